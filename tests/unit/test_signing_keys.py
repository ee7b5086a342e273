"""Key and certificate methods, both directions with the upstream model_signing library and
CLI, and every way a verification must fail."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import model_signing
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from model_signing import hashing

from modelhooks.adapters.signing import (
    CertificateSigner,
    CertificateVerifier,
    HashOptions,
    KeySigner,
    KeyVerifier,
    local_model,
    sign_model,
    verify_bundle,
    verify_model,
)
from modelhooks.adapters.signing.bundle import unverified_payload
from modelhooks.core.errors import Conflict, VerificationFailed
from modelhooks.core.ports import Signer, Verifier
from tests.unit.signing_material import Chain, KeyPair, make_chain, make_key, write_model

CLI = Path(sys.executable).parent / "model_signing"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_model(tmp_path / "bert")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Chain:
    return make_chain(tmp_path_factory.mktemp("pki"))


def sign(model: Path, signer: Signer, **kw: object) -> str:
    store, bucket, prefix = local_model(model)
    return sign_model(store, bucket, prefix, signer, **kw).root_digest  # type: ignore[arg-type]


def verify(model: Path, verifier: Verifier, **kw: object) -> str:
    store, bucket, prefix = local_model(model)
    return verify_model(store, bucket, prefix, verifier, **kw).root_digest  # type: ignore[arg-type]


def upstream_hashing() -> hashing.Config:
    # as the CLI does for its signature; ours leaves its binding statement next to it
    return hashing.Config().set_ignored_paths(paths=["model.sig", "model.sig.binding"])


@pytest.mark.parametrize(
    "curve", [ec.SECP256R1(), ec.SECP384R1(), ec.SECP521R1()], ids=["p256", "p384", "p521"]
)
def test_key_both_directions(model: Path, tmp_path: Path, curve: ec.EllipticCurve) -> None:
    pair = make_key(tmp_path, "k", curve)
    digest = sign(model, KeySigner.from_file(pair.private))
    # upstream accepts ours (auto-detecting our serialization)...
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=pair.public).verify(
        model, model / "model.sig"
    )
    # ...and we accept upstream's.
    (model / "model.sig").unlink()
    model_signing.signing.Config().use_elliptic_key_signer(
        private_key=pair.private
    ).set_hashing_config(upstream_hashing()).sign(model, model / "model.sig")
    assert verify(model, KeyVerifier(pair.public)) == digest


def test_certificate_both_directions(model: Path, chain: Chain) -> None:
    signer = CertificateSigner.from_files(chain.key, chain.leaf, [chain.intermediates])
    digest = sign(model, signer)
    model_signing.verifying.Config().use_certificate_verifier(
        certificate_chain=[chain.root]
    ).verify(model, model / "model.sig")
    (model / "model.sig").unlink()
    model_signing.signing.Config().use_certificate_signer(
        private_key=chain.key,
        signing_certificate=chain.leaf,
        certificate_chain=[chain.intermediates],
    ).set_hashing_config(upstream_hashing()).sign(model, model / "model.sig")
    assert verify(model, CertificateVerifier([chain.root])) == digest


def test_shards_both_directions(model: Path, keys: KeyPair) -> None:
    opts = HashOptions(method="shards", shard_size=4096)
    digest = sign(model, KeySigner.from_file(keys.private), options=opts)
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=keys.public).verify(
        model, model / "model.sig"
    )
    (model / "model.sig").unlink()
    model_signing.signing.Config().use_elliptic_key_signer(
        private_key=keys.private
    ).set_hashing_config(upstream_hashing().use_shard_serialization(shard_size=4096)).sign(
        model, model / "model.sig"
    )
    assert verify(model, KeyVerifier(keys.public)) == digest


@pytest.mark.skipif(not CLI.exists(), reason="model_signing CLI not installed in the venv")
def test_upstream_cli_accepts_ours(model: Path, keys: KeyPair, chain: Chain) -> None:
    sign(model, KeySigner.from_file(keys.private))
    args = ["verify", "key", "--signature", model / "model.sig", "--public_key", keys.public]
    out = subprocess.run([CLI, *args, model], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    (model / "model.sig").unlink()
    sign(model, CertificateSigner.from_files(chain.key, chain.leaf, [chain.intermediates]))
    args = ["verify", "certificate", "--signature", model / "model.sig"]
    args += ["--certificate_chain", chain.root]
    out = subprocess.run([CLI, *args, model], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_bundle_format(model: Path, keys: KeyPair) -> None:
    sign(model, KeySigner.from_file(keys.private))
    bundle = json.loads((model / "model.sig").read_bytes())
    assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    assert bundle["verificationMaterial"] == {
        "publicKey": {"hint": KeySigner.from_file(keys.private).identity().split(":")[1]},
        "tlogEntries": [],
    }
    payload_type, payload = unverified_payload((model / "model.sig").read_bytes())
    statement = json.loads(payload)
    assert payload_type == "application/vnd.in-toto+json"
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://model_signing/signature/v1.0"
    assert statement["subject"][0]["name"] == "bert"
    assert set(statement["predicate"]) == {"serialization", "resources"}
    assert {"model.sig", "_SUCCESS"} <= set(statement["predicate"]["serialization"]["ignore_paths"])


def test_tampered_missing_and_extra_files_are_named(model: Path, keys: KeyPair) -> None:
    sign(model, KeySigner.from_file(keys.private))
    (model / "a.txt").write_bytes(b"ALPHA")
    (model / "weights" / "model-00002.safetensors").unlink()
    (model / "evil.py").write_text("import os")
    with pytest.raises(VerificationFailed) as e:
        verify(model, KeyVerifier(keys.public))
    assert e.value.details == {
        "missing": ["weights/model-00002.safetensors"],
        "extra": ["evil.py"],
        "modified": ["a.txt"],
    }
    assert "a.txt" in e.value.message


def test_ready_marker_after_signing_is_ignored(model: Path, keys: KeyPair) -> None:
    sign(model, KeySigner.from_file(keys.private))
    (model / "_SUCCESS").write_text("")
    verify(model, KeyVerifier(keys.public))


def test_wrong_key_is_refused(model: Path, keys: KeyPair, tmp_path: Path) -> None:
    sign(model, KeySigner.from_file(keys.private))
    other = make_key(tmp_path, "other")
    with pytest.raises(VerificationFailed, match="not valid"):
        verify(model, KeyVerifier(other.public))


def test_untrusted_chain_is_refused(model: Path, chain: Chain, tmp_path: Path) -> None:
    sign(model, CertificateSigner.from_files(chain.key, chain.leaf, [chain.intermediates]))
    stranger = make_chain(tmp_path, "stranger")
    with pytest.raises(VerificationFailed) as e:
        verify(model, CertificateVerifier([stranger.root]))
    assert e.value.details["reason"]


def test_key_signature_is_not_a_certificate_signature(
    model: Path, keys: KeyPair, chain: Chain
) -> None:
    sign(model, KeySigner.from_file(keys.private))
    with pytest.raises(VerificationFailed):
        verify(model, CertificateVerifier([chain.root]))


def test_signature_for_another_model_is_rejected(tmp_path: Path, keys: KeyPair) -> None:
    one, two = write_model(tmp_path / "one"), write_model(tmp_path / "two")
    (two / "config.json").write_text('{"layers": 3}')
    sign(one, KeySigner.from_file(keys.private))
    bundle = (one / "model.sig").read_bytes()
    with pytest.raises(VerificationFailed, match=r"config\.json"):
        verify(two, KeyVerifier(keys.public), bundle=bundle)
    digest = verify(one, KeyVerifier(keys.public))
    with pytest.raises(VerificationFailed, match="another model digest"):
        verify_bundle(bundle, KeyVerifier(keys.public), expected_digest="sha256:" + "0" * 64)
    assert verify_bundle(bundle, KeyVerifier(keys.public), expected_digest=digest)


def test_modified_envelope_is_refused(model: Path, keys: KeyPair) -> None:
    sign(model, KeySigner.from_file(keys.private))
    bundle = json.loads((model / "model.sig").read_bytes())
    other = write_model(model.parent / "other")
    (other / "a.txt").write_text("beta")
    store, bucket, prefix = local_model(other)
    forged = sign_model(store, bucket, prefix, KeySigner.from_file(keys.private))
    bundle["dsseEnvelope"]["payload"] = json.loads((other / "model.sig").read_bytes())[
        "dsseEnvelope"
    ]["payload"]
    assert forged.created
    with pytest.raises(VerificationFailed):
        verify_bundle(json.dumps(bundle).encode(), KeyVerifier(keys.public))


def test_signing_is_idempotent_and_never_overwrites(model: Path, keys: KeyPair) -> None:
    store, bucket, prefix = local_model(model)
    signer = KeySigner.from_file(keys.private)
    first = sign_model(store, bucket, prefix, signer)
    again = sign_model(store, bucket, prefix, signer)
    assert first.created and not again.created and again.root_digest == first.root_digest
    (model / "a.txt").write_text("changed")
    with pytest.raises(Conflict):
        sign_model(store, bucket, prefix, signer)
    replaced = sign_model(store, bucket, prefix, signer, replace=True)
    assert replaced.created and replaced.root_digest != first.root_digest


def test_missing_signature(model: Path, keys: KeyPair) -> None:
    with pytest.raises(VerificationFailed, match="no signature"):
        verify(model, KeyVerifier(keys.public))


def test_custom_signature_name(model: Path, keys: KeyPair) -> None:
    opts = HashOptions(signature_name="bert.sig")
    sign(model, KeySigner.from_file(keys.private), options=opts)
    assert (model / "bert.sig").exists()
    verify(model, KeyVerifier(keys.public), options=opts)
    shutil.copy(model / "bert.sig", model.parent / "elsewhere.sig")
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=keys.public).verify(
        model, model / "bert.sig"
    )


def test_verify_can_ignore_more_paths(model: Path, keys: KeyPair) -> None:
    sign(model, KeySigner.from_file(keys.private))
    (model / "README.md").write_text("added after signing")
    with pytest.raises(VerificationFailed, match="README"):
        verify(model, KeyVerifier(keys.public))
    verify(model, KeyVerifier(keys.public), options=HashOptions(ignore_paths=("README.md",)))


def test_someone_elses_signature_is_not_kept(model: Path, keys: KeyPair, tmp_path: Path) -> None:
    store, bucket, prefix = local_model(model)
    other = KeySigner.from_file(make_key(tmp_path, "other").private)
    sign_model(store, bucket, prefix, other)
    mine = KeySigner.from_file(keys.private)
    assert not mine.signed((model / "model.sig").read_bytes())
    with pytest.raises(Conflict, match="other signer"):
        sign_model(store, bucket, prefix, mine)
    assert sign_model(store, bucket, prefix, mine, replace=True).created
    assert mine.signed((model / "model.sig").read_bytes())


def test_blake3_both_directions(model: Path, keys: KeyPair) -> None:
    digest = sign(model, KeySigner.from_file(keys.private), options=HashOptions(hash_type="blake3"))
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=keys.public).verify(
        model, model / "model.sig"
    )
    (model / "model.sig").unlink()
    model_signing.signing.Config().use_elliptic_key_signer(
        private_key=keys.private
    ).set_hashing_config(
        upstream_hashing().use_file_serialization(hashing_algorithm="blake3")
    ).sign(model, model / "model.sig")
    assert verify(model, KeyVerifier(keys.public)) == digest


@pytest.mark.parametrize("method", ["key", "certificate"])
def test_a_bundle_is_what_sigstore_models_writes_to_the_byte(
    method: str, keys: KeyPair, chain: Chain
) -> None:
    """sign writes its bundles without sigstore_models' pydantic models (~100 ms of a cold
    start's CPU to import): byte for byte what the models write for the same signature."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding
    from sigstore_models import intoto
    from sigstore_models.bundle.v1 import Bundle, VerificationMaterial
    from sigstore_models.common.v1 import (
        PublicKeyIdentifier,
        X509Certificate,
        X509CertificateChain,
    )

    from modelhooks.adapters.signing.bundle import MEDIA_TYPE, envelope_parts
    from modelhooks.adapters.signing.keys import key_fingerprint

    if method == "key":
        signer: KeySigner = KeySigner.from_file(keys.private)
        public = signer._key.public_key()
        material = VerificationMaterial(
            public_key=PublicKeyIdentifier(hint=key_fingerprint(public)), tlog_entries=[]
        )
    else:
        signer = CertificateSigner.from_files(chain.key, chain.leaf, [chain.intermediates])
        ders = [
            x509.load_pem_x509_certificate(p.read_bytes()).public_bytes(Encoding.DER)
            for p in (chain.leaf, chain.intermediates)
        ]
        certificates = [X509Certificate(raw_bytes=base64.b64encode(d)) for d in ders]
        material = VerificationMaterial(
            x509_certificate_chain=X509CertificateChain(certificates=certificates),
            tlog_entries=[],
        )
    statement = json.dumps({"_type": "https://in-toto.io/Statement/v1", "é": "/+="}).encode()
    bundle = signer.sign(statement)
    payload_type, payload, signature = envelope_parts(bundle)
    envelope = intoto.Envelope(
        payload=base64.b64encode(payload),
        payload_type=payload_type,
        signatures=[intoto.Signature(sig=base64.b64encode(signature), keyid="")],
    )
    expected = Bundle(media_type=MEDIA_TYPE, verification_material=material, dsse_envelope=envelope)
    assert payload == statement
    assert bundle == expected.to_json().encode()
    assert signer.signed(bundle)


def test_a_key_signer_is_made_without_cryptography_s_serialization_package(
    keys: KeyPair,
) -> None:
    """The key is loaded with the function `serialization` re-exports, without importing
    that package (its SSH module: ~14 ms of a sign cold start), and its hint is still
    model_signing's (the PEM SubjectPublicKeyInfo's sha256)."""
    from cryptography.hazmat.primitives import serialization

    from modelhooks.adapters.signing.keys import _pem_private_key_loader

    assert _pem_private_key_loader() is serialization.load_pem_private_key
    code = (
        "import sys; from pathlib import Path; "
        "from modelhooks.adapters.signing.keys import KeySigner; "
        f"signer = KeySigner.from_file(Path({str(keys.private)!r})); "
        "signer.sign(b'{}'); print(signer.identity()); "
        "assert 'cryptography.hazmat.primitives.serialization' not in sys.modules"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    public = keys.public.read_bytes()
    key = serialization.load_pem_public_key(public)
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert out.stdout.strip() == f"key sha256:{hashlib.sha256(pem).hexdigest()}"


@pytest.mark.parametrize("curve", [ec.SECP256R1(), ec.SECP384R1(), ec.SECP521R1()])
def test_a_key_signs_without_cryptography_s_openssl_backend(
    curve: ec.EllipticCurve, tmp_path: Path
) -> None:
    """A key signs and checks its signatures without importing the OpenSSL backend (the
    ECDSA constructor imports it, with its cffi binding and every cipher: ~5 ms of a sign
    cold start), with what cryptography's own ECDSA accepts, and accepts what it signs."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization

    from modelhooks.adapters.signing.keys import _hash_for

    key = ec.generate_private_key(curve)
    ours = _hash_for(key.public_key())
    digest = {256: hashes.SHA256, 384: hashes.SHA384, 521: hashes.SHA512}[curve.key_size]
    assert isinstance(ours, ec.ECDSA) and isinstance(ours.algorithm, digest)
    assert ours.deterministic_signing  # RFC 6979: one statement, one signature
    assert key.sign(b"statement", ours) == key.sign(b"statement", ours)
    deterministic = ec.ECDSA(digest(), deterministic_signing=True)  # cryptography's own
    assert key.sign(b"statement", ours) == key.sign(b"statement", deterministic)
    theirs = ec.ECDSA(digest())
    key.public_key().verify(key.sign(b"statement", ours), b"statement", theirs)
    key.public_key().verify(key.sign(b"statement", theirs), b"statement", ours)
    with pytest.raises(InvalidSignature):
        key.public_key().verify(key.sign(b"statement", ours), b"statemenT", ours)

    pem = tmp_path / "key.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    code = (
        "import sys; from pathlib import Path; "
        "from modelhooks.adapters.signing.keys import KeySigner; "
        "signer = KeySigner.from_file(Path(sys.argv[1])); "
        "assert signer.signed(signer.sign(b'{}')); "
        "print(sorted(m for m in sys.modules if m.startswith('cryptography.hazmat.backends')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(pem)], check=True, capture_output=True, text=True
    )
    assert out.stdout.strip() == "[]"


def test_a_key_signs_one_statement_into_one_bundle(keys: KeyPair) -> None:
    """RFC 6979: the same statement signed twice is the same bundle (one push signed by two
    deliveries pushes one OCI referrer, not two), and it verifies."""
    signer = KeySigner.from_file(keys.private)
    statement = b'{"_type": "https://in-toto.io/Statement/v1"}'
    assert signer.sign(statement) == signer.sign(statement)
    assert signer.signed(signer.sign(statement))


def test_an_openssl_without_deterministic_ecdsa_signs_with_random_nonces(keys: KeyPair) -> None:
    """cryptography built against an OpenSSL before 3.2 refuses deterministic ECDSA
    (UnsupportedAlgorithm): the key signs as before, each bundle its own bytes."""
    from cryptography.exceptions import UnsupportedAlgorithm

    real = KeySigner.from_file(keys.private)._key

    class OldOpenSsl:
        def sign(self, data: bytes, algorithm: ec.ECDSA) -> bytes:
            if algorithm.deterministic_signing:
                raise UnsupportedAlgorithm("deterministic ECDSA is not supported")
            return real.sign(data, algorithm)

        def public_key(self) -> ec.EllipticCurvePublicKey:
            return real.public_key()

    signer = KeySigner(OldOpenSsl())  # type: ignore[arg-type]
    statement = b'{"_type": "https://in-toto.io/Statement/v1"}'
    first, second = signer.sign(statement), signer.sign(statement)
    assert first != second and signer.signed(first) and signer.signed(second)
