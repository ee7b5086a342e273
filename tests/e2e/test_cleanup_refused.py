"""A Model whose cleanup is refused for good, on a real kube-apiserver: `modelhooks
watch-models --raw` → `modelhooks serve` (Kubernetes registry, notify and cleanup on the
apiserver, tenancy for the namespace) → cleanup refuses the deletion (a Secret that is not
there; a source outside the namespace's tenancy) → notify: the condition CleanupFailed
(reason CleanupRefused) and a Warning Event on the Model, its finalizer kept and its manifest
left in the registry; then deletionPolicy Retain: the cleanup succeeds, CleanupFailed turns
False and the finalizer goes (the artifacts stay)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.model_registry.kubernetes import GROUP, VERSION
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core.conditions import FINALIZER
from tests.e2e.conftest import MODELHOOKS, Served
from tests.e2e.pods import push_model
from tests.e2e.test_model_chain import registry_namespace, serve_on_cluster  # noqa: F401
from tests.e2e.test_model_resources import models_api  # noqa: F401 (a fixture)
from tests.servers.kube import KubeApiServer
from tests.servers.registries import OciRegistry

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

HOLD = "example.com/hold"  # another controller's finalizer: the Model stays to be read


class Cluster:
    """The Models of one namespace of its own, watched and served."""

    def __init__(self, kube: KubeApiServer, models: Any, namespace: str, served: Served) -> None:
        self.kube, self.models, self.namespace, self.served = kube, models, namespace, served

    def create(self, name: str, spec: dict[str, Any], finalizers: list[str]) -> None:
        meta = {"name": name, "namespace": self.namespace, "finalizers": finalizers}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": meta}
        self.models.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "models", {**body, "spec": spec}
        )

    def get(self, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            found: dict[str, Any] = self.models.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "models", name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def patch(self, name: str, patch: dict[str, Any]) -> None:
        self.models.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "models", name, patch
        )

    def delete(self, name: str) -> None:
        self.models.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, "models", name)

    def cleanup_failed(self, name: str) -> dict[str, Any]:
        status = (self.get(name) or {}).get("status") or {}
        found = [c for c in status.get("conditions", []) if c["type"] == "CleanupFailed"]
        return found[0] if found else {}

    def refused(self, name: str) -> dict[str, Any]:
        """CleanupFailed once it says CleanupRefused ({} until then)."""
        condition = self.cleanup_failed(name)
        return condition if condition.get("reason") == "CleanupRefused" else {}

    def column(self, name: str, column: str) -> Any:
        """The Model's cell in `column` of `kubectl get models -o wide` (the Table API)."""
        api = self.models.api_client
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/models/{name}"
        request = api.param_serialize(
            "GET", path, auth_settings=["BearerToken"],
            header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        )  # fmt: skip
        answer = api.call_api(*request)
        answer.read()
        table = json.loads(answer.data)
        names = [c["name"] for c in table["columnDefinitions"]]
        return table["rows"][0]["cells"][names.index(column)]

    def warnings(self, name: str) -> list[Any]:
        from kubernetes import client

        with self.kube.api_client() as api:
            events = client.EventsV1Api(api).list_namespaced_event(self.namespace).items
        return [e for e in events if e.regarding.name == name and e.type == "Warning"]


@pytest.fixture
def cluster(
    kube_apiserver: KubeApiServer,
    models_api: Any,  # noqa: F811
    registry_namespace: str,  # noqa: F811
    distribution3: OciRegistry,
    serve: Callable[..., Served],
    tmp_path: Path,
) -> Iterator[Cluster]:
    """serve whose tenancy lets the namespace act on `cleanup-refused/allowed/` of the
    registry only, fed by watch-models on that namespace."""
    from kubernetes import client

    namespace = f"refused-{uuid.uuid4().hex[:8]}"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
    tenants = f"{namespace}=oci://{distribution3.host}/cleanup-refused/allowed/"
    served, kubeconfig = serve_on_cluster(
        kube_apiserver, registry_namespace, serve, tmp_path, "--tenancy-tenants", tenants
    )
    log = tmp_path / "watch.log"
    with log.open("wb") as out:
        watcher = subprocess.Popen(
            [MODELHOOKS, "watch-models", "--kubeconfig", kubeconfig, "--namespace", namespace,
             "--raw", "--to", served.url + "/"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield Cluster(kube_apiserver, models_api, namespace, served)
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)


def test_a_refused_cleanup_is_told_on_the_model_and_a_later_one_clears_it(
    cluster: Cluster, distribution3: OciRegistry, tmp_path: Path
) -> None:
    served, name = cluster.served, f"no-secret-{uuid.uuid4().hex[:8]}"
    repo = f"cleanup-refused/allowed/{name}"
    digest = push_model(distribution3, repo, name, tmp_path, tag="v1")
    oci = DistributionRegistry(distribution3.url)
    reference = f"{distribution3.host}/{repo}@{digest}"
    source = {"oci": {"reference": reference}, "secretRef": {"name": f"{name}-creds"}}
    cluster.create(name, {"source": source, "version": "1", "deletionPolicy": "Delete"}, [HOLD])

    def held() -> bool:  # notify holds it for cleanup (deletionPolicy Delete)
        return FINALIZER in ((cluster.get(name) or {})["metadata"].get("finalizers") or [])

    served.wait_for(f"{name} held by {FINALIZER}", held, timeout=60)
    cluster.delete(name)  # cleanup reads the Secret spec.source.secretRef names: not there
    condition = served.wait_for(f"{name} CleanupRefused", lambda: cluster.refused(name), 60)
    assert condition["status"] == "True"
    assert f"Secret '{name}-creds' in namespace '{cluster.namespace}'" in condition["message"]
    assert "kubectl annotate model" in condition["message"]
    assert cluster.column(name, "Cleanup") == "CleanupRefused"
    (warning,) = cluster.warnings(name)
    assert warning.reason == "CleanupRefused" and warning.action == "KeepFinalizer"
    model = cluster.get(name)
    assert model is not None and model["metadata"]["deletionTimestamp"]
    assert set(model["metadata"]["finalizers"]) == {FINALIZER, HOLD}
    assert oci.manifest(repo, digest)  # nothing was deleted

    # the engineer keeps the artifacts: Retain, whose cleanup reads no Secret and succeeds
    cluster.patch(name, {"spec": {"deletionPolicy": "Retain"}})

    def released() -> dict[str, Any] | None:
        model = cluster.get(name) or {"metadata": {}}
        return model if model["metadata"].get("finalizers") == [HOLD] else None

    served.wait_for(f"{FINALIZER} removed from {name}", released, timeout=60)
    served.wait_for(f"CleanupFailed gone from {name}", lambda: not cluster.cleanup_failed(name))
    assert oci.manifest(repo, digest)  # Retain: the manifest stays
    cluster.patch(name, {"metadata": {"finalizers": None}})  # the other controller lets go
    served.wait_for(f"{name} gone", lambda: cluster.get(name) is None)


def test_a_source_outside_the_namespace_is_told_on_the_model_with_nothing_deleted(
    cluster: Cluster, distribution3: OciRegistry, tmp_path: Path
) -> None:
    """A Model holding the finalizer (given before its namespace's tenancy was narrowed)
    whose source its namespace may not act on: every function refuses it, and its deletion
    is told on it rather than dead-lettered alone."""
    served, name = cluster.served, f"elsewhere-{uuid.uuid4().hex[:8]}"
    repo = f"cleanup-refused/other-team/{name}"
    digest = push_model(distribution3, repo, name, tmp_path, tag="v1")
    source = {"oci": {"reference": f"{distribution3.host}/{repo}@{digest}"}}
    spec = {"source": source, "version": "1", "deletionPolicy": "Delete"}
    cluster.create(name, spec, [FINALIZER])
    cluster.delete(name)
    condition = served.wait_for(f"{name} CleanupRefused", lambda: cluster.refused(name), 60)
    location = f"oci://{distribution3.host}/{repo}"
    assert f"namespace '{cluster.namespace}' may not act on {location}" in condition["message"]
    (warning,) = cluster.warnings(name)
    assert warning.reason == "CleanupRefused"
    assert DistributionRegistry(distribution3.url).manifest(repo, digest)  # nothing deleted
    model = cluster.get(name)
    assert model is not None and model["metadata"]["finalizers"] == [FINALIZER]
    cluster.patch(name, {"metadata": {"finalizers": None}})  # let go by hand, as it says
    served.wait_for(f"{name} gone", lambda: cluster.get(name) is None)
