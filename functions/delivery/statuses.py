"""The HTTP meaning of each error: the one place where the error tree meets the wire.

Transient errors answer 5xx/429 (the platform redelivers), permanent ones 4xx with a JSON
reason (never retried). Note that Knative redelivers 404 and 409 as well as 5xx/429 (then
dead-letters them).
"""

from __future__ import annotations

from modelhooks.core.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    ModelhooksError,
    NotFound,
    PayloadTooLarge,
    Permanent,
    Throttled,
    Transient,
    Unauthenticated,
    Unavailable,
    VerificationFailed,
)

__all__ = ["status_of"]

_STATUS: dict[type[ModelhooksError], int] = {
    Throttled: 429,
    Unavailable: 503,
    Transient: 503,
    BadRequest: 400,
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    PayloadTooLarge: 413,
    VerificationFailed: 422,
    Permanent: 400,
}


def status_of(error: ModelhooksError) -> int:
    """The HTTP status that answers `error`: its nearest class in the table (500 when none,
    e.g. a ConfigError, which should never reach a delivery)."""
    for cls in type(error).__mro__:
        if cls in _STATUS:
            return _STATUS[cls]
    return 500
