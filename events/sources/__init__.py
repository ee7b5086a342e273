"""Every upstream format → canonical events: one translator module per upstream.

`translate` dispatches one decoded delivery (`Inbound`) by kind, type and shape:

| kind       | recognised by                                   | translator                       |
|------------|-------------------------------------------------|----------------------------------|
| cloudevent | type `dev.modelhooks.*`                         | canonical.from_canonical_cloudevent |
| cloudevent | type `google.cloud.storage.object.v1.*`         | gcs.from_eventarc                |
| cloudevent | type `dev.knative.apiserver.*`                  | kubernetes.from_apiserver_event  |
| cloudevent | type `zotregistry.*`                            | oci_distribution.from_zot_event  |
| cloudevent | type `dev.knative.sources.ping`                 | schedule.from_ping               |
| cloudevent | type `google.cloud.pubsub.topic.v1.messagePublished` | its Pub/Sub message, as below |
| pubsub     | attributes `ce-specversion` / `ce-type`          | the CloudEvent it carries, as above |
| pubsub     | attributes `eventType` + `bucketId`             | gcs.from_pubsub_notification     |
| pubsub     | data `action` + `digest`/`tag`                  | artifact_registry.from_gar_message |
| webhook    | `Records`                                       | s3.from_s3_notification          |
| webhook    | `events`                                        | oci_distribution.from_distribution_notification |

Valid but irrelevant deliveries (a blob push, a file that is not the ready marker, a pull)
translate to `[]`. Unknown types or shapes and malformed or missing fields raise
`BadRequest` naming the field; a body of several units (S3 records, registry events) with
some bad raises `PartlyBad`, which carries the events of the others. Canonical ids derive
from the upstream identity, so a redelivery translates to the same ids.

>>> from modelhooks.events.layout import ObjectLayout
>>> body = {"events": [{"id": "e1", "action": "pull", "target": {}}]}
>>> translate(Inbound("webhook", "w1", body), layout=ObjectLayout())
[]
"""

from __future__ import annotations

from collections.abc import Mapping

from modelhooks.events.errors import BadRequest, PartlyBad
from modelhooks.events.inbound import Inbound
from modelhooks.events.ingress import MAX_NAME_BYTES
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import CanonicalEvent
from modelhooks.events.sources._common import json_value, unwrap_pubsub
from modelhooks.events.sources._types import (
    APISERVER_TYPE_PREFIX,
    CANONICAL_TYPE_PREFIX,
    EVENTARC_TYPE_PREFIX,
    PING_TYPE,
    ZOT_TYPE_PREFIX,
)

# Each translator module is imported by the branch that calls it, when a delivery first
# needs it: a process fed GCS events never imports the OCI, S3 or Kubernetes ones (cold
# start). The types dispatched on by name are in _types, apart from them.

__all__ = ["KINDS", "PUBSUB_MESSAGE_PUBLISHED", "PartlyBad", "kind_of", "translate"]

# The upstream kinds a delivery can be (a route accepts some of them: trust is bound to it).
KINDS = ("canonical", "gcs", "s3", "oci", "zot", "artifact-registry", "kubernetes", "schedule")

PUBSUB_MESSAGE_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"
_CE_PREFIX = "ce-"  # the CloudEvents Pub/Sub protocol binding's attribute prefix


def translate(
    inbound: Inbound, *, layout: ObjectLayout, registry_host: str | None = None
) -> list[CanonicalEvent]:
    """The canonical events one upstream delivery means (often one, maybe none).

    `layout` says which object-store keys are model prefixes and ready markers;
    `registry_host` names the registry zot events come from (zot does not say).
    """
    if inbound.kind == "cloudevent":
        return _cloudevent(inbound, layout, registry_host)
    if inbound.kind == "pubsub":
        return _pubsub(inbound, layout, registry_host)
    if inbound.kind == "webhook":
        return _webhook(inbound, layout)
    raise BadRequest(f"unknown delivery kind {inbound.kind!r}", field="kind")


def kind_of(inbound: Inbound) -> str | None:
    """Which upstream a delivery is (one of KINDS), by the same rules `translate` follows;
    None when no translator would take it (translate then says why)."""
    if inbound.kind == "cloudevent":
        event_type = inbound.attributes.get("type") or ""
        for prefix, kind in (
            (CANONICAL_TYPE_PREFIX, "canonical"),
            (EVENTARC_TYPE_PREFIX, "gcs"),
            (APISERVER_TYPE_PREFIX, "kubernetes"),
            (ZOT_TYPE_PREFIX, "zot"),
        ):
            if event_type.startswith(prefix):
                return kind
        if event_type == PING_TYPE:
            return "schedule"
        if event_type == PUBSUB_MESSAGE_PUBLISHED:
            try:
                data = json_value(inbound.data, "cloudevent")
                return kind_of(unwrap_pubsub(data, "cloudevent data"))
            except BadRequest:
                return None
        return None
    if inbound.kind == "pubsub":
        attrs = inbound.attributes
        if f"{_CE_PREFIX}type" in attrs:
            # with its data, as translate carries it: a messagePublished type wraps another
            # message, whose kind is the delivery's (without the data it was None, unchecked)
            carried = {"type": attrs[f"{_CE_PREFIX}type"]}
            return kind_of(
                Inbound(kind="cloudevent", id=inbound.id, data=inbound.data, attributes=carried)
            )
        if "eventType" in attrs and "bucketId" in attrs:
            return "gcs"
        try:
            data = json_value(inbound.data, "pubsub message")
        except BadRequest:
            return None
        from modelhooks.events.sources import artifact_registry

        return "artifact-registry" if artifact_registry.is_gar_message(data) else None
    if inbound.kind == "webhook":
        from modelhooks.events.sources import oci_distribution, s3

        body = inbound.data
        if s3.is_s3_notification(body):
            return "s3"
        if oci_distribution.is_distribution_notification(body):
            return "oci"
    return None


def _cloudevent(
    inbound: Inbound, layout: ObjectLayout, registry_host: str | None
) -> list[CanonicalEvent]:
    event_type = inbound.attributes.get("type")
    if not event_type:
        raise BadRequest("cloudevent: type is missing", field="type")
    if event_type.startswith(CANONICAL_TYPE_PREFIX):
        from modelhooks.events.sources import canonical

        return canonical.from_canonical_cloudevent(inbound)
    if event_type.startswith(EVENTARC_TYPE_PREFIX):
        from modelhooks.events.sources import gcs

        return gcs.from_eventarc(inbound, layout=layout)
    if event_type.startswith(APISERVER_TYPE_PREFIX):
        from modelhooks.events.sources import kubernetes

        return kubernetes.from_apiserver_event(inbound)
    if event_type.startswith(ZOT_TYPE_PREFIX):
        from modelhooks.events.sources import oci_distribution

        return oci_distribution.from_zot_event(inbound, registry_host=registry_host)
    if event_type == PING_TYPE:
        from modelhooks.events.sources import schedule

        return schedule.from_ping(inbound)
    if event_type == PUBSUB_MESSAGE_PUBLISHED:
        message = unwrap_pubsub(json_value(inbound.data, "cloudevent"), "cloudevent data")
        return _pubsub(message, layout, registry_host)
    raise BadRequest(f"cloudevent: unknown type {event_type!r}", field="type")


def _pubsub(
    inbound: Inbound, layout: ObjectLayout, registry_host: str | None
) -> list[CanonicalEvent]:
    attrs = inbound.attributes
    if f"{_CE_PREFIX}specversion" in attrs or f"{_CE_PREFIX}type" in attrs:
        ce = {k.removeprefix(_CE_PREFIX): v for k, v in attrs.items() if k.startswith(_CE_PREFIX)}
        if "content-type" in attrs:
            ce["datacontenttype"] = attrs["content-type"]
        # No ce-id (Cloud Scheduler publishes fixed attributes): the message id, unique
        # per publish, is the event's.
        ce["id"] = ce.get("id") or inbound.id
        for name in ("id", "source"):  # as ingress bounds them in every other mode
            value = ce.get(name, "")
            if len(value.encode(errors="replace")) > MAX_NAME_BYTES:
                field = f"message.attributes.{_CE_PREFIX}{name}"
                raise BadRequest(f"{field} is over {MAX_NAME_BYTES} bytes of UTF-8", field=field)
        carried = Inbound(
            kind="cloudevent",
            id=ce["id"],
            data=inbound.data,
            attributes=ce,
            headers=inbound.headers,
        )
        return _cloudevent(carried, layout, registry_host)
    if "eventType" in attrs and "bucketId" in attrs:
        from modelhooks.events.sources import gcs

        return gcs.from_pubsub_notification(inbound, layout=layout)
    from modelhooks.events.sources import artifact_registry

    if artifact_registry.is_gar_message(json_value(inbound.data, "pubsub message")):
        return artifact_registry.from_gar_message(inbound)
    raise BadRequest(
        "pubsub message: unknown shape (neither a CloudEvent, a Cloud Storage notification "
        "nor an Artifact Registry message)",
        field="data",
    )


def _webhook(inbound: Inbound, layout: ObjectLayout) -> list[CanonicalEvent]:
    from modelhooks.events.sources import oci_distribution, s3

    body = json_value(inbound.data, "webhook")
    if s3.is_s3_notification(body):
        return s3.from_s3_notification(inbound, layout=layout)
    if oci_distribution.is_distribution_notification(body):
        return oci_distribution.from_distribution_notification(inbound)
    if _pubsub_data(body):
        raise BadRequest(
            "webhook body: a Pub/Sub message's data alone (an Artifact Registry message or "
            "a Cloud Storage object), without its message id and attributes: a subscription "
            "pushing unwrapped must write its metadata (gcloud pubsub subscriptions update "
            "… --push-no-wrapper --push-no-wrapper-write-metadata), or push wrapped",
            field="body",
        )
    raise BadRequest(
        "webhook body: unknown shape (expected S3 `Records` or registry `events`)",
        field="body",
    )


def _pubsub_data(body: object) -> bool:
    """Whether `body` is what a Pub/Sub message we take carries as its data."""
    from modelhooks.events.sources import artifact_registry

    is_object = isinstance(body, Mapping) and body.get("kind") == "storage#object"
    return is_object or artifact_registry.is_gar_message(body)
