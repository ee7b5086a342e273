"""What every authenticator shares: the principal, the protocol, header helpers."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import msgspec

from modelhooks.events.errors import ConfigError, Unauthenticated

Clock = Callable[[], float]
"""Seconds since the epoch; inject a fake one in tests."""

Secrets = Mapping[str, str | bytes] | Sequence[str | bytes] | str | bytes
"""One secret, or several for rotation: named (name -> secret) or positional (``#0``, ...)."""


class Principal(msgspec.Struct, frozen=True):  # a Struct: cheaper to make than a dataclass
    """Who a delivery came from: ``scheme`` as in `from_spec`, ``subject`` an email or key name."""

    scheme: str
    subject: str


class Authenticator(Protocol):
    def __call__(self, headers: Mapping[str, str], body: bytes, /) -> Principal: ...


Trust = frozenset[tuple[str, ...]]
"""What a delivery an authenticator accepts may be signed with, compared by value, never
shown: ``("secret", <sha256 hex of it>)`` for each shared secret (HMAC, MLflow, bearer,
header: one secret under two schemes is one secret), ``("oidc", iss, aud, email)`` for
each OIDC issuer, audience and email (``"*"``: any). Two authenticators whose trust
overlaps (`shares`) accept each other's deliveries."""


def trust_of(auth: object) -> Trust:
    """`auth`'s `Trust` (its `trust()`); none for one that has none (accepts everything,
    or a callable of another kind)."""
    trust = getattr(auth, "trust", None)
    return trust() if callable(trust) else frozenset()


def shares(a: Trust, b: Trust) -> bool:
    """Would a delivery one accepts pass the other: a secret in both, or an OIDC issuer and
    audience in both whose emails meet (the same one, or `*` on either side)."""
    if a & b:
        return True
    oidc = [u for u in b if u[0] == "oidc"]
    return any(t[0] == "oidc" and t[1:3] == u[1:3] and "*" in (t[3], u[3]) for t in a for u in oidc)


def _secret_trust(secrets: Sequence[bytes]) -> Trust:
    return frozenset(("secret", hashlib.sha256(s).hexdigest()) for s in secrets)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        lowered = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lowered), None)
    return value


def _required(headers: Mapping[str, str], name: str) -> str:
    value = _header(headers, name)
    if not value:
        raise Unauthenticated(f"missing {name} header")
    return value


def _bearer(headers: Mapping[str, str]) -> str:
    scheme, _, token = _required(headers, "Authorization").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("Authorization header must be 'Bearer <token>'")
    return token.strip()


def _keyed(secrets: Secrets) -> tuple[tuple[str, bytes], ...]:
    if isinstance(secrets, str | bytes):
        secrets = [secrets]
    named = (
        secrets.items()
        if isinstance(secrets, Mapping)
        else ((f"#{i}", s) for i, s in enumerate(secrets))
    )
    keyed = tuple((name, s.encode() if isinstance(s, str) else bytes(s)) for name, s in named)
    if not keyed or not all(s for _, s in keyed):
        raise ConfigError("at least one secret is required and none may be empty")
    return keyed


def _fresh(headers: Mapping[str, str], name: str, now: float, window: float) -> str:
    raw = _required(headers, name)
    if not (raw.isascii() and raw.isdigit()):  # "²" (a latin-1 header byte) is a digit to str
        raise Unauthenticated(f"{name} must be integer seconds since the epoch")
    if abs(now - int(raw)) > window:
        age = int(now) - int(raw)
        when = f"{age}s old" if age >= 0 else f"{-age}s in the future"
        raise Unauthenticated(f"{name} is {when}, outside the ±{window:g}s window")
    return raw


def _match(
    keyed: Sequence[tuple[str, bytes]],
    message: bytes,
    given: bytes,
    scheme: str,
    encode: Callable[[bytes], bytes],
) -> Principal:
    for name, secret in keyed:
        expected = encode(hmac.new(secret, message, hashlib.sha256).digest())
        if hmac.compare_digest(expected, given):
            return Principal(scheme, name)
    raise Unauthenticated("signature does not match any configured secret")
