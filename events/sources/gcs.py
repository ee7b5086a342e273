"""Cloud Storage object changes → canonical events.

Two deliveries carry the same facts:

- Eventarc CloudEvents `google.cloud.storage.object.v1.{finalized,deleted,archived,
  metadataUpdated}`; data is the object resource (int64 fields such as `generation`
  arrive as strings).
- Pub/Sub notifications: attributes `eventType` (OBJECT_FINALIZE, OBJECT_DELETE,
  OBJECT_ARCHIVE, OBJECT_METADATA_UPDATE), `bucketId`, `objectId`, `objectGeneration`,
  `overwroteGeneration` / `overwrittenByGeneration`, `notificationConfig`; data is the
  object resource (payloadFormat JSON_API_V1) or empty (NONE). The event id is the
  message id qualified by the configuration (`<message id>@<N>`): a message id is unique
  within its topic alone.

A model version is a prefix; it is pushed when its ready marker is finalized
(→ ArtifactPushed named by the marker's generation). A delete of the marker or of any
file under a model prefix → ArtifactDeleted for that prefix. A delete that carries
`overwrittenByGeneration` is an overwrite, not a deletion → nothing. Archive and
metadata updates → nothing.

Eventarc's `deleted` data carries no overwrite marker, so an overwrite there reads as a
deletion of the old generation; the marker's ArtifactDeleted names that generation
(`digest`), and consumers compare it with the live marker before acting.

>>> from modelhooks.events.layout import ObjectLayout
>>> msg = Inbound(kind="pubsub", id="42", data=b"", attributes={
...     "eventType": "OBJECT_FINALIZE", "bucketId": "models",
...     "objectId": "models/bert/3/_SUCCESS", "objectGeneration": "17"})
>>> [e.data.digest for e in from_pubsub_notification(msg, layout=ObjectLayout())]
['gcs-generation:17']
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from modelhooks.events.errors import BadRequest
from modelhooks.events.inbound import Inbound
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ArtifactDeleted, ArtifactPushed, CanonicalEvent, EventData
from modelhooks.events.sources._common import (
    as_object,
    bucket_name,
    canonical,
    json_value,
    parse_time,
    payload,
    text,
)
from modelhooks.events.sources._types import EVENTARC_TYPE_PREFIX

__all__ = ["EVENTARC_TYPE_PREFIX", "from_eventarc", "from_pubsub_notification", "source_of"]

Change = Literal["finalize", "delete"] | None
_EVENTARC: dict[str, Change] = {
    "finalized": "finalize",
    "deleted": "delete",
    "archived": None,
    "metadataUpdated": None,
}
_PUBSUB: dict[str, Change] = {
    "OBJECT_FINALIZE": "finalize",
    "OBJECT_DELETE": "delete",
    "OBJECT_ARCHIVE": None,
    "OBJECT_METADATA_UPDATE": None,
}


def source_of(bucket: str) -> str:
    """The bucket's resource name, as Eventarc spells the CloudEvent `source`."""
    return f"//storage.googleapis.com/projects/_/buckets/{bucket}"


def from_eventarc(inbound: Inbound, *, layout: ObjectLayout) -> list[CanonicalEvent]:
    """An Eventarc Cloud Storage CloudEvent → [] or one canonical event."""
    where = "gcs event"
    event_type = inbound.attributes.get("type", "")
    suffix = event_type.removeprefix(EVENTARC_TYPE_PREFIX)
    if not event_type.startswith(EVENTARC_TYPE_PREFIX) or suffix not in _EVENTARC:
        raise BadRequest(f"{where}: unknown type {event_type!r}", field="type")
    change = _EVENTARC[suffix]
    if change is None:
        return []
    data = as_object(json_value(inbound.data, where), where)
    return _object_changed(
        change,
        bucket=bucket_name(data, "bucket", where),
        name=text(data, "name", where),
        generation=_generation(data, "generation", where),
        labels=_labels(data),
        id=inbound.attributes.get("id") or inbound.id,
        time=parse_time(inbound.attributes.get("time"), where, "time"),
        layout=layout,
        where=where,
    )


def from_pubsub_notification(inbound: Inbound, *, layout: ObjectLayout) -> list[CanonicalEvent]:
    """A Cloud Storage Pub/Sub notification → [] or one canonical event."""
    where = "gcs notification"
    attrs = inbound.attributes
    event_type = text(attrs, "eventType", where)
    if event_type not in _PUBSUB:
        raise BadRequest(f"{where}: unknown eventType {event_type!r}", field="eventType")
    change = _PUBSUB[event_type]
    if change is None:
        return []
    if change == "delete" and attrs.get("overwrittenByGeneration"):
        return []  # replaced by a newer generation: the finalize of that one speaks for it
    data = inbound.data  # the object resource, or nothing (payloadFormat NONE)
    return _object_changed(
        change,
        bucket=bucket_name(attrs, "bucketId", where),
        name=text(attrs, "objectId", where),
        generation=_generation(attrs, "objectGeneration", where),
        labels=_labels(data) if isinstance(data, Mapping) else {},
        id=_notification_id(inbound.id, attrs.get("notificationConfig")),
        time=parse_time(attrs.get("eventTime"), where, "eventTime"),
        layout=layout,
        where=where,
    )


def _notification_id(message_id: str, config: str | None) -> str:
    """The event id of a notification: its Pub/Sub message id, unique within its topic
    alone, qualified by the notification configuration that published it
    (`projects/_/buckets/B/notificationConfigs/N` → `<message id>@N`): a bucket's
    configurations may each publish to a topic of their own, and the bucket is the event's
    source, so two of them gave two changes one (source, id) and the second was a Conflict.
    A redelivery carries both again: the same id (fitted to what ingress takes by
    `canonical`, as every id a translator builds)."""
    if not isinstance(config, str) or not config:
        return message_id
    return f"{message_id}@{config.rpartition('/')[2]}"


def _object_changed(
    change: Literal["finalize", "delete"],
    *,
    bucket: str,
    name: str,
    generation: str,
    labels: dict[str, str],
    id: str,
    time: datetime | None,
    layout: ObjectLayout,
    where: str,
) -> list[CanonicalEvent]:
    path = layout.match(name) if change == "finalize" else layout.model_of(name)
    if path is None:
        return []  # a file being uploaded, or not under any model prefix
    uri = f"gs://{bucket}/{path.prefix}"
    is_marker = name == path.prefix + layout.marker
    data: EventData
    if change == "finalize":
        data = payload(
            ArtifactPushed,
            where,
            model=path.name,
            version=path.version,
            uri=uri,
            digest=f"gcs-generation:{generation}",
            store="gcs",
            labels=labels,
        )
    else:
        data = payload(
            ArtifactDeleted,
            where,
            uri=uri,
            store="gcs",
            digest=f"gcs-generation:{generation}" if is_marker else None,
            model=path.name,
            version=path.version,
        )
    return [canonical(data, id=id, source=source_of(bucket), subject=f"objects/{name}", time=time)]


def _generation(obj: Mapping[str, Any], path: str, where: str) -> str:
    """An object's generation: an int64 > 0, as a JSON string or number, in ASCII digits
    ('٣', ' 1', '1e3', '-1' named generations no store has: the marker's identity)."""
    value = text(obj, path, where)
    if not re.fullmatch(r"[1-9][0-9]{0,18}", value, re.ASCII) or int(value) >= 1 << 63:
        raise BadRequest(f"{where}: {path} {value!r} is not a generation", field=path, where=where)
    return value


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    """The object's custom metadata, when it is a plain string map."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return {}
    return {str(k): v for k, v in metadata.items() if isinstance(v, str)}
