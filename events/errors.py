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
        │   └── PartlyBad  some units of a delivery are, the others (its `good`) not
        ├── Unauthenticated  missing or invalid delivery credentials
        └── PayloadTooLarge  a body over the configured limit
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

__all__ = [
    "MAX_REFUSED",
    "BadRequest",
    "ConfigError",
    "ModelhooksError",
    "PartlyBad",
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


# Bad units one delivery may carry and still have its others taken: past them it is refused
# whole, at once (each refusal is an exception and its message: a 1 MiB batch of ~350,000
# members `1` cost ~2 s of CPU and ~300 MB refused one by one)
MAX_REFUSED = 100


class PartlyBad(BadRequest):
    """Some units of one delivery (CloudEvents batch members, S3 records, registry events)
    are bad input and the others are not: `good` holds those others (the decoded units, or
    the events they mean), so they still take effect while these are refused."""

    def __init__(self, refused: Sequence[BadRequest], good: list[Any]) -> None:
        shown = "; ".join(e.message for e in refused[:3])
        more = f" (and {len(refused) - 3} more)" if len(refused) > 3 else ""
        super().__init__(shown + more, refused=len(refused))
        self.good = good

    @staticmethod
    def note(refused: list[BadRequest], error: BadRequest) -> None:
        """Add one unit's refusal to `refused`; past MAX_REFUSED, refuse the delivery."""
        refused.append(error)
        if len(refused) > MAX_REFUSED:
            raise BadRequest(
                f"more than {MAX_REFUSED} units of the delivery are bad input; the first: "
                f"{refused[0].message}",
                refused=len(refused),
            )

    @classmethod
    def check(cls, refused: Sequence[BadRequest], good: list[Any], units: int) -> None:
        """Raise for `refused` of `units`: every one the first's error, some a PartlyBad."""
        if refused and len(refused) == units:
            raise refused[0]
        if refused:
            raise cls(refused, good)


class Unauthenticated(Permanent):
    code = "unauthenticated"


class PayloadTooLarge(Permanent):
    code = "payload_too_large"
