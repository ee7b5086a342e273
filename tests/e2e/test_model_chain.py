"""The whole Kubernetes chain on a real kube-apiserver: oras push → a `Model` naming it →
`modelhooks watch-models --raw` (a local ApiServerSource) → `modelhooks serve` with the
Kubernetes registry on the same apiserver → register → notify: the finalizer, Registered and
Ready with observedGeneration and Events, a ModelVersion resource; then deleting the Model →
cleanup deletes the manifest → notify lets the Model go. A paused Model gets nothing."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.model_registry.kubernetes import GROUP, MODEL_LABEL, VERSION, object_name
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core.conditions import FINALIZER
from modelhooks.core.errors import NotFound
from tests.e2e.conftest import MODELHOOKS, Served
from tests.e2e.pods import push_model
from tests.e2e.test_model_resources import models_api  # noqa: F401 (a fixture)
from tests.servers._proc import free_port
from tests.servers.kube import KubeApiServer
from tests.servers.registries import OciRegistry

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

CRDS = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "crds"


@pytest.fixture(scope="module")
def registry_namespace(kube_apiserver: KubeApiServer, models_api: Any) -> str:  # noqa: F811
    """The registry's CRDs served, and a namespace of its own for its records."""
    return registry_on(kube_apiserver, "registry")


def registry_on(kube_apiserver: KubeApiServer, prefix: str) -> str:
    """The Kubernetes registry's CRDs served, and a new namespace `<prefix>-…` for its
    records (its name)."""
    from kubernetes import client

    namespace = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kube_apiserver.install_crd(CRDS / "registeredmodel.yaml", "registeredmodels")
    kube_apiserver.install_crd(CRDS / "modelversion.yaml", "modelversions")
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
    return namespace


def serve_on_cluster(
    kube_apiserver: KubeApiServer,
    registry_namespace: str,
    serve: Callable[..., Served],
    tmp_path: Path,
    *flags: str,
) -> tuple[Served, str]:
    """`modelhooks serve` with the Kubernetes registry, notify and cleanup on the apiserver
    (signing off, `flags` added), and the kubeconfig it uses."""
    kubeconfig = str(kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    served = serve(
        free_port(),
        "--registry-backend", "kubernetes",
        "--registry-kubeconfig", kubeconfig,
        "--registry-namespace", registry_namespace,
        "--notify-kubeconfig", kubeconfig,
        "--cleanup-kubeconfig", kubeconfig,
        "--store-allow-local-targets", "true",
        "--signing-enabled", "false",
        *flags,
    )  # fmt: skip
    return served, kubeconfig


@pytest.fixture
def chain(
    kube_apiserver: KubeApiServer,
    registry_namespace: str,
    serve: Callable[..., Served],
    tmp_path: Path,
) -> Iterator[tuple[Served, Path]]:
    """`modelhooks serve` (Kubernetes registry, notify and cleanup on the apiserver) fed by
    `modelhooks watch-models --raw`; yields the server and the watcher's log."""
    served, kubeconfig = serve_on_cluster(kube_apiserver, registry_namespace, serve, tmp_path)
    log = tmp_path / "watch.log"
    with log.open("wb") as out:
        watcher = subprocess.Popen(
            [MODELHOOKS, "watch-models", "--kubeconfig", kubeconfig, "--namespace", "default",
             "--raw", "--to", served.url + "/"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield served, log
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)


def test_a_model_is_registered_ready_and_cleaned_up_through_the_whole_chain(
    chain: tuple[Served, Path],
    models_api: Any,  # noqa: F811
    distribution3: OciRegistry,
    kube_apiserver: KubeApiServer,
    registry_namespace: str,
    tmp_path: Path,
) -> None:
    served, log = chain
    name = f"chain-{uuid.uuid4().hex[:8]}"
    repo = f"model-chain/{name}"
    digest = push_model(distribution3, repo, name, tmp_path, tag="v1")
    oci = DistributionRegistry(distribution3.url)

    started = time.monotonic()
    _create(models_api, name, {
        "source": {"oci": {"reference": f"{distribution3.host}/{repo}:v1"}},
        "version": "1",
        "deletionPolicy": "Delete",
    })  # fmt: skip

    def ready() -> dict[str, Any] | None:  # Ready and held: notify sees the registration
        model = _get(models_api, name)  # and the creation in either order
        conditions = _conditions(model)
        held = FINALIZER in model["metadata"].get("finalizers", [])
        return model if held and conditions.get("Ready", {}).get("status") == "True" else None

    model = served.wait_for(f"{name} Ready (watch log: {log})", ready, timeout=60)
    elapsed = time.monotonic() - started
    print(f"\ncreate → Ready: {elapsed:.2f} s")
    generation = model["metadata"]["generation"]
    conditions = _conditions(model)
    assert conditions["Registered"]["status"] == "True"
    assert {c["observedGeneration"] for c in conditions.values()} == {generation}
    assert model["status"]["observedGeneration"] == generation
    assert model["status"]["resolvedDigest"] == digest  # the tag, resolved once
    assert FINALIZER in model["metadata"]["finalizers"]
    reasons = {e.reason for e in _events(kube_apiserver, name)}
    assert {"FinalizerAdded", "Registered"} <= reasons, reasons

    # kubectl get modelversions: the registry's record of it
    versions = models_api.list_namespaced_custom_object(
        GROUP, VERSION, registry_namespace, "modelversions",
        label_selector=f"{MODEL_LABEL}={object_name(name)}",
    )["items"]  # fmt: skip
    assert [(v["spec"]["modelName"], v["spec"]["name"]) for v in versions] == [(name, "1")]
    assert model["status"]["modelVersionId"] == versions[0]["metadata"]["name"]

    models_api.delete_namespaced_custom_object(GROUP, VERSION, "default", "models", name)

    def manifest_gone() -> bool:
        try:
            oci.manifest(repo, digest)
        except NotFound:
            return True
        return False

    served.wait_for(f"{repo}@{digest} deleted by cleanup", manifest_gone, timeout=60)
    served.wait_for(f"{name} gone (finalizer removed)", lambda: _get(models_api, name) is None)
    assert "CleanedUp" in {e.reason for e in _events(kube_apiserver, name)}


def test_a_paused_model_gets_no_status_and_no_registration(
    chain: tuple[Served, Path],
    models_api: Any,  # noqa: F811
    distribution3: OciRegistry,
    registry_namespace: str,
) -> None:
    served, log = chain
    name = f"paused-{uuid.uuid4().hex[:8]}"
    _create(models_api, name, {
        "source": {"oci": {"reference": f"{distribution3.host}/model-chain/{name}:v1"}},
        "version": "1",
        "deletionPolicy": "Delete",
        "paused": True,
    })  # fmt: skip
    served.wait_for("the add event", lambda: name in log.read_text(), timeout=30)
    served.wait_for("serve to skip it", lambda: "paused" in served.log.read_text(), timeout=30)
    time.sleep(2)  # anything the chain would do has had its time
    model = _get(models_api, name)
    assert model is not None and not model.get("status")
    assert FINALIZER not in (model["metadata"].get("finalizers") or [])
    records = models_api.list_namespaced_custom_object(
        GROUP, VERSION, registry_namespace, "registeredmodels"
    )["items"]
    assert name not in {r["spec"].get("name") for r in records}
    models_api.delete_namespaced_custom_object(GROUP, VERSION, "default", "models", name)


def _create(objects: Any, name: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Model",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }
    objects.create_namespaced_custom_object(GROUP, VERSION, "default", "models", body)


def _get(objects: Any, name: str) -> dict[str, Any] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        found: dict[str, Any] = objects.get_namespaced_custom_object(
            GROUP, VERSION, "default", "models", name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def _conditions(model: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    status = (model or {}).get("status") or {}
    return {c["type"]: c for c in status.get("conditions", [])}


def _events(kube_apiserver: KubeApiServer, name: str) -> list[Any]:
    from kubernetes import client

    with kube_apiserver.api_client() as api:
        events = client.EventsV1Api(api).list_namespaced_event("default").items
    return [e for e in events if e.regarding and e.regarding.name == name]


def test_a_namespace_deleted_with_its_models_lets_them_go(
    models_api: Any,  # noqa: F811
    distribution3: OciRegistry,
    kube_apiserver: KubeApiServer,
    registry_namespace: str,
    serve: Callable[..., Served],
    tmp_path: Path,
) -> None:
    """A namespace deleted with Models under Delete in it (the namespace controller deletes
    them; here the test does): the API server creates nothing in it any more, notify's Events
    and the registry's records included. Both Models, one registered and one whose tag was
    never pushed, are cleaned up and let go, every delivery answered 2xx: notify answered 403
    before removing a finalizer (the namespace Terminating for ever), and register 403 for
    the Model it had no record of."""
    import json

    from kubernetes import client

    served, kubeconfig = serve_on_cluster(kube_apiserver, registry_namespace, serve, tmp_path)
    ns = f"going-{uuid.uuid4().hex[:8]}"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    name = f"kept-{uuid.uuid4().hex[:8]}"
    repo = f"model-chain/{name}"
    digest = push_model(distribution3, repo, name, tmp_path, tag="v1")
    log = tmp_path / "watch.log"
    with log.open("wb") as out:
        watcher = subprocess.Popen(
            [MODELHOOKS, "watch-models", "--kubeconfig", kubeconfig, "--namespace", ns,
             "--raw", "--to", served.url + "/"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        for model, tag in ((name, "v1"), ("never-pushed", "v404")):
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Model",
                "metadata": {"name": model},
                "spec": {
                    "source": {"oci": {"reference": f"{distribution3.host}/{repo}:{tag}"}},
                    "version": "1",
                    "deletionPolicy": "Delete",
                },
            }
            models_api.create_namespaced_custom_object(GROUP, VERSION, ns, "models", body)

        def get(model: str) -> dict[str, Any] | None:
            found: list[dict[str, Any]] = models_api.list_namespaced_custom_object(
                GROUP, VERSION, ns, "models", field_selector=f"metadata.name={model}"
            )["items"]
            return found[0] if found else None

        def held() -> bool:
            ready = _conditions(get(name)).get("Ready", {}).get("status") == "True"
            return ready and all(
                FINALIZER in ((get(m) or {}).get("metadata") or {}).get("finalizers", [])
                for m in (name, "never-pushed")
            )

        served.wait_for(f"both held, {name} Ready (watch log: {log})", held, timeout=60)
        with kube_apiserver.api_client() as api:
            client.CoreV1Api(api).delete_namespace(ns)
        for model in (name, "never-pushed"):  # the namespace controller's part
            models_api.delete_namespaced_custom_object(GROUP, VERSION, ns, "models", model)
        for model in (name, "never-pushed"):
            served.wait_for(f"{model} gone (watch log: {log})", lambda m=model: get(m) is None)
        with pytest.raises(NotFound):
            DistributionRegistry(distribution3.url).manifest(repo, digest)
        time.sleep(1)  # the last deliveries' lines
        outcomes = [
            json.loads(line)
            for line in served.log.read_text().splitlines()
            if line.startswith("{") and '"function"' in line
        ]
        failed = [o for o in outcomes if o["status"] >= 400]
        assert outcomes and not failed, failed
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)
