"""The spec grammar (see the package docstring) → an authenticator."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence

from modelhooks.events.auth._base import Authenticator, Clock
from modelhooks.events.auth.oidc import GOOGLE_ISSUERS, GOOGLE_JWKS_URL, OidcAuthenticator
from modelhooks.events.auth.shared_secret import (
    AllowAll,
    BearerAuthenticator,
    HmacAuthenticator,
    MlflowAuthenticator,
    SecretHeaderAuthenticator,
)
from modelhooks.events.errors import ConfigError

MAX_SECRET_BYTES = 1 << 20  # a `file:` reference's (a CA bundle is a few hundred KB)


def resolve_value(raw: str, origin: str) -> str:
    """A configured value: `env:NAME` (that variable), `file:PATH` (the file, stripped) or
    the literal itself. ConfigError (naming `origin`, never the value) when the reference
    cannot be read or gives nothing: an empty file or variable (a Secret's key left empty)
    was taken as no token at all, a file not UTF-8 (an HMAC key of random bytes) was an
    internal error, and `file:/dev/zero` was read without bound."""
    source, _, ref = raw.partition(":")
    if source == "env" and ref:
        value = os.environ.get(ref)
        if value is None:
            raise ConfigError(f"{origin}=env:{ref} but ${ref} is not set")
        if not value.strip():
            raise ConfigError(f"{origin}=env:{ref} but ${ref} is empty")
        return value
    if source == "file" and ref:
        return _read_secret(ref, f"{origin}=file:{ref}")
    return raw


def _read_secret(path: str, where: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SECRET_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{where} cannot be read ({e.strerror})") from None
    if len(data) > MAX_SECRET_BYTES:
        raise ConfigError(f"{where} is over {MAX_SECRET_BYTES} bytes: not a secret")
    try:
        value = data.decode().strip()
    except UnicodeDecodeError:  # its message quotes a byte of the secret: not shown
        raise ConfigError(f"{where} is not UTF-8 text") from None
    if not value:
        raise ConfigError(f"{where} is empty")
    return value


class _Params:
    """The key=value pairs of one spec, resolved on demand; unknown keys are an error."""

    def __init__(self, origin: str, pairs: list[tuple[str, str]]) -> None:
        self.origin, self.pairs, self.known = origin, pairs, set[str]()

    def error(self, what: str) -> ConfigError:
        return ConfigError(f"{self.origin}: {what}")

    def named(self, key: str, *, required: bool = False) -> dict[str, str]:
        """Values of `key` by name: ``env:X``/``file:P`` for references, ``#i`` for literals."""
        self.known.add(key)
        if required and not any(k == key for k, _ in self.pairs):
            raise self.error(f"{key}= is required")
        out: dict[str, str] = {}
        for i, raw in enumerate(v for k, v in self.pairs if k == key):
            value = resolve_value(raw, f"{self.origin}: {key}")
            if value is raw:
                raw = f"#{i}"
            if not value:
                raise self.error(f"{key} ({raw}) is empty")
            out[raw] = value
        return out

    def one(self, key: str, default: str) -> str:
        values = list(self.named(key).values())
        if len(values) > 1:
            raise self.error(f"{key}= may be given only once")
        return values[0] if values else default

    def seconds(self, key: str, default: float) -> float:
        value = self.one(key, str(default))
        if not re.fullmatch(r"\d+(\.\d*)?", value):
            raise self.error(f"{key}={value!r} is not a number of seconds")
        return float(value)


def _pairs(spec: str | Mapping[str, str | Sequence[str]], origin: str) -> tuple[str, _Params]:
    if isinstance(spec, str):
        scheme, _, rest = spec.strip().partition(":")
        pairs = []
        for i, part in enumerate(rest.split(",") if rest.strip() else [], 1):
            key, eq, value = part.partition("=")
            if not eq or not re.fullmatch(r"[a-z_]+", key.strip()):
                raise ConfigError(
                    f"{origin}: part {i} after '{scheme}:' is not key=value "
                    "(a literal value cannot contain ','; use env: or file:)"
                )
            pairs.append((key.strip(), value.strip()))
    else:
        named = spec.get("scheme", "")
        if not isinstance(named, str):
            raise ConfigError(f"{origin}: 'scheme' must be a string")
        scheme = named
        items = ((k, [v] if isinstance(v, str) else v) for k, v in spec.items() if k != "scheme")
        pairs = [(k, v) for k, vs in items for v in vs]
        if not all(isinstance(v, str) for _, v in pairs):
            raise ConfigError(f"{origin}: every value must be a string or a list of strings")
    return scheme.strip().lower(), _Params(origin, pairs)


def _oidc(p: _Params, clock: Clock) -> OidcAuthenticator:
    """`oidc:…`; its refusals name the route (`origin`): Google's issuer without email= is
    one, since any Google account can mint a token for any audience."""
    try:
        return OidcAuthenticator(
            list(p.named("aud", required=True).values()),
            emails=list(p.named("email").values()),
            issuers=list(p.named("iss").values()) or GOOGLE_ISSUERS,
            jwks_url=p.one("jwks", GOOGLE_JWKS_URL),
            leeway=p.seconds("leeway", 60.0),
            clock=clock,
        )
    except ConfigError as e:
        if e.message.startswith(p.origin):
            raise
        raise p.error(e.message) from None


def from_spec(
    spec: str | Mapping[str, str | Sequence[str]],
    *,
    origin: str = "auth spec",
    clock: Clock = time.time,
) -> Authenticator:
    """Build an authenticator from the grammar in this module's docstring.

    `origin` names where the spec came from (e.g. an environment variable) in errors:

        from_spec(os.environ["MODELHOOKS_INGRESS_AUTH"], origin="MODELHOOKS_INGRESS_AUTH")
    """
    scheme, p = _pairs(spec, origin)
    auth: Authenticator
    match scheme:
        case "none":
            auth = AllowAll()
        case "oidc":
            auth = _oidc(p, clock)
        case "hmac":
            auth = HmacAuthenticator(
                p.named("secret", required=True),
                header=p.one("header", "X-Modelhooks-Signature"),
                timestamp_header=p.one("timestamp_header", "X-Modelhooks-Timestamp"),
                window=p.seconds("window", 300.0),
                clock=clock,
            )
        case "mlflow":
            auth = MlflowAuthenticator(
                p.named("secret", required=True), window=p.seconds("window", 300.0), clock=clock
            )
        case "bearer":
            auth = BearerAuthenticator(p.named("token", required=True))
        case "header":
            auth = SecretHeaderAuthenticator(
                p.one("name", "X-Webhook-Secret"), p.named("secret", required=True)
            )
        case _:
            raise ConfigError(
                f"{origin}: unknown scheme {scheme!r} "
                "(expected oidc, hmac, mlflow, bearer, header or none)"
            )
    if unknown := sorted({k for k, _ in p.pairs} - p.known):
        known = ", ".join(sorted(p.known)) or "none"
        raise ConfigError(
            f"{origin}: unknown key(s) {', '.join(unknown)} for {scheme} (known: {known})"
        )
    return auth
