"""The harness's private Sigstore, proved with sigstore-python alone (no modelhooks code):
the TUF repository loads, a ServiceAccount token gets a certificate, a log entry and a
timestamp, the bundle verifies for that identity and issuer, and what should be refused is;
then the upstream ``model_signing`` CLI signs and verifies a model directory on it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from tests.servers.sigstore import Sigstore

pytestmark = pytest.mark.integration

NAMESPACE, ACCOUNT = "smoke-sigstore", "signer"


@pytest.fixture(scope="module")
def trust(sigstore: Sigstore) -> object:
    from sigstore.models import ClientTrustConfig

    return ClientTrustConfig.from_tuf(sigstore.tuf_url, bootstrap_root=sigstore.tuf_root)


def _token(sigstore: Sigstore, *, audience: str = "sigstore") -> object:
    from sigstore.oidc import IdentityToken

    raw = sigstore.token(NAMESPACE, ACCOUNT, audience=audience)
    return IdentityToken(raw, client_id=audience)


def test_tuf_repository_serves_the_instance(sigstore: Sigstore, trust: object) -> None:
    from sigstore.models import ClientTrustConfig

    assert isinstance(trust, ClientTrustConfig)
    from_file = json.loads(sigstore.trust_config.read_text())
    served = json.loads(trust._inner.to_json())
    assert served["trustedRoot"] == from_file["trustedRoot"]
    assert served["signingConfig"]["rekorTlogUrls"][0]["url"] == sigstore.rekor_url
    assert served["signingConfig"]["tsaUrls"][0]["url"] == sigstore.tsa_url
    assert served["signingConfig"]["caUrls"][0]["url"] == sigstore.fulcio_url


def test_blob_and_dsse_sign_and_verify_with_identity(sigstore: Sigstore, trust: object) -> None:
    from sigstore import dsse
    from sigstore.errors import VerificationError
    from sigstore.sign import SigningContext
    from sigstore.verify import Verifier, policy

    identity = Sigstore.identity(NAMESPACE, ACCOUNT)
    payload = b"model weights, or their manifest"
    statement = (
        dsse.StatementBuilder()
        .subjects(
            [dsse.Subject(name="model", digest={"sha256": hashlib.sha256(payload).hexdigest()})]  # type: ignore[arg-type]
        )
        .predicate_type("https://modelhooks.dev/smoke/v1")
        .predicate({"note": "harness smoke"})
        .build()
    )
    context = SigningContext.from_trust_config(trust)  # type: ignore[arg-type]
    with context.signer(_token(sigstore)) as signer:  # type: ignore[arg-type]
        blob_bundle = signer.sign_artifact(payload)
        dsse_bundle = signer.sign_dsse(statement)

    # the certificate names the ServiceAccount; the entry is Rekor v2's; a TSA timestamp
    san = blob_bundle.signing_certificate.extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [identity]
    document = json.loads(blob_bundle.to_json())
    assert document["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    assert document["verificationMaterial"]["tlogEntries"][0]["kindVersion"] == {
        "kind": "hashedrekord",
        "version": "0.0.2",
    }
    assert document["verificationMaterial"]["timestampVerificationData"]["rfc3161Timestamps"]

    verifier = Verifier(trusted_root=trust.trusted_root)  # type: ignore[attr-defined]
    good = policy.Identity(identity=identity, issuer=sigstore.issuer)
    verifier.verify_artifact(payload, blob_bundle, good)
    payload_type, body = verifier.verify_dsse(dsse_bundle, good)
    assert payload_type == "application/vnd.in-toto+json"
    assert json.loads(body)["predicate"] == {"note": "harness smoke"}

    refusals = {
        "wrong identity": (
            payload,
            policy.Identity(identity=Sigstore.identity(NAMESPACE, "other"), issuer=sigstore.issuer),
        ),
        "wrong issuer": (
            payload,
            policy.Identity(identity=identity, issuer="https://127.0.0.1:1"),
        ),
        "tampered payload": (payload + b"!", good),
    }
    for reason, (data, wanted) in refusals.items():
        with pytest.raises(VerificationError):
            verifier.verify_artifact(data, blob_bundle, wanted)
            pytest.fail(f"{reason}: accepted")


def test_fulcio_refuses_a_token_for_another_audience(sigstore: Sigstore, trust: object) -> None:
    import requests
    from sigstore._internal.fulcio.client import FulcioClientError
    from sigstore.sign import SigningContext

    context = SigningContext.from_trust_config(trust)  # type: ignore[arg-type]
    with (
        pytest.raises(FulcioClientError) as refused,
        context.signer(_token(sigstore, audience="not-sigstore")) as signer,  # type: ignore[arg-type]
    ):
        signer.sign_artifact(b"anything")  # (the signer asks Fulcio as it is made)
    cause = refused.value.__cause__
    assert isinstance(cause, requests.HTTPError)
    assert cause.response is not None and cause.response.status_code == 400


def test_fulcio_refuses_an_expired_token_it_would_otherwise_accept(sigstore: Sigstore) -> None:
    import base64

    import jwt
    import requests
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from sigstore.oidc import IdentityError, IdentityToken

    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([]))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = csr.public_bytes(serialization.Encoding.PEM)
    body = {"certificateSigningRequest": base64.b64encode(pem).decode()}

    def ask_fulcio(token: str) -> requests.Response:
        return requests.post(
            f"{sigstore.fulcio_url}/api/v2/signingCert",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )

    live = sigstore.signed_token(NAMESPACE, ACCOUNT, expires_in=600)
    expired = sigstore.signed_token(NAMESPACE, ACCOUNT, expires_in=-60)
    assert ask_fulcio(live).status_code in (200, 201)  # the crafted token is otherwise valid
    assert ask_fulcio(expired).status_code == 400
    with pytest.raises(IdentityError) as refused:  # sigstore-python refuses it first
        IdentityToken(expired, client_id="sigstore")
    assert isinstance(refused.value.__cause__, jwt.ExpiredSignatureError)


def _model_signing(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("model_signing")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "model_signing"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def test_model_signing_cli_signs_and_verifies_a_model(sigstore: Sigstore, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"layers": 2}')
    (model / "weights.bin").write_bytes(b"\x00\x01" * 1024)
    signature = tmp_path / "model.sig"
    token = sigstore.token(NAMESPACE, ACCOUNT)
    # cli_trust_config: its oidcUrl is the harness's stub discovery document (model-signing
    # 1.1.1 fetches discovery even with a token; the apiserver's has no OAuth endpoints).
    signed = _model_signing(
        "sign",
        "sigstore",
        str(model),
        "--signature",
        str(signature),
        "--identity_token",
        token,
        "--trust_config",
        str(sigstore.cli_trust_config),
    )
    assert signed.returncode == 0, signed.stdout + signed.stderr

    def verify(identity: str, issuer: str, path: Path = model) -> subprocess.CompletedProcess[str]:
        return _model_signing(
            "verify",
            "sigstore",
            str(path),
            "--signature",
            str(signature),
            "--identity",
            identity,
            "--identity_provider",
            issuer,
            "--trust_config",
            str(sigstore.trust_config),
        )

    identity = Sigstore.identity(NAMESPACE, ACCOUNT)
    ok = verify(identity, sigstore.issuer)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    tampered = tmp_path / "tampered"
    shutil.copytree(model, tampered)
    (tampered / "weights.bin").write_bytes(b"\x00\x02" * 1024)
    refusals = {
        "SANs do not match": verify(Sigstore.identity(NAMESPACE, "other"), sigstore.issuer),
        "OIDCIssuer does not match": verify(identity, "https://127.0.0.1:1"),
        "Hash mismatch for 'weights.bin'": verify(identity, sigstore.issuer, tampered),
    }
    for reason, refused in refusals.items():
        assert refused.returncode == 1, (reason, refused.stdout + refused.stderr)
        assert reason in refused.stdout + refused.stderr
