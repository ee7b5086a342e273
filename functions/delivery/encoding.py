"""CloudEvents and JSON on the wire: the answers the delivery layer gives (a reply in binary
mode, several as a batch, an error as JSON with its status)."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from modelhooks.core.errors import ModelhooksError
from modelhooks.core.logs import log
from modelhooks.delivery.statuses import status_of
from modelhooks.events.model import CanonicalEvent

__all__ = [
    "Response",
    "answer_reason",
    "binary",
    "encode_replies",
    "error_response",
    "internal_error",
    "json_response",
    "outcome_reason",
    "structured",
]


class Response(msgspec.Struct, frozen=True):  # a Struct: cheaper to make than a dataclass
    status: int
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    body: bytes = b""


def encode_replies(replies: Sequence[CanonicalEvent]) -> Response:
    if not replies:
        return Response(204)
    if len(replies) == 1:
        return binary(replies[0], 200)
    batch = [structured(r) for r in replies]
    return Response(
        200, {"Content-Type": "application/cloudevents-batch+json"}, json.dumps(batch).encode()
    )


def binary(event: CanonicalEvent, status: int = 200) -> Response:
    """A CloudEvent in binary mode: attributes in ce-* headers, data as the body."""
    attrs = event.attributes()
    attrs.pop("datacontenttype", None)  # the Content-Type
    # one search over them all finds whether any needs encoding (mostly none does)
    clean = not _NEEDS_ENCODING.search("".join(attrs.values()))
    headers = {"Content-Type": "application/json"}
    for name, value in attrs.items():
        headers[_HEADER.get(name) or f"ce-{name}"] = value if clean else _percent_encode(value)
    return Response(status, headers, event.data.to_json())


_HEADER = {
    n: f"ce-{n}" for n in ("specversion", "id", "source", "type", "dataschema", "subject", "time")
}


def structured(event: CanonicalEvent) -> dict[str, Any]:
    doc: dict[str, Any] = dict(event.attributes())
    doc["data"] = event.data.to_dict()
    return doc


_NEEDS_ENCODING = re.compile(r'[^\x21-\x7e]|["%]')


def _percent_encode(value: str) -> str:
    """The HTTP binding's rule: space, '"', '%' and non-printable-ASCII are %-encoded."""
    if not _NEEDS_ENCODING.search(value):
        return value
    return _NEEDS_ENCODING.sub(lambda m: "".join(f"%{b:02X}" for b in m[0].encode()), value)


def json_response(status: int, doc: Mapping[str, Any]) -> Response:
    return Response(status, {"Content-Type": "application/json"}, json.dumps(doc).encode())


def error_response(error: ModelhooksError) -> Response:
    """The JSON answer to an error, with its status."""
    return json_response(status_of(error), error.as_json())


def internal_error(exc: BaseException, where: str) -> Response:
    """An unexpected exception: one JSON log line with the traceback, and a JSON 500 that
    says nothing of the internals (the platform redelivers; the log has the details)."""
    incident = uuid.uuid4().hex[:12]
    log(logging.ERROR, f"unexpected error in {where}", exc_info=exc, incident=incident)
    body = {"error": "internal", "message": f"internal error; see the logs (incident {incident})"}
    return json_response(500, body)


def answer_reason(body: bytes | str) -> str:
    """What a failed answer of ours says: each failed outcome's `function (status): message`
    (`/` and a function endpoint answer that way), else its message, else the body itself."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    if not isinstance(doc, dict):
        return text
    outcomes = doc.get("outcomes")
    failed = [
        o
        for o in (outcomes if isinstance(outcomes, list) else [])
        if isinstance(o, dict) and isinstance(o.get("status"), int) and o["status"] >= 300
    ]
    if failed:
        return "; ".join(outcome_reason(o) for o in failed)
    return str(doc.get("message") or text)


def outcome_reason(outcome: Mapping[str, Any]) -> str:
    """`function (status): message` of one failed outcome, in full."""
    error = outcome.get("error")
    message = error.get("message", "") if isinstance(error, dict) else ""
    return f"{outcome.get('function', '?')} ({outcome.get('status')}): {message}"
