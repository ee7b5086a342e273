"""Property: a Model's deletions refused for good (a source outside its namespace's tenancy,
a Secret cleanup may not read) and one that cleanup carries out (Retain), delivered through
the broker in any order, each any number of times, leave the Model alike: the cleanup
finalizer gone and CleanupFailed not True (DESIGN: the final state is a function of the
set of events, not of their order; CleanupFailed is still absent or False by the order,
H4's review). Refusals alone keep the finalizer, CleanupFailed True."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from modelhooks.bootstrap import build
from modelhooks.core.conditions import FINALIZER
from modelhooks.core.settings import load_settings
from modelhooks.events.model import CanonicalEvent, ModelDeleted
from tests.contract.cluster import model
from tests.fakes.memory_cluster import InMemoryCluster
from tests.fakes.memory_secrets import InMemorySecrets

NS = "ml"
T0 = datetime(2026, 11, 1, tzinfo=UTC)
SUBJECT = f"/apis/modelhooks.dev/v1alpha1/namespaces/{NS}/models/bert"
HOLD = "example.com/hold"  # another controller's finalizer: the Model stays to be read
OURS = {"s3": {"uri": "s3://ml-models/bert/1/"}}
# each deletion as the ApiServerSource sent it: the Model's spec then
DELETIONS: dict[str, dict[str, Any]] = {
    "tenancy": {"source": {"s3": {"uri": "s3://team-b/bert/1/"}}, "deletionPolicy": "Delete"},
    "secret": {"source": {**OURS, "secretRef": {"name": "creds"}}, "deletionPolicy": "Delete"},
    "retain": {"source": OURS, "deletionPolicy": "Retain"},
}


def _after(order: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """The Model's finalizers and CleanupFailed's status(es) after `order`'s deliveries
    (a name again: the platform delivers that event again)."""
    cluster = InMemoryCluster()
    with tempfile.TemporaryDirectory() as home:
        env = {"MODELHOOKS_HOME": home, "MODELHOOKS_TENANCY_TENANTS": f"{NS}=s3://ml-models"}
        secrets = InMemorySecrets(granted=[])  # RBAC: cleanup may read no Secret of ml
        app = build(load_settings(env=env), cluster=cluster, secrets=secrets)
        broker = app.broker()
        cluster.create(NS, model("bert", finalizers=[FINALIZER, HOLD], deletionPolicy="Delete"))
        cluster.delete(NS, "bert")
        for name in order:
            data = ModelDeleted(name="bert", namespace=NS, version="1", spec=DELETIONS[name])
            at = T0 + timedelta(minutes=list(DELETIONS).index(name))
            event = CanonicalEvent(
                id=f"d-{name}", source="k8s", type=data.TYPE, data=data, time=at, subject=SUBJECT
            )
            told = [o for o in broker.publish(event) if o.function in ("cleanup", "notify")]
            assert len(told) == 2 and all(o.status < 300 for o in told), (name, told)
        app.delivery.dedupe.log.close()  # its group commit, before its folder goes
    found = cluster.get_model(NS, "bert")
    assert found is not None
    conditions = (found.get("status") or {}).get("conditions", [])
    failed = [c["status"] for c in conditions if c["type"] == "CleanupFailed"]
    return tuple(found["metadata"]["finalizers"]), failed


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(list(DELETIONS)), max_size=5).flatmap(
        lambda extra: st.permutations([*DELETIONS, *extra])
    )
)
def test_refused_and_allowed_deletions_in_any_order_end_alike(order: list[str]) -> None:
    finalizers, failed = _after(order)
    assert finalizers == (HOLD,), order
    # gone with the finalizer, whether the success came first or after refusals
    assert failed == [], order


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.sampled_from(["tenancy", "secret"]), max_size=3).flatmap(
        lambda extra: st.permutations(["tenancy", "secret", *extra])
    )
)
def test_refusals_alone_keep_the_finalizer_in_any_order(order: list[str]) -> None:
    assert _after(order) == ((FINALIZER, HOLD), ["True"]), order


class _Racing(InMemoryCluster):
    """The first status write waits for `meanwhile` (another delivery, handled whole) to
    run between the Model's read and the write."""

    meanwhile: Any = None

    def apply_status(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        run, self.meanwhile = self.meanwhile, None
        if run is not None:
            run()
        return super().apply_status(*args, **kwargs)


def test_a_refusal_whose_write_meets_a_finished_cleanup_leaves_it_alone() -> None:
    """A refusal read the Model still held, and a successful cleanup took the finalizer away
    before the refusal wrote: the write, a Conflict, read the Model again and set
    CleanupFailed True on a Model no cleanup waits on (kept by another finalizer) for good."""
    from modelhooks.core.function import Skip

    cluster = _Racing()
    cluster.create(NS, model("bert", finalizers=[FINALIZER, HOLD], deletionPolicy="Delete"))
    cluster.delete(NS, "bert")

    cluster.meanwhile = lambda: _tell(cluster, "success", deleted=["a"])
    try:
        _tell(cluster, "refusal", refused="forbidden: no")
    except Skip as skipped:
        assert "waits on no cleanup" in str(skipped)
    found = cluster.get_model(NS, "bert")
    assert found is not None and found["metadata"]["finalizers"] == [HOLD]
    conditions = (found.get("status") or {}).get("conditions", [])
    assert [c for c in conditions if c["type"] == "CleanupFailed"] == []


def test_a_refusal_told_between_a_success_and_its_finalizer_goes_with_the_finalizer() -> None:
    """A successful cleanup read the Model (no CleanupFailed), then a refusal, the finalizer
    still there, set CleanupFailed True, then the success removed the finalizer: the Model,
    kept by another finalizer, said for good that its cleanup was refused."""

    cluster = _Racing()
    cluster.create(NS, model("bert", finalizers=[FINALIZER, HOLD], deletionPolicy="Delete"))
    cluster.delete(NS, "bert")

    real_record = cluster.record

    def record_then_refusal(event: Any) -> bool:  # the success's Event, before the finalizer
        cluster.record = real_record  # type: ignore[method-assign]
        _tell(cluster, "refusal", refused="forbidden: no")
        return real_record(event)

    cluster.record = record_then_refusal  # type: ignore[method-assign]
    _tell(cluster, "success", deleted=["a"])
    found = cluster.get_model(NS, "bert")
    assert found is not None and found["metadata"]["finalizers"] == [HOLD]
    conditions = (found.get("status") or {}).get("conditions", [])
    assert [c for c in conditions if c["type"] == "CleanupFailed"] == []


def _tell(cluster: InMemoryCluster, id_: str, **report: Any) -> None:
    """notify told cleanup's report `id_` on the Model bert."""
    from modelhooks.events.model import ArtifactPurged
    from modelhooks.handlers.notify import handle as notify

    data = ArtifactPurged(uri="", model="bert", policy="Delete", namespace=NS, **report)
    event = CanonicalEvent(
        id=id_, source="cleanup", type=data.TYPE, data=data, time=T0, subject=SUBJECT
    )
    notify(event, cluster=cluster, rollout=False)


def test_a_late_report_on_a_deleted_model_leaves_a_new_model_of_its_name_alone() -> None:
    """Model bert deleted and cleaned up, then a new bert created and being deleted: the
    first one's reports, delivered late, named only the Model by name, so a success let the
    new one's finalizer go (its artifacts never cleaned up) and a refusal said its cleanup
    failed. Each report names its Model's uid, and tells no other."""
    from modelhooks.core.function import Skip

    cluster = InMemoryCluster()
    cluster.create(NS, model("bert", finalizers=[FINALIZER, HOLD], deletionPolicy="Delete"))
    old = cluster.get_model(NS, "bert")
    assert old is not None
    cluster.delete(NS, "bert")
    _tell(cluster, "done", deleted=["a"], model_uid=old["metadata"]["uid"])
    cluster.remove_finalizer(NS, "bert", HOLD)  # the old one is gone
    assert cluster.get_model(NS, "bert") is None
    cluster.create(NS, model("bert", finalizers=[FINALIZER, HOLD], deletionPolicy="Delete"))
    cluster.delete(NS, "bert")

    for late in ({"deleted": ["a"]}, {"refused": "forbidden: no"}):
        try:
            _tell(cluster, "late", model_uid=old["metadata"]["uid"], **late)
        except Skip as skipped:
            assert "not the one this cleanup was for" in str(skipped)
        new = cluster.get_model(NS, "bert")
        assert new is not None and new["metadata"]["finalizers"] == [FINALIZER, HOLD]
        assert not (new.get("status") or {}).get("conditions")
    _tell(cluster, "now", deleted=["b"], model_uid=new["metadata"]["uid"])  # its own report
    new = cluster.get_model(NS, "bert")
    assert new is not None and new["metadata"]["finalizers"] == [HOLD]
