"""The `Cluster` contract, which `KubernetesCluster` (on the real kube-apiserver, as notify's
ServiceAccount) and the fake `InMemoryCluster` must both pass.

Use: subclass `ClusterContract` and provide the fixture `place`: a `Place` whose `cluster` is
the port under test and whose other members act as the cluster's admin (kubectl).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from modelhooks.core.conditions import FINALIZER, ROLLOUT_ANNOTATION, ModelEvent, event_name
from modelhooks.core.errors import Conflict, NotFound
from modelhooks.core.ports import Cluster


@dataclass(frozen=True)
class Place:
    cluster: Cluster
    namespace: Callable[[], str]  # a fresh namespace
    create: Callable[[str, dict[str, Any]], dict[str, Any]]  # a Model, as its owner does
    delete: Callable[[str, str], None]  # kubectl delete (finalizers hold it)
    deploy: Callable[[str, str, Mapping[str, str]], None]  # a Deployment with annotations
    pod_annotations: Callable[[str, str], dict[str, str]]  # of a Deployment's template
    events: Callable[[str], list[dict[str, Any]]]  # Events in a namespace, as the API shows


def model(name: str, finalizers: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    body = {"source": {"oci": {"reference": "registry.local:5000/models/demo:1"}}, "version": "1"}
    body.update(spec)
    meta: dict[str, Any] = {"name": name}
    if finalizers:
        meta["finalizers"] = finalizers
    return {
        "apiVersion": "modelhooks.dev/v1alpha1",
        "kind": "Model",
        "metadata": meta,
        "spec": body,
    }


def condition(type_: str, status: str = "True", generation: int = 1) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": type_,
        "message": f"{type_} is {status}",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": generation,
    }


class ClusterContract:
    def test_a_model_reads_back_and_a_missing_one_is_none(self, place: Place) -> None:
        ns = place.namespace()
        place.create(ns, model("bert", deletionPolicy="Delete"))
        found = place.cluster.get_model(ns, "bert")
        assert found is not None
        assert found["spec"]["deletionPolicy"] == "Delete"
        assert found["metadata"]["generation"] == 1 and found["metadata"]["uid"]
        assert place.cluster.get_model(ns, "other") is None
        assert [m["metadata"]["name"] for m in place.cluster.list_models(ns)] == ["bert"]

    def test_a_cached_read_is_the_model_as_it_was_at_some_resource_version(
        self, place: Place
    ) -> None:
        """From the watch cache: the Model once the cache shows it (until then none, or an
        older one), none for a Model that does not exist."""
        ns = place.namespace()
        created = place.create(ns, model("bert"))
        deadline = time.monotonic() + 10
        while (found := place.cluster.get_model(ns, "bert", cached=True)) is None:
            assert time.monotonic() < deadline, "the cache never showed the Model"
            time.sleep(0.05)
        assert found["metadata"]["uid"] == created["metadata"]["uid"]
        assert found["spec"] == created["spec"]
        assert place.cluster.get_model(ns, "other", cached=True) is None

    def test_status_apply_is_conditional_and_a_repeat_changes_nothing(self, place: Place) -> None:
        ns = place.namespace()
        created = place.create(ns, model("bert"))
        rv = created["metadata"]["resourceVersion"]
        status = {"registeredModelId": "7", "conditions": [condition("Registered")]}
        applied = place.cluster.apply_status(ns, "bert", status, resource_version=rv)
        assert applied["status"]["conditions"] == [condition("Registered")]
        assert applied["metadata"]["generation"] == 1  # status writes leave the generation
        again = place.cluster.apply_status(
            ns, "bert", status, resource_version=applied["metadata"]["resourceVersion"]
        )
        assert again["metadata"]["resourceVersion"] == applied["metadata"]["resourceVersion"]
        with pytest.raises(Conflict):  # read before the last write: stale
            place.cluster.apply_status(ns, "bert", {"modelVersionId": "9"}, resource_version=rv)
        with pytest.raises(NotFound):
            place.cluster.apply_status(ns, "gone", status, resource_version=rv)

    def test_what_a_later_apply_leaves_out_is_removed(self, place: Place) -> None:
        ns = place.namespace()
        rv = place.create(ns, model("bert"))["metadata"]["resourceVersion"]
        first = {
            "registeredModelId": "7",
            "conditions": [condition("Registered"), condition("CleanupFailed")],
        }
        rv = place.cluster.apply_status(ns, "bert", first, resource_version=rv)["metadata"][
            "resourceVersion"
        ]
        second = {"conditions": [condition("Registered"), condition("Ready")]}
        stored = place.cluster.apply_status(ns, "bert", second, resource_version=rv)["status"]
        assert set(stored) == {"conditions"}  # registeredModelId and CleanupFailed went
        by_type = {c["type"]: c for c in stored["conditions"]}
        assert by_type == {"Ready": condition("Ready"), "Registered": condition("Registered")}

    def test_finalizers_are_added_and_removed_keeping_others(self, place: Place) -> None:
        ns = place.namespace()
        place.create(ns, model("held", finalizers=["example.com/other"]))
        assert place.cluster.add_finalizer(ns, "held", FINALIZER)
        assert not place.cluster.add_finalizer(ns, "held", FINALIZER)
        found = place.cluster.get_model(ns, "held")
        assert found and found["metadata"]["finalizers"] == ["example.com/other", FINALIZER]
        assert place.cluster.remove_finalizer(ns, "held", FINALIZER)
        assert not place.cluster.remove_finalizer(ns, "held", FINALIZER)
        found = place.cluster.get_model(ns, "held")
        assert found and found["metadata"]["finalizers"] == ["example.com/other"]
        assert not place.cluster.add_finalizer(ns, "missing", FINALIZER)
        assert not place.cluster.remove_finalizer(ns, "missing", FINALIZER)

    def test_the_finalizer_holds_a_deletion_until_removed(self, place: Place) -> None:
        ns = place.namespace()
        place.create(ns, model("bert"))
        assert place.cluster.add_finalizer(ns, "bert", FINALIZER)  # none before: a new list
        place.delete(ns, "bert")
        held = place.cluster.get_model(ns, "bert")
        assert held and held["metadata"]["deletionTimestamp"]
        assert place.cluster.remove_finalizer(ns, "bert", FINALIZER)
        assert place.cluster.get_model(ns, "bert") is None

    def test_a_finalizer_held_twice_is_removed_both_times(self, place: Place) -> None:
        """The API server takes a finalizer listed twice (a manifest naming it twice): one
        removal took the first, and the other held the deletion."""
        ns = place.namespace()
        place.create(ns, model("twice", finalizers=[FINALIZER, "example.com/other", FINALIZER]))
        place.delete(ns, "twice")
        assert place.cluster.remove_finalizer(ns, "twice", FINALIZER)
        found = place.cluster.get_model(ns, "twice")
        assert found and found["metadata"]["finalizers"] == ["example.com/other"]

    def test_no_finalizer_is_added_to_a_model_being_deleted(self, place: Place) -> None:
        """The API server takes no new finalizer on an object being deleted (422): a Model
        deleted between notify's read and its finalizer write is False at once, not five
        refused writes and a 503 saying the finalizers kept changing."""
        ns = place.namespace()
        place.create(ns, model("going", finalizers=["example.com/other"]))
        place.delete(ns, "going")
        assert not place.cluster.add_finalizer(ns, "going", FINALIZER)
        found = place.cluster.get_model(ns, "going")
        assert found and found["metadata"]["finalizers"] == ["example.com/other"]

    def test_an_event_is_recorded_once_under_its_name(self, place: Place) -> None:
        ns = place.namespace()
        created = place.create(ns, model("bert"))
        event = ModelEvent(
            namespace=ns,
            name=event_name("bert", "src", "id-1", "Registered"),
            model="bert",
            uid=created["metadata"]["uid"],
            reason="Registered",
            action="UpdateStatus",
            note="version 1 registered",
            time=datetime(2026, 1, 1, tzinfo=UTC),
        )
        assert place.cluster.record(event)
        assert not place.cluster.record(event)
        (shown,) = place.events(ns)
        assert shown["reason"] == "Registered" and shown["note"] == "version 1 registered"
        assert shown["regarding"]["name"] == "bert" and shown["regarding"]["kind"] == "Model"
        assert shown["reportingController"] == "modelhooks.dev/notify"

    def test_roll_out_annotates_only_the_models_workloads_once(self, place: Place) -> None:
        ns = place.namespace()
        place.deploy(ns, "serve-bert", {"modelhooks.dev/model": "bert"})
        place.deploy(ns, "serve-gpt", {"modelhooks.dev/model": "gpt"})
        place.deploy(ns, "plain", {})
        assert place.cluster.roll_out(ns, "bert", "1@sha256:aa") == ["Deployment/serve-bert"]
        assert place.cluster.roll_out(ns, "bert", "1@sha256:aa") == []
        assert place.pod_annotations(ns, "serve-bert")[ROLLOUT_ANNOTATION] == "1@sha256:aa"
        assert ROLLOUT_ANNOTATION not in place.pod_annotations(ns, "serve-gpt")
        assert ROLLOUT_ANNOTATION not in place.pod_annotations(ns, "plain")
