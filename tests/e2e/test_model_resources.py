"""Model resources on a real kube-apiserver → `modelhooks watch-models` (a local
ApiServerSource) → `modelhooks serve` → register archives the deleted model."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.core.records import ModelState
from tests.e2e.conftest import MODELHOOKS, Served
from tests.local_store import lay_model
from tests.servers._proc import free_port
from tests.servers.kube import KubeApiServer

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

CRD = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "crds" / "model.yaml"


@pytest.fixture(scope="module")
def models_api(kube_apiserver: KubeApiServer) -> Iterator[Any]:
    """The Model CRD installed and served; yields a CustomObjectsApi."""
    from kubernetes import client

    kube_apiserver.install_crd(CRD, "models")
    with kube_apiserver.api_client() as api:
        yield client.CustomObjectsApi(api)


def post_pushed(served: Served, model: str) -> None:
    lay_model(served.home, "models", f"models/{model}/1")  # what the push names
    event = {
        "specversion": "1.0",
        "id": f"e2e-{model}",
        "source": "/e2e",
        "type": "dev.modelhooks.artifact.pushed",
        "time": "2026-01-01T00:00:00Z",
        "data": {
            "model": model,
            "version": "1",
            "uri": f"gs://models/models/{model}/1/",
            "digest": "gcs-generation:1",
            "store": "gcs",
        },
    }
    req = urllib.request.Request(
        served.url + "/",
        data=json.dumps(event).encode(),
        headers={"Content-Type": "application/cloudevents+json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def test_deleting_the_model_resource_archives_the_registered_model(
    kube_apiserver: KubeApiServer,
    models_api: Any,
    serve: Callable[..., Served],
    tmp_path: Path,
) -> None:
    served = serve(free_port())
    name = "e2e-sentiment"
    post_pushed(served, name)
    model = served.registry.get_model(name)
    assert model is not None and model.state == ModelState.LIVE

    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    log = tmp_path / "watch.log"
    with log.open("wb") as out:
        watcher = subprocess.Popen(
            [MODELHOOKS, "watch-models", "--kubeconfig", str(kubeconfig), "--to", served.url + "/"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        body = {
            "apiVersion": "modelhooks.dev/v1alpha1",
            "kind": "Model",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"source": {"gcs": {"uri": f"gs://models/models/{name}/1/"}}, "version": "1"},
        }
        models_api.create_namespaced_custom_object(
            "modelhooks.dev", "v1alpha1", "default", "models", body
        )
        served.wait_for("the add event", lambda: "resource.add" in log.read_text(), timeout=30)
        models_api.delete_namespaced_custom_object(
            "modelhooks.dev", "v1alpha1", "default", "models", name
        )

        def archived() -> bool:
            found = served.registry.get_model(name)
            return found is not None and found.state == ModelState.ARCHIVED

        served.wait_for(f"{name} to be archived (watch log: {log})", archived, timeout=30)
        version = served.registry.get_version(model.id, "1")
        assert version is not None and version.state == ModelState.ARCHIVED
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)
