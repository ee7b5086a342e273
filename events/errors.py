"""The root of modelhooks' error tree, and the errors the vocabulary itself raises.

The event vocabulary is the bottom layer, so the tree starts here; `modelhooks.core.errors`
extends it and is the place to read it whole. No error carries a transport status: the
delivery layer decides what each one means on the wire.

    ModelhooksError
    ├── ConfigError        a setting is invalid (start-up): the message names it
    ├── Transient          worth retrying: the platform redelivers
    │   └── Unavailable    a backend (a JWKS endpoint, a registry, a store) did not answer
    └── Permanent          never worth retrying
        ├── BadRequest     malformed input: the reason names the field
        ├── Unauthenticated  missing or invalid delivery credentials
        └── PayloadTooLarge  a body over the configured limit
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "BadRequest",
    "ConfigError",
    "ModelhooksError",
    "PayloadTooLarge",
    "Permanent",
    "Transient",
    "Unauthenticated",
    "Unavailable",
]


class ModelhooksError(Exception):
    """Root of every error modelhooks raises on purpose."""

    code: ClassVar[str] = "error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def as_json(self) -> dict[str, Any]:
        """What went wrong, for a person and a program."""
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body

    def diagnostics(self) -> str:
        """A few lines for a person at a terminal."""
        lines = [f"{self.code}: {self.message}"]
        lines += [f"  {k}: {v}" for k, v in self.details.items()]
        return "\n".join(lines)


class ConfigError(ModelhooksError):
    """Not a delivery outcome: raised at start-up, where it stops the process."""

    code = "config_error"


class Transient(ModelhooksError):
    code = "transient"


class Unavailable(Transient):
    code = "unavailable"


class Permanent(ModelhooksError):
    code = "permanent"


class BadRequest(Permanent):
    code = "bad_request"


class Unauthenticated(Permanent):
    code = "unauthenticated"


class PayloadTooLarge(Permanent):
    code = "payload_too_large"
