"""`events.sources.translate`: dispatch by kind, type and shape, over every sample."""

from __future__ import annotations

import copy
import doctest
import importlib
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

import modelhooks.events.sources
from modelhooks.core.errors import BadRequest
from modelhooks.delivery.statuses import status_of
from modelhooks.events import samples
from modelhooks.events.inbound import Inbound
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import EVENT_TYPES
from modelhooks.events.sources import translate

LAYOUT = ObjectLayout()
HOST = "registry.local:5000"
PUSHED = "dev.modelhooks.artifact.pushed"
DELETED = "dev.modelhooks.artifact.deleted"
PRUNE = "dev.modelhooks.prune.requested"
TRANSFER = "dev.modelhooks.transfer.requested"

# What every recorded delivery means. A new sample must say what it expects here.
EXPECTED: dict[str, list[str]] = {
    "canonical-artifact-pushed": [PUSHED],
    "canonical-pubsub-artifact-pushed": [PUSHED],
    "gar-delete": [DELETED],
    "gar-delete-tag": [DELETED],
    "gar-eventarc-insert": [PUSHED],
    "gar-insert": [PUSHED],
    "gar-insert-untagged": [],
    "gcs-eventarc-deleted-marker": [DELETED],
    "gcs-eventarc-finalized-marker": [PUSHED],
    "gcs-eventarc-finalized-weights": [],
    "gcs-eventarc-metadata-updated": [],
    "gcs-pubsub-archive-marker": [],
    "gcs-pubsub-delete-weights": [DELETED],
    "gcs-pubsub-finalize-attributes-only": [PUSHED],
    "gcs-pubsub-finalize-marker": [PUSHED],
    "gcs-pubsub-finalize-overwrote": [PUSHED],
    "gcs-pubsub-metadata-update": [],
    "gcs-pubsub-overwrite-delete": [],
    "k8s-ref-delete": ["dev.modelhooks.model.deleted"],
    "k8s-resource-add": ["dev.modelhooks.model.created"],
    "k8s-resource-add-other-kind": [],
    "k8s-resource-delete": ["dev.modelhooks.model.deleted"],
    "k8s-resource-update": ["dev.modelhooks.model.updated"],
    "k8s-resource-update-deleting": ["dev.modelhooks.model.deleted"],
    "knative-ping-prune": [PRUNE],
    "oci-distribution-blob-push": [],
    "oci-distribution-delete": [DELETED, DELETED],
    "oci-distribution-envelope-untagged": [],
    "oci-distribution-index-push": [PUSHED],
    "oci-distribution-manifest-list-push": [PUSHED],
    "oci-distribution-pull": [],
    "oci-distribution-push": [PUSHED],
    "oci-distribution-referrer-push": [],
    "s3-aws-batch": [PUSHED, DELETED],
    "s3-aws-put-marker": [PUSHED],
    "s3-aws-put-marker-space-in-key": [PUSHED],
    "s3-minio-copy-marker-versioned": [PUSHED],
    "s3-minio-delete-marker-created": [DELETED],
    "s3-minio-put-marker": [PUSHED],
    "s3-removed": [DELETED],
    "s3-test-event": [],
    "scheduler-pubsub-prune-requested": [PRUNE],
    "zot-image-deleted": [DELETED],
    "zot-image-updated": [PUSHED],
    "zot-repository-created": [],
}


def _translate(inbound: Inbound) -> list[Any]:
    return translate(inbound, layout=LAYOUT, registry_host=HOST)


def test_every_sample_has_an_expectation() -> None:
    assert sorted(EXPECTED) == samples.names()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_sample_translates_to_what_it_means(name: str) -> None:
    events = _translate(samples.inbound(name))
    assert [e.type for e in events] == EXPECTED[name]
    for event in events:
        assert EVENT_TYPES[event.type] is type(event.data)
        assert event.source and event.id


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_redelivery_translates_to_equal_events_with_equal_ids(name: str) -> None:
    first, again = _translate(samples.inbound(name)), _translate(samples.inbound(name))
    assert first == again
    assert len({e.id for e in first}) == len(first)  # one delivery, distinct ids


def _mutations(value: Any) -> Iterator[tuple[str, Any]]:
    """Every copy of `value` with one field removed or replaced by a wrong type."""
    if isinstance(value, dict):
        for key in value:
            for label, replacement in (("del", ...), ("null", None), ("int", 7), ("list", [])):
                changed = copy.copy(value)
                if replacement is ...:
                    del changed[key]
                else:
                    changed[key] = replacement
                yield f"{label} {key}", changed
            for path, inner in _mutations(value[key]):
                yield f"{key}.{path}", {**value, key: inner}
    elif isinstance(value, list):
        for i, item in enumerate(value):
            for path, inner in _mutations(item):
                yield f"[{i}].{path}", [*value[:i], inner, *value[i + 1 :]]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_broken_deliveries_raise_bad_request_and_nothing_else(name: str) -> None:
    inbound = samples.inbound(name)
    variants = [msgspec.structs.replace(inbound, data=d) for _, d in _mutations(inbound.data)]
    variants += [
        msgspec.structs.replace(
            inbound, attributes={k: v for k, v in inbound.attributes.items() if k != a}
        )
        for a in inbound.attributes
    ]
    variants += [msgspec.structs.replace(inbound, data=d) for d in (None, b"{not json", "text", 3)]
    assert len(variants) > 4
    for variant in variants:
        try:
            result = _translate(variant)
        except BadRequest as exc:
            assert exc.message and status_of(exc) == 400
        else:
            assert isinstance(result, list)


@pytest.mark.parametrize(
    ("inbound", "message"),
    [
        (
            Inbound("cloudevent", "1", {}, {"id": "1", "source": "/x"}),
            "cloudevent: type is missing",
        ),
        (
            Inbound("cloudevent", "1", {}, {"id": "1", "source": "/x", "type": "com.example.ping"}),
            "cloudevent: unknown type 'com.example.ping'",
        ),
        (Inbound("pubsub", "1", {"hello": "world"}, {}), "pubsub message: unknown shape"),
        (Inbound("webhook", "1", {"entity": "model_version"}), "webhook body: unknown shape"),
        (Inbound("webhook", "1", ["Records"]), "webhook body: unknown shape"),
        (Inbound("smtp", "1", {}), "unknown delivery kind 'smtp'"),  # type: ignore[arg-type]
    ],
)
def test_unknown_types_and_shapes_are_bad_requests(inbound: Inbound, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        _translate(inbound)


def test_the_package_exports_only_the_facade() -> None:
    assert modelhooks.events.sources.__all__ == [
        "KINDS",
        "PUBSUB_MESSAGE_PUBLISHED",
        "PartlyBad",
        "kind_of",
        "translate",
    ]
    for name in modelhooks.events.sources.__all__:
        assert hasattr(modelhooks.events.sources, name)


@pytest.mark.parametrize(
    "module",
    [
        "modelhooks.events.sources",
        "modelhooks.events.sources.artifact_registry",
        "modelhooks.events.sources.canonical",
        "modelhooks.events.sources.gcs",
        "modelhooks.events.sources.kubernetes",
        "modelhooks.events.sources.s3",
        "modelhooks.events.sources.schedule",
        "modelhooks.events.samples",
    ],
)
def test_docstring_examples_hold(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_samples_are_loaded_by_name() -> None:
    assert samples.load("gar-insert")["subscription"].endswith("/modelhooks-gcr")
    assert samples.body("s3-test-event").startswith(b"{")
    with pytest.raises(KeyError, match="no sample named 'nope'"):
        samples.load("nope")
