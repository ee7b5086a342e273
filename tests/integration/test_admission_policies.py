"""The admission function's policy source on the real kube-apiserver, as the
modelhooks-admission ServiceAccount: (Cluster)VerificationPolicies listed, then kept by a
watch (created, changed — a new resourceVersion, so a new verdict key — and deleted)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.kubernetes.connection import Connection
from modelhooks.adapters.kubernetes.policies import PLURALS, KubernetesPolicies
from modelhooks.core.verification import Policy
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

K8S = Path(__file__).resolve().parents[2] / "infra" / "k8s"
GROUP, VERSION = "modelhooks.dev", "v1alpha1"
PEM = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"


def eventually(check: Callable[[], Any], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_policies_are_listed_then_kept_by_a_watch(
    kube_apiserver: KubeApiServer, tmp_path: Path
) -> None:
    from kubernetes import client

    for crd, plural in (
        ("verificationpolicy", "verificationpolicies"),
        ("clusterverificationpolicy", "clusterverificationpolicies"),
    ):
        kube_apiserver.install_crd(K8S / "crds" / f"{crd}.yaml", plural)
    kube_apiserver.apply(K8S / "rbac")
    namespace = f"pol-{uuid.uuid4().hex[:8]}"
    token = kube_apiserver.token_for("modelhooks-admission", "modelhooks")
    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig", token=token)
    source = KubernetesPolicies(
        connection=Connection(kubeconfig=str(kubeconfig), variable="X", needs="test")
    )
    name = f"team-{uuid.uuid4().hex[:6]}"
    cluster_name = f"platform-{uuid.uuid4().hex[:6]}"

    def names(fresh: bool = False) -> set[str]:
        return {p.name for p in source.policies(namespace, fresh=fresh)}

    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
        custom = client.CustomObjectsApi(api)
        spec = {"keys": [{"name": "k", "pem": PEM}]}
        try:
            assert name not in names(fresh=True)
            assert eventually(lambda: source._synced == set(PLURALS))
            custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, "verificationpolicies",
                {"apiVersion": f"{GROUP}/{VERSION}", "kind": "VerificationPolicy", "metadata": {"name": name}, "spec": spec},
            )  # fmt: skip
            custom.create_cluster_custom_object(
                GROUP, VERSION, "clusterverificationpolicies",
                {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterVerificationPolicy", "metadata": {"name": cluster_name}, "spec": spec},
            )  # fmt: skip
            assert eventually(lambda: {name, cluster_name} <= names())  # from the watch
            (before,) = [p for p in source.policies(namespace) if p.name == name]
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "verificationpolicies", name, {"spec": {"mode": "warn"}}
            )

            def changed() -> Policy | None:
                found = [p for p in source.policies(namespace) if p.name == name]
                return found[0] if found and found[0].mode == "warn" else None

            after = eventually(changed)
            assert after is not None and after.version != before.version  # a new verdict key
            assert name not in {p.name for p in source.policies("default")}  # its namespace only
            assert cluster_name in {p.name for p in source.policies("default")}
            custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, "verificationpolicies", name
            )
            assert eventually(lambda: name not in names())
        finally:
            source.close()
            with contextlib.suppress(client.ApiException):
                custom.delete_cluster_custom_object(
                    GROUP, VERSION, "clusterverificationpolicies", cluster_name
                )
