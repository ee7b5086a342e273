"""HTTP delivery → decoded upstream units (`Inbound`), whatever the transport.

The mode is decided by Content-Type, as the CloudEvents HTTP binding says:
- `application/cloudevents+json`        structured CloudEvent
- `application/cloudevents-batch+json`  a JSON array of structured CloudEvents
- a `ce-specversion` header             binary CloudEvent (attributes in `ce-*` headers)
- otherwise JSON: a Pub/Sub push envelope (`message` + `subscription`), an unwrapped
  Pub/Sub push (`x-goog-pubsub-*` headers), or a native webhook body.

Every malformed input raises `BadRequest` naming what is wrong (`PartlyBad`, carrying the
good members, when only some of a batch are); nothing here does I/O.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from modelhooks.events.errors import BadRequest, PartlyBad, PayloadTooLarge
from modelhooks.events.inbound import Inbound
from modelhooks.events.safe_json import check_text, loads, loads_or_raw

__all__ = ["DEFAULT_MAX_BYTES", "decode"]

DEFAULT_MAX_BYTES = 1 << 20
_REQUIRED = ("id", "source", "type")
# an upstream event's id and source, in UTF-8 bytes: as a Pub/Sub attribute holds (where
# Eventarc carries them); what they lead to is recorded under them (a reply's id, register's
# source_event, prune's plan), and Kubeflow's PostgreSQL refuses a property past 2,704 bytes
MAX_NAME_BYTES = 1024
_PUBSUB_META = "x-goog-pubsub-"
_KNOWN_ATTRIBUTES = {
    name.lower(): name
    for name in (
        "eventType",
        "bucketId",
        "objectId",
        "objectGeneration",
        "overwroteGeneration",
        "overwrittenByGeneration",
        "payloadFormat",
        "notificationConfig",
        "eventTime",
    )
}


def decode(
    headers: Mapping[str, str], body: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> list[Inbound]:
    """Decode one HTTP delivery into the upstream units it carries."""
    if len(body) > max_bytes:
        raise PayloadTooLarge(f"body of {len(body)} bytes is over the limit of {max_bytes}")
    h = {k.lower(): v for k, v in headers.items()}
    ctype = h.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "application/cloudevents+json":
        return [_structured(_json(body, "structured CloudEvent"), "body", h)]
    if ctype == "application/cloudevents-batch+json":
        batch = _json(body, "CloudEvents batch")
        if not isinstance(batch, list):
            raise BadRequest("a CloudEvents batch must be a JSON array")
        members: list[Inbound] = []
        refused: list[BadRequest] = []
        for i, item in enumerate(batch):  # a bad member does not take the others with it
            try:
                members.append(_structured(item, f"batch[{i}]", h))
            except BadRequest as exc:
                PartlyBad.note(refused, exc)
        PartlyBad.check(refused, members, len(batch))
        return members
    if "ce-specversion" in h:
        return [_binary(h, body, ctype)]
    if f"{_PUBSUB_META}message-id" in h:
        return [_pubsub_unwrapped(h, body)]
    doc = _json(body, "body")
    if isinstance(doc, dict) and isinstance(doc.get("message"), dict) and "subscription" in doc:
        return [_pubsub_wrapped(doc, h)]
    if not isinstance(doc, dict):
        raise BadRequest("expected a JSON object (a CloudEvent, Pub/Sub push or webhook body)")
    if doc.get("specversion"):
        # A structured CloudEvent sent as plain application/json: accept it as such.
        return [_structured(doc, "body", h)]
    digest = hashlib.sha256(body).hexdigest()[:32]
    return [Inbound(kind="webhook", id=f"webhook-{digest}", data=doc, headers=h)]


def _json(raw: bytes, what: str) -> Any:
    return loads(raw, what)


def _check_attributes(attrs: Mapping[str, Any], where: str) -> None:
    if attrs.get("specversion") != "1.0":
        raise BadRequest(f"{where}: specversion must be '1.0', got {attrs.get('specversion')!r}")
    for name in _REQUIRED:
        if not isinstance(attrs.get(name), str) or not attrs[name]:
            raise BadRequest(f"{where}: CloudEvent attribute '{name}' is missing or empty")
    _bounded(attrs["id"], f"{where}: CloudEvent attribute 'id'")
    _bounded(attrs["source"], f"{where}: CloudEvent attribute 'source'")


def _bounded(value: str, field: str) -> str:
    if len(value.encode(errors="replace")) > MAX_NAME_BYTES:  # a lone surrogate: one byte
        raise BadRequest(f"{field} is over {MAX_NAME_BYTES} bytes of UTF-8")
    return value


def _structured(doc: Any, where: str, headers: Mapping[str, str]) -> Inbound:
    if not isinstance(doc, dict):
        raise BadRequest(f"{where}: a structured CloudEvent must be a JSON object")
    _check_attributes(doc, where)
    attrs = {
        k: check_text(_attr_str(v), f"{where}.{k}")
        for k, v in doc.items()
        if k not in ("data", "data_base64")
    }
    if "data_base64" in doc:
        try:
            data: Any = base64.b64decode(doc["data_base64"], validate=True)
        except (ValueError, TypeError):  # binascii.Error; ValueError: a str not ASCII
            raise BadRequest(f"{where}: data_base64 is not valid base64") from None
        data = _maybe_json(data, attrs.get("datacontenttype", ""))
    else:
        data = doc.get("data")
    return Inbound(kind="cloudevent", id=attrs["id"], data=data, attributes=attrs, headers=headers)


def _binary(h: Mapping[str, str], body: bytes, ctype: str) -> Inbound:
    attrs = {k[3:]: check_text(_unquoted(v, k), k) for k, v in h.items() if k.startswith("ce-")}
    _check_attributes(attrs, "headers")
    if ctype:
        attrs["datacontenttype"] = h["content-type"]
    data = _maybe_json(body, ctype) if body else None
    return Inbound(kind="cloudevent", id=attrs["id"], data=data, attributes=attrs, headers=h)


def _unquoted(value: str, name: str) -> str:
    """A `ce-*` header's value, percent-decoded as UTF-8: a sequence that decodes to no
    character is refused (replaced, '%C3' and '%C4' were the same id, U+FFFD)."""
    try:
        return unquote(value, errors="strict")
    except UnicodeDecodeError:
        raise BadRequest(f"{name}: percent-encodes no UTF-8 text: {value!r}", field=name) from None


def _maybe_json(raw: bytes, ctype: str) -> Any:
    ctype = ctype.split(";")[0].strip().lower()
    if ctype in ("", "application/json", "text/json") or ctype.endswith("+json"):
        return _json(raw, "CloudEvent data")
    return raw


def _pubsub_wrapped(doc: Mapping[str, Any], headers: Mapping[str, str]) -> Inbound:
    msg = doc["message"]
    msg_id = msg.get("messageId") or msg.get("message_id")
    if not isinstance(msg_id, str) or not msg_id.strip():
        raise BadRequest("Pub/Sub push: message.messageId is missing")
    _bounded(check_text(msg_id, "message.messageId"), "Pub/Sub push: message.messageId")
    attrs = msg.get("attributes") or {}
    if not isinstance(attrs, dict):
        raise BadRequest("Pub/Sub push: message.attributes must be an object")
    raw = msg.get("data", "")
    try:
        payload = base64.b64decode(raw, validate=True) if raw else b""
    except (ValueError, TypeError):  # binascii.Error; ValueError: a str not ASCII
        raise BadRequest("Pub/Sub push: message.data is not valid base64") from None
    publish_time = msg.get("publishTime") or msg.get("publish_time")
    return Inbound(
        kind="pubsub",
        id=msg_id,
        data=_lenient_json(payload),
        attributes={
            check_text(str(k), "message.attributes"): check_text(str(v), f"message.attributes.{k}")
            for k, v in attrs.items()
        },
        headers=headers,
        time=publish_time if isinstance(publish_time, str) else None,
    )


def _pubsub_unwrapped(h: Mapping[str, str], body: bytes) -> Inbound:
    # Unwrapped push with metadata: the body is the message data, attributes travel as
    # headers of their own name next to the x-goog-pubsub-* metadata headers.
    # HTTP folds header case, so known camelCase attribute names are restored.
    skip = {"content-type", "content-length", "authorization", "host", "user-agent", "accept"}
    attrs = {
        _KNOWN_ATTRIBUTES.get(k, k): v
        for k, v in h.items()
        if not k.startswith(_PUBSUB_META) and k not in skip
    }
    # as a wrapped push's messageId: every push without one was one id (a Conflict for all
    # but the first)
    msg_id = check_text(h[f"{_PUBSUB_META}message-id"].strip(), f"{_PUBSUB_META}message-id")
    if not msg_id:
        raise BadRequest(f"Pub/Sub push: {_PUBSUB_META}message-id is empty")
    _bounded(msg_id, f"Pub/Sub push: {_PUBSUB_META}message-id")
    return Inbound(
        kind="pubsub",
        id=msg_id,
        data=_lenient_json(body),
        attributes=attrs,
        headers=h,
        time=h.get(f"{_PUBSUB_META}publish-time"),
    )


def _lenient_json(raw: bytes) -> Any:
    return loads_or_raw(raw, "message data") if raw else None


def _attr_str(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
