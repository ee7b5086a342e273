"""Pub/Sub push authentication: Google-signed OIDC tokens checked against a cached JWKS."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from modelhooks.events.auth._base import Clock, Principal, Trust, _bearer
from modelhooks.events.errors import ConfigError, Unauthenticated, Unavailable

if TYPE_CHECKING:
    from jwt import PyJWK

GOOGLE_ISSUERS = ("https://accounts.google.com", "accounts.google.com")
GOOGLE_JWKS_URL = "https://www.googleapis.com/oauth2/v3/certs"


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
    ``nbf`` (± `leeway` seconds), and that ``email`` is verified and one of `emails`
    (``"*"``: any). The subject is the sender's email.

    Google's issuer needs `emails`: anyone can mint a Google ID token for any audience
    (`gcloud auth print-identity-token --audiences=…`, any account), so the audience alone
    authenticates nobody in particular. ``emails=["*"]`` says "any Google account" on
    purpose; no `emails` is a ConfigError.

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
        if not self.emails and set(self.issuers) & set(GOOGLE_ISSUERS):
            raise ConfigError(
                "OIDC with Google's issuer needs email= (the push service account): anyone "
                "can mint a Google ID token for any audience, so aud= alone accepts every "
                "Google account; email=* accepts any on purpose"
            )
        self._any = "*" in self.emails
        self.leeway, self._clock = leeway, clock
        self._jwks = _Jwks(jwks_url, jwks_ttl, jwks_min_interval, clock)

    def trust(self) -> Trust:
        emails = self.emails or {"*"}  # none: a non-Google issuer's any verified email
        return frozenset(
            ("oidc", iss, aud, email) for iss in self.issuers for aud in self.audience
            for email in emails
        )  # fmt: skip

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
        if not self._any and self.emails and email not in self.emails:
            raise Unauthenticated(f"sender {email} is not an allowed service account")
