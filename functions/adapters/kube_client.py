"""One way to reach a Kubernetes API server, for every adapter family that needs one (the
families may not import each other): a kubeconfig file when one is configured, else the
pod's in-cluster configuration. The `kubernetes` client is imported here, on first use.

>>> api = connect("/etc/modelhooks/kubeconfig", variable="MODELHOOKS_REGISTRY_KUBECONFIG")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from modelhooks.core.errors import ConfigError, Unavailable
from modelhooks.core.extras import importing

__all__ = ["check_kubeconfig", "connect", "in_cluster"]


def in_cluster(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs in a pod (the in-cluster configuration can work)."""
    return bool((os.environ if env is None else env).get("KUBERNETES_SERVICE_HOST"))


def check_kubeconfig(kubeconfig: str, variable: str) -> None:
    """At start-up: a configured kubeconfig must exist (ConfigError naming `variable`)."""
    if kubeconfig and not Path(kubeconfig).is_file():
        raise ConfigError(f"{variable}={kubeconfig}: no such file")


def connect(kubeconfig: str, *, variable: str, needs: str) -> Any:
    """An `ApiClient` through `kubeconfig`, else the in-cluster configuration. ConfigError
    when the client is not installed (`needs` says for what); Unavailable when the
    configuration cannot be used (a token file not mounted yet is worth a retry)."""
    with importing("k8s", needs):
        from kubernetes import client, config
    where = f"{variable}={kubeconfig}" if kubeconfig else "in-cluster config"
    try:
        if kubeconfig:
            return config.new_client_from_config(config_file=kubeconfig)
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise Unavailable(f"no usable Kubernetes configuration ({where}): {exc}") from None
