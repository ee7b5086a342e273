"""watch-models speaks ApiServerSource's Resource mode: the translator reads it back."""

from __future__ import annotations

import json

from modelhooks.adapters.kubernetes.model_source import to_cloudevent
from modelhooks.events.ingress import decode
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ModelCreated, ModelDeleted
from modelhooks.events.sources import translate

MODEL = {
    "apiVersion": "modelhooks.dev/v1alpha1",
    "kind": "Model",
    "metadata": {"name": "bert", "namespace": "ml", "uid": "u-1", "resourceVersion": "42"},
    "spec": {"source": {"gcs": {"uri": "gs://m/models/bert/3/"}}, "version": "3"},
}


def roundtrip(kind: str) -> object:
    ce = to_cloudevent(kind, MODEL, "https://127.0.0.1:6443")
    assert ce is not None
    (inbound,) = decode({"Content-Type": "application/cloudevents+json"}, json.dumps(ce).encode())
    (event,) = translate(inbound, layout=ObjectLayout())
    return event


def test_added_and_deleted_models_become_canonical_events() -> None:
    created = roundtrip("ADDED")
    deleted = roundtrip("DELETED")
    assert isinstance(created.data, ModelCreated)  # type: ignore[attr-defined]
    assert isinstance(deleted.data, ModelDeleted)  # type: ignore[attr-defined]
    assert deleted.data.name == "bert" and deleted.data.namespace == "ml"  # type: ignore[attr-defined]
    assert deleted.data.version == "3"  # type: ignore[attr-defined]
    assert deleted.time is not None  # type: ignore[attr-defined]


def test_ids_are_stable_per_resource_version_and_action() -> None:
    a = to_cloudevent("MODIFIED", MODEL, "s")
    b = to_cloudevent("MODIFIED", MODEL, "s")
    assert a is not None and b is not None and a["id"] == b["id"] == "u-1/42/update"


def test_bookmarks_and_nameless_objects_send_nothing() -> None:
    assert to_cloudevent("BOOKMARK", MODEL, "s") is None
    assert to_cloudevent("ADDED", {"metadata": {}}, "s") is None
