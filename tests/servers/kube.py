"""etcd + kube-apiserver on loopback, envtest-style (no controller-manager, no scheduler).

What is missing without a controller-manager: garbage collection, automatic ServiceAccount
tokens (use TokenRequest), namespace finalization (deleted namespaces stay Terminating).
"""

from __future__ import annotations

import contextlib
import json
import signal
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.servers._proc import Process, free_port
from tests.servers.recipes import KUBE_VERSION, RECIPES
from tests.servers.tls import CertificateAuthority, write_rsa_key


@dataclass(frozen=True)
class KubeApiServer:
    """What a client needs: ``url``, ``ca_file`` (PEM), ``admin_token`` (group system:masters).

    ``ca`` is the harness CA: it signed the apiserver's serving certificate and can issue
    certificates for webhook listeners the apiserver should call (``ca.server_context(...)``;
    use ``ca.cert_pem`` as the webhook's caBundle).
    """

    url: str
    ca_file: Path
    admin_token: str
    ca: CertificateAuthority
    etcd_url: str
    version: str
    log_files: tuple[Path, ...]
    # the key that signs its ServiceAccount tokens (RSA, PEM): for tokens TokenRequest
    # cannot mint, e.g. already expired ones
    service_account_key: Path | None = None

    def write_kubeconfig(
        self, path: Path, *, token: str | None = None, user: str = "admin"
    ) -> Path:
        """Write a kubeconfig (JSON is valid YAML) using ``token`` or the admin token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "modelhooks-test",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": user, "user": {"token": token or self.admin_token}}],
            "contexts": [{"name": user, "context": {"cluster": "modelhooks-test", "user": user}}],
            "current-context": user,
        }
        path.write_text(json.dumps(config, indent=2))
        return path

    def install_crd(self, path: Path, plural: str, timeout: float = 30) -> None:
        """Create the CRD at ``path`` (installed already by another module: fine) and wait
        until its resources are served (Established is not enough: a list must work)."""
        import yaml
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        crd = yaml.safe_load(path.read_text())
        group, version = crd["spec"]["group"], crd["spec"]["versions"][0]["name"]
        with self.api_client() as api:
            try:
                client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
            except ApiException as exc:
                if exc.status != 409:
                    raise
            objects, deadline = client.CustomObjectsApi(api), time.monotonic() + timeout
            cluster_scoped = crd["spec"].get("scope") == "Cluster"
            while True:
                try:
                    if cluster_scoped:
                        objects.list_cluster_custom_object(group, version, plural)
                    else:
                        objects.list_namespaced_custom_object(group, version, "default", plural)
                    return
                except ApiException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def apply(self, *paths: Path) -> None:
        """Create every document of the YAML files (or of a folder's ``*.yaml``, in name
        order) as the admin, as `kubectl apply` would on a fresh cluster: one present already
        (409, another module of the session made it) is fine."""
        import yaml
        from kubernetes import utils

        files = [f for p in paths for f in (sorted(p.glob("*.yaml")) if p.is_dir() else [p])]
        docs = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
        with self.api_client() as api:
            for doc in docs:
                try:
                    utils.create_from_dict(api, doc)
                except utils.FailToCreateError as exc:
                    if any(e.status != 409 for e in exc.api_exceptions):
                        raise

    def token_for(self, account: str, namespace: str, *, seconds: int = 600) -> str:
        """A TokenRequest token of the ServiceAccount (no controller-manager mints any)."""
        from kubernetes import client

        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[self.url], expiration_seconds=seconds)
        )
        with self.api_client() as api:
            answer = client.CoreV1Api(api).create_namespaced_service_account_token(
                account, namespace, request
            )
        return str(answer.status.token)

    @contextlib.contextmanager
    def api_client(self, token: str | None = None) -> Iterator[Any]:
        """A configured ``kubernetes.client.ApiClient`` (closed on exit)."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.ca_file)
        configuration.api_key = {"authorization": token or self.admin_token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        api = client.ApiClient(configuration)
        try:
            yield api
        finally:
            api.close()  # type: ignore[no-untyped-call,unused-ignore]


def _get(url: str, *, token: str | None = None, context: ssl.SSLContext | None = None) -> str:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=5, context=context) as response:
        body: bytes = response.read()
        return body.decode()


def _ready(url: str, token: str, ca_file: Path) -> Callable[[], bool]:
    context = ssl.create_default_context(cafile=str(ca_file))
    return lambda: _get(f"{url}/readyz", token=token, context=context) == "ok"


def restart_apiserver(
    kube: KubeApiServer, processes: list[Process], *, crash: bool = False
) -> float:
    """Stop the kube-apiserver of ``processes`` (from `start_kube`; SIGTERM, or SIGKILL if
    ``crash``) and start it again with the same argv: same port, certificates and etcd,
    which keeps running. The new process replaces the old in ``processes`` (so whoever
    stops ``processes`` stops it); returns the seconds the API was down."""
    index = next(i for i, p in enumerate(processes) if p.name == "kube-apiserver")
    old = processes[index]
    if crash:
        old.stop_signal = signal.SIGKILL
    down = time.monotonic()
    old.stop()
    new = Process(old.name, old.argv, log_path=old.log_path, stop_signal=signal.SIGTERM)
    processes[index] = new
    new.wait_ready(_ready(kube.url, kube.admin_token, kube.ca_file), timeout=120)
    return time.monotonic() - down


# A node's kubelet (tests/servers/node.py) authenticates with this token as the Node authorizer
# expects: user system:node:<node name>, group system:nodes.
NODE_NAME = "localhost"
KUBELET_TOKEN = "modelhooks-kubelet-token"


def start_kube(workdir: Path, *, for_node: bool = False) -> tuple[KubeApiServer, list[Process]]:
    """etcd + kube-apiserver; ``for_node``: configured for a kubelet and controller-manager
    (Node authorizer, ServiceAccount admission, a client certificate for calls to the kubelet,
    the ImageVolume feature gate; ../shared/NODE-LOCAL.md)."""
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    peer_url = f"http://127.0.0.1:{peer_port}"
    etcd = Process(
        "etcd",
        [
            RECIPES["etcd"].binary(),
            "--name=default",
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
        log_path=workdir / "etcd.log",
    )
    processes = [etcd]
    try:
        etcd.wait_ready(lambda: '"health":"true"' in _get(f"{etcd_url}/health"), timeout=30)
        ca = CertificateAuthority.create(workdir / "pki")
        cert, key = ca.issue("kube-apiserver", workdir / "pki")
        sa_key = write_rsa_key(workdir / "pki" / "service-account.key")
        admin_token = "modelhooks-admin-token"
        tokens = workdir / "tokens.csv"
        tokens.write_text(f'{admin_token},admin,admin-uid,"system:masters"\n')
        node_args = [
            "--authorization-mode=RBAC",
            "--disable-admission-plugins=ServiceAccount",
            # OCI image volumes (KEP-4639) kept in Pod specs, for the admission webhook's tests
            "--feature-gates=ImageVolume=true",
        ]
        if for_node:
            with tokens.open("a") as lines:
                lines.write(f'{KUBELET_TOKEN},system:node:{NODE_NAME},kubelet-uid,"system:nodes"\n')
            client_cert, client_key = ca.issue("kube-apiserver-kubelet-client", workdir / "pki")
            node_args = [
                "--authorization-mode=Node,RBAC",
                f"--kubelet-client-certificate={client_cert}",
                f"--kubelet-client-key={client_key}",
                "--kubelet-preferred-address-types=Hostname",
                "--feature-gates=ImageVolume=true",
            ]
        url = f"https://127.0.0.1:{api_port}"
        apiserver = Process(
            "kube-apiserver",
            [
                RECIPES["kube-apiserver"].binary(),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={workdir / 'certs'}",
                f"--tls-cert-file={cert}",
                f"--tls-private-key-file={key}",
                f"--client-ca-file={ca.cert_file}",
                "--service-cluster-ip-range=10.0.0.0/24",
                f"--service-account-issuer={url}",
                # the discovery document names it (Fulcio's `kubernetes` issuer reads it)
                f"--service-account-jwks-uri={url}/openid/v1/jwks",
                f"--service-account-key-file={sa_key}",
                f"--service-account-signing-key-file={sa_key}",
                f"--token-auth-file={tokens}",
                *node_args,
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--v=1",
            ],
            log_path=workdir / "kube-apiserver.log",
        )
        processes.append(apiserver)
        apiserver.wait_ready(_ready(url, admin_token, ca.cert_file), timeout=120)
        info = KubeApiServer(
            url=url,
            ca_file=ca.cert_file,
            admin_token=admin_token,
            ca=ca,
            etcd_url=etcd_url,
            version=KUBE_VERSION,
            log_files=(apiserver.log_path, etcd.log_path),
            service_account_key=sa_key,
        )
        return info, processes
    except BaseException:
        for process in reversed(processes):
            process.stop()
        raise
