"""Hostile but valid `Model` objects from a REAL kube-apiserver, sent as `watch-models` sends
them (the object as the API server gives it, managedFields and all) to `serve`'s functions:
what Kubernetes takes, the functions take; nothing is a 5xx."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from modelhooks.adapters.kubernetes.model_source import GROUP, PLURAL, VERSION, to_cloudevent
from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from tests.local_store import lay_model
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

CRD = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "crds" / "model.yaml"
# a qualified name at Kubernetes' limits: a 253-character DNS prefix, '/', 63 characters
LONGEST_KEY = ("p" * 61 + ".") * 4 + "q" * 5 + "/" + "n" * 63


@pytest.fixture(scope="module")
def models(kube_apiserver: KubeApiServer) -> Iterator[Any]:
    from kubernetes import client

    kube_apiserver.install_crd(CRD, PLURAL)
    with kube_apiserver.api_client() as api:
        name = f"hostile-{uuid.uuid4().hex[:8]}"
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
        yield client.CustomObjectsApi(api), name


@pytest.fixture
def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FlaskClient, Path]]:
    """`serve`'s functions in-process on a fresh home (SQLite registry, local store)."""
    from modelhooks import bootstrap
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import create_app

    for var in list(os.environ):
        if var.startswith("MODELHOOKS_") or var == "K_SINK":
            monkeypatch.delenv(var)
    home = tmp_path / "home"
    monkeypatch.setenv("MODELHOOKS_HOME", str(home))
    bootstrap.reset()
    yield create_app(build().broker()).test_client(), home
    bootstrap.reset()


def _versions(home: Path, model: str) -> list[str]:
    registry = SqliteModelRegistry(home / "registry.db")
    found = registry.get_model(model)
    return [v.name for v in registry.list_versions(found.id)] if found else []


def test_a_model_labelled_and_annotated_at_kubernetes_limits_is_registered(
    models: tuple[Any, str], serve: tuple[FlaskClient, Path]
) -> None:
    """A 317-character label and annotation key (their managedFields key `f:<key>`: 319) was
    over ingress's key limit of 256: the Model's every event a 400, never registered, and
    its deletion never cleaned up."""
    objects, namespace = models
    client, home = serve
    lay_model(home, "models", "models/labelled/1")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Model",
        "metadata": {
            "name": "labelled",
            "labels": {LONGEST_KEY: "x" * 63},
            "annotations": {LONGEST_KEY: "y"},
        },
        "spec": {"source": {"gcs": {"uri": "gs://models/models/labelled/1/"}}, "version": "1"},
    }
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    stored = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "labelled")
    assert any(
        f"f:{LONGEST_KEY}" in str(m["fieldsV1"]) for m in stored["metadata"]["managedFields"]
    )
    event = to_cloudevent("add", stored, "https://apiserver")
    resp = client.post("/", json=event, content_type="application/cloudevents+json")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert _versions(home, "labelled") == ["1"]


def test_a_model_with_a_finalizer_and_a_condition_at_kubernetes_limits_is_registered(
    models: tuple[Any, str], serve: tuple[FlaskClient, Path]
) -> None:
    """Another controller's finalizer (a 317-character qualified name: managedFields key
    `v:"<name>"`, 321) and condition (type of the CRD's 316: `k:{"type":"<type>"}`, 329)
    were over ingress's key limit of 320: the Model's every event a 400."""
    objects, namespace = models
    client, home = serve
    lay_model(home, "models", "models/finalized/1")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Model",
        "metadata": {"name": "finalized", "finalizers": [LONGEST_KEY]},
        "spec": {"source": {"gcs": {"uri": "gs://models/models/finalized/1/"}}, "version": "1"},
    }
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    condition = {
        "type": LONGEST_KEY[:-1],  # 316, the CRD's maxLength
        "status": "True",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "reason": "Watched",
        "message": "",
    }
    objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "finalized", {"status": {"conditions": [condition]}}
    )
    stored = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "finalized")
    fields = str([m["fieldsV1"] for m in stored["metadata"]["managedFields"]])
    assert f'v:"{LONGEST_KEY}"' in fields and f'k:{{"type":"{LONGEST_KEY[:-1]}"}}' in fields
    event = to_cloudevent("add", stored, "https://apiserver")
    resp = client.post("/", json=event, content_type="application/cloudevents+json")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert _versions(home, "finalized") == ["1"]


def test_a_model_as_big_as_the_api_server_stores_is_registered(
    models: tuple[Any, str], serve: tuple[FlaskClient, Path]
) -> None:
    """Labels have no total limit, so a Model is as big as etcd stores (1.5 MiB), managedFields
    naming each label again: over ingress's body limit of 1 MiB, its every event was a 413
    (never retried): never registered, its finalizer never added, and when it grew after
    getting it, its deletion never cleaned up and the finalizer held for ever."""
    objects, namespace = models
    client, home = serve
    lay_model(home, "models", "models/big/1")
    prefix = LONGEST_KEY.partition("/")[0]
    labels = {f"{prefix}/{i:05d}{'n' * 58}": "x" * 63 for i in range(3800)}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Model",
        "metadata": {"name": "big", "labels": labels},
        "spec": {"source": {"gcs": {"uri": "gs://models/models/big/1/"}}, "version": "1"},
    }
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    stored = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "big")
    event = to_cloudevent("add", stored, "https://apiserver")
    import json

    assert len(json.dumps(event)) > 1 << 20
    resp = client.post("/", json=event, content_type="application/cloudevents+json")
    assert resp.status_code == 200, resp.get_data(as_text=True)[:500]
    assert _versions(home, "big") == ["1"]
