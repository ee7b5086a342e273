"""The key and certificate methods: EC keys (P-256/384/521) signing a DSSE envelope.

Signing uses `cryptography` directly with model_signing's conventions (key hint = sha256 of
the PEM SubjectPublicKeyInfo, hash by curve size); verification delegates to
model_signing's own verifiers, so we accept exactly what `model_signing verify` accepts.

>>> signer = KeySigner.from_file(Path("key.pem"))  # doctest: +SKIP
>>> bundle = signer.sign(manifest.statement())  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelhooks.adapters.signing.bundle import (
    certificate_material,
    dsse_bundle,
    envelope_parts,
    pae,
    proto_bundle,
    public_key_material,
)
from modelhooks.core.errors import ConfigError, VerificationFailed
from modelhooks.core.extras import require

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

__all__ = ["CertificateSigner", "CertificateVerifier", "KeySigner", "KeyVerifier"]

_CURVES = {"secp256r1": 256, "secp384r1": 384, "secp521r1": 521}
MAX_PEM_BYTES = 1 << 20  # a key, a certificate chain, a password: a few KB


def read_small(path: Path) -> bytes:
    """A key material file's bytes; ValueError past MAX_PEM_BYTES: `--key /dev/zero` (or a
    model's weights named by mistake) was read whole into memory."""
    with open(path, "rb") as file:
        data = file.read(MAX_PEM_BYTES + 1)
    if len(data) > MAX_PEM_BYTES:
        raise ValueError(f"over {MAX_PEM_BYTES} bytes: not key material")
    return data


def _hash_for(key: ec.EllipticCurvePublicKey, deterministic: bool = True) -> ec.ECDSA:
    from cryptography.hazmat.primitives import hashes

    algorithm = {256: hashes.SHA256(), 384: hashes.SHA384(), 521: hashes.SHA512()}
    return _ecdsa(deterministic)(algorithm[key.curve.key_size])


@functools.cache
def _ecdsa(deterministic: bool) -> type[ec.ECDSA]:
    """`ec.ECDSA` made without its constructor, which imports the OpenSSL backend (its cffi
    binding and every cipher: ~5 ms of CPU in a sign cold start) only to check that
    deterministic signing is supported (KeySigner.sign falls back when it is not). An
    `ec.ECDSA` all the same for the keys' `sign` and `verify`, which read these two
    properties (test_signing_keys pins that cryptography's own ECDSA verifies what it
    signs, and the reverse).

    Deterministic (RFC 6979: the nonce derived from the key and the digest): a key signs
    one statement into the same bytes every time, so one push signed twice (at-least-once
    delivery: two runs at once, or a run killed after pushing its OCI referrer, before the
    fallback index named it) pushes one referrer, not two signatures of one signer, and a
    fallback index both runs write holds the same entry. Verifying is unchanged."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    class ECDSA(ec.ECDSA):
        def __init__(self, algorithm: hashes.HashAlgorithm) -> None:
            self._hash = algorithm

        @property
        def algorithm(self) -> hashes.HashAlgorithm:
            return self._hash

        @property
        def deterministic_signing(self) -> bool:
            return deterministic

    return ECDSA


def _pem_private_key_loader() -> Any:
    """cryptography's `serialization.load_pem_private_key` without importing that package:
    it re-exports the Rust bindings' function, and importing it imports its SSH module too
    (its regexes, every key type, the ciphers: ~14 ms of CPU in a sign cold start, whose
    key is a PEM). The package's own where a release has moved it (test_signing_keys pins
    that they are the same function)."""
    try:
        from cryptography.hazmat.bindings._rust import openssl

        return openssl.keys.load_pem_private_key
    except (ImportError, AttributeError):  # pragma: no cover - another cryptography
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        return load_pem_private_key


def _load_private(path: Path, password: str | None) -> ec.EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key = _pem_private_key_loader()(read_small(path), password.encode() if password else None)
    except (OSError, ValueError, TypeError) as e:
        raise ConfigError(f"cannot load private key {path}", reason=str(e)) from e
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in _CURVES:
        raise ConfigError(f"{path}: only EC P-256/P-384/P-521 keys are supported")
    return key


def key_fingerprint(key: ec.EllipticCurvePublicKey) -> str:
    """model_signing's key hint: sha256 of the PEM SubjectPublicKeyInfo."""
    # the enums `serialization` re-exports, from where they are defined (see above)
    from cryptography.hazmat.primitives._serialization import Encoding, PublicFormat

    pem = key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


def _verify_with(verifier: Any, bundle: bytes) -> bytes:
    """Run a model_signing verifier over our bundle; (type, payload) or VerificationFailed."""
    from model_signing._signing import sign_sigstore_pb

    signature = sign_sigstore_pb.Signature(proto_bundle(bundle))
    try:
        # The hook every model_signing verifier implements: checks trust and the DSSE
        # signature and returns the signed payload, before any manifest parsing.
        payload_type, payload = verifier._verify_signed_content(signature)
    except Exception as e:  # cryptography, pyOpenSSL and ValueError alike
        raise VerificationFailed(
            "signature is not valid for the trusted key or certificate chain",
            reason=str(e) or type(e).__name__,
        ) from e
    if payload_type != "application/vnd.in-toto+json":
        raise VerificationFailed("unexpected DSSE payload type", payload_type=payload_type)
    return bytes(payload)


class KeySigner:
    """Signs with an EC private key; the bundle carries only the key's hint."""

    def __init__(self, private_key: ec.EllipticCurvePrivateKey) -> None:
        self._key = private_key

    @classmethod
    def from_file(cls, path: Path, password: str | None = None) -> KeySigner:
        return cls(_load_private(Path(path), password))

    def identity(self) -> str:
        return f"key sha256:{self._hint}"

    @cached_property
    def _hint(self) -> str:
        return key_fingerprint(self._key.public_key())

    @cached_property
    def _made(self) -> tuple[dict[str, Any], ec.ECDSA]:
        """What every bundle of this signer repeats, made once (the key's hint is a PEM
        encoding and a hash; the material a model): its verification material and hash."""
        return self._material(), _hash_for(self._key.public_key())

    def _material(self) -> dict[str, Any]:
        return public_key_material(self._hint)

    def sign(self, statement: bytes) -> bytes:
        from cryptography.exceptions import UnsupportedAlgorithm

        material, algorithm = self._made
        try:
            signature = self._key.sign(pae(statement), algorithm)
        except UnsupportedAlgorithm:  # an OpenSSL before 3.2 (cryptography built against it)
            signature = self._key.sign(pae(statement), _hash_for(self._key.public_key(), False))
        return dsse_bundle(statement, signature, material)

    def signed(self, bundle: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            payload_type, payload, signature = envelope_parts(bundle)
            key = self._key.public_key()
            key.verify(signature, pae(payload, payload_type), _hash_for(key))
        except (InvalidSignature, VerificationFailed):
            return False
        return True


class CertificateSigner(KeySigner):
    """Signs with an EC key whose certificate (and chain) travel in the bundle."""

    def __init__(
        self,
        private_key: ec.EllipticCurvePrivateKey,
        certificate: x509.Certificate,
        chain: Sequence[x509.Certificate] = (),
    ) -> None:
        if certificate.public_key() != private_key.public_key():
            raise ConfigError("the signing certificate does not match the private key")
        super().__init__(private_key)
        self._certificate = certificate
        self._chain = tuple(chain)

    @classmethod
    def from_files(
        cls,
        private_key: Path,
        certificate: Path,
        chain: Sequence[Path] = (),
        password: str | None = None,
    ) -> CertificateSigner:
        from cryptography import x509

        try:
            cert = x509.load_pem_x509_certificate(read_small(Path(certificate)))
            rest = [c for p in chain for c in x509.load_pem_x509_certificates(read_small(p))]
        except (OSError, ValueError) as e:
            raise ConfigError("cannot load the signing certificate or chain", reason=str(e)) from e
        return cls(_load_private(Path(private_key), password), cert, rest)

    def identity(self) -> str:
        return f"certificate {self._certificate.subject.rfc4514_string()}"

    def _material(self) -> dict[str, Any]:
        from cryptography.hazmat.primitives.serialization import Encoding

        chain = (self._certificate, *self._chain)
        return certificate_material([c.public_bytes(Encoding.DER) for c in chain])


class KeyVerifier:
    """Trusts one EC public key."""

    def __init__(self, public_key: Path) -> None:
        require("signing", "verifying signatures")
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import load_pem_public_key
        from model_signing._signing import sign_ec_key

        try:
            key = load_pem_public_key(read_small(Path(public_key)))
            self._verifier = sign_ec_key.Verifier(Path(public_key))
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot load public key {public_key}", reason=str(e)) from e
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise ConfigError(f"{public_key}: only EC public keys are supported")
        self._fingerprint = key_fingerprint(key)

    def identity(self) -> str:
        return f"key sha256:{self._fingerprint}"

    def verify(self, bundle: bytes) -> bytes:
        return _verify_with(self._verifier, bundle)


class CertificateVerifier:
    """Trusts the given root (and intermediate) certificates; the signing certificate
    must chain to them and allow digital signatures or code signing."""

    def __init__(self, chain: Sequence[Path]) -> None:
        require("signing", "verifying signatures")
        from model_signing._signing import sign_certificate

        if not chain:
            raise ConfigError("certificate verification needs at least one trusted certificate")
        try:
            self._verifier = sign_certificate.Verifier([Path(p) for p in chain])
        except (OSError, ValueError) as e:
            raise ConfigError("cannot load the trusted certificates", reason=str(e)) from e
        self._roots = ", ".join(str(p) for p in chain)

    def identity(self) -> str:
        return f"certificates from {self._roots}"

    def verify(self, bundle: bytes) -> bytes:
        return _verify_with(self._verifier, bundle)
