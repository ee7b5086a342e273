"""The Kubernetes adapters' API client: one `ApiClient` per adapter, built on first use (or
injected) by `modelhooks.adapters.kube_client.connect` (a kubeconfig file when one is
configured, else the pod's in-cluster configuration; the `kubernetes` client is imported
only then), shared by its threads and closed with the adapter. Each function that talks to
the cluster has its own setting naming its kubeconfig (`cleanup.kubeconfig`,
`notify.kubeconfig`), so each runs as its own identity with its own RBAC.

>>> connection = Connection.configured("", variable="MODELHOOKS_NOTIFY_KUBECONFIG", env={})
>>> connection is None  # no kubeconfig and not in a cluster: no cluster access
True
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from modelhooks.adapters.kube_client import check_kubeconfig, connect, in_cluster
from modelhooks.core.extras import require

__all__ = ["Connection"]


class Connection:
    """One API client, built on first use from `kubeconfig` (else in-cluster config), or the
    one injected. `variable` names the setting in messages; `needs` says what for."""

    def __init__(
        self, api_client: Any = None, *, kubeconfig: str = "", variable: str, needs: str
    ) -> None:
        if api_client is None:  # its library is imported on first use: checked here, at build
            require("k8s", needs or variable)
        self._api_client = api_client
        self._kubeconfig = kubeconfig
        self._variable = variable
        self._needs = needs
        self._lock = threading.Lock()

    @classmethod
    def configured(
        cls,
        kubeconfig: str,
        *,
        variable: str,
        needs: str = "",
        env: Mapping[str, str] | None = None,
    ) -> Connection | None:
        """A connection through `kubeconfig` when one is configured (ConfigError at start-up
        when the file is missing), else through the pod's in-cluster configuration when the
        process runs in one (KUBERNETES_SERVICE_HOST); None otherwise: no cluster."""
        check_kubeconfig(kubeconfig, variable)
        if kubeconfig or in_cluster(env):
            return cls(kubeconfig=kubeconfig, variable=variable, needs=needs)
        return None

    @property
    def api_client(self) -> Any:
        with self._lock:
            if self._api_client is None:
                self._api_client = self._connect()
            return self._api_client

    def _connect(self) -> Any:
        return connect(self._kubeconfig, variable=self._variable, needs=self._needs)

    def close(self) -> None:
        with self._lock:
            if self._api_client is not None:
                self._api_client.close()
                self._api_client = None
