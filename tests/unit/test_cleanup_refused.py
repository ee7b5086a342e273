"""A Model's deletion that cleanup refuses for good (its namespace may not act on its source,
its Secret may not be read, its policy is none) is told to the Model, not only answered 4xx:
cleanup answers an `artifact.purged` that says why (nothing deleted), notify sets
CleanupFailed (reason CleanupRefused) with a Warning Event and keeps the finalizer; a later
successful cleanup turns it False and lets the Model go, in any order of the reports. A
transient failure stays a 5xx, and a deletion no Model waits on keeps its 4xx."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from modelhooks.bootstrap import App, build
from modelhooks.core.conditions import FINALIZER
from modelhooks.core.errors import Forbidden
from modelhooks.core.function import Skip
from modelhooks.core.settings import load_settings
from modelhooks.core.tenancy import Tenancy
from modelhooks.delivery.runtime import Outcome, run
from modelhooks.events.model import ArtifactPurged, ArtifactPushed, CanonicalEvent, ModelDeleted
from modelhooks.handlers.cleanup import refused
from modelhooks.handlers.notify import handle as notify
from modelhooks.handlers.register import register_model
from tests.contract.cluster import model
from tests.fakes.memory_cluster import InMemoryCluster
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.fakes.memory_secrets import InMemorySecrets

NS = "ml"
T0 = datetime(2026, 11, 1, tzinfo=UTC)
SUBJECT = f"/apis/modelhooks.dev/v1alpha1/namespaces/{NS}/models/bert"
HOLD = "example.com/hold"  # another controller's finalizer: the Model stays to be read


class World:
    def __init__(self, tmp_path: Path, tenants: str = "", **overrides: Any) -> None:
        self.cluster = InMemoryCluster()
        env = {"MODELHOOKS_HOME": str(tmp_path), "MODELHOOKS_TENANCY_TENANTS": tenants}
        overrides.setdefault("secrets", InMemorySecrets(granted=[]))
        self.app: App = build(load_settings(env=env), cluster=self.cluster, **overrides)
        self.broker = self.app.broker()

    def deleting(self, spec: dict[str, Any]) -> None:
        """The Model, held by the cleanup finalizer (and another), being deleted."""
        self.cluster.create(NS, model("bert", finalizers=[FINALIZER, HOLD], **spec))
        self.cluster.delete(NS, "bert")

    def publish(self, spec: dict[str, Any], id_: str, at: datetime = T0) -> list[Outcome]:
        """A model.deleted of the Model as the ApiServerSource sends it (spec and subject)."""
        data = ModelDeleted(name="bert", namespace=NS, version="1", spec=spec)
        event = CanonicalEvent(
            id=id_, source="k8s", type=data.TYPE, data=data, time=at, subject=SUBJECT
        )
        return self.broker.publish(event)

    def get(self) -> dict[str, Any]:
        found = self.cluster.get_model(NS, "bert")
        assert found is not None
        return found

    def cleanup_failed(self) -> dict[str, Any]:
        conditions = (self.get().get("status") or {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == "CleanupFailed"), {})

    def warnings(self) -> list[str]:
        return sorted(e.reason for e in self.cluster.events.values() if e.type == "Warning")


def _of(outcomes: list[Outcome], function: str) -> Outcome:
    (found,) = [o for o in outcomes if o.function == function]
    return found


def test_a_source_outside_the_namespace_is_told_to_the_model_which_keeps_its_finalizer(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, tenants=f"{NS}=s3://ml-models")
    spec = {"source": {"s3": {"uri": "s3://team-b/models/bert/1/"}}, "deletionPolicy": "Delete"}
    world.deleting(spec)
    outcomes = world.publish(spec, "d1")
    cleanup = _of(outcomes, "cleanup")
    # refused as it was admitted (no store reached), answered with the refusal, not a 403
    assert cleanup.status == 200 and cleanup.error is not None
    assert cleanup.error["details"]["location"] == "s3://team-b"
    ((reply),) = cleanup.replies
    assert reply.subject == SUBJECT and reply.id.startswith("d1/refused/")
    purged = reply.data
    assert isinstance(purged, ArtifactPurged)
    assert (purged.uri, purged.deleted, purged.failed) == ("s3://team-b/models/bert/1/", [], {})
    assert purged.refused.startswith("forbidden: namespace 'ml' may not act on s3://team-b")
    # notify takes it, though it names another tenant's bucket: it acts on no bucket
    assert _of(outcomes, "notify").status < 300
    held = world.get()
    assert held["metadata"]["finalizers"] == [FINALIZER, HOLD]
    condition = world.cleanup_failed()
    assert (condition["status"], condition["reason"]) == ("True", "CleanupRefused")
    assert condition["message"].startswith("cleanup by deletionPolicy Delete of s3://team-b/")
    for part in ("may not act on s3://team-b", "refused for good", "kubectl annotate"):
        assert part in condition["message"]
    assert world.warnings() == ["CleanupRefused"]

    before, events = world.get(), dict(world.cluster.events)
    again = world.publish(spec, "d1")  # the platform redelivers it: nothing changes
    assert _of(again, "cleanup").replies == cleanup.replies
    assert world.get() == before and world.cluster.events == events


def test_a_refusal_then_a_cleanup_that_succeeds_lets_the_model_go(tmp_path: Path) -> None:
    world = World(tmp_path)  # cleanup may read no Secret of the namespace (RBAC)
    source = {"gcs": {"uri": f"file://{tmp_path}/store/bert/1/"}, "secretRef": {"name": "creds"}}
    world.deleting({"source": source, "deletionPolicy": "Delete"})
    outcomes = world.publish({"source": source, "deletionPolicy": "Delete"}, "d1")
    assert _of(outcomes, "cleanup").status == 200
    condition = world.cleanup_failed()
    assert condition["reason"] == "CleanupRefused"
    assert "cleanup may not read Secret 'creds' in namespace 'ml'" in condition["message"]
    assert world.get()["metadata"]["finalizers"] == [FINALIZER, HOLD]

    # the engineer keeps the artifacts: deletionPolicy Retain, whose cleanup reads no Secret
    later = T0 + timedelta(minutes=5)
    world.publish({"source": source, "deletionPolicy": "Retain"}, "d2", at=later)
    assert world.get()["metadata"]["finalizers"] == [HOLD]  # the cleanup finalizer went
    assert world.cleanup_failed() == {}  # and CleanupFailed after it: as if it never failed
    world.publish({"source": source, "deletionPolicy": "Delete"}, "d1")  # a late redelivery
    assert world.cleanup_failed() == {}  # changes nothing: no cleanup waits


def _told(cluster: InMemoryCluster, order: Any) -> dict[str, Any]:
    """The Model, deleting and held, after notify was told each report of `order`."""
    cluster.create(NS, model("bert", finalizers=[FINALIZER, HOLD], deletionPolicy="Delete"))
    cluster.delete(NS, "bert")
    for id_, at, data in order:
        report = ArtifactPurged(
            uri="oci://registry.local:5000/models/demo:1", model="bert", policy="Delete",
            namespace=NS, **data,
        )  # fmt: skip
        event = CanonicalEvent(
            id=id_, source="cleanup", type=report.TYPE, data=report, time=at, subject=SUBJECT
        )
        try:
            notify(event, cluster=cluster, rollout=False)
        except Skip as skipped:  # a report no cleanup waits on any more
            assert "waits on no cleanup" in str(skipped)
    found = cluster.get_model(NS, "bert")
    assert found is not None
    return found


def test_the_end_does_not_depend_on_the_order_of_the_reports() -> None:
    """A refusal, a partial failure and a success, in every order, each twice: the cleanup
    finalizer goes and CleanupFailed with it, whichever came first. Without the success, the condition says what the last
    report said, and a report told again changes nothing: each status write comes back as
    an update of the deleting Model, so cleanup runs again and its report, the current one,
    is what stays."""
    reports = [
        ("r", T0, {"refused": "forbidden: no"}),
        ("f", T0, {"failed": {"sha256:" + "a" * 64: "403 DENIED"}}),
        ("s", T0, {"deleted": ["sha256:" + "a" * 64]}),
    ]
    ends = set()
    for order in set(itertools.permutations((0, 1, 2) * 2)):  # 90 orders
        found = _told(InMemoryCluster(), [reports[n] for n in order])
        assert found["metadata"]["finalizers"] == [HOLD]
        ends.add(tuple(c["status"] for c in found.get("status", {}).get("conditions", [])))
    assert ends == {()}

    cluster = InMemoryCluster()
    stale_then_current = [reports[1], reports[0], reports[1], ("f2", T0, reports[1][2])]
    found = _told(cluster, stale_then_current)
    assert found["status"]["conditions"][0]["reason"] == "CleanupFailed"
    # one Event per report that changed the condition: "f" told again is the Event of its
    # first telling, and "f2", the echo of the write, changed nothing
    assert sorted(e.reason for e in cluster.events.values()) == ["CleanupFailed", "CleanupRefused"]


def test_a_transient_failure_stays_a_5xx_with_nothing_told(tmp_path: Path) -> None:
    world = World(tmp_path, secrets=None)  # no cluster access to read the Secret: 503
    source = {"gcs": {"uri": f"file://{tmp_path}/store/bert/1/"}, "secretRef": {"name": "creds"}}
    world.deleting({"source": source, "deletionPolicy": "Delete"})
    cleanup = _of(world.publish({"source": source, "deletionPolicy": "Delete"}, "d1"), "cleanup")
    assert (cleanup.status, cleanup.replies) == (503, ())
    assert world.cleanup_failed() == {} and world.warnings() == []


def test_a_deletion_no_model_waits_on_keeps_its_4xx(tmp_path: Path) -> None:
    """A registry's webhook deletion (no Model's spec, no subject) of a version outside the
    namespace's locations: 403, dead-lettered, as before."""
    registry = InMemoryModelRegistry()
    env = {"MODELHOOKS_HOME": str(tmp_path)}
    app = build(load_settings(env=env), registry=registry, tenancy=Tenancy.parse("ml=gs://ml-*"))
    pushed = ArtifactPushed(
        model="bert", version="1", uri=f"file://{tmp_path}/bert/1/", digest="local:1", store="local"
    )
    register_model(
        CanonicalEvent(id="p", source="t", type=pushed.TYPE, data=pushed, time=T0),
        pushed,
        registry=registry,
    )
    data = ModelDeleted(name="bert", namespace=NS, spec={"deletionPolicy": "Delete"})
    event = CanonicalEvent(id="d", source="t", type=data.TYPE, data=data, time=T0 + timedelta(1))
    outcome = run(app.function("cleanup"), event, app.delivery)
    assert (outcome.status, outcome.replies) == (403, ())
    assert refused(event, Forbidden("no")) == []


def test_the_refusal_is_named_after_the_event_and_its_reason() -> None:
    data = ModelDeleted(name="bert", namespace=NS, spec={"deletionPolicy": "Delete"})
    event = CanonicalEvent(id="d", source="t", type=data.TYPE, data=data, subject=SUBJECT)
    (first,) = refused(event, Forbidden("no"))
    assert refused(event, Forbidden("no")) == [first]
    (other,) = refused(event, Forbidden("not this either"))
    assert other.id != first.id and first.id.startswith("d/refused/")
    assert isinstance(first.data, ArtifactPurged) and first.data.policy == "Delete"
    assert first.data.uri == ""  # no source in the spec: notify finds the Model by subject


def test_a_model_listed_while_being_deleted_is_a_deletion() -> None:
    """A watch (re)started lists its Models as adds: one whose deletion it did not see is
    being deleted all the same, and goes to cleanup (it went to register as created, and
    its finalizer was held for ever)."""
    from modelhooks.events.inbound import Inbound
    from modelhooks.events.sources.kubernetes import from_apiserver_event

    meta = {"name": "bert", "namespace": NS, "deletionTimestamp": "2026-11-01T00:00:00Z"}
    obj = {"apiVersion": "modelhooks.dev/v1alpha1", "kind": "Model", "metadata": meta}
    for op in ("add", "update"):
        attrs = {"type": f"dev.knative.apiserver.resource.{op}", "id": op, "source": "k8s"}
        (event,) = from_apiserver_event(Inbound("cloudevent", op, {**obj, "spec": {}}, attrs))
        assert isinstance(event.data, ModelDeleted), op


def test_an_http_source_with_credentials_in_its_url_is_refused_naming_none_of_them(
    tmp_path: Path, caplog: Any
) -> None:
    """A password in an http source's URL (user:password@host) was taken as the Model's
    location: tenancy's refusal named it, and cleanup's report put it in CleanupFailed, its
    Warning Event, the answers and the log lines, all of a wider audience than the Model
    (and register put it in the registry). Credentials go in spec.source.secretRef: such a
    source is refused by every function, and nothing says the password."""
    import json

    world = World(tmp_path, tenants=f"{NS}=https://models.example.com")
    url = "https://ci:s3cret-pw@models.example.com/bert-1.tar.gz"
    spec = {"source": {"http": {"url": url, "sha256": "a" * 64}}, "deletionPolicy": "Delete"}
    world.deleting(spec)
    outcomes = world.publish(spec, "d1")
    assert _of(outcomes, "cleanup").status == 200
    condition = world.cleanup_failed()
    assert condition["reason"] == "CleanupRefused"
    assert "spec.source.http.url" in condition["message"] and "secretRef" in condition["message"]
    told = json.dumps(
        [world.get()["status"], [e.note for e in world.cluster.events.values()]]
        + [o.as_json() for o in outcomes]
        + [r.data.to_dict() for o in outcomes for r in o.replies]
    )
    assert "s3cret" not in told and "s3cret" not in caplog.text
