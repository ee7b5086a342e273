"""A function: a name, the canonical event types it accepts, and a plain handler.

A handler is `handle(event, *, <dependencies>) -> list[reply]`; the names of its keyword-only
parameters say which dependencies it needs, and the composition root passes exactly those
(`Function.bind`). So a unit test calls a handler with fakes, by name, and nothing else.

>>> def handle(event, *, registry): ...
>>> Function("register", frozenset({"dev.modelhooks.artifact.pushed"}), handle).needs
('registry',)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Literal

import msgspec

from modelhooks.core.errors import ConfigError, Permanent
from modelhooks.events.model import CanonicalEvent

__all__ = ["Function", "Handler", "Refusal", "Skip", "WebhookHandler"]

Handler = Callable[..., list[CanonicalEvent]]
# What a function answers instead of refusing an event for good (its tenancy refused, or its
# handler raised Permanent): the replies that tell whoever waits on it ([]: the 4xx stands).
Refusal = Callable[[CanonicalEvent, Permanent], list[CanonicalEvent]]
# A webhook function (admission) answers a request of its own instead of events: its
# handler takes that request and returns its answer (`handle(review, *, deps) -> Decision`).
WebhookHandler = Callable[..., Any]


class Skip(Exception):
    """Raised by a handler that does nothing on purpose; the message says why. The delivery
    answers 204 and logs the reason (`sign skipped: signing is off`)."""


# A frozen msgspec Struct, not a dataclass: making its class costs ~2 % of a dataclass's
# (~0.5 ms of CPU at every process's start, issue 22)
class Function(msgspec.Struct, frozen=True):
    name: str
    accepts: frozenset[str]
    handle: Handler | WebhookHandler
    # The optional dependency groups (pyproject extras) its code paths import, beyond the
    # object-store and registry clients every function may use: sign needs "signing".
    extras: tuple[str, ...] = ()
    # "events": CloudEvents through its Trigger; "admission": AdmissionReviews on its own
    # paths (modelhooks.delivery.admission), accepting no events and having no Trigger.
    kind: Literal["events", "admission"] = "events"
    # Whether it acts on object-store pushes, which the ingress names by their content (one
    # listing of the version, Delivery.enter) before it runs; prune acts on OCI pushes
    # only, which their manifest digest names: its process lists nothing, nor builds a store.
    object_pushes: bool = True
    # A refusal for good told as replies, answered 2xx so the platform routes them on
    # (cleanup: an `artifact.purged` that says why it stopped, for the Model's
    # finalizer to wait visibly); not remembered by dedupe, so once the cause is fixed a
    # redelivery acts. None: the refusal is a 4xx (dead-lettered).
    refused: Refusal | None = None

    @property
    def needs(self) -> tuple[str, ...]:
        """The dependencies the handler names (its keyword-only parameters)."""
        params = inspect.signature(self.handle).parameters.values()
        return tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)

    def bind(self, available: Mapping[str, Any]) -> Function:
        """This function with its dependencies given: `handle(event)` is then enough."""
        missing = [name for name in self.needs if name not in available]
        if missing:
            raise ConfigError(f"function {self.name!r} needs {', '.join(missing)}, not provided")
        given = {name: available[name] for name in self.needs}
        return msgspec.structs.replace(self, handle=partial(self.handle, **given))
