"""Cloud Storage (Eventarc and Pub/Sub notifications) → canonical events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from modelhooks.core.errors import BadRequest
from modelhooks.events import samples
from modelhooks.events.inbound import Inbound
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ArtifactDeleted, ArtifactPushed
from modelhooks.events.sources import gcs, translate

LAYOUT = ObjectLayout()
GEN = "1795453331523407"
SOURCE = "//storage.googleapis.com/projects/_/buckets/models"


def _with(inbound: Inbound, **changes: Any) -> Inbound:
    return msgspec.structs.replace(inbound, **changes)


def test_eventarc_finalize_of_the_marker_is_a_push_named_by_its_generation() -> None:
    [event] = gcs.from_eventarc(samples.inbound("gcs-eventarc-finalized-marker"), layout=LAYOUT)
    assert event.type == "dev.modelhooks.artifact.pushed"
    assert event.data == ArtifactPushed(
        model="sentiment",
        version="1",
        uri="gs://models/models/sentiment/1/",
        digest=f"gcs-generation:{GEN}",
        store="gcs",
        labels={"framework": "pytorch", "commit": "9f2c1e7"},
    )
    assert event.id == "9780479128541716"
    assert event.source == SOURCE
    assert event.subject == "objects/models/sentiment/1/_SUCCESS"
    assert event.time == datetime(2026, 11, 23, 17, 2, 11, 535000, tzinfo=UTC)


def test_pubsub_finalize_of_the_marker_says_the_same_as_eventarc() -> None:
    [event] = gcs.from_pubsub_notification(
        samples.inbound("gcs-pubsub-finalize-marker"), layout=LAYOUT
    )
    [via_eventarc] = gcs.from_eventarc(
        samples.inbound("gcs-eventarc-finalized-marker"), layout=LAYOUT
    )
    assert event.data == via_eventarc.data
    assert event.id == "11954318722141447@3"  # the Pub/Sub messageId, of configuration 3
    assert (event.source, event.subject) == (via_eventarc.source, via_eventarc.subject)
    assert event.time == datetime(2026, 11, 23, 17, 2, 11, 523407, tzinfo=UTC)


@pytest.mark.parametrize(
    "name",
    [
        "gcs-eventarc-finalized-weights",  # a file of the model, not its marker
        "gcs-eventarc-metadata-updated",
        "gcs-pubsub-archive-marker",
        "gcs-pubsub-overwrite-delete",
    ],
)
def test_irrelevant_changes_translate_to_nothing(name: str) -> None:
    assert translate(samples.inbound(name), layout=LAYOUT) == []


def test_a_delete_replaced_by_a_newer_generation_is_an_overwrite_not_a_deletion() -> None:
    overwrite = samples.inbound("gcs-pubsub-overwrite-delete")
    assert overwrite.attributes["overwrittenByGeneration"] == GEN
    assert gcs.from_pubsub_notification(overwrite, layout=LAYOUT) == []
    # The same message without the overwrite marker is a real deletion of the marker.
    attrs = {k: v for k, v in overwrite.attributes.items() if k != "overwrittenByGeneration"}
    [event] = gcs.from_pubsub_notification(_with(overwrite, attributes=attrs), layout=LAYOUT)
    assert isinstance(event.data, ArtifactDeleted)
    assert event.data.digest == "gcs-generation:1795449731002911"


def test_eventarc_delete_of_the_marker_deletes_the_model_version() -> None:
    [event] = gcs.from_eventarc(samples.inbound("gcs-eventarc-deleted-marker"), layout=LAYOUT)
    assert event.type == "dev.modelhooks.artifact.deleted"
    assert event.data == ArtifactDeleted(
        uri="gs://models/models/sentiment/1/",
        store="gcs",
        digest=f"gcs-generation:{GEN}",
        model="sentiment",
        version="1",
    )


def test_delete_of_any_file_under_a_model_prefix_deletes_that_prefix() -> None:
    [event] = gcs.from_pubsub_notification(
        samples.inbound("gcs-pubsub-delete-weights"), layout=LAYOUT
    )
    assert isinstance(event.data, ArtifactDeleted)
    assert (event.data.model, event.data.version) == ("sentiment", "1")
    assert event.data.uri == "gs://models/models/sentiment/1/"
    assert event.data.digest is None  # the generation of a weights file names no artifact
    assert event.subject == "objects/models/sentiment/1/model.safetensors"


def test_objects_outside_any_model_prefix_are_ignored() -> None:
    inbound = samples.inbound("gcs-pubsub-finalize-marker")
    attrs = {**inbound.attributes, "objectId": "datasets/imdb/_SUCCESS"}
    assert gcs.from_pubsub_notification(_with(inbound, attributes=attrs), layout=LAYOUT) == []
    attrs["eventType"] = "OBJECT_DELETE"
    assert gcs.from_pubsub_notification(_with(inbound, attributes=attrs), layout=LAYOUT) == []


def test_the_layout_decides_the_prefix_and_the_marker() -> None:
    layout = ObjectLayout(pattern="registry/{name}/v{version}/", marker="READY")
    inbound = samples.inbound("gcs-pubsub-finalize-marker")
    attrs = {**inbound.attributes, "objectId": "registry/bert/v3/READY"}
    [event] = gcs.from_pubsub_notification(_with(inbound, attributes=attrs), layout=layout)
    assert isinstance(event.data, ArtifactPushed)
    assert (event.data.model, event.data.version) == ("bert", "3")
    assert event.data.uri == "gs://models/registry/bert/v3/"
    # the default marker name means nothing under this layout
    attrs["objectId"] = "registry/bert/v3/_SUCCESS"
    assert gcs.from_pubsub_notification(_with(inbound, attributes=attrs), layout=layout) == []


def test_payload_format_none_still_translates_from_the_attributes() -> None:
    inbound = _with(samples.inbound("gcs-pubsub-finalize-marker"), data=None)
    [event] = gcs.from_pubsub_notification(inbound, layout=LAYOUT)
    assert isinstance(event.data, ArtifactPushed)
    assert event.data.digest == f"gcs-generation:{GEN}"
    assert event.data.labels == {}


@pytest.mark.parametrize("field", ["bucket", "name", "generation"])
def test_eventarc_data_missing_a_field_is_a_bad_request_naming_it(field: str) -> None:
    inbound = samples.inbound("gcs-eventarc-finalized-marker")
    data = {k: v for k, v in inbound.data.items() if k != field}
    with pytest.raises(BadRequest, match=f"gcs event: {field} is missing"):
        gcs.from_eventarc(_with(inbound, data=data), layout=LAYOUT)


@pytest.mark.parametrize("attribute", ["bucketId", "objectId", "objectGeneration", "eventType"])
def test_pubsub_attribute_missing_is_a_bad_request_naming_it(attribute: str) -> None:
    inbound = samples.inbound("gcs-pubsub-finalize-marker")
    attrs = {k: v for k, v in inbound.attributes.items() if k != attribute}
    with pytest.raises(BadRequest, match=f"gcs notification: {attribute} is missing"):
        gcs.from_pubsub_notification(_with(inbound, attributes=attrs), layout=LAYOUT)


def test_unknown_event_types_and_non_object_data_are_bad_requests() -> None:
    inbound = samples.inbound("gcs-eventarc-finalized-marker")
    attrs = {**inbound.attributes, "type": "google.cloud.storage.object.v1.renamed"}
    with pytest.raises(BadRequest, match="unknown type"):
        gcs.from_eventarc(_with(inbound, attributes=attrs), layout=LAYOUT)
    with pytest.raises(BadRequest, match="gcs event: data must be a JSON object"):
        gcs.from_eventarc(_with(inbound, data=["models"]), layout=LAYOUT)
    notification = samples.inbound("gcs-pubsub-finalize-marker")
    attrs = {**notification.attributes, "eventType": "OBJECT_RENAME"}
    with pytest.raises(BadRequest, match="unknown eventType 'OBJECT_RENAME'"):
        gcs.from_pubsub_notification(_with(notification, attributes=attrs), layout=LAYOUT)


def test_generation_as_a_json_number_is_accepted_but_not_as_an_object() -> None:
    inbound = samples.inbound("gcs-eventarc-finalized-marker")
    [event] = gcs.from_eventarc(
        _with(inbound, data={**inbound.data, "generation": int(GEN)}), layout=LAYOUT
    )
    assert isinstance(event.data, ArtifactPushed)
    assert event.data.digest == f"gcs-generation:{GEN}"
    with pytest.raises(BadRequest, match="generation must be a string"):
        gcs.from_eventarc(_with(inbound, data={**inbound.data, "generation": {}}), layout=LAYOUT)


@pytest.mark.parametrize(
    "generation", ["abc", "-1", "0", "1.5", "1e3", "\u0663", " 17", "17\n", str(1 << 63), -17]
)
def test_a_generation_that_is_no_int64_is_a_bad_request(generation: object) -> None:
    """Each named the marker `gcs-generation:<it>`, a generation no store has."""
    inbound = samples.inbound("gcs-eventarc-finalized-marker")
    with pytest.raises(BadRequest, match=r"generation .* is not a generation"):
        gcs.from_eventarc(
            _with(inbound, data={**inbound.data, "generation": generation}), layout=LAYOUT
        )
    notification = samples.inbound("gcs-pubsub-delete-weights")
    attrs = {**notification.attributes, "objectGeneration": str(generation)}
    with pytest.raises(BadRequest, match=r"objectGeneration .* is not a generation"):
        gcs.from_pubsub_notification(_with(notification, attributes=attrs), layout=LAYOUT)


@pytest.mark.parametrize(
    "name",
    ["gcs-eventarc-finalized-marker", "gcs-pubsub-finalize-marker", "gcs-pubsub-delete-weights"],
)
def test_translating_a_redelivery_gives_the_same_event(name: str) -> None:
    first = translate(samples.inbound(name), layout=LAYOUT)
    again = translate(samples.inbound(name), layout=LAYOUT)
    assert first and first == again
