"""Delivery authentication, with real crypto and a real (local) JWKS endpoint."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from modelhooks.core.errors import ConfigError, Unauthenticated, Unavailable
from modelhooks.delivery.statuses import status_of
from modelhooks.events.auth import (
    GOOGLE_ISSUERS,
    AllowAll,
    BearerAuthenticator,
    HmacAuthenticator,
    MlflowAuthenticator,
    OidcAuthenticator,
    Principal,
    SecretHeaderAuthenticator,
    from_spec,
)

NOW = 1_800_000_000.0
AUD = "https://fn.example.com/push"
EMAIL = "push@proj.iam.gserviceaccount.com"
ISS_OTHER = "https://issuer.example"  # not Google's: its accounts are its own


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Jwks:
    """A JWKS endpoint on 127.0.0.1 that serves `keys` and counts requests."""

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        self.requests = 0
        jwks = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                jwks.requests += 1
                body = json.dumps({"keys": jwks.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/certs"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)

    def publish(self, key: rsa.RSAPrivateKey, kid: str) -> None:
        jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
        self.keys.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@contextmanager
def serving() -> Iterator[Jwks]:
    jwks = Jwks()
    jwks.thread.start()
    try:
        yield jwks
    finally:
        jwks.stop()


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def other_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def jwks(key: rsa.RSAPrivateKey) -> Iterator[Jwks]:
    with serving() as server:
        server.publish(key, "k1")
        yield server


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def oidc(jwks: Jwks, clock: Clock) -> OidcAuthenticator:
    return OidcAuthenticator(AUD, emails=[EMAIL], jwks_url=jwks.url, clock=clock)


def token(key: rsa.RSAPrivateKey, kid: str = "k1", **overrides: Any) -> str:
    claims: dict[str, Any] = {
        "iss": "https://accounts.google.com",
        "aud": AUD,
        "azp": "1234567890",
        "email": EMAIL,
        "email_verified": True,
        "sub": "1234567890",
        "iat": int(NOW) - 10,
        "exp": int(NOW) + 3590,
    }
    claims.update(overrides)
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def denied(auth: Any, headers: dict[str, str], body: bytes = b"{}") -> str:
    with pytest.raises(Unauthenticated) as caught:
        auth(headers, body)
    assert status_of(caught.value) == 401
    return caught.value.message


# --- OIDC (Pub/Sub push) ------------------------------------------------------------------


def test_oidc_accepts_a_valid_token_and_fetches_keys_lazily_once(
    oidc: OidcAuthenticator, jwks: Jwks, key: rsa.RSAPrivateKey
) -> None:
    assert jwks.requests == 0  # nothing fetched at construction: cold start matters
    assert oidc(bearer(token(key)), b"{}") == Principal("oidc", EMAIL)
    assert oidc({"authorization": f"bearer {token(key)}"}, b"{}") == Principal("oidc", EMAIL)
    assert jwks.requests == 1


def test_oidc_accepts_the_short_issuer_and_a_list_audience(
    oidc: OidcAuthenticator, key: rsa.RSAPrivateKey
) -> None:
    t = token(key, iss="accounts.google.com", aud=["https://other", AUD])
    assert oidc(bearer(t), b"").subject == EMAIL


def test_oidc_any_verified_email_when_star_configured(
    jwks: Jwks, clock: Clock, key: rsa.RSAPrivateKey
) -> None:
    auth = OidcAuthenticator(AUD, emails=["*"], jwks_url=jwks.url, clock=clock)
    assert auth(bearer(token(key, email="x@y.iam.gserviceaccount.com")), b"").subject == (
        "x@y.iam.gserviceaccount.com"
    )
    assert "verified" in denied(auth, bearer(token(key, email_verified=False)))


def test_oidc_with_google_s_issuer_and_no_email_is_refused(
    jwks: Jwks, clock: Clock, key: rsa.RSAPrivateKey
) -> None:
    """Anyone mints a Google ID token for any audience (`gcloud auth
    print-identity-token --audiences=…`, any account): aud= alone accepted every Google
    account. No email is refused for Google's issuer; another issuer's are its own."""
    for issuers in (GOOGLE_ISSUERS, ["accounts.google.com"]):
        with pytest.raises(ConfigError, match=r"needs email=.*email=\* accepts any"):
            OidcAuthenticator(AUD, issuers=issuers, jwks_url=jwks.url, clock=clock)
    own = OidcAuthenticator(AUD, issuers=[ISS_OTHER], jwks_url=jwks.url, clock=clock)
    t = token(key, iss=ISS_OTHER, email="x@y.example")
    assert own(bearer(t), b"").subject == "x@y.example"


@pytest.mark.parametrize(
    ("claims", "clock_shift", "reason"),
    [
        ({"exp": int(NOW) - 61}, 0, "expired 61s ago"),
        ({"exp": int(NOW) - 10_000}, 0, "expired 10000s ago"),
        ({}, 3600 + 61, "expired"),
        ({"iat": int(NOW) + 120}, 0, "not valid yet"),
        ({"nbf": int(NOW) + 120}, 0, "not valid yet"),
        ({"aud": "https://evil.example.com"}, 0, "audience"),
        ({"iss": "https://evil.example.com"}, 0, "issuer"),
        ({"email": "intruder@proj.iam.gserviceaccount.com"}, 0, "not an allowed"),
        ({"email_verified": False}, 0, "no verified email"),
        ({"email": None}, 0, "no verified email"),
        ({"exp": None}, 0, '"exp"'),
        ({"exp": "soon"}, 0, "must be numbers"),
    ],
)
def test_oidc_rejects_bad_claims(
    oidc: OidcAuthenticator,
    clock: Clock,
    key: rsa.RSAPrivateKey,
    claims: dict[str, Any],
    clock_shift: float,
    reason: str,
) -> None:
    clock.now += clock_shift
    assert reason in denied(oidc, bearer(token(key, **claims)))


def test_oidc_leeway_tolerates_small_clock_skew(
    oidc: OidcAuthenticator, key: rsa.RSAPrivateKey
) -> None:
    t = token(key, exp=int(NOW) - 59, iat=int(NOW) - 3659, nbf=int(NOW) + 59)
    assert oidc(bearer(t), b"").subject == EMAIL


def test_oidc_rejects_a_tampered_token(
    oidc: OidcAuthenticator, key: rsa.RSAPrivateKey, other_key: rsa.RSAPrivateKey
) -> None:
    header, _, signature = token(key).split(".")
    forged = jwt.encode({"email": "root@evil"}, other_key, algorithm="RS256").split(".")[1]
    assert "signature" in denied(oidc, bearer(f"{header}.{forged}.{signature}"))
    # right kid, wrong key
    assert "signature" in denied(oidc, bearer(token(other_key, kid="k1")))


def test_oidc_unknown_kid_refetches_once_then_is_rate_limited(
    oidc: OidcAuthenticator, jwks: Jwks, clock: Clock, other_key: rsa.RSAPrivateKey
) -> None:
    assert "'nope' is not published" in denied(oidc, bearer(token(other_key, kid="nope")))
    assert jwks.requests == 1  # the first, lazy fetch
    clock.now += 61
    for i in range(20):  # a flood of forged kids
        denied(oidc, bearer(token(other_key, kid=f"forged-{i}")))
    assert jwks.requests == 2  # one refetch for the whole flood
    clock.now += 61
    denied(oidc, bearer(token(other_key, kid="nope")))
    assert jwks.requests == 3


def test_oidc_picks_up_a_rotated_key_by_refetching(
    oidc: OidcAuthenticator,
    jwks: Jwks,
    clock: Clock,
    key: rsa.RSAPrivateKey,
    other_key: rsa.RSAPrivateKey,
) -> None:
    assert oidc(bearer(token(key)), b"").subject == EMAIL
    jwks.publish(other_key, "k2")
    clock.now += 61
    assert oidc(bearer(token(other_key, kid="k2")), b"").subject == EMAIL
    assert jwks.requests == 2


def test_oidc_refetches_after_ttl(jwks: Jwks, clock: Clock, key: rsa.RSAPrivateKey) -> None:
    auth = OidcAuthenticator(AUD, emails=[EMAIL], jwks_url=jwks.url, jwks_ttl=600, clock=clock)
    auth(bearer(token(key)), b"")
    clock.now += 599
    auth(bearer(token(key, iat=int(clock.now))), b"")
    assert jwks.requests == 1
    clock.now += 1
    auth(bearer(token(key, iat=int(clock.now))), b"")
    assert jwks.requests == 2


def test_oidc_unreachable_jwks_is_transient_but_cached_keys_keep_working(
    key: rsa.RSAPrivateKey, clock: Clock
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/certs"
    with pytest.raises(Unavailable, match="cannot fetch JWKS"):
        OidcAuthenticator(AUD, emails=[EMAIL], jwks_url=dead, clock=clock)(bearer(token(key)), b"")

    with serving() as server:
        server.publish(key, "k1")
        auth = OidcAuthenticator(AUD, emails=[EMAIL], jwks_url=server.url, jwks_ttl=60, clock=clock)
        auth(bearer(token(key)), b"")
    clock.now += 120  # TTL passed and the endpoint is gone: keep the keys we have
    assert auth(bearer(token(key, iat=int(clock.now))), b"").subject == EMAIL


def test_oidc_jwks_without_usable_keys_is_transient(
    oidc: OidcAuthenticator, jwks: Jwks, key: rsa.RSAPrivateKey
) -> None:
    jwks.keys = [{"kty": "bogus", "kid": "k1"}]
    with pytest.raises(Unavailable, match=f"cannot fetch JWKS from {jwks.url}"):
        oidc(bearer(token(key)), b"")


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing Authorization header"),
        ({"Authorization": ""}, "missing Authorization header"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "must be 'Bearer <token>'"),
        ({"Authorization": "Bearer"}, "must be 'Bearer <token>'"),
        ({"Authorization": "Bearer not-a-jwt"}, "not a JWT"),
    ],
)
def test_oidc_rejects_missing_or_malformed_credentials(
    oidc: OidcAuthenticator, headers: dict[str, str], reason: str
) -> None:
    assert reason in denied(oidc, headers)


def test_oidc_rejects_other_algorithms_before_looking_up_keys(
    oidc: OidcAuthenticator, jwks: Jwks
) -> None:
    hs = jwt.encode({"aud": AUD}, "k" * 32, algorithm="HS256", headers={"kid": "k1"})
    assert "RS256" in denied(oidc, bearer(hs))
    assert jwks.requests == 0


def test_oidc_reasons_do_not_echo_the_token(
    oidc: OidcAuthenticator, key: rsa.RSAPrivateKey
) -> None:
    t = token(key, aud="https://evil.example.com")
    assert t not in denied(oidc, bearer(t))
    assert t.split(".")[2] not in denied(oidc, {"Authorization": f"Basic {t}"})


def test_oidc_requires_an_audience() -> None:
    with pytest.raises(ConfigError):
        OidcAuthenticator([])


# --- HMAC ---------------------------------------------------------------------------------


def signed(secret: str, body: bytes, ts: float = NOW) -> dict[str, str]:
    digest = hmac.new(secret.encode(), f"{int(ts)}.".encode() + body, hashlib.sha256)
    return {
        "X-Modelhooks-Signature": f"sha256={digest.hexdigest()}",
        "X-Modelhooks-Timestamp": str(int(ts)),
    }


BODY = b'{"action": "push"}'


def test_hmac_accepts_a_valid_signature_with_any_header_case(clock: Clock) -> None:
    auth = HmacAuthenticator("s3cret", clock=clock)
    assert auth(signed("s3cret", BODY), BODY) == Principal("hmac", "#0")
    lowered = {k.lower(): v for k, v in signed("s3cret", BODY).items()}
    assert auth(lowered, BODY) == Principal("hmac", "#0")


def test_hmac_rejects_wrong_secret_and_tampered_body(clock: Clock) -> None:
    auth = HmacAuthenticator("s3cret", clock=clock)
    assert "does not match" in denied(auth, signed("other", BODY), BODY)
    assert "does not match" in denied(auth, signed("s3cret", BODY), BODY + b" ")
    replayed = {**signed("s3cret", BODY), "X-Modelhooks-Timestamp": str(int(NOW) - 1)}
    assert "does not match" in denied(auth, replayed, BODY)


@pytest.mark.parametrize("shift", [-301, 301, -10_000])
def test_hmac_rejects_timestamps_outside_the_window(clock: Clock, shift: int) -> None:
    auth = HmacAuthenticator("s3cret", clock=clock)
    reason = denied(auth, signed("s3cret", BODY, ts=NOW + shift), BODY)
    when = f"{-shift}s old" if shift < 0 else f"{shift}s in the future"
    assert f"X-Modelhooks-Timestamp is {when}, outside the ±300s window" == reason
    assert (
        auth(signed("s3cret", BODY, ts=NOW + (299 if shift > 0 else -299)), BODY).scheme == "hmac"
    )


def test_hmac_accepts_every_secret_in_rotation_and_names_the_one_that_matched(
    clock: Clock,
) -> None:
    auth = HmacAuthenticator({"current": "new-secret", "previous": "old-secret"}, clock=clock)
    assert auth(signed("new-secret", BODY), BODY).subject == "current"
    assert auth(signed("old-secret", BODY), BODY).subject == "previous"
    assert "does not match" in denied(auth, signed("older-secret", BODY), BODY)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"X-Modelhooks-Signature": "md5=abc"}, "must be 'sha256=<64 hex digits>'"),
        ({"X-Modelhooks-Signature": "sha256=zz"}, "must be 'sha256=<64 hex digits>'"),
        ({"X-Modelhooks-Signature": ""}, "missing X-Modelhooks-Signature"),
        ({"X-Modelhooks-Timestamp": ""}, "missing X-Modelhooks-Timestamp"),
        ({"X-Modelhooks-Timestamp": "1.8e9"}, "integer seconds"),
        # a header byte 0xB2 (latin-1 '²') is a digit to str.isdigit, not to int(): a 500
        ({"X-Modelhooks-Timestamp": "\u00b2"}, "integer seconds"),
        ({"X-Modelhooks-Timestamp": "17\u00b9"}, "integer seconds"),
    ],
)
def test_hmac_rejects_malformed_headers(clock: Clock, change: dict[str, str], reason: str) -> None:
    auth = HmacAuthenticator("s3cret", clock=clock)
    assert reason in denied(auth, {**signed("s3cret", BODY), **change}, BODY)


def test_hmac_custom_header_names(clock: Clock) -> None:
    auth = HmacAuthenticator("s3cret", header="X-Sig", timestamp_header="X-Ts", clock=clock)
    headers = signed("s3cret", BODY)
    moved = {"x-sig": headers["X-Modelhooks-Signature"], "x-ts": headers["X-Modelhooks-Timestamp"]}
    assert auth(moved, BODY).scheme == "hmac"
    assert "missing X-Sig" in denied(auth, headers, BODY)


@pytest.mark.parametrize("secrets", ["", b"", [], ["ok", ""], {}, {"named": ""}])
def test_secrets_must_not_be_empty(secrets: Any) -> None:
    with pytest.raises(ConfigError, match="at least one secret"):
        HmacAuthenticator(secrets)


# --- MLflow 3 -----------------------------------------------------------------------------


def mlflow_signed(
    secret: str, body: bytes, delivery: str = "d-1", ts: float = NOW
) -> dict[str, str]:
    mac = hmac.new(secret.encode(), f"{delivery}.{int(ts)}.".encode() + body, hashlib.sha256)
    return {
        "X-MLflow-Delivery-Id": delivery,
        "X-MLflow-Timestamp": str(int(ts)),
        "X-MLflow-Signature": "v1," + base64.b64encode(mac.digest()).decode(),
    }


def test_mlflow_signature(clock: Clock) -> None:
    auth = MlflowAuthenticator(["old", "new"], clock=clock)
    assert auth(mlflow_signed("new", BODY), BODY) == Principal("mlflow", "#1")
    assert "does not match" in denied(auth, mlflow_signed("wrong", BODY), BODY)
    moved = {**mlflow_signed("new", BODY), "X-MLflow-Delivery-Id": "d-2"}
    assert "does not match" in denied(auth, moved, BODY)
    assert "outside" in denied(auth, mlflow_signed("new", BODY, ts=NOW - 400), BODY)
    unversioned = {**mlflow_signed("new", BODY), "X-MLflow-Signature": "abc"}
    assert "v1," in denied(auth, unversioned, BODY)


# --- static secrets -----------------------------------------------------------------------


def test_bearer_tokens() -> None:
    auth = BearerAuthenticator({"registry": "tok-registry-123", "minio": "m"})
    assert auth(bearer("tok-registry-123"), b"") == Principal("bearer", "registry")
    assert auth({"authorization": "Bearer m"}, b"") == Principal("bearer", "minio")
    assert "does not match" in denied(auth, bearer("tok-registry-124"))
    assert "does not match" in denied(auth, bearer("tok-registry-123x"))
    assert "Bearer" in denied(auth, {"Authorization": "tok-registry-123"})
    assert "missing" in denied(auth, {})
    assert "tok-registry" not in denied(auth, bearer("tok-registry-124"))


def test_secret_header() -> None:
    auth = SecretHeaderAuthenticator("X-Webhook-Secret", "hf-secret")
    assert auth({"x-webhook-secret": "hf-secret"}, b"") == Principal("header", "#0")
    assert "does not match" in denied(auth, {"X-Webhook-Secret": "hf-secreT"})
    assert "missing X-Webhook-Secret" in denied(auth, {"Authorization": "Bearer hf-secret"})


def test_allow_all_is_explicit() -> None:
    assert AllowAll()({}, b"") == Principal("none", "anonymous")


# --- from_spec ----------------------------------------------------------------------------


def test_spec_none() -> None:
    assert isinstance(from_spec("none"), AllowAll)
    assert isinstance(from_spec({"scheme": "none"}), AllowAll)


def test_spec_oidc_end_to_end(jwks: Jwks, clock: Clock, key: rsa.RSAPrivateKey) -> None:
    auth = from_spec(
        f"oidc:aud={AUD}, email={EMAIL},email=b@p.iam.gserviceaccount.com,jwks={jwks.url},leeway=5",
        clock=clock,
    )
    assert isinstance(auth, OidcAuthenticator)
    assert auth.audience == (AUD,) and auth.leeway == 5.0
    assert auth.emails == {EMAIL, "b@p.iam.gserviceaccount.com"}
    assert auth(bearer(token(key)), b"") == Principal("oidc", EMAIL)
    assert "expired" in denied(auth, bearer(token(key, exp=int(NOW) - 6)))


def test_spec_hmac_secrets_from_env_and_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clock: Clock
) -> None:
    monkeypatch.setenv("WEBHOOK_SECRET", "from-env")
    (tmp_path / "previous").write_text("from-file\n")
    auth = from_spec(
        f"hmac:secret=env:WEBHOOK_SECRET,secret=file:{tmp_path}/previous,window=60", clock=clock
    )
    assert auth(signed("from-env", BODY), BODY).subject == "env:WEBHOOK_SECRET"
    assert auth(signed("from-file", BODY), BODY).subject == f"file:{tmp_path}/previous"
    assert "61s old, outside the ±60s window" in denied(
        auth, signed("from-env", BODY, ts=NOW - 61), BODY
    )


def test_spec_bearer_header_and_mlflow(tmp_path: Path, clock: Clock) -> None:
    (tmp_path / "token").write_text("tok\n")
    assert from_spec(f"bearer:token=file:{tmp_path}/token")(bearer("tok"), b"").scheme == "bearer"
    hf = from_spec({"scheme": "header", "secret": ["a", "b"]})
    assert hf({"X-Webhook-Secret": "b"}, b"") == Principal("header", "#1")
    custom = from_spec("header:name=X-Gitlab-Token,secret=g")
    assert custom({"X-Gitlab-Token": "g"}, b"").scheme == "header"
    ml = from_spec("mlflow:secret=m", clock=clock)
    assert ml(mlflow_signed("m", BODY), BODY).scheme == "mlflow"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("", "unknown scheme ''"),
        ("basic:user=a", "unknown scheme 'basic'"),
        ("oidc", "aud= is required"),
        ("oidc:email=a@b", "aud= is required"),
        ("oidc:aud=x,email=*,audience=y", "unknown key(s) audience for oidc"),
        ("oidc:aud=x", "Google's issuer needs email="),
        ("oidc:aud=x,iss=https://accounts.google.com,iss=https://k8s", "needs email="),
        ("none:token=x", "unknown key(s) token for none"),
        ("hmac:secret", "part 1 after 'hmac:' is not key=value"),
        ("hmac:secret=a,window=soon", "window='soon' is not a number of seconds"),
        ("hmac:secret=a,window=-5", "window='-5' is not a number of seconds"),
        ("hmac:secret=a,header=X,header=Y", "header= may be given only once"),
        ("hmac:secret=", "secret (#0) is empty"),
        ("hmac:secret=env:MODELHOOKS_TEST_UNSET", "$MODELHOOKS_TEST_UNSET is not set"),
        ("bearer:token=file:/nonexistent/token", "file:/nonexistent/token cannot be read"),
        ("bearer", "token= is required"),
        ({"scheme": 1}, "'scheme' must be a string"),
        ({"scheme": "bearer", "token": [1]}, "must be a string or a list of strings"),
    ],
)
def test_spec_errors_name_the_bad_part(spec: Any, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        from_spec(spec, origin="MODELHOOKS_AUTH")
    assert caught.value.message.startswith("MODELHOOKS_AUTH: ")
    assert reason in caught.value.message


def test_spec_errors_do_not_echo_literal_secrets() -> None:
    with pytest.raises(ConfigError) as caught:
        from_spec("hmac:secret=abc,TopSecretTail")
    assert "TopSecretTail" not in caught.value.message
