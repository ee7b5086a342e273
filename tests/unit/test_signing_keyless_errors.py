"""Keyless signing names the piece that failed, without a Sigstore: the trust config
(malformed → ConfigError naming the file and the field), the TUF repository (not answering →
Unavailable naming it), the service overrides (Rekor v2 kept, a TSA's endpoint path), and
Fulcio on a loopback HTTP server that refuses the identity (→ CredentialsRefused naming the
identity and issuer), fails (→ Unavailable) or does not listen at all."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
import sigstore
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from modelhooks.adapters.signing import Manifest, Resource, Serialization
from modelhooks.adapters.signing.bundle import signer_of
from modelhooks.adapters.signing.keyless import SigstoreSigner
from modelhooks.adapters.signing.trust import SigstoreTrust
from modelhooks.core.errors import ConfigError, CredentialsRefused, Unavailable

EMBEDDED = Path(sigstore.__file__).parent / "_store" / "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev"
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens
ISSUER = "https://kubernetes.default.svc"


def _document() -> dict[str, object]:
    return {
        "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
        "trustedRoot": json.loads((EMBEDDED / "trusted_root.json").read_text()),
        "signingConfig": json.loads((EMBEDDED / "signing_config.v0.2.json").read_text()),
    }


@pytest.fixture
def trust_config(tmp_path: Path) -> Path:
    path = tmp_path / "trust.json"
    path.write_text(json.dumps(_document()))
    return path


@pytest.fixture
def token(tmp_path: Path) -> Path:
    """A ServiceAccount-shaped token (unsigned for Fulcio's purposes: it is refused or
    never reaches a Fulcio in these tests)."""
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "sub": "system:serviceaccount:ml:trainer",
        "aud": ["sigstore"],
        "iat": now,
        "exp": now + 600,
        "kubernetes.io": {"namespace": "ml", "serviceaccount": {"name": "trainer"}},
    }
    path = tmp_path / "token"
    path.write_text(jwt.encode(claims, "k" * 32, algorithm="HS256"))
    return path


class _Answer(http.server.BaseHTTPRequestHandler):
    status = 500
    body = b"{}"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def fulcio(request: pytest.FixtureRequest) -> Iterator[str]:
    """A loopback server answering every POST with (status, body) of the test's param."""
    status, body = request.param
    handler = type("Handler", (_Answer,), {"status": status, "body": body})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _statement() -> bytes:
    return Manifest("m", Serialization(), (Resource("a", "sha256", "0" * 64),)).statement()


REFUSED = json.dumps({"code": 3, "message": "There was an error processing the identity token"})


@pytest.mark.parametrize("fulcio", [(400, REFUSED.encode())], indirect=True)
def test_fulcio_refusing_the_identity_names_it_and_its_issuer(
    fulcio: str, trust_config: Path, token: Path
) -> None:
    signer = SigstoreSigner(SigstoreTrust(trust_config=trust_config, fulcio_url=fulcio), token)
    with pytest.raises(CredentialsRefused) as refused:
        signer.sign(_statement())
    message = refused.value.diagnostics()
    assert "https://kubernetes.io/namespaces/ml/serviceaccounts/trainer" in message
    assert ISSUER in message and fulcio in message
    assert "error processing the identity token" in message  # Fulcio's own reason


@pytest.mark.parametrize("fulcio", [(503, b"overloaded")], indirect=True)
def test_fulcio_failing_is_transient_and_named(
    fulcio: str, trust_config: Path, token: Path
) -> None:
    signer = SigstoreSigner(SigstoreTrust(trust_config=trust_config, fulcio_url=fulcio), token)
    with pytest.raises(Unavailable) as failed:
        signer.sign(_statement())
    assert not isinstance(failed.value, CredentialsRefused)
    assert f"Fulcio {fulcio}" in str(failed.value) and "503" in str(failed.value)


def test_a_fulcio_that_does_not_listen_is_named(trust_config: Path, token: Path) -> None:
    signer = SigstoreSigner(SigstoreTrust(trust_config=trust_config, fulcio_url=CLOSED), token)
    with pytest.raises(Unavailable, match=r"\(Fulcio\) http://127.0.0.1:9/.* did not answer"):
        signer.sign(_statement())


def test_a_malformed_trust_config_names_the_file_and_the_field(tmp_path: Path) -> None:
    document = _document()
    document["signingConfig"]["caUrls"][0]["majorApiVersion"] = "one"  # type: ignore[index]
    path = tmp_path / "trust.json"
    path.write_text(json.dumps(document))
    with pytest.raises(
        ConfigError, match=re.escape(f"{path} is malformed at signingConfig.caUrls.0.")
    ):
        SigstoreTrust(trust_config=path).load()
    with pytest.raises(
        ConfigError, match=re.escape(f"trust config {tmp_path / 'absent.json'} cannot be")
    ):
        SigstoreTrust(trust_config=tmp_path / "absent.json").load()


def test_a_tuf_repository_that_does_not_answer_is_transient(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # sigstore-python's TUF cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    trust = SigstoreTrust(tuf_url=CLOSED, tuf_root=EMBEDDED / "root.json")
    with pytest.raises(Unavailable, match=re.escape(f"TUF repository {CLOSED} did not answer")):
        trust.load()
    # why, not an empty reason (tuf's SlowRetrievalError says nothing): the refusal under it
    with pytest.raises(Unavailable, match=r"did not answer: .*Connection refused"):
        trust.load()
    with pytest.raises(ConfigError, match=re.escape("SIGSTORE_TUF_ROOT=/nonexistent/root.json")):
        SigstoreTrust(tuf_url=CLOSED, tuf_root=Path("/nonexistent/root.json")).load()


@pytest.mark.parametrize(("listed", "spoken"), [((1,), 1), ((1, 2), 2), ((), 2)])
def test_overrides_keep_the_instance_api_versions(
    tmp_path: Path, listed: tuple[int, ...], spoken: int
) -> None:
    """A Rekor URL replaces the instance's log at the highest version the instance lists
    (a private rekor-tiles: 2; none listed: 2, the log that comes with a TSA), Fulcio stays
    v1, a TSA host gets its endpoint path."""
    document = _document()
    signing = document["signingConfig"]
    (log,) = [s for s in signing["rekorTlogUrls"] if s["majorApiVersion"] == 1]  # type: ignore[index]
    signing["rekorTlogUrls"] = [{**log, "majorApiVersion": v} for v in listed]  # type: ignore[index]
    path = tmp_path / "trust.json"
    path.write_text(json.dumps(document))
    env = {
        "SIGSTORE_FULCIO_URL": "http://fulcio:5555",
        "SIGSTORE_REKOR_URL": "http://rekor:3000/",
        "SIGSTORE_TSA_URL": "http://tsa:3000",
    }
    config = SigstoreTrust.from_env(env, trust_config=path).load()
    inner = config._inner.signing_config
    assert [(s.url, s.major_api_version) for s in inner.rekor_tlog_urls] == [
        ("http://rekor:3000", spoken)
    ]
    assert [(s.url, s.major_api_version) for s in inner.ca_urls] == [("http://fulcio:5555", 1)]
    assert [s.url for s in inner.tsa_urls] == ["http://tsa:3000/api/v1/timestamp"]
    client = type(config.signing_config.get_tlogs()[0]).__name__
    assert client == ("RekorV2Client" if spoken == 2 else "RekorClient")


def test_a_trusted_root_with_the_instance_urls_is_a_trust(tmp_path: Path) -> None:
    root = tmp_path / "trusted_root.json"
    root.write_text((EMBEDDED / "trusted_root.json").read_text())
    env = {
        "SIGSTORE_TRUSTED_ROOT": str(root),
        "SIGSTORE_FULCIO_URL": "http://fulcio:5555",
        "SIGSTORE_REKOR_URL": "http://rekor:3000",
    }
    # Rekor v2 entries carry no time: without a TSA the signature could never verify
    with pytest.raises(ConfigError, match="SIGSTORE_TSA_URL"):
        SigstoreTrust.from_env(env).load()
    config = SigstoreTrust.from_env({**env, "SIGSTORE_TSA_URL": "http://tsa:3000"}).load()
    assert config.signing_config.get_fulcio().url == "http://fulcio:5555"
    assert [t.url for t in config.signing_config.get_tsas()] == ["http://tsa:3000/api/v1/timestamp"]
    without = {k: v for k, v in env.items() if k != "SIGSTORE_FULCIO_URL"}
    with pytest.raises(ConfigError, match="set SIGSTORE_FULCIO_URL and SIGSTORE_REKOR_URL"):
        SigstoreTrust.from_env(without).load()


def test_a_fulcio_certificate_is_recorded_as_its_identity_and_issuer() -> None:
    """What `registry show` and model.signed carry (signature.signer) for a keyless bundle."""
    key = ec.generate_private_key(ec.SECP256R1())
    identity = "https://kubernetes.io/namespaces/ml/serviceaccounts/trainer"
    issuer_v2 = b"\x0c" + bytes([len(ISSUER)]) + ISSUER.encode()  # DER UTF8String
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sigstore")]))
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(minutes=10))
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(identity)]), critical=True
        )
        .add_extension(
            x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8"), issuer_v2),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    from base64 import b64encode

    from cryptography.hazmat.primitives.serialization import Encoding

    bundle = {
        "dsseEnvelope": {},
        "verificationMaterial": {
            "certificate": {"rawBytes": b64encode(cert.public_bytes(Encoding.DER)).decode()}
        },
    }
    assert signer_of(json.dumps(bundle).encode()) == f"sigstore {identity} ({ISSUER})"


@pytest.mark.parametrize("fulcio", [(400, REFUSED.encode())], indirect=True)
def test_the_token_file_is_read_again_for_every_signature(
    fulcio: str, trust_config: Path, token: Path
) -> None:
    """One signer; its file rewritten between signatures, as the kubelet rotates it."""
    signer = SigstoreSigner(SigstoreTrust(trust_config=trust_config, fulcio_url=fulcio), token)
    live = token.read_text()
    claims = jwt.decode(live, options={"verify_signature": False})
    token.write_text(jwt.encode({**claims, "exp": int(time.time()) - 60}, "k" * 32))
    with pytest.raises(CredentialsRefused, match="expired at"):
        signer.sign(_statement())
    token.write_text(live)
    with pytest.raises(CredentialsRefused, match="Fulcio refused"):  # read again: it went on
        signer.sign(_statement())
    token.unlink()
    with pytest.raises(CredentialsRefused, match=re.escape(f"identity token {token}")):
        signer.sign(_statement())


def test_verifying_needs_only_the_trusted_root(tmp_path: Path) -> None:
    """A verifier (admission, `modelhooks verify`) with SIGSTORE_TRUSTED_ROOT alone: no
    signing services, and what it is given is judged, not refused as configuration."""
    from modelhooks.adapters.signing import KeySigner
    from modelhooks.adapters.signing.keyless import SigstoreVerifier
    from modelhooks.core.errors import VerificationFailed
    from tests.unit.signing_material import make_key

    root = tmp_path / "trusted_root.json"
    root.write_text((EMBEDDED / "trusted_root.json").read_text())
    bundle = KeySigner.from_file(make_key(tmp_path).private).sign(_statement())
    trust = SigstoreTrust.from_env({"SIGSTORE_TRUSTED_ROOT": str(root)})
    verifier = SigstoreVerifier(trust, "me@example.com", "https://issuer.example")
    with pytest.raises(VerificationFailed):
        verifier.verify(bundle)
