"""Reading untyped upstream JSON with errors that name the field.

Every translator reads through these helpers, so a malformed delivery surfaces as
`BadRequest("s3 record 0: s3.object.key is missing")` and never as a KeyError.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from modelhooks.events.errors import BadRequest, PartlyBad
from modelhooks.events.inbound import Inbound
from modelhooks.events.model import (
    BUCKET_NAME,
    MAX_BUCKET,
    CanonicalEvent,
    EventData,
    fit_id,
    parse,
)
from modelhooks.events.safe_json import loads, loads_or_raw

__all__ = [
    "as_object",
    "canonical",
    "each",
    "json_value",
    "optional_object",
    "optional_text",
    "parse_time",
    "payload",
    "text",
    "unwrap_pubsub",
    "value_at",
]

D = TypeVar("D", bound=EventData)

_MISSING = object()


def each(
    units: Sequence[Any], one: Callable[[int, Any], CanonicalEvent | None]
) -> list[CanonicalEvent]:
    """`one(n, unit)` over every unit of a body that carries several: their events. Some bad:
    PartlyBad carrying the others' events; every one bad: the first one's BadRequest; more
    than MAX_REFUSED bad: a BadRequest at once."""
    events: list[CanonicalEvent] = []
    refused: list[BadRequest] = []
    for n, unit in enumerate(units):
        try:
            event = one(n, unit)
        except BadRequest as exc:
            PartlyBad.note(refused, exc)
            continue
        if event is not None:
            events.append(event)
    PartlyBad.check(refused, events, len(units))
    return events


def _fail(where: str, path: str, problem: str) -> BadRequest:
    return BadRequest(f"{where}: {path} {problem}", field=path, where=where)


def as_object(value: Any, where: str, path: str = "data") -> Mapping[str, Any]:
    """`value` as a JSON object, else BadRequest naming `path`."""
    if not isinstance(value, Mapping):
        raise _fail(where, path, f"must be a JSON object, not {type(value).__name__}")
    return value


def value_at(obj: Mapping[str, Any], path: str, where: str) -> Any:
    """The value at a dotted `path` ("s3.object.key"), or `_MISSING`."""
    current: Any = obj
    walked: list[str] = []
    for part in path.split("."):
        if current is None:
            return _MISSING
        if not isinstance(current, Mapping):
            raise _fail(where, ".".join(walked), "must be a JSON object")
        walked.append(part)
        current = current.get(part, _MISSING)
        if current is _MISSING:
            return _MISSING
    return current


def optional_object(obj: Mapping[str, Any], path: str, where: str) -> Mapping[str, Any]:
    """An object field that may be absent (absent and null read as {})."""
    value = value_at(obj, path, where)
    if value is _MISSING or value is None:
        return {}
    return as_object(value, where, path)


def optional_text(obj: Mapping[str, Any], path: str, where: str) -> str | None:
    """A string field that may be absent (absent, null and "" all read as None).

    Numbers are accepted and rendered as text: several upstreams send int64 values
    either as JSON numbers or as strings.
    """
    value = value_at(obj, path, where)
    if value is _MISSING or value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _fail(where, path, f"must be a string, not {type(value).__name__}")
    return str(value)


def text(obj: Mapping[str, Any], path: str, where: str) -> str:
    """A required, non-empty string field."""
    value = optional_text(obj, path, where)
    if value is None:
        raise _fail(where, path, "is missing")
    return value


# date, time (seconds and fraction optional), offset (naive: UTC): no bare dates, no ISO 8601
# week or basic forms, which datetime.fromisoformat also reads
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?", re.ASCII
)


def bucket_name(obj: Mapping[str, Any], path: str, where: str) -> str:
    """The bucket an object notification names, by the one rule of a bucket name
    (events.model.Bucket): a push's is read as its content is, a deletion's was taken as it
    came, and one holding a control character, past 1,024 bytes or a path (`a/../b`) went
    to the Broker in the event's source and uri, for the next function to refuse (400,
    dead-lettered)."""
    name = text(obj, path, where)
    if len(name) > MAX_BUCKET or not _BUCKET.fullmatch(name):
        raise BadRequest(f"{where}: {path} {name[:64]!r} is not a bucket name", field=path)
    return name


_BUCKET = re.compile(BUCKET_NAME)


def parse_time(value: str | None, where: str, path: str) -> datetime | None:
    """An RFC 3339 timestamp (nanoseconds and a trailing Z allowed) as an aware UTC datetime,
    between 1970 and 9998 (so every time compares, and converts, without surprises)."""
    if value is None:
        return None
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):  # fromisoformat takes more
        raise _fail(where, path, f"is not an RFC 3339 timestamp: {value!r}")
    try:
        parsed = datetime.fromisoformat(value)
        parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise _fail(where, path, f"is not an RFC 3339 timestamp: {value!r}") from None
    if not 1970 <= parsed.year <= 9998:
        raise _fail(where, path, f"is outside 1970-9998: {value!r}")
    return parsed


def json_value(data: Any, where: str) -> Any:
    """Decoded JSON data: ingress hands over bytes when the body did not parse."""
    if isinstance(data, bytes | bytearray):
        return loads(bytes(data), f"{where}: data")
    return data


def payload(cls: type[D], where: str, **fields: Any) -> D:
    """A canonical payload; a value the model refuses becomes BadRequest naming it."""
    return parse(cls, fields, where)


def canonical(
    data: EventData,
    *,
    id: str,
    source: str,
    subject: str | None,
    time: datetime | None,
) -> CanonicalEvent:
    """The canonical envelope. Every attribute comes from the upstream delivery (no clock,
    no random id), so translating the same delivery twice yields equal events; an id built
    from the payload is fitted to what ingress takes (`fit_id`), it and the subject written
    without control characters (`escaped`)."""
    return CanonicalEvent(
        id=fit_id(escaped(id)),
        source=source,
        type=data.TYPE,
        data=data,
        subject=None if subject is None else escaped(subject),
        time=time,
    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def escaped(text: str) -> str:
    """`text` with each control character (U+0000-U+001F, U+007F) as its `%XX` escape.
    CloudEvents attributes hold none (the spec's rule: ingress refuses one in a header or an
    attribute), yet an id or subject built from a payload may: an S3 key may hold any
    character (`we%09ights.bin` is a tab), a registry's event id is any JSON string. Such an
    event went to the Broker (202) and the next function's ingress refused it 400 ('ce-id:
    holds a control character'): dead-lettered, never acted on. Text without one, almost
    all, is unchanged (its id too).

    >>> escaped("models/m/1/we\\tights.bin"), escaped("models/m/1/w.bin")
    ('models/m/1/we%09ights.bin', 'models/m/1/w.bin')
    """
    if text.isascii() and text.isprintable():  # a flag and a scan in C: most text
        return text
    return _CONTROL.sub(lambda m: f"%{ord(m.group()):02X}", text)


def unwrap_pubsub(envelope: Any, where: str = "pubsub push") -> Inbound:
    """The Inbound for a Pub/Sub push body `{"message": {...}, "subscription": ...}`.

    Also the `data` of an Eventarc `google.cloud.pubsub.topic.v1.messagePublished`
    CloudEvent, which carries the same envelope. Message data that parses as JSON is
    decoded; anything else stays bytes.
    """
    body = as_object(envelope, where, "body")
    as_object(value_at(body, "message", where), where, "message")
    # Push deliveries carry both spellings (messageId and message_id).
    message_id = optional_text(body, "message.messageId", where) or optional_text(
        body, "message.message_id", where
    )
    if message_id is None:
        raise _fail(where, "message.messageId", "is missing")
    attributes = value_at(body, "message.attributes", where)
    attrs = {} if attributes in (_MISSING, None) else attributes
    attrs = as_object(attrs, where, "message.attributes")
    if not all(isinstance(v, str) for v in attrs.values()):
        raise _fail(where, "message.attributes", "values must be strings")
    raw = optional_text(body, "message.data", where)
    try:
        decoded = base64.b64decode(raw, validate=True) if raw else b""
    except (binascii.Error, ValueError):
        raise _fail(where, "message.data", "is not base64") from None
    data: Any = None  # as ingress decodes an empty push: no data
    if decoded:
        data = loads_or_raw(decoded, f"{where}: message.data")
    publish_time = optional_text(body, "message.publishTime", where)
    return Inbound(
        kind="pubsub", id=message_id, data=data, attributes=dict(attrs), time=publish_time
    )
