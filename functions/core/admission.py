"""What admission reads and answers, without the AdmissionReview wire format
(modelhooks.delivery.admission decodes and encodes that).

>>> Decision.allow().allowed
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

__all__ = ["Decision", "Review"]


# frozen msgspec Structs, not dataclasses: making a Struct class costs ~2 % of a dataclass's
class Review(msgspec.Struct, frozen=True):
    """One admission request: which object, where, and whether the answer may mutate it."""

    uid: str
    kind: str  # the object's kind (request.kind.kind): Pod, Deployment, InferenceService, …
    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    namespace: str
    name: str
    object: Mapping[str, Any] = msgspec.field(default_factory=dict)
    mutate: bool = False  # the mutating webhook asks: tags may be pinned to digests
    old_object: Mapping[str, Any] = msgspec.field(default_factory=dict)  # what an UPDATE replaces


class Decision(msgspec.Struct, frozen=True):
    """The answer: allowed or not (with the reason and an HTTP-like code), the warnings the
    client shows, and a JSONPatch (mutating only)."""

    allowed: bool
    message: str = ""
    code: int = 200
    reason: Literal["", "Forbidden", "BadRequest", "ServiceUnavailable"] = ""
    warnings: tuple[str, ...] = ()
    patch: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def allow(
        cls, warnings: tuple[str, ...] = (), patch: tuple[Mapping[str, Any], ...] = ()
    ) -> Decision:
        return cls(True, warnings=warnings, patch=patch)

    @classmethod
    def deny(cls, message: str, *, code: int = 403, warnings: tuple[str, ...] = ()) -> Decision:
        reason: Literal["Forbidden", "BadRequest", "ServiceUnavailable"] = (
            "BadRequest" if code == 400 else "ServiceUnavailable" if code == 503 else "Forbidden"
        )
        return cls(False, message, code, reason, warnings)
