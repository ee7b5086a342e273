"""prune killed after its deletions, before its answer was kept, then delivered again, on
real registries (distribution v3; 2.8, which untags through a placeholder manifest) and the
model registry backends (SQLite, the Kubernetes resources on the real kube-apiserver,
Kubeflow's Model Registry), each opened again as a restarted process opens it: the
redelivery answers as the first run would have (the same tags deleted, kept and
manifests), finishing what the kill left. It listed again, found the tags gone and answered
nothing deleted."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry
from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.bootstrap import model_registry
from modelhooks.core.errors import Conflict, NotFound
from modelhooks.core.records import ModelState
from modelhooks.core.retention import Policies, Policy
from modelhooks.core.settings import load_settings
from modelhooks.core.tenancy import Tenancy
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, PruneRequested, TagsPruned
from modelhooks.handlers import load, prune
from tests.integration.test_prune_cli import push
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

POLICY = Policy(streams=("v*",), keep=2, grace=timedelta(hours=1), untagged=timedelta(hours=1))
OLD = datetime(2026, 1, 1, tzinfo=UTC)
CRDS = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "crds"


class Killed(BaseException):
    """The process dying where it is raised (SIGKILL: nothing after it runs)."""


@pytest.fixture(params=["distribution3", "docker_registry"])
def server(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


Opening = Callable[[], Any]


@pytest.fixture(params=["sqlite", "kubernetes", "kubeflow"])
def opening(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opening]:
    """How a (restarted) process opens the model registry: each call a new client."""
    if request.param == "sqlite":
        yield lambda: SqliteModelRegistry(tmp_path / "registry.db")
    elif request.param == "kubeflow":
        url = request.getfixturevalue("model_registry").url
        yield lambda: KubeflowModelRegistry(url, timeout=10)
    else:
        kube: KubeApiServer = request.getfixturevalue("kube_apiserver")
        kube.install_crd(CRDS / "registeredmodel.yaml", "registeredmodels")
        kube.install_crd(CRDS / "modelversion.yaml", "modelversions")
        env = {
            "MODELHOOKS_REGISTRY_BACKEND": "kubernetes",
            "MODELHOOKS_REGISTRY_KUBECONFIG": str(kube.write_kubeconfig(tmp_path / "kubeconfig")),
            "MODELHOOKS_REGISTRY_NAMESPACE": "default",
        }
        yield lambda: model_registry(load_settings(env=env))


def _prune(server: Any, opening: Opening) -> tuple[Any, Any]:
    registry = opening()
    bound = load("prune").bind(
        {
            "oci": OciClients(allow_local=True),
            "registry": registry,
            "retention": Policies(((f"{server.host}/redeliver/*", POLICY),)),
            "tenancy": Tenancy(),
        }
    )
    return bound, registry


def _answer(bound: Any, event: CanonicalEvent) -> TagsPruned:
    (reply,) = bound.handle(event)
    assert isinstance(reply.data, TagsPruned)
    return reply.data


def _repository(server: Any) -> tuple[DistributionRegistry, str, dict[str, str]]:
    client, repo = DistributionRegistry(server.url), f"redeliver/{uuid.uuid4().hex[:8]}"
    digests = {t: push(client, repo, t, created=OLD) for t in ("v1.0.0", "v1.1.0", "v1.2.0")}
    digests["v1.3.0"] = push(client, repo, "v1.3.0", created=OLD)
    return client, repo, digests


@pytest.mark.parametrize("where", ["after-every-delete", "between-tags-and-manifests"])
def test_a_redelivery_after_a_kill_answers_the_plan_the_killed_run_applied(
    server: Any,
    opening: Opening,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    client, repo, digests = _repository(server)
    event = CanonicalEvent.new(
        PruneRequested(uri=f"oci://{server.host}/{repo}"), source="schedule", id=f"tick-1-{repo}"
    )
    bound, registry = _prune(server, opening)
    if where == "after-every-delete":
        applied = prune.apply

        def apply_then_die(*args: Any, **kwargs: Any) -> Any:
            applied(*args, **kwargs)
            raise Killed

        monkeypatch.setattr(prune, "apply", apply_then_die)
    else:
        deleting = DistributionRegistry.delete_manifests

        def die_at_the_manifests(self: DistributionRegistry, repo: str, found: Any) -> None:
            if digests["v1.0.0"] in found:
                raise Killed
            deleting(self, repo, found)

        monkeypatch.setattr(DistributionRegistry, "delete_manifests", die_at_the_manifests)
    with pytest.raises(Killed):
        bound.handle(event)
    registry.close()
    monkeypatch.undo()
    assert sorted(client.tags(repo)) == ["v1.2.0", "v1.3.0"]  # the tags went before the kill

    bound, registry = _prune(server, opening)  # the restarted process
    try:
        first = _answer(bound, event)
        assert first.deleted == ["v1.0.0", "v1.1.0"]
        assert first.kept == ["v1.2.0", "v1.3.0"]
        assert sorted(first.manifests) == sorted([digests["v1.0.0"], digests["v1.1.0"]])
        for tag in ("v1.0.0", "v1.1.0"):  # what the kill left is done
            with pytest.raises(NotFound):
                client.manifest(repo, digests[tag])
        assert _answer(bound, event) == first  # and again, as often as it is delivered
        other = CanonicalEvent.new(
            PruneRequested(uri=f"oci://{server.host}/{repo}"),
            source="schedule",
            id=f"tick-2-{repo}",
        )
        assert _answer(bound, other).deleted == []  # another event deleted nothing
        plans = registry.get_model(prune.PLANS)
        assert plans is not None and plans.state == ModelState.ARCHIVED
        assert not prune.in_use(registry) & set(digests.values())  # no version of it is live
    finally:
        registry.close()


def test_an_id_delivered_again_for_another_repository_is_a_conflict(
    distribution3: Any, opening: Opening
) -> None:
    client, repo, _ = _repository(distribution3)
    push(client, f"{repo}-b", "v1.0.0", created=OLD)
    bound, registry = _prune(distribution3, opening)
    try:
        pushed = ArtifactPushed(
            model=repo,
            version="x",
            uri=f"oci://{distribution3.host}/{repo}:x",
            digest="d",
            store="oci",
        )
        assert _answer(bound, CanonicalEvent.new(pushed, source="s", id=f"e-{repo}")).deleted
        elsewhere = msgspec.structs.replace(pushed, uri=f"oci://{distribution3.host}/{repo}-b:x")
        with pytest.raises(Conflict, match="delivered before"):
            bound.handle(CanonicalEvent.new(elsewhere, source="s", id=f"e-{repo}"))
    finally:
        registry.close()


def test_a_plan_past_max_record_is_applied_unrecorded(
    distribution3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Kubernetes object holds 1.5 MB: a plan past MAX_RECORD bytes of JSON is applied
    without its record (its redelivery plans again, as before), never refused."""
    client, repo, _ = _repository(distribution3)
    monkeypatch.setattr(prune, "MAX_RECORD", 100)
    bound, registry = _prune(distribution3, lambda: SqliteModelRegistry(tmp_path / "r.db"))
    try:
        event = CanonicalEvent.new(
            PruneRequested(uri=f"oci://{distribution3.host}/{repo}"), source="s", id=repo
        )
        assert _answer(bound, event).deleted == ["v1.0.0", "v1.1.0"]
        assert registry.get_model(prune.PLANS) is None
        assert sorted(client.tags(repo)) == ["v1.2.0", "v1.3.0"]
    finally:
        registry.close()


def test_a_plan_of_thousands_of_tags_is_recorded_and_read_back_whole(opening: Opening) -> None:
    """A plan's JSON goes in parts: one property past 2,704 bytes answered 500 on Kubeflow
    (its PostgreSQL indexes string properties in a btree: prune answered 503 for good for a
    plan of some 30 tags), past 65,536 characters 422 on Kubernetes; up to MAX_RECORD
    (~5,000 tags deleted at once) in one version."""
    digest = "sha256:" + "ab" * 32
    deletes = tuple((f"v1.{n}.{n % 97}-b.{n:05d}", digest) for n in range(5000))
    plan = prune.Recorded(f"oci://r.example/big/{uuid.uuid4().hex[:8]}", deletes, deletes[:5])
    assert 65_536 < len(msgspec.json.encode(plan)) <= prune.MAX_RECORD
    delivery = (uuid.uuid4().hex, f" big {uuid.uuid4().hex}")
    registry = opening()
    try:
        assert prune._record(registry, delivery, plan) is plan
    finally:
        registry.close()
    registry = opening()  # another process reads it
    try:
        assert prune._recorded(registry, delivery, plan.repository) == plan
    finally:
        registry.close()


def _plan(tags: int) -> prune.Recorded:
    digest = "sha256:" + "cd" * 32
    deletes = tuple((f"v{n}", digest) for n in range(tags))
    return prune.Recorded(f"oci://r.example/slots/{uuid.uuid4().hex[:8]}", deletes)


def test_plan_records_are_bounded_slots_reused_once_no_redelivery_brings_them(
    opening: Opening, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry deletes nothing: a version a delivery grew the records for ever. Now
    SLOTS slots (here 1), a live one kept (the next plan unrecorded), one older than
    RETENTION overwritten, a longer plan's tail in it not read back."""
    monkeypatch.setattr(prune, "PLANS", f"modelhooks:prune-{uuid.uuid4().hex[:8]}")
    monkeypatch.setattr(prune, "SLOTS", 1, raising=False)
    first, second, third = _plan(100), _plan(3), _plan(2)  # the first in parts
    deliveries = [(uuid.uuid4().hex, f" slots {uuid.uuid4().hex}") for _ in range(3)]
    registry = opening()
    try:
        assert prune._record(registry, deliveries[0], first) is first
        assert prune._record(registry, deliveries[1], second) is second  # unrecorded
        assert prune._recorded(registry, deliveries[1], second.repository) is None
        assert prune._recorded(registry, deliveries[0], first.repository) == first
        model = registry.get_model(prune.PLANS)
        (slot,) = registry.list_versions(model.id)
        aged = (datetime.now(UTC) - timedelta(days=9)).isoformat()
        props = {**slot.custom_properties, "modelhooks.prune_at": aged}
        registry.update_version(msgspec.structs.replace(slot, custom_properties=props))
    finally:
        registry.close()
    registry = opening()  # another process records the third
    try:
        assert prune._record(registry, deliveries[2], third) is third
        model = registry.get_model(prune.PLANS)
        assert len(registry.list_versions(model.id)) == 1
        assert prune._recorded(registry, deliveries[2], third.repository) == third
        assert prune._recorded(registry, deliveries[0], first.repository) is None
    finally:
        registry.close()


def test_registry_export_leaves_the_plans_out_and_import_passes_them_by(
    opening: Opening, tmp_path: Path
) -> None:
    """`modelhooks:prune` is no model: `registry list` and `export` showed and copied it
    (its versions, plans of thousands of tags, with it); an export holding it (an older
    one's) imports without it."""
    from modelhooks.core.registry_copy import export_registry, import_registry, walk

    registry = opening()
    try:
        prune._record(registry, (uuid.uuid4().hex, f" export {uuid.uuid4().hex}"), _plan(3))
        registry.create_model(f"bert-{uuid.uuid4().hex[:8]}", properties={})
        doc = export_registry(registry)
        assert doc["models"] and prune.PLANS not in [m["name"] for m in doc["models"]]
        assert prune.PLANS not in {model.name for model, _, _ in walk(registry)}
        plans = registry.get_model(prune.PLANS)
        doc["models"].append(
            {
                **msgspec.structs.asdict(plans),
                "state": plans.state.value,
                "versions": [
                    {**msgspec.structs.asdict(v), "state": v.state.value, "artifacts": []}
                    for v in registry.list_versions(plans.id)
                ],
            }
        )
    finally:
        registry.close()
    target = SqliteModelRegistry(tmp_path / "target.db")
    try:
        report = import_registry(target, doc)
        assert report.refused == []
        assert target.get_model(prune.PLANS) is None
    finally:
        target.close()


def test_deliveries_whose_source_and_id_share_their_words_are_told_apart(
    distribution3: Any, tmp_path: Path
) -> None:
    """The delivery's record was keyed by its tenant, source and id joined by spaces: source
    "tick a", id "1" and source "tick", id "a 1" were one delivery, so the second event
    (a new tick) applied the first's recorded plan again instead of planning anew."""
    client, repo, _ = _repository(distribution3)
    uri = f"oci://{distribution3.host}/{repo}"
    bound, registry = _prune(distribution3, lambda: SqliteModelRegistry(tmp_path / "r.db"))
    try:
        first = _answer(bound, CanonicalEvent.new(PruneRequested(uri=uri), source="tick a", id="1"))
        assert first.deleted == ["v1.0.0", "v1.1.0"]
        for tag in ("v1.4.0", "v1.5.0"):
            push(client, repo, tag, created=OLD)
        other = CanonicalEvent.new(PruneRequested(uri=uri), source="tick", id="a 1")
        assert _answer(bound, other).deleted == ["v1.2.0", "v1.3.0"]
        assert sorted(client.tags(repo)) == ["v1.4.0", "v1.5.0"]
    finally:
        registry.close()
