"""S3 / MinIO bucket notifications → canonical events."""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from modelhooks.core.errors import BadRequest
from modelhooks.events import samples
from modelhooks.events.inbound import Inbound
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ArtifactDeleted, ArtifactPushed
from modelhooks.events.sources import s3, translate

LAYOUT = ObjectLayout()


def _body(name: str) -> dict[str, Any]:
    body: dict[str, Any] = copy.deepcopy(samples.load(name))
    return body


def _translate(body: Any) -> list[Any]:
    return s3.from_s3_notification(Inbound("webhook", "webhook-abc", body), layout=LAYOUT)


def _object(body: dict[str, Any], n: int = 0) -> dict[str, Any]:
    obj: dict[str, Any] = body["Records"][n]["s3"]["object"]
    return obj


def test_aws_put_of_the_marker_on_a_versioned_bucket_is_named_by_its_version() -> None:
    [event] = translate(samples.inbound("s3-aws-put-marker"), layout=LAYOUT)
    assert event.type == "dev.modelhooks.artifact.pushed"
    assert event.data == ArtifactPushed(
        model="sentiment",
        version="1",
        uri="s3://models/models/sentiment/1/",
        digest="s3-version:3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY",
        store="s3",
    )
    assert event.source == "s3://models"
    assert event.subject == "models/sentiment/1/_SUCCESS"
    assert (
        event.id == "s3://models/models/sentiment/1/_SUCCESS#ObjectCreated:Put@0067420E53A2B1C9D4"
    )
    assert event.time == datetime(2026, 11, 23, 17, 2, 11, 802000, tzinfo=UTC)


def test_minio_webhook_body_with_an_escaped_key_is_decoded() -> None:
    body = samples.load("s3-minio-put-marker")
    assert _object(body)["key"] == "models%2Fsentiment%2F1%2F_SUCCESS"
    [event] = translate(samples.inbound("s3-minio-put-marker"), layout=LAYOUT)
    assert isinstance(event.data, ArtifactPushed)
    assert event.data.uri == "s3://models/models/sentiment/1/"
    # an unversioned bucket: the ETag names the marker
    assert event.data.digest == "s3-etag:d41d8cd98f00b204e9800998ecf8427e"
    assert event.subject == "models/sentiment/1/_SUCCESS"


def test_a_space_arrives_as_plus_and_a_plus_as_percent_2b() -> None:
    [event] = translate(samples.inbound("s3-aws-put-marker-space-in-key"), layout=LAYOUT)
    assert isinstance(event.data, ArtifactPushed)
    assert (event.data.model, event.data.version) == ("sentiment v2", "1+rc1")
    assert event.subject == "models/sentiment v2/1+rc1/_SUCCESS"


def test_a_key_that_percent_encodes_no_utf8_is_a_bad_request_and_others_decode() -> None:
    """Replaced by U+FFFD, `w%C3.bin` and `w%C4.bin` were one key and one event id."""
    body = _body("s3-removed")
    _object(body)["key"] = "models/sentiment/1/w%C3.bin"
    with pytest.raises(BadRequest, match="percent-encodes no UTF-8 key"):
        _translate(body)
    for encoded, key in (
        ("models/sentiment/1/%zz", "models/sentiment/1/%zz"),  # no escape: as written
        ("models%2Fsentiment%2F1%2Fw%C3%A9+1", "models/sentiment/1/w\u00e9 1"),
    ):
        _object(body)["key"] = encoded
        [event] = _translate(body)
        assert event.subject == key


def test_removal_of_the_marker_deletes_the_model_version() -> None:
    [event] = translate(samples.inbound("s3-removed"), layout=LAYOUT)
    assert event.type == "dev.modelhooks.artifact.deleted"
    assert event.data == ArtifactDeleted(
        uri="s3://models/models/sentiment/1/", store="s3", model="sentiment", version="1"
    )


def test_several_records_give_several_events_and_only_the_relevant_ones() -> None:
    events = translate(samples.inbound("s3-aws-batch"), layout=LAYOUT)
    # record 0 is a weights file (ignored), 1 the marker of v1, 2 a delete marker on v0
    assert [e.type for e in events] == [
        "dev.modelhooks.artifact.pushed",
        "dev.modelhooks.artifact.deleted",
    ]
    pushed, deleted = (e.data for e in events)
    assert isinstance(pushed, ArtifactPushed) and pushed.version == "1"
    assert isinstance(deleted, ArtifactDeleted) and deleted.version == "0"
    # a delete marker's versionId names the marker, not the object that vanished
    assert deleted.digest is None
    assert len({e.id for e in events}) == 2


def test_deleting_a_specific_version_of_the_marker_names_that_version() -> None:
    body = _body("s3-removed")
    _object(body)["versionId"] = "UIORUnfndfiufdisojhr398493jfdkjFJjkndnqUifhnw89493jJFJ"
    [event] = _translate(body)
    assert isinstance(event.data, ArtifactDeleted)
    assert event.data.digest == "s3-version:UIORUnfndfiufdisojhr398493jfdkjFJjkndnqUifhnw89493jJFJ"


def test_version_null_means_unversioned() -> None:
    body = _body("s3-aws-put-marker")
    _object(body)["versionId"] = "null"
    [event] = _translate(body)
    assert isinstance(event.data, ArtifactPushed)
    assert event.data.digest == "s3-etag:d41d8cd98f00b204e9800998ecf8427e"


@pytest.mark.parametrize(
    "event_name",
    [
        "s3:ObjectAccessed:Get",
        "ObjectRestore:Completed",
        "s3:ObjectRemoved:NoOP",
        "ObjectTagging:Put",
    ],
)
def test_other_event_names_are_ignored(event_name: str) -> None:
    body = _body("s3-removed")
    body["Records"][0]["eventName"] = event_name
    assert _translate(body) == []


def test_lifecycle_expiration_is_a_removal() -> None:
    body = _body("s3-removed")
    body["Records"][0]["eventName"] = "LifecycleExpiration:Delete"
    [event] = _translate(body)
    assert event.type == "dev.modelhooks.artifact.deleted"


def test_the_configuration_test_event_is_ignored() -> None:
    assert translate(samples.inbound("s3-test-event"), layout=LAYOUT) == []


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (("s3", "object", "key"), "s3 record 0: s3.object.key is missing"),
        (("s3", "bucket", "name"), "s3 record 0: s3.bucket.name is missing"),
        (("eventName",), "s3 record 0: eventName is missing"),
        (("s3", "object", "eTag"), "s3 record 0: s3.object.eTag is missing"),
    ],
)
def test_a_missing_field_is_a_bad_request_naming_it(path: tuple[str, ...], message: str) -> None:
    body = _body("s3-minio-put-marker")
    parent = body["Records"][0]
    for part in path[:-1]:
        parent = parent[part]
    del parent[path[-1]]
    with pytest.raises(BadRequest) as caught:
        _translate(body)
    assert caught.value.message == message
    assert caught.value.details["field"] == ".".join(path)


def test_malformed_shapes_are_bad_requests() -> None:
    with pytest.raises(BadRequest, match="Records must be a list"):
        _translate({"Records": {"eventName": "ObjectCreated:Put"}})
    with pytest.raises(BadRequest, match="s3 record 0: record must be a JSON object"):
        _translate({"Records": ["models/sentiment/1/_SUCCESS"]})
    body = _body("s3-aws-put-marker")
    body["Records"][0]["s3"]["object"] = "models/sentiment/1/_SUCCESS"
    with pytest.raises(BadRequest, match=re.escape("s3 record 0: s3.object must be a JSON object")):
        _translate(body)
    body = _body("s3-aws-batch")
    body["Records"][2]["eventTime"] = "yesterday"
    with pytest.raises(BadRequest, match="s3 record 2: eventTime is not an RFC 3339"):
        _translate(body)


def test_ids_are_stable_and_fall_back_to_the_delivery_id_without_a_sequencer() -> None:
    first = translate(samples.inbound("s3-aws-batch"), layout=LAYOUT)
    assert first == translate(samples.inbound("s3-aws-batch"), layout=LAYOUT)
    body = _body("s3-aws-batch")
    del _object(body, 1)["sequencer"]
    events = _translate(body)
    assert events[0].id == "webhook-abc:1"  # record index within the delivery
    assert events == _translate(body)


def test_a_put_and_a_delete_sharing_a_sequencer_keep_distinct_ids() -> None:
    put = _body("s3-minio-put-marker")
    removed = copy.deepcopy(put)
    removed["Records"][0]["eventName"] = "s3:ObjectRemoved:Delete"
    assert _translate(put)[0].id != _translate(removed)[0].id


@pytest.mark.parametrize(
    "event_name",
    ["s3:ObjectCreated:PutTagging", "s3:ObjectCreated:DeleteTagging",
     "s3:ObjectCreated:PutRetention", "s3:ObjectCreated:PutLegalHold"],
)  # fmt: skip
def test_minio_metadata_only_changes_of_the_marker_are_not_pushes(event_name: str) -> None:
    inbound = samples.inbound("s3-minio-put-marker")
    body = copy.deepcopy(inbound.data)
    body["EventName"] = event_name
    for record in body["Records"]:
        record["eventName"] = event_name
    assert translate(msgspec.structs.replace(inbound, data=body), layout=LAYOUT) == []


@pytest.mark.parametrize(
    "value", ["2026-11-27", "20261127T100000Z", "2026-W48-5T10:00:00Z", "2026-11-27T10:00:00Zjunk"]
)
def test_a_time_that_is_not_rfc_3339_is_refused_though_fromisoformat_reads_it(value: str) -> None:
    body = _body("s3-aws-batch")
    body["Records"][2]["eventTime"] = value
    with pytest.raises(BadRequest, match="eventTime is not an RFC 3339"):
        _translate(body)


@pytest.mark.parametrize(
    "value",
    [
        "2026-11-27T10:00:00.123456789Z",
        "2026-11-27t10:00:00+01:00",
        "2026-11-27 10:00:00",
        "2026-11-27T10:00Z",
    ],
)
def test_rfc_3339_times_as_producers_write_them_are_read(value: str) -> None:
    body = _body("s3-aws-batch")
    body["Records"][2]["eventTime"] = value
    assert len(_translate(body)) == len(_translate(_body("s3-aws-batch")))
