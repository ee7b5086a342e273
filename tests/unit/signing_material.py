"""Real key material for the signing tests: EC keys and a root → intermediate → leaf chain,
generated with `cryptography` and written as PEM files."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from modelhooks.core.ports import ObjectStore

__all__ = ["Chain", "KeyPair", "make_chain", "make_key", "write_model"]


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path


@dataclass(frozen=True)
class Chain:
    key: Path  # the leaf's private key
    leaf: Path
    intermediates: Path
    root: Path


def _write_key(key: ec.EllipticCurvePrivateKey, directory: Path, name: str) -> KeyPair:
    private = directory / f"{name}.pem"
    public = directory / f"{name}.pub.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return KeyPair(private, public)


def make_key(directory: Path, name: str = "key", curve: ec.EllipticCurve | None = None) -> KeyPair:
    return _write_key(ec.generate_private_key(curve or ec.SECP256R1()), directory, name)


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not ca,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if not ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CODE_SIGNING]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def make_chain(directory: Path, name: str = "ca") -> Chain:
    """A fresh root CA, an intermediate and a code-signing leaf, as PEM files."""
    root_key, mid_key, leaf_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    root = _cert(f"{name} root", root_key, None, ca=True)
    mid = _cert(f"{name} intermediate", mid_key, (f"{name} root", root_key), ca=True)
    leaf = _cert(f"{name} signer", leaf_key, (f"{name} intermediate", mid_key), ca=False)
    pem = serialization.Encoding.PEM
    paths = Chain(
        key=_write_key(leaf_key, directory, f"{name}-leaf").private,
        leaf=directory / f"{name}-leaf.crt",
        intermediates=directory / f"{name}-intermediate.crt",
        root=directory / f"{name}-root.crt",
    )
    paths.leaf.write_bytes(leaf.public_bytes(pem))
    paths.intermediates.write_bytes(mid.public_bytes(pem))
    paths.root.write_bytes(root.public_bytes(pem))
    return paths


def write_model(directory: Path) -> Path:
    """A small model with nested files, an empty file and names that sort differently as
    strings and as paths ("a/b" vs "a.txt")."""
    files = {
        "config.json": b'{"layers": 2}',
        "a.txt": b"alpha",
        "a/b.bin": bytes(range(256)) * 300,
        "weights/model-00001.safetensors": b"\x01" * 70_001,
        "weights/model-00002.safetensors": b"\x02" * 5,
        "empty": b"",
    }
    for name, data in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return directory


def upload(store: ObjectStore, bucket: str, model: Path, prefix: str) -> None:
    """Every file of the local `model` directory put under `prefix` in `bucket`."""
    for path in sorted(model.rglob("*")):
        if path.is_file():
            store.put(bucket, f"{prefix}/{path.relative_to(model).as_posix()}", path.read_bytes())
