"""`notify` over the in-memory cluster (which passes the same `Cluster` contract as the real
apiserver, below): conditions with observedGeneration, Ready by the signing rule in any
order, one Event per delivery, redelivery changes nothing, the finalizer added and removed
by the policy, a failed purge keeps it with CleanupFailed, rollout only when Ready."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelhooks.bootstrap import build
from modelhooks.core.conditions import FINALIZER, ROLLOUT_ANNOTATION
from modelhooks.core.function import Skip
from modelhooks.core.settings import load_settings
from modelhooks.events.model import (
    ArtifactPurged,
    CanonicalEvent,
    EventData,
    ModelCreated,
    ModelRegistered,
    ModelSigned,
    ModelUpdated,
    TagsPruned,
)
from tests.contract.cluster import ClusterContract, Place, model
from tests.fakes.memory_cluster import InMemoryCluster

NS = "ml"
DIGEST = "sha256:" + "a" * 64
T0 = datetime(2026, 3, 1, tzinfo=UTC)
RBAC = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "rbac" / "notify.yaml"


class TestInMemoryCluster(ClusterContract):
    @pytest.fixture
    def place(self) -> Place:
        cluster = InMemoryCluster()
        names = (f"ns-{n}" for n in itertools.count())

        def events(namespace: str) -> list[dict[str, Any]]:
            return [
                {
                    "reason": e.reason,
                    "note": e.note,
                    "regarding": {"kind": "Model", "name": e.model},
                    "reportingController": "modelhooks.dev/notify",
                }
                for (ns, _), e in cluster.events.items()
                if ns == namespace
            ]

        def deploy(namespace: str, name: str, annotations: Mapping[str, str]) -> None:
            cluster.deploy(namespace, name, annotations)

        def pods(namespace: str, name: str) -> dict[str, str]:
            return cluster.pod_annotations(namespace, name)

        return Place(
            cluster, lambda: next(names), cluster.create, cluster.delete, deploy, pods, events
        )


def _event(data: EventData, id_: str = "e1", subject: str | None = None) -> CanonicalEvent:
    return CanonicalEvent(
        id=id_, source="test", type=data.TYPE, data=data, time=T0, subject=subject
    )


def _registered(**changes: Any) -> ModelRegistered:
    data = ModelRegistered(
        model="bert",
        version="1",
        uri="oci://registry.local:5000/models/demo@" + DIGEST,
        digest=DIGEST,
        registry="sqlite",
        registered_model_id="7",
        model_version_id="9",
        model_artifact_id="11",
        namespace=NS,
        created=True,
    )
    return data.replace(**changes)


def _signed(**changes: Any) -> ModelSigned:
    data = ModelSigned(
        model="bert",
        version="1",
        uri="oci://registry.local:5000/models/demo@" + DIGEST,
        digest=DIGEST,
        signature_uri="oci://registry.local:5000/models/demo@sha256:" + "b" * 64,
        root_digest="sha256:" + "c" * 64,
        signer="key:abcd",
        namespace=NS,
    )
    return data.replace(**changes)


def _purged(**changes: Any) -> ArtifactPurged:
    data = ArtifactPurged(
        uri="oci://registry.local:5000/models/demo:1",
        deleted=[DIGEST],
        policy="Delete",
        namespace=NS,
    )
    return data.replace(**changes)


class World:
    def __init__(self, tmp_path: Path, *, rollout: bool = False) -> None:
        self.cluster = InMemoryCluster()
        settings = load_settings(env={"MODELHOOKS_HOME": str(tmp_path)})
        app = build(settings, cluster=self.cluster, rollout=rollout)
        self.notify = app.function("notify")

    def model(self, name: str = "bert", **spec: Any) -> dict[str, Any]:
        return self.cluster.create(NS, model(name, **spec))

    def get(self, name: str = "bert") -> dict[str, Any]:
        found = self.cluster.get_model(NS, name)
        assert found is not None
        return found

    def conditions(self, name: str = "bert") -> dict[str, dict[str, Any]]:
        return {c["type"]: c for c in self.get(name).get("status", {}).get("conditions", [])}


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_registered_then_signed_makes_a_signing_model_ready(world: World) -> None:
    world.model(signing={"enabled": True, "method": "keyless"})
    world.cluster.update_spec(NS, "bert", deletionPolicy="Delete")  # generation 2
    assert world.notify.handle(_event(_registered())) == []
    conditions = world.conditions()
    assert conditions["Registered"]["status"] == "True"
    assert conditions["Registered"]["observedGeneration"] == 2
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "NotSigned"
    world.notify.handle(_event(_signed(), "e2"))
    conditions = world.conditions()
    assert {t: c["status"] for t, c in conditions.items()} == {
        "Ready": "True",
        "Registered": "True",
        "Signed": "True",
    }
    status = world.get()["status"]
    assert status["registeredModelId"] == "7" and status["modelVersionId"] == "9"
    assert status["resolvedDigest"] == DIGEST and status["signatureRef"].endswith("b" * 64)
    assert status["observedGeneration"] == 2
    reasons = sorted(e.reason for e in world.cluster.events.values())
    assert reasons == ["Registered", "Signed"]


def test_the_order_of_registered_and_signed_does_not_matter(tmp_path: Path) -> None:
    ends = []
    for order in ((_registered(), _signed()), (_signed(), _registered())):
        world = World(tmp_path)
        world.model(signing={"enabled": True, "method": "keyless"})
        for n, data in enumerate(order):
            world.notify.handle(_event(data, f"e{n}"))
        ends.append(world.get()["status"])
    assert ends[0] == ends[1]


def test_without_signing_registered_is_ready(world: World) -> None:
    world.model()
    world.notify.handle(_event(_registered()))
    assert world.conditions()["Ready"]["status"] == "True"
    assert "Signed" not in world.conditions()


def test_a_redelivery_changes_nothing(world: World) -> None:
    world.model()
    world.notify.handle(_event(_registered()))
    before, events = world.get(), dict(world.cluster.events)
    world.notify.handle(_event(_registered(created=False)))  # the same CloudEvent id
    assert world.get() == before  # same resourceVersion: nothing written
    assert world.cluster.events == events


def test_the_same_registration_told_again_records_no_second_event(world: World) -> None:
    world.model()
    world.notify.handle(_event(_registered()))
    world.notify.handle(_event(_registered(created=False), "e-again"))  # another CloudEvent
    assert [e.reason for e in world.cluster.events.values()] == ["Registered"]


def test_another_version_or_no_model_is_skipped(world: World) -> None:
    world.model()
    with pytest.raises(Skip):
        world.notify.handle(_event(_registered(version="2")))
    with pytest.raises(Skip):
        world.notify.handle(_event(_registered(model="models/other")))
    assert "status" not in world.get()


def test_the_subject_names_the_model(world: World) -> None:
    world.model("served-bert")
    subject = f"/apis/modelhooks.dev/v1alpha1/namespaces/{NS}/models/served-bert"
    world.notify.handle(_event(_registered(model="models/bert"), subject=subject))
    assert world.conditions("served-bert")["Ready"]["status"] == "True"


def test_a_digest_mismatch_is_not_ready(world: World) -> None:
    world.model()
    world.notify.handle(_event(_registered()))
    world.notify.handle(_event(_signed(digest="sha256:" + "f" * 64), "e2"))
    conditions = world.conditions()
    assert conditions["Signed"]["reason"] == "DigestMismatch"
    assert world.get()["status"]["resolvedDigest"] == DIGEST


def test_the_finalizer_follows_the_deletion_policy(world: World) -> None:
    world.model("kept")
    world.model("deleted", deletionPolicy="Delete")
    for name in ("kept", "deleted"):
        world.notify.handle(_event(ModelCreated(name=name, namespace=NS), f"c-{name}"))
    assert "finalizers" not in world.get("kept")["metadata"]
    assert world.get("deleted")["metadata"]["finalizers"] == [FINALIZER]
    world.notify.handle(_event(ModelUpdated(name="deleted", namespace=NS), "u1"))  # again: once
    assert world.get("deleted")["metadata"]["finalizers"] == [FINALIZER]


def test_a_clean_purge_releases_the_model(world: World) -> None:
    world.model(deletionPolicy="Delete")
    world.notify.handle(_event(ModelCreated(name="bert", namespace=NS), "c1"))
    world.cluster.delete(NS, "bert")
    world.notify.handle(_event(_purged(), "p1"))  # found by its source, no subject
    assert world.cluster.get_model(NS, "bert") is None
    assert [e.reason for e in world.cluster.events.values()] == ["FinalizerAdded", "CleanedUp"]


def test_a_purge_naming_its_model_releases_that_one(world: World) -> None:
    for name in ("bert", "bert-copy"):  # two Models being deleted, the same source
        world.model(name, deletionPolicy="Delete")
        world.notify.handle(_event(ModelCreated(name=name, namespace=NS), f"c-{name}"))
        world.cluster.delete(NS, name)
    world.notify.handle(_event(_purged(model="bert-copy"), "p1"))
    assert world.cluster.get_model(NS, "bert-copy") is None  # the one cleanup named
    assert world.cluster.get_model(NS, "bert") is not None  # still held: its cleanup is due


def test_a_purge_of_a_live_model_keeps_its_finalizer(world: World) -> None:
    world.model(deletionPolicy="Delete")
    world.notify.handle(_event(ModelCreated(name="bert", namespace=NS), "c1"))
    subject = f"/apis/modelhooks.dev/v1alpha1/namespaces/{NS}/models/bert"
    world.notify.handle(_event(_purged(), "p1", subject=subject))
    assert world.get()["metadata"]["finalizers"] == [FINALIZER]


def test_a_failed_purge_keeps_the_finalizer_and_says_what_to_do(world: World) -> None:
    world.model(deletionPolicy="Delete")
    world.notify.handle(_event(ModelCreated(name="bert", namespace=NS), "c1"))
    world.cluster.delete(NS, "bert")
    failed = {DIGEST: "403 DENIED: delete not allowed"}
    world.notify.handle(_event(_purged(deleted=[], failed=failed), "p1"))
    held = world.get()
    assert held["metadata"]["finalizers"] == [FINALIZER]
    condition = world.conditions()["CleanupFailed"]
    assert condition["status"] == "True" and condition["reason"] == "CleanupFailed"
    assert "403 DENIED" in condition["message"] and "kubectl annotate" in condition["message"]
    (warning,) = [e for e in world.cluster.events.values() if e.type == "Warning"]
    assert warning.reason == "CleanupFailed"
    world.notify.handle(_event(_purged(), "p2"))  # a retry that succeeds
    assert world.cluster.get_model(NS, "bert") is None


def test_tags_pruned_is_an_event_on_the_model(world: World) -> None:
    world.model()
    subject = f"/apis/modelhooks.dev/v1alpha1/namespaces/{NS}/models/bert"
    pruned = TagsPruned(repository="registry.local:5000/models/demo", deleted=["0.1"])
    world.notify.handle(_event(pruned, subject=subject))
    (event,) = world.cluster.events.values()
    assert event.reason == "TagsPruned" and "1 tag(s)" in event.note


def test_rollout_only_when_ready_and_enabled(tmp_path: Path) -> None:
    for rollout in (False, True):
        world = World(tmp_path, rollout=rollout)
        world.model(signing={"enabled": True, "method": "keyless"})
        world.cluster.deploy(NS, "serve", {"modelhooks.dev/model": "bert"})
        world.notify.handle(_event(_registered()))
        assert world.cluster.pod_annotations(NS, "serve") == {}  # not Ready: nothing rolls
        world.notify.handle(_event(_signed(), "e2"))
        rolled = world.cluster.pod_annotations(NS, "serve").get(ROLLOUT_ANNOTATION)
        assert rolled == (f"1@{DIGEST}" if rollout else None)


def test_paused_models_and_no_cluster_are_skipped(tmp_path: Path, world: World) -> None:
    world.model(paused=True)
    with pytest.raises(Skip):
        world.notify.handle(_event(_registered()))
    settings = load_settings(env={"MODELHOOKS_HOME": str(tmp_path)})
    with pytest.raises(Skip, match="MODELHOOKS_NOTIFY_KUBECONFIG"):
        build(settings, cluster=None).function("notify").handle(_event(_registered()))


def test_rollout_rights_are_opt_in_per_namespace() -> None:
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    rollout = roles["modelhooks-notify-rollout"]["rules"]
    assert {(r["apiGroups"][0], r["resources"][0]) for r in rollout} == {
        ("apps", "deployments"),
        ("serving.kserve.io", "inferenceservices"),
    }
    assert all(r["verbs"] == ["list", "patch"] for r in rollout)
    bound = [d for d in docs if d["kind"].endswith("Binding")]
    assert [b["roleRef"]["name"] for b in bound] == ["modelhooks-notify"]


class CountingCluster(InMemoryCluster):
    def __init__(self) -> None:
        super().__init__()
        self.reads = self.cached = 0

    def get_model(
        self, namespace: str, name: str, *, cached: bool = False
    ) -> dict[str, Any] | None:
        self.reads += 1
        self.cached += cached
        return super().get_model(namespace, name, cached=cached)


def test_a_retained_model_event_reads_nothing_and_a_later_policy_holds(tmp_path: Path) -> None:
    cluster = CountingCluster()
    settings = load_settings(env={"MODELHOOKS_HOME": str(tmp_path)})
    notify = build(settings, cluster=cluster).function("notify")
    kept = cluster.create(NS, model("bert"))
    created = ModelCreated(name="bert", namespace=NS, spec=dict(kept["spec"]))
    assert notify.handle(_event(created, "c1")) == []
    assert cluster.reads == 0  # the status writes of a burst, echoed as updates, cost nothing
    # the policy changed to Delete: that update's event reads the Model and holds it, and
    # the older Retain event, arriving after it, changes nothing
    cluster.update_spec(NS, "bert", deletionPolicy="Delete")
    changed = {**kept["spec"], "deletionPolicy": "Delete"}
    notify.handle(_event(ModelUpdated(name="bert", namespace=NS, spec=changed), "u1"))
    notify.handle(_event(created, "c1"))
    held = cluster.get_model(NS, "bert")
    assert held is not None and held["metadata"]["finalizers"] == [FINALIZER]


def test_a_status_computed_from_a_stale_cache_is_computed_again(world: World) -> None:
    """The status is computed from the watch cache's Model; one older than the Model (signed
    meanwhile) is refused by the apply (its resourceVersion), read again, and the result is
    what a fresh read gives: signed and registered, both kept."""
    world.model(signing={"enabled": True, "method": "keyless"})
    world.cluster.cache_behind[(NS, "bert")] = world.get()  # before the signature
    world.notify.handle(_event(_signed(), "e1"))
    world.notify.handle(_event(_registered(), "e2"))  # its cached read lacks Signed
    conditions = world.conditions()
    assert {t: c["status"] for t, c in conditions.items()} == {
        "Ready": "True",
        "Registered": "True",
        "Signed": "True",
    }


def test_a_model_the_cache_does_not_show_yet_is_read_fresh(tmp_path: Path) -> None:
    """None, paused or another version in the cache would write nothing: read fresh."""
    for behind in (None, {"paused": True}, {"version": "0"}):
        world = World(tmp_path)
        created = world.model()
        stale = None if behind is None else {**created, "spec": {**created["spec"], **behind}}
        world.cluster.cache_behind[(NS, "bert")] = stale
        world.notify.handle(_event(_registered()))
        assert world.conditions()["Ready"]["status"] == "True", behind


def test_a_status_is_computed_from_the_watch_caches_model(tmp_path: Path) -> None:
    """No read of etcd for it: the apply's resourceVersion precondition catches a stale one."""
    cluster = CountingCluster()
    notify = build(load_settings(env={"MODELHOOKS_HOME": str(tmp_path)}), cluster=cluster)
    cluster.create(NS, model("bert"))
    notify.function("notify").handle(_event(_registered()))
    assert (cluster.reads, cluster.cached) == (1, 1)


def test_a_registration_told_again_from_a_stale_cache_records_no_second_event(
    world: World,
) -> None:
    """register answers a Model's creation and its echo (notify's finalizer, an update) with
    two model.registered of their own ids: the second read the watch cache before it showed
    the first's status, so its apply, refused (resourceVersion) and computed again from a
    fresh read, changed nothing, but its result differed from the stale base: a second
    Registered Event for each Model."""
    world.model()
    stale = world.get()
    world.notify.handle(_event(_registered(), "r1"))
    written = world.get()
    world.cluster.cache_behind[(NS, "bert")] = stale  # the cache has not shown r1's status
    world.notify.handle(_event(_registered(), "r2"))
    assert world.get() == written
    assert [e.reason for e in world.cluster.events.values()] == ["Registered"]
