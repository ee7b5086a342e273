"""Delivery authentication: who sent this request, and may we believe them?

An authenticator is a callable ``(headers, body) -> Principal`` that raises
`functions.errors.Unauthenticated` (401) with an operator-readable reason that never
echoes a credential. Header names are matched case-insensitively.

    OidcAuthenticator          Pub/Sub push: ``Authorization: Bearer <Google OIDC JWT>``
    HmacAuthenticator          generic webhooks: ``sha256=<hex HMAC(secret, "{ts}.{body}")>``
    MlflowAuthenticator        MLflow 3: ``v1,<base64 HMAC(secret, "{id}.{ts}.{body}")>``
    BearerAuthenticator        static tokens (OCI registry notifications, MinIO)
    SecretHeaderAuthenticator  a secret sent verbatim (Hugging Face ``X-Webhook-Secret``)
    AllowAll                   local development only: accepts everything

`from_spec` builds one from a compact string (so it fits in an environment variable)
or from a mapping with the same keys::

    spec   := "none" | scheme [":" param ("," param)*]
    param  := key "=" value          (a key may repeat: several emails, secrets, tokens)
    value  := literal | "env:" NAME | "file:" PATH     (file contents are stripped)

    oidc:aud=https://fn.example.com,email=push@p.iam.gserviceaccount.com
        keys: aud (required), email, iss, jwks, leeway
    hmac:secret=env:WEBHOOK_SECRET,secret=env:WEBHOOK_SECRET_PREVIOUS,window=300
        keys: secret (required), header, timestamp_header, window
    mlflow:secret=file:/var/run/secrets/mlflow          keys: secret (required), window
    bearer:token=file:/var/run/secrets/token            keys: token (required)
    header:name=X-Webhook-Secret,secret=env:HF_SECRET   keys: secret (required), name
    none
    {"scheme": "bearer", "token": ["env:A", "env:B"]}

A literal cannot contain ","; put such values in ``env:`` or ``file:``. A secret named by
``env:``/``file:`` is reported as the principal's subject (which key matched, useful
during rotation); a literal one as ``#<position>``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from functions.errors import ConfigError, Unauthenticated, Unavailable

if TYPE_CHECKING:
    from jwt import PyJWK

__all__ = [
    "AllowAll",
    "Authenticator",
    "BearerAuthenticator",
    "Clock",
    "HmacAuthenticator",
    "MlflowAuthenticator",
    "OidcAuthenticator",
    "Principal",
    "SecretHeaderAuthenticator",
    "Secrets",
    "from_spec",
    "resolve_value",
]

Clock = Callable[[], float]
"""Seconds since the epoch; inject a fake one in tests."""

Secrets = Mapping[str, str | bytes] | Sequence[str | bytes] | str | bytes
"""One secret, or several for rotation: named (name -> secret) or positional (``#0``, ...)."""

GOOGLE_ISSUERS = ("https://accounts.google.com", "accounts.google.com")
GOOGLE_JWKS_URL = "https://www.googleapis.com/oauth2/v3/certs"


@dataclass(frozen=True)
class Principal:
    """Who a delivery came from: ``scheme`` as in `from_spec`, ``subject`` an email or key name."""

    scheme: str
    subject: str


class Authenticator(Protocol):
    def __call__(self, headers: Mapping[str, str], body: bytes, /) -> Principal: ...


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
    if not raw.isdigit():
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


class HmacAuthenticator:
    """``<header>: sha256=<hex HMAC-SHA256(secret, "{ts}.{body}")>`` with ``ts`` within ``window``."""

    def __init__(
        self,
        secrets: Secrets,
        *,
        header: str = "X-Modelhooks-Signature",
        timestamp_header: str = "X-Modelhooks-Timestamp",
        window: float = 300.0,
        clock: Clock = time.time,
    ) -> None:
        self._keyed, self.header, self.timestamp_header = _keyed(secrets), header, timestamp_header
        self.window, self._clock = window, clock

    def __call__(self, headers: Mapping[str, str], body: bytes, /) -> Principal:
        signature = _required(headers, self.header).strip()
        ts = _fresh(headers, self.timestamp_header, self._clock(), self.window)
        hexdigest = signature.removeprefix("sha256=").lower()
        if not signature.startswith("sha256=") or not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
            raise Unauthenticated(f"{self.header} must be 'sha256=<64 hex digits>'")
        message = ts.encode() + b"." + body
        return _match(self._keyed, message, hexdigest.encode(), "hmac", lambda d: d.hex().encode())


class MlflowAuthenticator:
    """MLflow 3 webhooks: ``X-MLflow-Signature: v1,<base64 HMAC(secret, "{id}.{ts}.{body}")>``."""

    def __init__(self, secrets: Secrets, *, window: float = 300.0, clock: Clock = time.time):
        self._keyed, self.window, self._clock = _keyed(secrets), window, clock

    def __call__(self, headers: Mapping[str, str], body: bytes, /) -> Principal:
        signature = _required(headers, "X-MLflow-Signature").strip()
        delivery_id = _required(headers, "X-MLflow-Delivery-Id")
        ts = _fresh(headers, "X-MLflow-Timestamp", self._clock(), self.window)
        if not signature.startswith("v1,"):
            raise Unauthenticated("X-MLflow-Signature must be 'v1,<base64>'")
        message = f"{delivery_id}.{ts}.".encode() + body
        given = signature[3:].encode("ascii", "replace")
        return _match(self._keyed, message, given, "mlflow", base64.b64encode)


class SecretHeaderAuthenticator:
    """A shared secret sent verbatim in ``header`` (Hugging Face: ``X-Webhook-Secret``)."""

    scheme = "header"

    def __init__(self, header: str, secrets: Secrets) -> None:
        # Compare digests so the comparison time does not depend on the secret's length.
        self.header = header
        self._digests = tuple((n, hashlib.sha256(s).digest()) for n, s in _keyed(secrets))

    def _value(self, headers: Mapping[str, str]) -> str:
        return _required(headers, self.header)

    def __call__(self, headers: Mapping[str, str], body: bytes, /) -> Principal:
        given = hashlib.sha256(self._value(headers).encode("utf-8", "surrogateescape")).digest()
        for name, digest in self._digests:
            if hmac.compare_digest(digest, given):
                return Principal(self.scheme, name)
        raise Unauthenticated(f"{self.header} does not match any configured secret")


class BearerAuthenticator(SecretHeaderAuthenticator):
    """Static ``Authorization: Bearer <token>`` (registry notifications, MinIO webhooks)."""

    scheme = "bearer"

    def __init__(self, tokens: Secrets) -> None:
        super().__init__("Authorization", tokens)

    def _value(self, headers: Mapping[str, str]) -> str:
        return _bearer(headers)


class AllowAll:
    """Accepts every delivery, as subject ``anonymous``. For local development only."""

    def __call__(self, headers: Mapping[str, str], body: bytes, /) -> Principal:
        return Principal("none", "anonymous")


class _Jwks:
    """Signing keys by ``kid``, fetched on first use, kept ``ttl`` seconds, and refetched
    early for an unknown ``kid`` at most once per ``min_interval`` (so a flood of forged
    kids costs the JWKS endpoint one request per interval)."""

    def __init__(self, url: str, ttl: float, min_interval: float, clock: Clock) -> None:
        self.url, self.ttl, self.min_interval, self._clock = url, ttl, min_interval, clock
        self._keys: dict[str, PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = threading.Lock()

    def get(self, kid: str) -> PyJWK | None:
        with self._lock:
            now, last = self._clock(), self._fetched_at
            if (
                last is None
                or now - last >= self.ttl
                or (kid not in self._keys and now - last >= self.min_interval)
            ):
                self._refresh(now)
            return self._keys.get(kid)

    def _refresh(self, now: float) -> None:
        import urllib.request

        import jwt

        self._fetched_at = now  # a failed attempt counts too: never hammer a failing endpoint
        try:
            with urllib.request.urlopen(self.url, timeout=5) as response:
                document: Any = json.load(response)
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
            keys = jwt.PyJWKSet.from_dict(document).keys
        except (OSError, ValueError, jwt.PyJWTError) as e:
            if self._keys:
                return  # serve the keys we have rather than fail every delivery
            raise Unavailable(f"cannot fetch JWKS from {self.url}: {e}") from e
        self._keys = {k.key_id: k for k in keys if k.key_id and k.public_key_use in (None, "sig")}


class OidcAuthenticator:
    """Google-signed OIDC ID tokens, as Pub/Sub push sends: ``Authorization: Bearer <JWT>``.

    Checks the RS256 signature against `jwks_url`, then ``iss``, ``aud``, ``exp``/``iat``/
    ``nbf`` (± `leeway` seconds), and that ``email`` is verified and, when `emails` is
    given, one of them. The subject is the sender's email.

        auth = OidcAuthenticator("https://fn.example.com",
                                 emails=["push@p.iam.gserviceaccount.com"])
        auth(request.headers, request.get_data())  # Principal("oidc", "push@p.iam...")
    """

    def __init__(
        self,
        audience: str | Sequence[str],
        *,
        issuers: Sequence[str] = GOOGLE_ISSUERS,
        emails: Sequence[str] = (),
        jwks_url: str = GOOGLE_JWKS_URL,
        leeway: float = 60.0,
        jwks_ttl: float = 3600.0,
        jwks_min_interval: float = 60.0,
        clock: Clock = time.time,
    ) -> None:
        self.audience = (audience,) if isinstance(audience, str) else tuple(audience)
        if not self.audience or not all(self.audience):
            raise ConfigError("OIDC audience is required (the URL Pub/Sub pushes to)")
        self.issuers, self.emails = tuple(issuers), frozenset(emails)
        self.leeway, self._clock = leeway, clock
        self._jwks = _Jwks(jwks_url, jwks_ttl, jwks_min_interval, clock)

    def __call__(self, headers: Mapping[str, str], body: bytes, /) -> Principal:
        import jwt

        token = _bearer(headers)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("bearer token is not a JWT") from None
        if header.get("alg") != "RS256":
            raise Unauthenticated(f"JWT alg must be RS256, not {header.get('alg')!r}")
        kid = header.get("kid")
        key = self._jwks.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise Unauthenticated(f"JWT key id {kid!r:.80} is not published at {self._jwks.url}")
        try:  # PyJWT checks the signature; claims are checked below, against our clock
            claims = jwt.decode(
                token,
                key,
                algorithms=["RS256"],
                options={
                    "require": ["iss", "aud", "exp", "iat"],
                    "verify_aud": False,
                    "verify_iss": False,
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.InvalidSignatureError:
            raise Unauthenticated("JWT signature does not verify") from None
        except jwt.PyJWTError as e:
            raise Unauthenticated(f"invalid JWT: {e}") from None
        self._check_claims(claims)
        return Principal("oidc", claims["email"])

    def _check_claims(self, claims: dict[str, Any]) -> None:
        if claims["iss"] not in self.issuers:
            raise Unauthenticated(f"JWT issuer {claims['iss']!r} is not one of {self.issuers}")
        aud = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if not set(aud) & set(self.audience):
            raise Unauthenticated(f"JWT audience {aud} does not include {self.audience}")
        now, leeway = self._clock(), self.leeway
        times = {k: claims[k] for k in ("exp", "iat", "nbf") if k in claims}
        if not all(type(v) in (int, float) for v in times.values()):
            raise Unauthenticated("JWT exp/iat/nbf must be numbers")
        if now > times["exp"] + leeway:
            raise Unauthenticated(f"JWT expired {int(now - times['exp'])}s ago")
        if max(times["iat"], times.get("nbf", times["iat"])) > now + leeway:
            raise Unauthenticated("JWT is not valid yet (iat/nbf in the future)")
        email = claims.get("email")
        if not isinstance(email, str) or claims.get("email_verified") not in (True, "true"):
            raise Unauthenticated("JWT carries no verified email")
        if self.emails and email not in self.emails:
            raise Unauthenticated(f"sender {email} is not an allowed service account")


def resolve_value(raw: str, origin: str) -> str:
    """A configured value: `env:NAME` (that variable), `file:PATH` (the file, stripped) or
    the literal itself. ConfigError (naming `origin`) when the reference cannot be read."""
    source, _, ref = raw.partition(":")
    if source == "env" and ref:
        value = os.environ.get(ref)
        if value is None:
            raise ConfigError(f"{origin}=env:{ref} but ${ref} is not set")
        return value
    if source == "file" and ref:
        try:
            with open(ref, encoding="utf-8") as f:
                return f.read().strip()
        except OSError as e:
            raise ConfigError(f"{origin}=file:{ref} cannot be read ({e.strerror})") from None
    return raw


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


def from_spec(
    spec: str | Mapping[str, str | Sequence[str]],
    *,
    origin: str = "auth spec",
    clock: Clock = time.time,
) -> Authenticator:
    """Build an authenticator from the grammar in this module's docstring.

    `origin` names where the spec came from (e.g. an environment variable) in errors:

        from_spec(os.environ["MODELHOOKS_AUTH"], origin="MODELHOOKS_AUTH")
    """
    scheme, p = _pairs(spec, origin)
    auth: Authenticator
    match scheme:
        case "none":
            auth = AllowAll()
        case "oidc":
            auth = OidcAuthenticator(
                list(p.named("aud", required=True).values()),
                emails=list(p.named("email").values()),
                issuers=list(p.named("iss").values()) or GOOGLE_ISSUERS,
                jwks_url=p.one("jwks", GOOGLE_JWKS_URL),
                leeway=p.seconds("leeway", 60.0),
                clock=clock,
            )
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
