"""A throw-away certificate authority for the harness: serving certs for loopback servers.

Example::

    ca = CertificateAuthority.create(tmpdir)
    cert, key = ca.issue("webhook", tmpdir)   # SANs 127.0.0.1, ::1, localhost
    # register ca.cert_pem as caBundle; serve with ssl context from (cert, key)
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import shutil
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_LOOPBACK = (
    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    x509.IPAddress(ipaddress.ip_address("::1")),
    x509.DNSName("localhost"),
)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_rsa_key(path: Path) -> Path:
    """An RSA private key in PEM (kube-apiserver's service-account signing key)."""
    path.write_bytes(_key_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    return path


@dataclass(frozen=True)
class CertificateAuthority:
    cert_file: Path
    key_file: Path

    @property
    def cert_pem(self) -> bytes:
        return self.cert_file.read_bytes()

    @classmethod
    def create(cls, directory: Path, name: str = "modelhooks-test-ca") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_key_pem(key))
        key_file.chmod(0o600)
        return cls(cert_file, key_file)

    def issue(self, name: str, directory: Path) -> tuple[Path, Path]:
        """A serving (and client) certificate for loopback; returns (cert_file, key_file)."""
        ca_key = serialization.load_pem_private_key(self.key_file.read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate(self.cert_pem)
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(list(_LOOPBACK)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        directory.mkdir(parents=True, exist_ok=True)
        cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_key_pem(key))
        key_file.chmod(0o600)
        return cert_file, key_file

    def server_context(self, name: str, directory: Path) -> ssl.SSLContext:
        """An ssl.SSLContext for an HTTPS listener with a fresh certificate from this CA."""
        cert_file, key_file = self.issue(name, directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        return context


def serving_pair(directory: Path) -> tuple[CertificateAuthority, Path, Path]:
    """A CA and a loopback certificate it issued, as `live/tls.crt` and `live/tls.key` under
    `directory` (as a Secret mounts them: a test may replace them to see them reloaded)."""
    ca = CertificateAuthority.create(directory / "ca")
    cert, key = ca.issue("first", directory / "first")
    live = directory / "live"
    live.mkdir()
    shutil.copy(cert, live / "tls.crt")
    shutil.copy(key, live / "tls.key")
    return ca, live / "tls.crt", live / "tls.key"
