"""Sigstore keyless pieces that work offline: trust config loading, service URL overrides,
token errors, and refusing bundles that are not Sigstore-signed. (Signing itself needs a
reachable Fulcio and Rekor.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sigstore

from modelhooks.adapters.signing import (
    KeySigner,
    Manifest,
    Resource,
    Serialization,
    SigstoreSigner,
    SigstoreTrust,
    SigstoreVerifier,
)
from modelhooks.core.errors import CredentialsRefused, VerificationFailed
from tests.unit.signing_material import make_key

EMBEDDED = Path(sigstore.__file__).parent / "_store" / "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev"


@pytest.fixture
def trust_config(tmp_path: Path) -> Path:
    """A ClientTrustConfig built from sigstore-python's embedded public-good assets."""
    path = tmp_path / "trust.json"
    path.write_text(
        json.dumps(
            {
                "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
                "trustedRoot": json.loads((EMBEDDED / "trusted_root.json").read_text()),
                "signingConfig": json.loads((EMBEDDED / "signing_config.v0.2.json").read_text()),
            }
        )
    )
    return path


def test_trust_config_file_and_url_overrides(trust_config: Path) -> None:
    env = {
        "SIGSTORE_FULCIO_URL": "https://fulcio.internal",
        "SIGSTORE_REKOR_URL": "https://rekor.internal",
        "SIGSTORE_TSA_URL": "https://tsa.internal",
    }
    config = SigstoreTrust.from_env(env, trust_config=trust_config).load()
    signing = config._inner.signing_config
    assert [s.url for s in signing.ca_urls] == ["https://fulcio.internal"]
    assert [s.url for s in signing.rekor_tlog_urls] == ["https://rekor.internal"]
    # a TSA given by its host alone is its timestamp endpoint, as signing configs name it
    assert [s.url for s in signing.tsa_urls] == ["https://tsa.internal/api/v1/timestamp"]
    assert config.signing_config.get_fulcio().url.startswith("https://fulcio.internal")


def test_key_signed_bundle_is_not_a_sigstore_signature(tmp_path: Path, trust_config: Path) -> None:
    statement = Manifest("m", Serialization(), (Resource("a", "sha256", "0" * 64),)).statement()
    bundle = KeySigner.from_file(make_key(tmp_path).private).sign(statement)
    verifier = SigstoreVerifier(
        SigstoreTrust(trust_config=trust_config), "me@example.com", "https://issuer.example"
    )
    with pytest.raises(VerificationFailed, match="Sigstore"):
        verifier.verify(bundle)


def test_a_bad_or_absent_identity_token_is_our_credentials_refused(
    tmp_path: Path, trust_config: Path
) -> None:
    """The deployment's own credential: 503 for a delivery (retried, dead-lettered), naming
    the file and what is wrong with it."""
    token = tmp_path / "token"
    token.write_text("not-a-jwt")
    signer = SigstoreSigner(SigstoreTrust(trust_config=trust_config), token)
    with pytest.raises(CredentialsRefused, match=f"identity token {token} is not a JWT"):
        signer.identity()
    with pytest.raises(CredentialsRefused, match="No such file"):
        SigstoreSigner(SigstoreTrust(trust_config=trust_config), tmp_path / "absent").identity()


def test_an_expired_token_or_one_for_another_audience_is_refused_naming_it(
    tmp_path: Path, trust_config: Path
) -> None:
    import time

    import jwt

    token = tmp_path / "token"
    signer = SigstoreSigner(SigstoreTrust(trust_config=trust_config), token)
    claims = {"iss": "https://issuer", "sub": "s", "aud": ["sigstore"], "exp": time.time() - 5}
    token.write_text(jwt.encode(claims, "k" * 32, algorithm="HS256"))
    with pytest.raises(CredentialsRefused, match=f"identity token {token} expired at 20"):
        signer.identity()
    token.write_text(jwt.encode({**claims, "exp": time.time() + 600, "aud": "k8s"}, "k" * 32))
    with pytest.raises(CredentialsRefused, match="audience 'k8s', not 'sigstore'"):
        signer.identity()


def test_the_identity_is_the_one_fulcio_certifies() -> None:
    """A Kubernetes ServiceAccount token is certified as the account's URI (Fulcio's
    `kubernetes` issuer type), others by their email or subject."""
    from modelhooks.adapters.signing.keyless import certificate_identity

    k8s = {"sub": "system:serviceaccount:ml:trainer"}
    k8s["kubernetes.io"] = {"namespace": "ml", "serviceaccount": {"name": "trainer"}}  # type: ignore[assignment]
    uri = "https://kubernetes.io/namespaces/ml/serviceaccounts/trainer"
    assert certificate_identity(k8s) == uri
    assert certificate_identity({"sub": "x", "email": "a@example.com"}) == "a@example.com"
    assert certificate_identity({"sub": "x"}) == "x"
