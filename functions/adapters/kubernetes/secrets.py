"""`KubernetesSecrets`: the `Secrets` port on the Kubernetes API (the `kubernetes` client,
imported on first use), through a kubeconfig file or the pod's in-cluster configuration.

What it may read is up to RBAC: cleanup's ClusterRole `modelhooks-cleanup-secrets` is bound
per namespace by its owner (infra/k8s/rbac/cleanup.yaml), so a refusal names the namespace,
the Secret and how to grant it.

>>> secrets = kubernetes_secrets("/etc/modelhooks/kubeconfig")  # doctest: +SKIP
>>> secrets.get("ml", "s3-credentials")  # doctest: +SKIP
{'AWS_ACCESS_KEY_ID': b'…', 'AWS_SECRET_ACCESS_KEY': b'…'}
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from modelhooks.adapters.kubernetes.connection import Connection
from modelhooks.core.errors import (
    Forbidden,
    ModelhooksError,
    NotFound,
    Throttled,
    Unavailable,
)

__all__ = ["KubernetesSecrets", "kubernetes_secrets", "secret_error"]

VARIABLE = "MODELHOOKS_CLEANUP_KUBECONFIG"
GRANT = "modelhooks-cleanup-secrets"  # the ClusterRole a namespace owner binds


def kubernetes_secrets(
    kubeconfig: str = "", *, env: Mapping[str, str] | None = None
) -> KubernetesSecrets | None:
    """Secrets through `kubeconfig` when one is configured (ConfigError at start-up when the
    file is missing), else through the pod's in-cluster configuration when the process runs
    in one (KUBERNETES_SERVICE_HOST); None otherwise: no cluster to read from."""
    connection = Connection.configured(
        kubeconfig, variable=VARIABLE, needs="reading Secrets", env=env
    )
    return None if connection is None else KubernetesSecrets(connection=connection)


def secret_error(exc: Exception, namespace: str, name: str) -> ModelhooksError:
    """The modelhooks error for a kubernetes ApiException on a Secret read."""
    status = getattr(exc, "status", None)
    where = f"Secret {name!r} in namespace {namespace!r}"
    details = {"namespace": namespace, "secret": name}
    if status == 404:
        return NotFound(f"{where} does not exist", **details)
    if status == 403:
        return Forbidden(
            f"cleanup may not read {where}: the namespace's owner grants it by binding the "
            f"ClusterRole {GRANT} to cleanup's ServiceAccount with a RoleBinding in {namespace!r}",
            **details,
        )
    if status == 429:
        return Throttled(f"the Kubernetes API throttled reading {where}", **details)
    # 401 (a rotated or expired token: the client reloads it), 5xx, connection errors
    return Unavailable(f"the Kubernetes API failed reading {where}: {status or exc}", **details)


class KubernetesSecrets:
    """Reads Secrets with one API client, built on first use (or injected) from
    `kubeconfig`, else from the pod's in-cluster configuration. `timeout` bounds each
    request (seconds)."""

    def __init__(
        self,
        api_client: Any = None,
        *,
        kubeconfig: str = "",
        timeout: float = 10.0,
        connection: Connection | None = None,
    ):
        self._connection = connection or Connection(
            api_client, kubeconfig=kubeconfig, variable=VARIABLE, needs="reading Secrets"
        )
        self._timeout = timeout

    @property
    def api_client(self) -> Any:
        return self._connection.api_client

    def get(self, namespace: str, name: str) -> dict[str, bytes]:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = client.CoreV1Api(self.api_client)
        try:
            secret = api.read_namespaced_secret(name, namespace, _request_timeout=self._timeout)
        except ApiException as exc:
            raise secret_error(exc, namespace, name) from None
        except Exception as exc:  # urllib3 connection errors, timeouts
            raise secret_error(exc, namespace, name) from exc
        try:
            return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        except (binascii.Error, TypeError) as exc:  # the API server always encodes: not seen
            raise Unavailable(f"Secret {namespace}/{name}: undecodable data: {exc}") from None

    def close(self) -> None:
        self._connection.close()
