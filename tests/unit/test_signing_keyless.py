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
from modelhooks.core.errors import ConfigError, VerificationFailed
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
    assert [s.url for s in signing.tsa_urls] == ["https://tsa.internal"]
    assert config.signing_config.get_fulcio().url.startswith("https://fulcio.internal")


def test_key_signed_bundle_is_not_a_sigstore_signature(tmp_path: Path, trust_config: Path) -> None:
    statement = Manifest("m", Serialization(), (Resource("a", "sha256", "0" * 64),)).statement()
    bundle = KeySigner.from_file(make_key(tmp_path).private).sign(statement)
    verifier = SigstoreVerifier(
        SigstoreTrust(trust_config=trust_config), "me@example.com", "https://issuer.example"
    )
    with pytest.raises(VerificationFailed, match="Sigstore"):
        verifier.verify(bundle)


def test_bad_identity_token_is_a_config_error(tmp_path: Path, trust_config: Path) -> None:
    token = tmp_path / "token"
    token.write_text("not-a-jwt")
    signer = SigstoreSigner(SigstoreTrust(trust_config=trust_config), token)
    with pytest.raises(ConfigError, match="identity token"):
        signer.identity()
    with pytest.raises(ConfigError):
        SigstoreSigner(SigstoreTrust(trust_config=trust_config), tmp_path / "absent").identity()
