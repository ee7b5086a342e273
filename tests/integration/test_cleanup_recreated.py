"""A Model (deletionPolicy Delete) deleted before notify added its finalizer and created
again under its name with the same source (a new uid), on the real kube-apiserver: the old
Model's deletion, cleaned up before register heard of the new one, keeps the source the new
Model names (cleanup reads the namespace's Models as its own ServiceAccount, with the RBAC
of infra/k8s/rbac/cleanup.yaml), and says it kept it; the new Model's own deletion takes it.
Before, the old deletion deleted the new Model's source (its objects gone)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from modelhooks.bootstrap import build
from modelhooks.core.settings import load_settings
from modelhooks.events.model import ArtifactPurged, CanonicalEvent, ModelDeleted
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

K8S = Path(__file__).resolve().parents[2] / "infra" / "k8s"
GROUP, VERSION, PLURAL = "modelhooks.dev", "v1alpha1", "models"


def test_a_recreated_models_source_is_kept_from_the_old_ones_deletion(
    kube_apiserver: KubeApiServer, tmp_path: Path
) -> None:
    from kubernetes import client

    rbac = K8S / "rbac"
    kube_apiserver.apply(
        K8S / "crds" / "model.yaml", rbac / "00-namespace.yaml", rbac / "cleanup.yaml"
    )
    token = kube_apiserver.token_for("modelhooks-cleanup", "modelhooks", seconds=3600)
    kubeconfig = kube_apiserver.write_kubeconfig(
        tmp_path / "kubeconfig", token=token, user="modelhooks-cleanup"
    )
    namespace = f"recreated-{uuid.uuid4().hex[:8]}"
    spec = {"source": {"s3": {"uri": "s3://models/bert/1/"}}, "version": "1",
            "deletionPolicy": "Delete"}  # fmt: skip
    files = tmp_path / "store" / "models" / "bert" / "1"
    files.mkdir(parents=True)
    for name in ("weights.bin", "_SUCCESS"):
        (files / name).write_bytes(b"x")
    app = build(
        load_settings(
            env={"MODELHOOKS_HOME": str(tmp_path), "MODELHOOKS_CLEANUP_KUBECONFIG": str(kubeconfig)}
        ),
        registry=InMemoryModelRegistry(),
    )
    cleanup = app.function("cleanup")

    def deleted(uid: str) -> list[CanonicalEvent]:
        data = ModelDeleted(name="bert", namespace=namespace, version="1", uid=uid, spec=spec)
        event = CanonicalEvent(
            id=f"{uid}-deleted", source="t", type=data.TYPE, data=data, time=datetime.now(UTC)
        )
        return cleanup.handle(event)

    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
        custom = client.CustomObjectsApi(api)

        def create() -> str:
            body: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model",
                                    "metadata": {"name": "bert"}, "spec": spec}  # fmt: skip
            made = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
            return str(made["metadata"]["uid"])

        old = create()
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "bert")
        new = create()  # no finalizer: the old one went at once, the name is free
        assert new != old

        (reply,) = deleted(old)  # cleanup of the old before register of the new
        assert sorted(p.name for p in files.iterdir()) == ["_SUCCESS", "weights.bin"]
        assert isinstance(reply.data, ArtifactPurged)
        assert reply.data.deleted == []
        assert reply.data.kept == ["s3://models/bert/1/"]

        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "bert")
        deleted(new)  # the new one's own deletion: nothing names it now
        assert not files.exists() or list(files.iterdir()) == []
