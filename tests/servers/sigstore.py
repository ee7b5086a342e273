"""A private Sigstore on loopback: a CT log (TesseraCT), Rekor v2 (rekor-tiles), a timestamp
authority and Fulcio, whose OIDC issuer is the harness's kube-apiserver; plus a TUF
repository (python-tuf's metadata API) holding the instance's ``trusted_root.json`` and
``signing_config.v0.2.json``, served over loopback HTTP, as sigstore clients expect of a
private instance. Facts behind the flags and formats: ../shared/SIGSTORE-LOCAL.md.

Start order: (etcd, kube-apiserver: the ``kube_apiserver`` fixture) → the discovery
binding → CT log, Rekor, TSA → Fulcio (it reads the issuer's discovery once, at start).

Example::

    token = sigstore.token("ns", "sa")                       # audience "sigstore"
    trust = ClientTrustConfig.from_json(sigstore.trust_config.read_text())
    identity = Sigstore.identity("ns", "sa")                 # certificate SAN
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import http.server
import json
import secrets
import ssl
import threading
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from tests.servers._proc import Process, free_port
from tests.servers.kube import KubeApiServer
from tests.servers.recipes import RECIPES

NEEDS = ("tesseract", "rekor-tiles", "timestamp-server", "fulcio")
AUDIENCE = "sigstore"
OPERATOR = "modelhooks-test"
TRUST_CONFIG_TYPE = "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"
TRUSTED_ROOT_TYPE = "application/vnd.dev.sigstore.trustedroot+json;version=0.1"
SIGNING_CONFIG_TYPE = "application/vnd.dev.sigstore.signingconfig.v0.2+json"
# The TUF target names sigstore-python's TrustUpdater asks for.
TRUSTED_ROOT_TARGET = "trusted_root.json"
SIGNING_CONFIG_TARGET = "signing_config.v0.2.json"


@dataclass(frozen=True)
class Sigstore:
    """A running private Sigstore instance (see the module docstring).

    ``trust_config`` names the real issuer as the signing config's OIDC URL (what the
    served TUF repository holds too). ``cli_trust_config`` differs in one field: its
    ``oidcUrls`` names a stub discovery document the harness serves, because
    model-signing 1.1.1's signer fetches the issuer's discovery document even when given a
    token and needs authorization/token endpoints, which the kube-apiserver's lacks (a
    harness-side workaround for the upstream ``model_signing sign sigstore`` CLI only).
    """

    fulcio_url: str
    rekor_url: str
    tsa_url: str
    ct_url: str
    tuf_url: str
    tuf_root: Path
    trust_config: Path
    cli_trust_config: Path
    issuer: str
    kube: KubeApiServer
    log_files: tuple[Path, ...] = field(default=(), compare=False)

    def env(self) -> dict[str, str]:
        """SIGSTORE_* as a Kubeflow user sets them for this instance: its URLs and its
        TUF repository with the bootstrap root."""
        return {
            "SIGSTORE_TUF_URL": self.tuf_url,
            "SIGSTORE_TUF_ROOT": str(self.tuf_root),
            "SIGSTORE_FULCIO_URL": self.fulcio_url,
            "SIGSTORE_REKOR_URL": self.rekor_url,
            "SIGSTORE_TSA_URL": self.tsa_url,
        }

    @staticmethod
    def identity(namespace: str, service_account: str) -> str:
        """The certificate identity Fulcio gives a ServiceAccount token."""
        return f"https://kubernetes.io/namespaces/{namespace}/serviceaccounts/{service_account}"

    def token(
        self,
        namespace: str,
        service_account: str,
        *,
        audience: str = AUDIENCE,
        expiration_seconds: int = 600,
    ) -> str:
        """A TokenRequest token of the ServiceAccount (namespace and account created if
        absent); the apiserver refuses expirations under 600 s (see `signed_token`)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with self.kube.api_client() as api:
            core = client.CoreV1Api(api)
            for create, args in (
                (core.create_namespace, ({"metadata": {"name": namespace}},)),
                (
                    core.create_namespaced_service_account,
                    (namespace, {"metadata": {"name": service_account}}),
                ),
            ):
                try:
                    create(*args)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
            request = client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(
                    audiences=[audience], expiration_seconds=expiration_seconds
                )
            )
            answer = core.create_namespaced_service_account_token(
                service_account, namespace, request
            )
        return str(answer.status.token)

    def signed_token(
        self,
        namespace: str,
        service_account: str,
        *,
        expires_in: int,
        audience: str = AUDIENCE,
    ) -> str:
        """A ServiceAccount token shaped as the apiserver makes them and signed with its own
        key, expiring in ``expires_in`` seconds: negative for one already expired, which
        TokenRequest cannot mint (it refuses expirations under 600 s)."""
        import jwt

        key_file = self.kube.service_account_key
        assert key_file is not None, "kube_apiserver started without a service-account key"
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        der = _spki_der(key.public_key())
        kid = base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()
        now = int(dt.datetime.now(dt.UTC).timestamp())
        issued = min(now, now + expires_in - 600)
        claims = {
            "iss": self.issuer,
            "sub": f"system:serviceaccount:{namespace}:{service_account}",
            "aud": [audience],
            "iat": issued,
            "nbf": issued,
            "exp": now + expires_in,
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {"name": service_account, "uid": secrets.token_hex(16)},
            },
        }
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})  # type: ignore[arg-type]


# --- key and CA material -------------------------------------------------------------------


def _pem(key: Any, fmt: serialization.PrivateFormat, password: bytes | None = None) -> bytes:
    encryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return bytes(key.private_bytes(serialization.Encoding.PEM, fmt, encryption))


def _spki_der(public_key: Any) -> bytes:
    return bytes(
        public_key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _fulcio_root(directory: Path, password: bytes) -> tuple[Path, Path, x509.Certificate]:
    """A self-signed P-256 root for Fulcio's file CA; its key as encrypted PKCS#8."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, OPERATOR),
            x509.NameAttribute(NameOID.COMMON_NAME, "modelhooks-test-fulcio"),
        ]
    )
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
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
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "fulcio-root.pem", directory / "fulcio-root.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(_pem(key, serialization.PrivateFormat.PKCS8, password))
    key_file.chmod(0o600)
    return cert_file, key_file, cert


# --- trust material ------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _rfc3339(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _chain(certs: list[x509.Certificate]) -> dict[str, Any]:
    return {
        "certificates": [
            {"rawBytes": _b64(c.public_bytes(serialization.Encoding.DER))} for c in certs
        ]
    }


def _subject(cert: x509.Certificate) -> dict[str, str]:
    def first(oid: x509.ObjectIdentifier) -> str:
        values = cert.subject.get_attributes_for_oid(oid)
        return str(values[0].value) if values else ""

    return {
        "organization": first(NameOID.ORGANIZATION_NAME),
        "commonName": first(NameOID.COMMON_NAME),
    }


def rekor_log_id(origin: str, public_key: ed25519.Ed25519PublicKey) -> bytes:
    """Rekor v2's log ID: the signed-note key hash, sha256(origin "\\n" 0x01 raw-key)."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(origin.encode() + b"\n\x01" + raw).digest()


def _trusted_root(
    *,
    start: str,
    fulcio_url: str,
    fulcio_root: x509.Certificate,
    rekor_url: str,
    rekor_origin: str,
    rekor_key: ed25519.Ed25519PublicKey,
    ct_url: str,
    ct_key: ec.EllipticCurvePublicKey,
    tsa_url: str,
    tsa_chain: list[x509.Certificate],
) -> dict[str, Any]:
    ct_der = _spki_der(ct_key)
    return {
        "mediaType": TRUSTED_ROOT_TYPE,
        "tlogs": [
            {
                "baseUrl": rekor_url,
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": _b64(_spki_der(rekor_key)),
                    "keyDetails": "PKIX_ED25519",
                    "validFor": {"start": start},
                },
                "logId": {"keyId": _b64(rekor_log_id(rekor_origin, rekor_key))},
            }
        ],
        "certificateAuthorities": [
            {
                "subject": _subject(fulcio_root),
                "uri": fulcio_url,
                "certChain": _chain([fulcio_root]),
                "validFor": {"start": start},
            }
        ],
        "ctlogs": [
            {
                "baseUrl": ct_url,
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": _b64(ct_der),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": start},
                },
                "logId": {"keyId": _b64(hashlib.sha256(ct_der).digest())},
            }
        ],
        "timestampAuthorities": [
            {
                "subject": _subject(tsa_chain[-1]),
                "uri": tsa_url,
                "certChain": _chain(tsa_chain),
                "validFor": {"start": start},
            }
        ],
    }


def _signing_config(
    *, start: str, fulcio_url: str, oidc_url: str, rekor_url: str, tsa_url: str
) -> dict[str, Any]:
    def service(url: str, major: int) -> dict[str, Any]:
        return {
            "url": url,
            "majorApiVersion": major,
            "validFor": {"start": start},
            "operator": OPERATOR,
        }

    return {
        "mediaType": SIGNING_CONFIG_TYPE,
        "caUrls": [service(fulcio_url, 1)],
        "oidcUrls": [service(oidc_url, 1)],
        "rekorTlogUrls": [service(rekor_url, 2)],
        "tsaUrls": [service(tsa_url, 1)],
        "rekorTlogConfig": {"selector": "ANY"},
        "tsaConfig": {"selector": "ANY"},
    }


def write_tuf_repository(directory: Path, targets: dict[str, bytes]) -> Path:
    """A one-key TUF repository (root, targets, snapshot, timestamp; no consistent
    snapshots) holding ``targets``; returns the bootstrap root.json (outside the served
    folder, as a client receives it out of band)."""
    from securesystemslib.signer import CryptoSigner
    from tuf.api.metadata import (
        Metadata,
        MetaFile,
        Root,
        Snapshot,
        TargetFile,
        Targets,
        Timestamp,
    )

    served = directory / "repository"
    (served / "targets").mkdir(parents=True)
    expires = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(days=7)
    signer = CryptoSigner.generate_ed25519()
    root = Root(expires=expires, consistent_snapshot=False)
    for role in (Root.type, Targets.type, Snapshot.type, Timestamp.type):
        root.add_key(signer.public_key, role)
    target_files = {}
    for name, data in targets.items():
        (served / "targets" / name).write_bytes(data)
        target_files[name] = TargetFile.from_data(name, data)
    targets_md = Metadata(Targets(expires=expires, targets=target_files))
    snapshot_md = Metadata(Snapshot(expires=expires, meta={"targets.json": MetaFile(1)}))
    timestamp_md = Metadata(Timestamp(expires=expires, snapshot_meta=MetaFile(1)))
    root_md = Metadata(root)
    for md, filename in (
        (root_md, "1.root.json"),
        (targets_md, "targets.json"),
        (snapshot_md, "snapshot.json"),
        (timestamp_md, "timestamp.json"),
    ):
        md.sign(signer)
        md.to_file(str(served / filename))
    bootstrap = directory / "root.json"
    root_md.to_file(str(bootstrap))
    return bootstrap


class _StaticServer:
    """A threaded HTTP server of one folder on a loopback port (the TUF repository); stops
    with the fixture's processes (it has their ``name``, ``log_path`` and ``stop``)."""

    def __init__(self, folder: Path, log_path: Path) -> None:
        self.name, self.log_path = "tuf-http", log_path
        log_path.touch()
        handler = functools.partial(_QuietHandler, directory=str(folder))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


# --- processes -----------------------------------------------------------------------------


def _get(url: str, **kwargs: Any) -> bytes:
    with urllib.request.urlopen(url, timeout=5, **kwargs) as response:
        body: bytes = response.read()
        return body


def _answers(url: str) -> Callable[[], bool]:
    """A readiness probe: ``url`` answers 2xx (urlopen raises otherwise)."""
    return lambda: _get(url) is not None


def _bind_discovery(kube: KubeApiServer) -> None:
    """Let anyone read the issuer's discovery document and JWKS (Fulcio reads them)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "modelhooks-test-oidc-discovery"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:service-account-issuer-discovery",
        },
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Group",
                "name": "system:unauthenticated",
            }
        ],
    }
    with kube.api_client() as api:
        try:
            client.RbacAuthorizationV1Api(api).create_cluster_role_binding(binding)
        except ApiException as exc:
            if exc.status != 409:
                raise
    # read anonymously, as Fulcio will
    context = ssl.create_default_context(cafile=str(kube.ca_file))
    document = json.loads(_get(f"{kube.url}/.well-known/openid-configuration", context=context))
    if document.get("issuer") != kube.url:
        raise RuntimeError(f"kube-apiserver issuer is {document.get('issuer')!r}, not {kube.url}")


def start_sigstore(workdir: Path, kube: KubeApiServer) -> tuple[Sigstore, list[Any]]:
    processes: list[Any] = []
    try:
        return _start(workdir, kube, processes), processes
    except BaseException:
        for process in reversed(processes):
            process.stop()
        raise


def _start(workdir: Path, kube: KubeApiServer, processes: list[Any]) -> Sigstore:
    keys = workdir / "keys"
    keys.mkdir()
    start = _rfc3339(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    issuer = kube.url
    _bind_discovery(kube)

    password = secrets.token_hex(16).encode()
    fulcio_cert_file, fulcio_key_file, fulcio_root = _fulcio_root(keys, password)

    # CT log (TesseraCT): P-256 key in SEC1 PEM; accepts chains to the Fulcio root.
    ct_port = free_port()
    ct_url = f"http://127.0.0.1:{ct_port}"
    ct_key = ec.generate_private_key(ec.SECP256R1())
    ct_key_file = keys / "ct.pem"
    ct_key_file.write_bytes(_pem(ct_key, serialization.PrivateFormat.TraditionalOpenSSL))
    (workdir / "ct-storage").mkdir()
    ct = Process(
        "tesseract",
        [
            RECIPES["tesseract"].binary(),
            f"--http_endpoint=127.0.0.1:{ct_port}",
            f"--origin=ct.{OPERATOR}.local",
            f"--storage_dir={workdir / 'ct-storage'}",
            f"--private_key={ct_key_file}",
            f"--roots_pem_file={fulcio_cert_file}",
            "--ext_key_usages=CodeSigning",
        ],
        log_path=workdir / "tesseract.log",
        # its OTLP metrics exporter is always on: point it at a port nobody listens on
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}"},
    )
    processes.append(ct)

    # Rekor v2 (rekor-tiles): Ed25519 key in PKCS#8 PEM; the origin is its hostname.
    rekor_port = free_port()
    rekor_url = f"http://127.0.0.1:{rekor_port}"
    rekor_origin = f"rekor.{OPERATOR}.local"
    rekor_key = ed25519.Ed25519PrivateKey.generate()
    rekor_key_file = keys / "rekor.pem"
    rekor_key_file.write_bytes(_pem(rekor_key, serialization.PrivateFormat.PKCS8))
    (workdir / "rekor-storage").mkdir()
    rekor = Process(
        "rekor-tiles",
        [
            RECIPES["rekor-tiles"].binary(),
            "serve",
            "--http-address=127.0.0.1",
            f"--http-port={rekor_port}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={free_port()}",
            f"--http-metrics-port={free_port()}",
            f"--hostname={rekor_origin}",
            f"--storage-dir={workdir / 'rekor-storage'}",
            f"--signer-filepath={rekor_key_file}",
            "--checkpoint-interval=1s",
        ],
        log_path=workdir / "rekor-tiles.log",
    )
    processes.append(rekor)

    # Timestamp authority (our main over its packages: in-memory signer, no metrics, no NTP).
    tsa_port = free_port()
    tsa_url = f"http://127.0.0.1:{tsa_port}/api/v1/timestamp"
    tsa = Process(
        "timestamp-server",
        [RECIPES["timestamp-server"].binary(), "--host=127.0.0.1", f"--port={tsa_port}"],
        log_path=workdir / "timestamp-server.log",
    )
    processes.append(tsa)

    ct.wait_ready(_answers(f"{ct_url}/ct/v1/get-roots"), timeout=60)
    rekor.wait_ready(_answers(f"{rekor_url}/healthz"), timeout=60)
    tsa.wait_ready(_answers(f"{tsa_url}/certchain"), timeout=60)
    tsa_chain = x509.load_pem_x509_certificates(_get(f"{tsa_url}/certchain"))

    # Fulcio: file CA, the kube-apiserver as a `kubernetes` issuer, SCTs from the CT log.
    fulcio_port = free_port()
    fulcio_url = f"http://127.0.0.1:{fulcio_port}"
    fulcio_config = workdir / "fulcio-config.json"
    fulcio_config.write_text(
        json.dumps(
            {
                "OIDCIssuers": {
                    issuer: {
                        "IssuerURL": issuer,
                        "ClientID": AUDIENCE,
                        "Type": "kubernetes",
                        "CACert": kube.ca.cert_pem.decode(),
                    }
                }
            },
            indent=2,
        )
    )
    fulcio = Process(
        "fulcio",
        [
            RECIPES["fulcio"].binary(),
            "serve",
            "--host=127.0.0.1",
            f"--port={fulcio_port}",
            "--grpc-host=127.0.0.1",
            f"--grpc-port={free_port()}",
            f"--metrics-port={free_port()}",  # bound on all interfaces, no flag for it
            f"--legacy-unix-domain-socket={workdir / 'fulcio.sock'}",
            f"--config-path={fulcio_config}",
            "--ca=fileca",
            f"--fileca-cert={fulcio_cert_file}",
            f"--fileca-key={fulcio_key_file}",
            f"--fileca-key-passwd={password.decode()}",
            "--fileca-watch=false",
            f"--ct-log-url={ct_url}",
        ],
        log_path=workdir / "fulcio.log",
    )
    processes.append(fulcio)
    fulcio.wait_ready(_answers(f"{fulcio_url}/api/v2/trustBundle"), timeout=60)

    # Trust: the trusted root and signing config, as a ClientTrustConfig file and as TUF
    # targets served over HTTP (the same HTTP server serves the OIDC stub for the CLI).
    trusted_root = _trusted_root(
        start=start,
        fulcio_url=fulcio_url,
        fulcio_root=fulcio_root,
        rekor_url=rekor_url,
        rekor_origin=rekor_origin,
        rekor_key=rekor_key.public_key(),
        ct_url=ct_url,
        ct_key=ct_key.public_key(),
        tsa_url=tsa_url,
        tsa_chain=tsa_chain,
    )
    urls = {"fulcio_url": fulcio_url, "rekor_url": rekor_url, "tsa_url": tsa_url}
    signing_config = _signing_config(start=start, oidc_url=issuer, **urls)
    tuf_dir = workdir / "tuf"
    tuf_root = write_tuf_repository(
        tuf_dir,
        {
            TRUSTED_ROOT_TARGET: json.dumps(trusted_root, indent=2).encode(),
            SIGNING_CONFIG_TARGET: json.dumps(signing_config, indent=2).encode(),
        },
    )
    served = tuf_dir / "repository"
    http_server = _StaticServer(served, workdir / "tuf-http.log")
    processes.append(http_server)
    stub_url = f"{http_server.url}/oidc-stub"
    stub = served / "oidc-stub" / ".well-known"
    stub.mkdir(parents=True)
    (stub / "openid-configuration").write_text(
        json.dumps(
            {
                "issuer": stub_url,
                "authorization_endpoint": f"{stub_url}/authorize",
                "token_endpoint": f"{stub_url}/token",
                "jwks_uri": f"{stub_url}/jwks",
            }
        )
    )
    trust_config = workdir / "trust_config.json"
    cli_trust_config = workdir / "trust_config.cli.json"
    for path, oidc_url in ((trust_config, issuer), (cli_trust_config, stub_url)):
        document = {
            "mediaType": TRUST_CONFIG_TYPE,
            "trustedRoot": trusted_root,
            "signingConfig": _signing_config(start=start, oidc_url=oidc_url, **urls),
        }
        path.write_text(json.dumps(document, indent=2))
    return Sigstore(
        fulcio_url=fulcio_url,
        rekor_url=rekor_url,
        tsa_url=tsa_url,
        ct_url=ct_url,
        tuf_url=http_server.url,
        tuf_root=tuf_root,
        trust_config=trust_config,
        cli_trust_config=cli_trust_config,
        issuer=issuer,
        kube=kube,
        log_files=tuple(p.log_path for p in (ct, rekor, tsa, fulcio)),
    )
