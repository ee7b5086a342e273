"""Knative ApiServerSource events for `Model` resources → canonical lifecycle events.

ApiServerSource emits `dev.knative.apiserver.resource.{add,update,delete}` (mode
Resource: data is the whole object) and `dev.knative.apiserver.ref.{add,update,delete}`
(mode Reference: data is `{kind, namespace, name, apiVersion}`), with extensions `kind`,
`name`, `namespace`, source = the API server URL and subject = a selfLink-like path.

Only `Model` objects of group `modelhooks.dev` count; other kinds → nothing.
add → ModelCreated, update → ModelUpdated, delete → ModelDeleted. An update that sets
`metadata.deletionTimestamp` is the deletion (→ ModelDeleted): the cleanup finalizer
holds the object until cleanup is done, so the final delete only arrives afterwards
(and is translated too; cleanup is idempotent). So is an add of a Model being deleted: a
source (re)started lists the Models as adds, and one deleted before it saw it would
otherwise never be cleaned up, its finalizer held for ever.

>>> obj = {"apiVersion": "modelhooks.dev/v1alpha1", "kind": "Model",
...        "metadata": {"name": "bert", "namespace": "ml"}, "spec": {"version": "3"}}
>>> ev = from_apiserver_event(Inbound("cloudevent", "1", obj, {
...     "type": "dev.knative.apiserver.resource.add", "id": "1", "source": "https://k8s"}))
>>> ev[0].type, ev[0].data.version
('dev.modelhooks.model.created', '3')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from modelhooks.events.errors import BadRequest
from modelhooks.events.inbound import Inbound
from modelhooks.events.model import (
    CanonicalEvent,
    EventData,
    ModelCreated,
    ModelDeleted,
    ModelUpdated,
)
from modelhooks.events.sources._common import (
    as_object,
    canonical,
    json_value,
    optional_object,
    optional_text,
    parse_time,
    payload,
    text,
)
from modelhooks.events.sources._types import APISERVER_TYPE_PREFIX

__all__ = ["APISERVER_TYPE_PREFIX", "API_GROUP", "KIND", "from_apiserver_event"]

API_GROUP = "modelhooks.dev"
KIND = "Model"
_LIFECYCLE: dict[str, type[EventData]] = {
    "add": ModelCreated,
    "update": ModelUpdated,
    "delete": ModelDeleted,
}


def from_apiserver_event(inbound: Inbound) -> list[CanonicalEvent]:
    """An ApiServerSource CloudEvent → [] (another kind) or one lifecycle event."""
    where = "apiserver event"
    attrs = inbound.attributes
    event_type = text(attrs, "type", where)
    mode, _, op = event_type.removeprefix(APISERVER_TYPE_PREFIX).partition(".")
    if not event_type.startswith(APISERVER_TYPE_PREFIX) or mode not in ("resource", "ref"):
        raise BadRequest(f"{where}: unknown type {event_type!r}", field="type")
    if op not in _LIFECYCLE:
        raise BadRequest(f"{where}: unknown type {event_type!r}", field="type")
    data = as_object(json_value(inbound.data, where), where)
    if text(data, "kind", where) != KIND or _group(text(data, "apiVersion", where)) != API_GROUP:
        return []
    if mode == "ref":
        fields: dict[str, Any] = {
            "name": text(data, "name", where),
            "namespace": text(data, "namespace", where),
        }
    else:
        fields = _resource_fields(data, where)
        if op != "delete" and optional_text(data, "metadata.deletionTimestamp", where):
            op = "delete"  # being deleted, however it is seen: updated, or listed (add)
    model = payload(_LIFECYCLE[op], where, **fields)
    return [
        canonical(
            model,
            id=text(attrs, "id", where),
            source=text(attrs, "source", where),
            subject=attrs.get("subject"),
            time=parse_time(attrs.get("time"), where, "time"),
        )
    ]


def _group(api_version: str) -> str:
    group, _, _version = api_version.rpartition("/")
    return group


def _resource_fields(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    return {
        "name": text(obj, "metadata.name", where),
        "namespace": text(obj, "metadata.namespace", where),
        "uid": optional_text(obj, "metadata.uid", where),
        "resource_version": optional_text(obj, "metadata.resourceVersion", where),
        "version": optional_text(obj, "spec.version", where),
        "spec": dict(optional_object(obj, "spec", where)),
        "status": dict(optional_object(obj, "status", where)),
    }
