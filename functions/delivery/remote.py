"""A function that runs in another process: the broker's subscriber over HTTP.

Where Knative is not installed, the functions still run as Pods of their own (their own
ServiceAccount, RBAC and scaling) and one `modelhooks serve` is their Broker: it routes by the
same Triggers, POSTs each event to the function's URL in binary mode (`router.subscribers`),
and routes the replies it answers with, as the Knative Broker does with a subscriber's reply.
What the function answers keeps its meaning: a reply (or batch) goes on, 204 is done, a
skip is a skip, 5xx/429 or no answer is transient (the broker answers its sender 5xx, so the
delivery is retried), a 4xx is that same refusal.

>>> subscribers("register=http://modelhooks-register;sign=http://modelhooks-sign:8080")
{'register': 'http://modelhooks-register', 'sign': 'http://modelhooks-sign:8080'}
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from modelhooks.core.errors import (
    BadRequest,
    ConfigError,
    Conflict,
    CredentialsRefused,
    Forbidden,
    ModelhooksError,
    NotFound,
    PayloadTooLarge,
    Permanent,
    Throttled,
    Unavailable,
    VerificationFailed,
)
from modelhooks.core.function import Function, Skip
from modelhooks.delivery.encoding import answer_reason, binary
from modelhooks.events.ingress import decode
from modelhooks.events.model import CanonicalEvent
from modelhooks.events.sources.canonical import from_canonical_cloudevent

__all__ = ["remote", "subscribers"]

# What a subscriber's 4xx means here. A 401 is the broker's own credentials refused: the
# operator's to fix, retried meanwhile (as a store refusing ours is).
_REFUSALS: dict[int, type[ModelhooksError]] = {
    400: BadRequest,
    401: CredentialsRefused,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: VerificationFailed,
    429: Throttled,
}
_MAX_ANSWER = 8 * 1024 * 1024


def subscribers(spec: str, known: tuple[str, ...] = ()) -> dict[str, str]:
    """`function=URL;function=URL` as a table; ConfigError naming the entry that is wrong."""
    table: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, sep, url = (s.strip() for s in part.partition("="))
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"MODELHOOKS_ROUTER_SUBSCRIBERS: {part!r} is not 'function=http(s)://host[:port]'"
            )
        if known and name not in known:
            raise ConfigError(
                f"MODELHOOKS_ROUTER_SUBSCRIBERS: no function {name!r} "
                f"(the functions: {', '.join(known)})"
            )
        table[name] = url
    return table


def remote(fn: Function, url: str, timeout: float) -> Function:
    """`fn` (its name and the types it accepts) run by POSTing to `url`."""

    def handle(event: CanonicalEvent) -> list[CanonicalEvent]:
        msg = binary(event)
        request = urllib.request.Request(url, data=msg.body, headers=msg.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return _replies(fn.name, dict(answer.headers), answer.read(_MAX_ANSWER + 1))
        except urllib.error.HTTPError as exc:
            with exc:
                raise _refusal(fn.name, url, exc.code, exc.read(_MAX_ANSWER)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unavailable(f"{fn.name} at {url} did not answer: {reason}", url=url) from None

    return Function(fn.name, fn.accepts, handle, refused=fn.refused)  # told here, as there


def _replies(name: str, headers: dict[str, str], body: bytes) -> list[CanonicalEvent]:
    if len(body) > _MAX_ANSWER:
        raise Unavailable(f"{name} answered more than {_MAX_ANSWER} bytes")
    lowered = {k.lower(): v for k, v in headers.items()}
    if not body and "ce-specversion" not in lowered:
        return []  # 204: done, nothing to say
    if "ce-specversion" not in lowered and "cloudevents" not in lowered.get("content-type", ""):
        skipped = _json(body).get("skipped") or []  # 200 {"skipped": [...]}: on purpose
        reasons = [s.get("skipped", "") for s in skipped if isinstance(s, dict)]
        raise Skip("; ".join(filter(None, reasons)) or f"{name} did nothing")
    try:
        return [e for inbound in decode(lowered, body) for e in from_canonical_cloudevent(inbound)]
    except ModelhooksError as exc:  # our own function answered what we cannot read
        raise Unavailable(f"{name} answered a reply that does not decode: {exc.message}") from None


def _refusal(name: str, url: str, status: int, body: bytes) -> ModelhooksError:
    message = f"{name} at {url} answered {status}: {answer_reason(body)[:2000] or 'no reason'}"
    if status >= 500:
        return Unavailable(message, url=url, status=status)
    return _REFUSALS.get(status, Permanent)(message, url=url, status=status)


def _json(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
