"""VerificationPolicies from the cluster (the PolicySource port): a namespace's own and
every ClusterVerificationPolicy, listed for each review (two GETs on loopback-fast
informer-less reads, so a policy change counts at the next admission; verdicts are cached
by the policy's resourceVersion, not the list).

>>> source = kubernetes_policies("")  # doctest: +SKIP
>>> source.policies("team-a")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from modelhooks.adapters.kubernetes.connection import Connection
from modelhooks.core.errors import ConfigError, Unavailable
from modelhooks.core.logs import log
from modelhooks.core.verification import Policy

__all__ = ["GROUP", "KubernetesPolicies", "NoPolicies", "kubernetes_policies"]

GROUP, VERSION = "modelhooks.dev", "v1alpha1"
VARIABLE = "MODELHOOKS_ADMISSION_KUBECONFIG"


class NoPolicies:
    """Outside a cluster: no policy, so every model reference is refused (fail-closed)."""

    def policies(self, namespace: str) -> list[Policy]:
        return []


def kubernetes_policies(
    kubeconfig: str = "", *, env: Mapping[str, str] | None = None
) -> KubernetesPolicies | NoPolicies:
    connection = Connection.configured(kubeconfig, variable=VARIABLE, needs="admission", env=env)
    return NoPolicies() if connection is None else KubernetesPolicies(connection=connection)


class KubernetesPolicies:
    def __init__(
        self, api_client: Any = None, *, connection: Connection | None = None, timeout: float = 5.0
    ) -> None:
        self._connection = connection or Connection(
            api_client, variable=VARIABLE, needs="admission"
        )
        self._timeout = timeout

    def policies(self, namespace: str) -> list[Policy]:
        from kubernetes import client

        custom = client.CustomObjectsApi(self._connection.api_client)
        try:
            own = custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "verificationpolicies", _request_timeout=self._timeout
            )
            cluster = custom.list_cluster_custom_object(
                GROUP, VERSION, "clusterverificationpolicies", _request_timeout=self._timeout
            )
        except client.ApiException as e:
            raise Unavailable(f"listing VerificationPolicies: HTTP {e.status} {e.reason}") from None
        except Exception as e:  # urllib3 timeouts, connection refused
            raise Unavailable(f"listing VerificationPolicies: {e}") from None
        found = []
        for doc in [*own.get("items", []), *cluster.get("items", [])]:
            try:
                found.append(Policy.from_resource(doc))
            except (ConfigError, KeyError, TypeError) as e:  # the CRD refuses these; skip
                log(logging.WARNING, "verification policy skipped", error=str(e))
        return found

    def close(self) -> None:
        self._connection.close()
