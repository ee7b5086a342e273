"""Knative ApiServerSource events for Model resources → canonical lifecycle events."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from modelhooks.core.errors import BadRequest
from modelhooks.events import samples
from modelhooks.events.inbound import Inbound
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import MAX_UID, ModelCreated, ModelDeleted, ModelUpdated, parse
from modelhooks.events.sources import kubernetes, translate

UID = "0c1f3a52-7d8e-4b6a-9f21-3e5d7c9a1b04"
SPEC = {
    "source": {"gcs": {"uri": "gs://models/models/sentiment/1/"}},
    "version": "1",
    "deletionPolicy": "Retain",
    "signing": {"enabled": True},
}


def _with_data(name: str, edit: Any) -> Inbound:
    inbound = samples.inbound(name)
    data = copy.deepcopy(inbound.data)
    edit(data)
    return msgspec.structs.replace(inbound, data=data)


def test_resource_add_is_model_created_with_the_whole_object() -> None:
    [event] = translate(samples.inbound("k8s-resource-add"), layout=ObjectLayout())
    assert event.type == "dev.modelhooks.model.created"
    assert event.data == ModelCreated(
        name="sentiment",
        namespace="ml",
        version="1",
        uid=UID,
        resource_version="184467",
        spec=SPEC,
        status={},
    )
    assert event.id == "4f1e6a0b-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
    assert event.source == "https://10.96.0.1:443"
    assert event.subject == "/apis/modelhooks.dev/v1alpha1/namespaces/ml/models/sentiment"
    assert event.time == datetime(2026, 11, 23, 17, 5, 0, 412000, tzinfo=UTC)


def test_resource_update_is_model_updated_with_its_status() -> None:
    [event] = kubernetes.from_apiserver_event(samples.inbound("k8s-resource-update"))
    assert isinstance(event.data, ModelUpdated)
    assert event.data.resource_version == "184502"
    assert event.data.status["conditions"][0]["type"] == "Registered"


def test_an_update_that_sets_a_deletion_timestamp_is_the_deletion() -> None:
    [event] = kubernetes.from_apiserver_event(samples.inbound("k8s-resource-update-deleting"))
    assert event.type == "dev.modelhooks.model.deleted"
    assert isinstance(event.data, ModelDeleted)
    assert event.data.spec["deletionPolicy"] == "Retain"  # cleanup needs the policy
    assert event.data.resource_version == "186011"


def test_resource_delete_is_model_deleted() -> None:
    [event] = kubernetes.from_apiserver_event(samples.inbound("k8s-resource-delete"))
    assert isinstance(event.data, ModelDeleted)
    assert (event.data.name, event.data.namespace, event.data.uid) == ("sentiment", "ml", UID)


def test_reference_mode_carries_only_the_name_and_namespace() -> None:
    [event] = translate(samples.inbound("k8s-ref-delete"), layout=ObjectLayout())
    assert event.data == ModelDeleted(name="sentiment", namespace="ml")
    assert event.id == "8d5c0e4f-6a7b-4c9d-8e3f-4a5b6c7d8e9f"


def test_other_kinds_and_other_groups_are_ignored() -> None:
    assert kubernetes.from_apiserver_event(samples.inbound("k8s-resource-add-other-kind")) == []
    kserve = _with_data(
        "k8s-resource-add", lambda d: d.update(apiVersion="serving.kserve.io/v1beta1")
    )
    assert kubernetes.from_apiserver_event(kserve) == []


def test_an_integer_spec_version_reads_as_text() -> None:
    inbound = _with_data("k8s-resource-add", lambda d: d["spec"].update(version=3))
    [event] = kubernetes.from_apiserver_event(inbound)
    assert isinstance(event.data, ModelCreated)
    assert event.data.version == "3"


@pytest.mark.parametrize(
    "event_type",
    ["dev.knative.apiserver.resource.patch", "dev.knative.apiserver.object.add"],
)
def test_unknown_apiserver_types_are_bad_requests(event_type: str) -> None:
    inbound = samples.inbound("k8s-resource-add")
    attrs = {**inbound.attributes, "type": event_type}
    with pytest.raises(BadRequest, match="unknown type"):
        kubernetes.from_apiserver_event(msgspec.structs.replace(inbound, attributes=attrs))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["metadata"].pop("name"), "apiserver event: metadata.name is missing"),
        (lambda d: d["metadata"].pop("namespace"), "metadata.namespace is missing"),
        (lambda d: d.update(spec=["not", "an", "object"]), "spec must be a JSON object"),
        (lambda d: d.update(metadata="sentiment"), "metadata must be a JSON object"),
        (lambda d: d.pop("kind"), "apiserver event: kind is missing"),
    ],
)
def test_malformed_objects_are_bad_requests_naming_the_field(edit: Any, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        kubernetes.from_apiserver_event(_with_data("k8s-resource-add", edit))


@pytest.mark.parametrize("sample", ["k8s-resource-add", "k8s-resource-delete"])
def test_a_uid_longer_than_a_uid_is_a_bad_request_naming_it(sample: str) -> None:
    """register keeps a fact per Model's uid: one uid cannot make it huge (Kubernetes' are
    36 characters; 64 are taken)."""
    taken = kubernetes.from_apiserver_event(
        _with_data(sample, lambda d: d["metadata"].update(uid="u" * MAX_UID))
    )
    assert taken[0].data.uid == "u" * MAX_UID  # type: ignore[union-attr]
    with pytest.raises(BadRequest, match="uid: Expected `str` of length <= 64") as refused:
        kubernetes.from_apiserver_event(
            _with_data(sample, lambda d: d["metadata"].update(uid="u" * (MAX_UID + 1)))
        )
    assert refused.value.details["field"] == "uid"


def test_a_canonical_model_event_s_uid_is_bounded_alike() -> None:
    with pytest.raises(BadRequest, match="uid") as refused:
        parse(ModelDeleted, {"name": "sentiment", "uid": "u" * (MAX_UID + 1)})
    assert refused.value.details["field"] == "uid"


def test_ids_are_stable() -> None:
    first = translate(samples.inbound("k8s-resource-update"), layout=ObjectLayout())
    assert first and first == translate(
        samples.inbound("k8s-resource-update"), layout=ObjectLayout()
    )
