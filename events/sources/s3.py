"""S3 / MinIO bucket notifications → canonical events.

The body is the S3 event notification JSON: `Records[]`, each with `eventName`
(`ObjectCreated:Put`, `ObjectRemoved:Delete`, …; MinIO writes `s3:ObjectCreated:Put`),
`s3.bucket.name` and `s3.object.{key, size, eTag, versionId, sequencer}`. The key is
URL-encoded (a space arrives as `+`). MinIO webhook targets send the same record in an
envelope that adds `EventName` and `Key` (bucket/decoded key) at the top level.

Metadata-only changes are not pushes: MinIO's `s3:ObjectCreated:PutTagging`,
`DeleteTagging`, `PutRetention` and `PutLegalHold` (S3 files tagging, ACL and restore under
other event names, which are ignored too).

A ready marker created → ArtifactPushed named `s3-version:<versionId>` on a versioned
bucket, else `s3-etag:<etag>`. The marker or any file under a model prefix removed →
ArtifactDeleted for that prefix. Several records → several events.

>>> from modelhooks.events.layout import ObjectLayout
>>> body = {"Records": [{"eventName": "ObjectCreated:Put", "s3": {
...     "bucket": {"name": "models"},
...     "object": {"key": "models/bert/3/_SUCCESS", "eTag": "d41d8", "sequencer": "01"}}}]}
>>> [e.data.uri for e in from_s3_notification(Inbound("webhook", "x", body),
...                                          layout=ObjectLayout())]
['s3://models/models/bert/3/']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import unquote_plus

from modelhooks.events.errors import BadRequest
from modelhooks.events.inbound import Inbound
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ArtifactDeleted, ArtifactPushed, CanonicalEvent, EventData
from modelhooks.events.sources._common import (
    as_object,
    bucket_name,
    canonical,
    each,
    json_value,
    optional_text,
    parse_time,
    payload,
    text,
)

__all__ = ["from_s3_notification", "is_s3_notification"]

_TEST_EVENT = "s3:TestEvent"  # sent by AWS when a notification configuration is saved


def is_s3_notification(body: Any) -> bool:
    return isinstance(body, Mapping) and ("Records" in body or body.get("Event") == _TEST_EVENT)


def from_s3_notification(inbound: Inbound, *, layout: ObjectLayout) -> list[CanonicalEvent]:
    """An S3 / MinIO notification body → one canonical event per relevant record."""
    where = "s3 notification"
    body = as_object(json_value(inbound.data, where), where, "body")
    if body.get("Event") == _TEST_EVENT:
        return []
    records = body.get("Records")
    if not isinstance(records, Sequence) or isinstance(records, str):
        raise BadRequest(f"{where}: Records must be a list", field="Records")
    return each(
        records, lambda n, r: _record(inbound, n, as_object(r, f"s3 record {n}", "record"), layout)
    )


# MinIO files these metadata-only changes under s3:ObjectCreated:*; they are not pushes.
METADATA_ONLY = frozenset(
    {
        "ObjectCreated:PutTagging",
        "ObjectCreated:DeleteTagging",
        "ObjectCreated:PutRetention",
        "ObjectCreated:PutLegalHold",
    }
)


def _change(event_name: str) -> Literal["created", "removed"] | None:
    name = event_name.removeprefix("s3:")
    if name in METADATA_ONLY:
        return None
    if name.startswith("ObjectCreated:"):
        return "created"
    if name == "ObjectRemoved:NoOP":  # MinIO: a delete of a key that did not exist
        return None
    if name.startswith(("ObjectRemoved:", "LifecycleExpiration:")):
        return "removed"
    return None  # access, restore, replication, tagging, ACL, transition …


def _record(
    inbound: Inbound, n: int, record: Mapping[str, Any], layout: ObjectLayout
) -> CanonicalEvent | None:
    where = f"s3 record {n}"
    event_name = text(record, "eventName", where)
    change = _change(event_name)
    if change is None:
        return None
    bucket = bucket_name(record, "s3.bucket.name", where)
    key = _key(text(record, "s3.object.key", where), where)
    version = optional_text(record, "s3.object.versionId", where)
    if version == "null":  # the version id S3 gives objects written while unversioned
        version = None
    path = layout.match(key) if change == "created" else layout.model_of(key)
    if path is None:
        return None
    uri = f"s3://{bucket}/{path.prefix}"
    data: EventData
    if change == "created":
        data = payload(
            ArtifactPushed,
            where,
            model=path.name,
            version=path.version,
            uri=uri,
            digest=f"s3-version:{version}" if version else f"s3-etag:{_etag(record, where)}",
            store="s3",
        )
    else:
        # A delete marker's versionId names the marker, not the object that vanished.
        names_object = version and not event_name.endswith("DeleteMarkerCreated")
        is_marker = key == path.prefix + layout.marker
        data = payload(
            ArtifactDeleted,
            where,
            uri=uri,
            store="s3",
            digest=f"s3-version:{version}" if names_object and is_marker else None,
            model=path.name,
            version=path.version,
        )
    # Key + sequencer + event name names this event whatever delivery carries it. (The
    # name too: MinIO derives the sequencer from the object's mtime, which a put and
    # the delete of that same object can share.)
    sequencer = optional_text(record, "s3.object.sequencer", where)
    event_id = (
        f"s3://{bucket}/{key}#{event_name.removeprefix('s3:')}@{sequencer}"
        if sequencer
        else f"{inbound.id}:{n}"
    )
    return canonical(
        data,
        id=event_id,
        source=f"s3://{bucket}",
        subject=key,
        time=parse_time(optional_text(record, "eventTime", where), where, "eventTime"),
    )


def _key(encoded: str, where: str) -> str:
    """The object key, URL-decoded ('+' a space): keys are UTF-8, so a sequence that decodes
    to none names no object (replaced by U+FFFD, two such keys were one, and one event id)."""
    try:
        return unquote_plus(encoded, errors="strict")
    except UnicodeDecodeError:
        raise BadRequest(
            f"{where}: s3.object.key {encoded!r} percent-encodes no UTF-8 key",
            field="s3.object.key",
            where=where,
        ) from None


def _etag(record: Mapping[str, Any], where: str) -> str:
    return text(record, "s3.object.eTag", where).strip('"')
