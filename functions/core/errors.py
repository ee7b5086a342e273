"""One error tree, mapped to delivery semantics.

    ModelhooksError
    ├── ConfigError            (start-up) a setting is invalid: the message names it
    ├── Transient              5xx/429: the platform redelivers
    │   ├── Unavailable        503  a backend did not answer or answered 5xx
    │   └── Throttled          429  a backend or quota said "slow down"
    └── Permanent              4xx: never retried (but dead-lettered)
        ├── BadRequest         400  malformed input: the reason names the field
        ├── Unauthenticated    401  missing or invalid delivery credentials
        ├── Forbidden          403  a tenant acting outside its allowed buckets/repositories
        ├── NotFound           404  a thing the request names does not exist
        ├── Conflict           409  the same identity with different content
        ├── PayloadTooLarge    413  a body over the configured limit
        └── VerificationFailed 422  a signature does not match the model

Adapters wrap library errors at the boundary, so nothing above them sees an SDK exception.
Note that Knative redelivers 404 and 409 as well as 5xx/429 (then dead-letters them).
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "BadRequest",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "ModelhooksError",
    "NotFound",
    "PayloadTooLarge",
    "Permanent",
    "Throttled",
    "Transient",
    "Unauthenticated",
    "Unavailable",
    "VerificationFailed",
]


class ModelhooksError(Exception):
    """Root of every error modelhooks raises on purpose."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def as_json(self) -> dict[str, Any]:
        """The JSON body of an HTTP answer: what went wrong, for a person and a program."""
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body

    def diagnostics(self) -> str:
        """A few lines for a person at a terminal."""
        lines = [f"{self.code}: {self.message}"]
        lines += [f"  {k}: {v}" for k, v in self.details.items()]
        return "\n".join(lines)


class Transient(ModelhooksError):
    status = 503
    code = "transient"


class Unavailable(Transient):
    status = 503
    code = "unavailable"


class Throttled(Transient):
    status = 429
    code = "throttled"


class Permanent(ModelhooksError):
    status = 400
    code = "permanent"


class BadRequest(Permanent):
    status = 400
    code = "bad_request"


class Unauthenticated(Permanent):
    status = 401
    code = "unauthenticated"


class Forbidden(Permanent):
    status = 403
    code = "forbidden"


class NotFound(Permanent):
    status = 404
    code = "not_found"


class Conflict(Permanent):
    status = 409
    code = "conflict"


class PayloadTooLarge(Permanent):
    status = 413
    code = "payload_too_large"


class VerificationFailed(Permanent):
    status = 422
    code = "verification_failed"


class ConfigError(ModelhooksError):
    """Not a delivery outcome: raised at start-up, where it stops the process."""

    status = 500
    code = "config_error"
