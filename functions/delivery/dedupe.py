"""Dedupe: a delivery seen before answers its first replies; the same id with another
payload is a Conflict (like Powertools' IdempotencyValidationError)."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from threading import Lock
from typing import TYPE_CHECKING

import msgspec

from modelhooks.core.errors import Conflict
from modelhooks.delivery.encoding import structured
from modelhooks.events.inbound import Inbound
from modelhooks.events.model import CanonicalEvent
from modelhooks.events.sources.canonical import from_canonical_cloudevent

if TYPE_CHECKING:
    from modelhooks.core.ports import DeliveryLog

__all__ = ["Dedupe", "payload_digest"]


class Dedupe:
    """A memory of (function, event source, event id) → (payload digest, replies): the
    recent ones in process (bounded), all of them in `log` when there is one (durable).

    A key seen again with the same payload answers the first delivery's replies; with
    another payload it is a Conflict (an id reused for other content is never trusted),
    unless the first was answered with nothing: no effect to stand by, so it is handled anew.
    (A push is named by its content as it enters: the same marker's notification, announced
    again after its files changed back, is other content under the same id, and the
    functions that did nothing with it the first time answered 409.)"""

    def __init__(self, size: int, log: DeliveryLog | None = None) -> None:
        self.size = size
        self.log = log
        self._seen: OrderedDict[tuple[str, ...], tuple[str, tuple[CanonicalEvent, ...]]] = (
            OrderedDict()
        )
        self._lock = Lock()

    def get(self, key: tuple[str, str, str], digest: str) -> tuple[CanonicalEvent, ...] | None:
        with self._lock:
            seen = self._seen.get(key)
        if seen is None and self.log is not None and self.size > 0:
            logged = self.log.get(key)
            if logged is not None:
                seen = (logged[0], _replies(logged[1]))
        if seen is None or (seen[0] != digest and not seen[1]):
            return None
        if seen[0] != digest:
            raise Conflict(
                f"event id {key[-1]!r} from {key[-2]!r} was delivered before with other content",
                source=key[-2],
                id=key[-1],
            )
        return seen[1]

    def put(
        self, key: tuple[str, str, str], digest: str, replies: tuple[CanonicalEvent, ...]
    ) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._seen[key] = (digest, replies)
            self._seen.move_to_end(key)
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
        if self.log is not None:
            self.log.put(key, digest, msgspec.json.encode([structured(r) for r in replies]))


def _replies(raw: bytes) -> tuple[CanonicalEvent, ...]:
    """Replies as the log keeps them (structured CloudEvents) → canonical events."""
    out: list[CanonicalEvent] = []
    for doc in json.loads(raw):
        attrs = {k: v for k, v in doc.items() if k != "data"}
        inbound = Inbound(kind="cloudevent", id=doc["id"], data=doc["data"], attributes=attrs)
        out.extend(from_canonical_cloudevent(inbound))
    return tuple(out)


def payload_digest(event: CanonicalEvent) -> str:
    """What a redelivery must repeat: the type, subject, time and data."""
    h = hashlib.sha256()
    for part in (event.type, event.subject or "", event.time.isoformat() if event.time else ""):
        h.update(part.encode() + b"\0")
    h.update(event.data.to_json())
    return h.hexdigest()
