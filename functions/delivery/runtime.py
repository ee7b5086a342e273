"""The delivery contract: HTTP request → canonical events → handlers → status + reply.

- 2xx only after every effect committed; one reply → a binary-mode CloudEvent (200), none →
  204, several → a CloudEvents batch; with a sink (`K_SINK`) replies are POSTed there.
- Transient failures → 5xx/429 (the platform redelivers), permanent ones → 4xx with a JSON
  body that says what was wrong. A batch answers with its worst outcome.
- Duplicates (same function, same event id) return the first delivery's replies again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from modelhooks.core.errors import (
    BadRequest,
    ModelhooksError,
    PartlyBad,
    PayloadTooLarge,
    Permanent,
    Transient,
    Unavailable,
)
from modelhooks.core.function import Function, Refusal, Skip
from modelhooks.core.logs import enabled, log
from modelhooks.core.tenancy import Tenancy
from modelhooks.delivery.dedupe import Dedupe, payload_digest
from modelhooks.delivery.encoding import (
    Response,
    encode_replies,
    error_response,
    json_response,
)
from modelhooks.delivery.routes import RouteAuth, bind_tenant
from modelhooks.delivery.statuses import status_of
from modelhooks.events.inbound import Inbound
from modelhooks.events.ingress import decode
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import CanonicalEvent
from modelhooks.events.sources import kind_of, translate

__all__ = [
    "Delivery",
    "Outcome",
    "deliver",
    "entered",
    "ingest_each",
    "run",
    "run_all",
    "worst",
]

Sink = Callable[[CanonicalEvent], None]


# Structs, not dataclasses: making a Struct class costs a fraction of a dataclass's (cold start)
class Outcome(msgspec.Struct, frozen=True):
    function: str
    event_id: str
    event_type: str
    status: int
    replies: tuple[CanonicalEvent, ...] = ()
    error: dict[str, Any] | None = None
    skipped: str = ""  # why nothing was done, on purpose (a 2xx)

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "function": self.function,
            "id": self.event_id,
            "type": self.event_type,
            "status": self.status,
            "replies": [r.id for r in self.replies],
        }
        if self.error:
            doc["error"] = self.error
        if self.skipped:
            doc["skipped"] = self.skipped
        return doc


class Delivery(msgspec.Struct, frozen=True):
    """What the delivery contract needs, built once by the composition root: the functions
    (bound to their dependencies, loaded on first use), per-route authentication, tenancy,
    dedupe, the ingress limits and translation options, and the reply sink (`K_SINK`)."""

    function: Callable[[str], Function]
    names: tuple[str, ...]
    auth: RouteAuth
    tenancy: Tenancy
    dedupe: Dedupe
    layout: ObjectLayout
    max_body_bytes: int
    registry_host: str | None = None
    sink: Sink | None = None
    max_future_skew: float = 300.0
    max_events: int = 100
    deadline: float = 60.0
    # An upstream push → the same push named by its content (modelhooks.core.content);
    # raises Skip when the push names no model.
    resolve: Callable[[CanonicalEvent], CanonicalEvent] | None = None
    max_review_bytes: int = 3 << 20  # an AdmissionReview's limit (the admission function)

    def enter(self, event: CanonicalEvent) -> CanonicalEvent:
        """An event from outside (an HTTP delivery, the store watcher, a replay) as every
        function sees it: a push named by its content, resolved here, once, for all of
        them. Raises Skip when it names no model (nothing under the prefix but the marker:
        an upload aborted and cleaned up, a redelivery after the model was deleted)."""
        return event if self.resolve is None else self.resolve(event)


def ingest_each(
    headers: Mapping[str, str], body: bytes, delivery: Delivery, path: str = "/"
) -> tuple[list[CanonicalEvent], list[tuple[Outcome, Permanent]]]:
    """Size-check, authenticate, decode and translate one delivery: its events, and the
    units refused as bad input (each with its outcome). The size comes first: nothing is
    verified over an oversized body. A unit (a batch member, an S3 record, a registry event)
    that may not come through this route, does not translate, names another tenant or is
    dated in the future is refused alone: the others still take effect. When every unit is
    refused, so is the delivery (raises its first reason), as it does for what is not one."""
    limit = delivery.max_body_bytes
    if len(body) > limit:
        raise PayloadTooLarge(f"body of {len(body)} bytes is over the limit of {limit}")
    delivery.auth.check(path, headers, body)
    refused: list[tuple[Outcome, Permanent]] = []
    try:
        inbounds = decode(headers, body, max_bytes=limit)
    except PartlyBad as exc:  # batch members that are no CloudEvent
        inbounds = exc.good
        refused.append((Outcome("-", "-", "batch member", 400, error=exc.as_json()), exc))
    _check_count(len(inbounds), delivery.max_events)
    horizon = datetime.now(UTC) + timedelta(seconds=delivery.max_future_skew)
    events: list[CanonicalEvent] = []
    for inbound in inbounds:
        try:
            # trust is bound to the route: what may come through it
            delivery.auth.admit_kind(path, kind_of(inbound))
            translated = translate(
                inbound, layout=delivery.layout, registry_host=delivery.registry_host
            )
        except PartlyBad as exc:
            translated = exc.good
            refused.append((_refusal(inbound, exc), exc))
        except Permanent as exc:
            refused.append((_refusal(inbound, exc), exc))
            continue
        for event in translated:
            try:
                events.append(_admitted(event, delivery, path, horizon))
            except Permanent as exc:
                refused.append((_refusal(event, exc), exc))
        _check_count(len(events), delivery.max_events)
    if refused and not events:
        raise refused[0][1]
    for outcome, error in refused:  # the rest goes on: say what was left out
        log(
            logging.WARNING,
            f"part of a delivery rejected: {error.message}",
            event_id=outcome.event_id,
            status=outcome.status,
            error=outcome.error,
        )
    return events, refused


def _admitted(
    event: CanonicalEvent, delivery: Delivery, path: str, horizon: datetime
) -> CanonicalEvent:
    """`event` as the route's tenant sends it, or Permanent when it may not come in."""
    if event.time is not None and event.time > horizon:
        raise BadRequest(
            f"event {event.id!r} is dated {event.time.isoformat()}, beyond "
            f"{delivery.max_future_skew:g} s in the future (ingress.max_future_skew)",
            field="time",
        )
    return bind_tenant(delivery.auth, path, event)


def _refusal(unit: Inbound | CanonicalEvent, error: Permanent) -> Outcome:
    """The outcome of one unit of a delivery refused at ingress (no function saw it)."""
    if isinstance(unit, CanonicalEvent):
        return Outcome("-", unit.id, unit.type, status_of(error), error=error.as_json())
    kind = unit.attributes.get("type", unit.kind)
    return Outcome("-", unit.id, kind, status_of(error), error=error.as_json())


def _check_count(count: int, limit: int) -> None:
    if count > limit:
        raise PayloadTooLarge(
            f"a delivery of {count} events is over the limit of {limit} (ingress.max_events)"
        )


def entered(
    event: CanonicalEvent, delivery: Delivery, function: str = "-"
) -> CanonicalEvent | Outcome:
    """`event` as it enters the delivery (Delivery.enter), or the outcome that answers it
    instead: skipped (2xx) when it names no model, the error's status when naming it failed
    (a store that did not answer: 503, redelivered). Never raises."""
    started = time.perf_counter()
    try:
        return delivery.enter(event)
    except Exception as exc:
        name, outcome = _failed(function, event, exc)
    _log(outcome, name, event, started)
    return outcome


def run_all(
    events: Sequence[CanonicalEvent],
    dispatch: Callable[[CanonicalEvent], list[Outcome]],
    deadline: float,
) -> list[Outcome]:
    """Dispatch each event until the delivery's deadline; the events left then answer 503,
    so the platform redelivers them (every effect is idempotent)."""
    stop = time.monotonic() + deadline
    outcomes: list[Outcome] = []
    for event in events:
        if time.monotonic() > stop:
            error = Unavailable(
                f"the delivery's deadline of {deadline:g} s passed before event {event.id}"
            )
            outcomes.append(Outcome("-", event.id, event.type, 503, error=error.as_json()))
            continue
        outcomes.extend(dispatch(event))
    return outcomes


def _paused(event: CanonicalEvent) -> bool:
    """A Model lifecycle event of a Model whose spec says `paused: true`."""
    spec = getattr(event.data, "spec", None)
    return isinstance(spec, dict) and spec.get("paused") is True


def run(fn: Function, event: CanonicalEvent, delivery: Delivery) -> Outcome:
    """Run one function on one event, mapping errors to delivery semantics, and log it."""
    started = time.perf_counter()
    digest = payload_digest(event)
    outcome_name = "ok"
    tell = fn.refused  # set while a refusal for good may be told (tenancy, the handler)
    try:
        admitted = delivery.tenancy.admit(event)
        tell = None  # dedupe's Conflict is no refusal of the function's: a 409
        key = _dedupe_key(fn.name, admitted)
        cached = delivery.dedupe.get(key, digest)
        if cached is not None:
            outcome_name = "duplicate"
            outcome = Outcome(fn.name, event.id, event.type, 200 if cached else 204, cached)
        else:
            if _paused(admitted):
                raise Skip("the Model is paused (spec.paused): no function acts on it")
            tell = fn.refused
            replies = tuple(fn.handle(admitted))
            tell = None
            delivery.dedupe.put(key, digest, replies)
            outcome = Outcome(fn.name, event.id, event.type, 200 if replies else 204, replies)
    except Exception as exc:  # Skip and refusals are not remembered: their cause may change
        outcome_name, outcome = _told(fn.name, event, exc, tell) or _failed(fn.name, event, exc)
    _log(outcome, outcome_name, event, started)
    return outcome


def _told(
    function: str, event: CanonicalEvent, exc: Exception, tell: Refusal | None
) -> tuple[str, Outcome] | None:
    """A refusal for good that the function tells as replies (Function.refused): 200 with
    them, so the platform routes them on, the reason kept in the outcome and its log line.
    None when it tells nothing: the refusal's 4xx stands."""
    if tell is None or not isinstance(exc, Permanent):
        return None
    replies = tuple(tell(event, exc))
    if not replies:
        return None
    return "refused", Outcome(function, event.id, event.type, 200, replies, error=exc.as_json())


def _dedupe_key(function: str, event: CanonicalEvent) -> tuple[str, str, str]:
    """CloudEvents' source + id name an event, within its tenant: a route bound to one tenant
    may claim any source and id, and another tenant's event that then came with that id was
    'delivered before with other content' (409, dead-lettered: never acted on)."""
    namespace = getattr(event.data, "namespace", None)
    scope = f"{function}@{namespace}" if namespace else function  # '@' is in neither
    return (scope, event.source, event.id)


def _failed(function: str, event: CanonicalEvent, exc: Exception) -> tuple[str, Outcome]:
    """(outcome name, outcome) of `function` raising `exc` on `event`."""
    if isinstance(exc, Skip):
        return "skipped", Outcome(function, event.id, event.type, 204, skipped=str(exc))
    if isinstance(exc, ModelhooksError):
        name = "transient" if isinstance(exc, Transient) else "rejected"
        return name, Outcome(function, event.id, event.type, status_of(exc), error=exc.as_json())
    # a bug or an unwrapped library error: let the platform retry
    log(logging.ERROR, f"{function} failed", exc_info=exc, event_id=event.id)
    error = Unavailable(f"internal error in {function}; see the logs for event {event.id}")
    return "error", Outcome(function, event.id, event.type, 500, error=error.as_json())


def _log(outcome: Outcome, outcome_name: str, event: CanonicalEvent, started: float) -> None:
    """One structured line per outcome."""
    level = logging.WARNING if outcome.status >= 400 or outcome.error else logging.INFO
    if not enabled(level):  # its fields are not even made (five outcomes per signed push)
        return
    fields: dict[str, Any] = {
        "event_id": event.id,
        "type": event.type,
        "function": outcome.function,
        "outcome": outcome_name,
        "status": outcome.status,
        "duration_ms": round((time.perf_counter() - started) * 1000, 2),
    }
    uri = getattr(event.data, "uri", None)
    if uri:  # the model as its store names it (gs://…, s3://…, oci://…)
        fields["uri"] = uri
    if outcome.error:
        fields["error"] = outcome.error
    reason = outcome.skipped
    if reason:
        fields["reason"] = reason
    message = f"{outcome.function} {outcome_name} {event.type}" + (f": {reason}" if reason else "")
    log(level, message, **fields)


def deliver(
    headers: Mapping[str, str],
    body: bytes,
    delivery: Delivery,
    dispatch: Callable[[CanonicalEvent], list[Outcome]],
    path: str = "/",
) -> Response:
    """One HTTP delivery, end to end. `dispatch` runs the event through its function(s)."""
    try:
        events, refused = ingest_each(headers, body, delivery, path)
    except ModelhooksError as exc:
        log(
            logging.WARNING,
            f"delivery rejected: {exc.message}",
            status=status_of(exc),
            error=exc.as_json(),
        )
        return error_response(exc)
    outcomes = [o for o, _ in refused] + run_all(events, dispatch, delivery.deadline)
    status = worst(o.status for o in outcomes) if outcomes else 204
    replies = [r for o in outcomes for r in o.replies]
    if delivery.sink is not None and replies:
        # the replies of what took effect go on whatever its neighbours' outcome: a 4xx is
        # never redelivered, and they were lost with it (a sink dedupes by reply id)
        try:
            for reply in replies:
                delivery.sink(reply)
        except ModelhooksError as exc:
            return error_response(exc)
    if status >= 300:
        return json_response(status, {"outcomes": [o.as_json() for o in outcomes]})
    skips = [o.as_json() for o in outcomes if o.skipped]
    if skips and not replies:  # say why nothing was done (not a CloudEvent: no reply)
        return json_response(200, {"skipped": skips})
    if delivery.sink is not None and replies:
        return Response(204)
    return encode_replies(replies)


def worst(statuses: Sequence[int] | Any) -> int:
    """Transient beats permanent beats success: redelivery then repeats the whole batch,
    which is safe because every effect is idempotent."""
    ranked = sorted(statuses, key=lambda s: (s >= 500 or s == 429, s >= 400, s))
    return ranked[-1] if ranked else 204
