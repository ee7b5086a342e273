"""The functions as Pods on the harness's real node (tests/servers/node.py): the image the
image test builds, pushed to the node's registry, installed as `kubectl apply -k
infra/kubernetes` renders it (the install without Knative), each function a Deployment with
its own ServiceAccount and the RBAC of infra/k8s.

End to end in the cluster: a Model created → watch-models (a Pod) → the broker (a Pod) →
register and notify (Pods) → Registered; the registry's push notification → the ingress Pod →
sign (a Pod, the key from its Secret) → notify → Signed and Ready; a Deployment annotated
with the Model rolls out a new ReplicaSet; deleting the Model → cleanup (a Pod) deletes the
manifest → the finalizer is released. No Pod meets an RBAC denial.

What the test node changes in the install, and why: tests/e2e/pods.py.
"""

from __future__ import annotations

import functools
import json
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.model_registry.kubernetes import GROUP, VERSION
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core.conditions import FINALIZER
from modelhooks.core.errors import NotFound
from tests.e2e.pods import HOME, MODELS, Installed, install, push_model
from tests.servers.containers import Podman
from tests.servers.fixtures import SIGSTORE_NEEDS, _serve
from tests.servers.node import Node
from tests.servers.registries import OciRegistry
from tests.servers.sigstore import Sigstore, start_sigstore

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture(scope="module")
def node_sigstore(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, node: Node
) -> Iterator[Sigstore]:
    """A private Sigstore whose OIDC issuer is the node's apiserver: Fulcio accepts the
    tokens the kubelet projects into the node's Pods."""
    yield from _serve(
        request, tmp_path_factory, SIGSTORE_NEEDS, functools.partial(start_sigstore, kube=node.kube)
    )


@pytest.fixture(scope="module")
def installed(
    node: Node, image: str, podman: Podman, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    with install(node, image, podman, tmp_path_factory.mktemp("pods")) as done:
        yield done


def _notification(registry: OciRegistry, repository: str, digest: str) -> bytes:
    """The push notification distribution sends (its envelope, as events/samples has it)."""
    event = {
        "id": uuid.uuid4().hex,
        "timestamp": "2026-11-27T00:00:00Z",
        "action": "push",
        "target": {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "repository": repository,
            "url": f"{registry.url}/v2/{repository}/manifests/{digest}",
            "tag": "1",
        },
        "request": {"host": registry.host, "method": "PUT"},
    }
    return json.dumps({"events": [event]}).encode()


def _notify_push(installed: Installed, registry: OciRegistry, name: str, digest: str) -> None:
    """The registry's push notification, delivered to the ingress Pod as a registry would:
    again while it answers 5xx (a function of the chain failed transiently)."""
    body = _notification(registry, name, digest)

    def accepted() -> bool:
        request = urllib.request.Request(
            installed.url("modelhooks-ingress") + "/",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status == 202
        except urllib.error.HTTPError as exc:
            print(f"the ingress answered {exc.code}: {exc.read()[:2000]!r}")
            if exc.code < 500:
                raise
            return False

    installed.until("the ingress to accept the push", accepted, timeout=60)


def _models(installed: Installed) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(installed.api)


def _model(objects: Any, name: str) -> dict[str, Any] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        found: dict[str, Any] = objects.get_namespaced_custom_object(
            GROUP, VERSION, MODELS, "models", name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def _conditions(model: dict[str, Any] | None) -> dict[str, str]:
    return {
        c["type"]: c["status"] for c in ((model or {}).get("status") or {}).get("conditions", [])
    }


def _server_deployment(installed: Installed, model: str) -> Any:
    """A workload of the Model's (annotated modelhooks.dev/model), running the probe image."""
    from kubernetes import client

    labels = {"app": model}
    apps = client.AppsV1Api(installed.api)
    apps.create_namespaced_deployment(MODELS, {
        "metadata": {"name": model, "annotations": {"modelhooks.dev/model": model}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": installed.node.probe_image,
                                "args": ["sleep"]}],
            }},
        },
    })  # fmt: skip
    return apps


def _replica_sets(apps: Any, model: str) -> list[Any]:
    return apps.list_namespaced_replica_set(MODELS, label_selector=f"app={model}").items


def _rolled_out(installed: Installed, model: str) -> set[str]:
    """The workload's Pods once its rollout is complete (the old ones gone)."""
    installed.kubectl("rollout", "status", f"deployment/{model}", "-n", MODELS, "--timeout=90s")
    return installed.until(
        "one Pod running", lambda: len(p := _running_pods(installed, model)) == 1 and p
    )


def _running_pods(installed: Installed, model: str) -> set[str]:
    from kubernetes import client

    pods = client.CoreV1Api(installed.api).list_namespaced_pod(
        MODELS, label_selector=f"app={model}"
    )
    return {p.metadata.name for p in pods.items if p.status.phase == "Running"}


def test_a_model_is_registered_signed_ready_rolled_out_and_cleaned_up_by_the_pods(
    installed: Installed, distribution3: OciRegistry, tmp_path: Path
) -> None:
    name = f"pods-{uuid.uuid4().hex[:8]}"
    digest = push_model(distribution3, name, name, tmp_path)
    apps = _server_deployment(installed, name)
    installed.until("the workload's first ReplicaSet", lambda: len(_replica_sets(apps, name)) == 1)
    objects = _models(installed)
    started = time.monotonic()
    _create(objects, name, f"{distribution3.host}/{name}:1", "1", deletionPolicy="Delete",
            signing={"enabled": True, "method": "key",
                     "keySecretRef": {"name": "modelhooks-signing-key"}})  # fmt: skip
    installed.until(
        f"{name} Registered",
        lambda: _conditions(_model(objects, name)).get("Registered") == "True",
    )
    _notify_push(installed, distribution3, name, digest)

    def ready() -> dict[str, Any] | None:
        model = _model(objects, name)
        held = FINALIZER in ((model or {}).get("metadata", {}).get("finalizers") or [])
        return model if held and _conditions(model).get("Ready") == "True" else None

    model = installed.until(f"{name} Ready", ready)
    print(f"\nModel created → Ready with the functions as Pods: {time.monotonic() - started:.2f} s")
    assert _conditions(model) == {"Registered": "True", "Signed": "True", "Ready": "True"}
    assert model["status"]["resolvedDigest"] == digest
    assert model["status"]["signatureRef"]

    # notify's rollout: the Model's workload got a new ReplicaSet, annotated with the version
    installed.until("the rollout's new ReplicaSet", lambda: len(_replica_sets(apps, name)) == 2)
    template = apps.read_namespaced_deployment(name, MODELS).spec.template.metadata.annotations
    assert template["modelhooks.dev/model-version"] == f"1@{digest}"

    # deleting the Model: cleanup deletes the manifest, notify releases the finalizer; the
    # workload keeps running what it runs
    pods = _rolled_out(installed, name)
    objects.delete_namespaced_custom_object(GROUP, VERSION, MODELS, "models", name)
    oci = DistributionRegistry(distribution3.url)

    def manifest_gone() -> bool:
        try:
            oci.manifest(name, digest)
        except NotFound:
            return True
        return False

    installed.until(f"{name}@{digest} deleted by cleanup", manifest_gone)
    installed.until(f"{name} gone (finalizer released)", lambda: _model(objects, name) is None)

    # the Model again, a version that fails (its tag was never pushed): nothing rolls, the
    # old Pods keep running ("keep the healthy state")
    _create(objects, name, f"{distribution3.host}/{name}:2", "2")
    installed.until(
        "register to refuse version 2",
        lambda: any(f"{name}:2" in text for text in installed.logs().values()),
    )
    time.sleep(3)  # what notify would do has had its time
    assert _conditions(_model(objects, name)).get("Ready") != "True"
    assert len(_replica_sets(apps, name)) == 2
    assert _running_pods(installed, name) == pods
    objects.delete_namespaced_custom_object(GROUP, VERSION, MODELS, "models", name)
    installed.until(f"{name} v2 gone", lambda: _model(objects, name) is None)

    # a version that is Ready: a new ReplicaSet, new Pods
    good = push_model(distribution3, name, f"{name} v3", tmp_path, tag="3")
    _create(objects, name, f"{distribution3.host}/{name}:3", "3")
    installed.until("the rollout of version 3", lambda: len(_replica_sets(apps, name)) == 3)
    template = apps.read_namespaced_deployment(name, MODELS).spec.template.metadata.annotations
    assert template["modelhooks.dev/model-version"] == f"3@{good}"
    assert _rolled_out(installed, name).isdisjoint(pods)
    objects.delete_namespaced_custom_object(GROUP, VERSION, MODELS, "models", name)
    _no_denials(installed)


def _create(objects: Any, name: str, reference: str, version: str, **spec: Any) -> None:
    """A Model in MODELS (deletionPolicy Retain unless `spec` says otherwise)."""
    objects.create_namespaced_custom_object(GROUP, VERSION, MODELS, "models", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Model",
        "metadata": {"name": name, "namespace": MODELS},
        "spec": {"source": {"oci": {"reference": reference}}, "version": version, **spec},
    })  # fmt: skip


def test_sign_as_a_pod_signs_keylessly_as_its_service_account(
    installed: Installed, node_sigstore: Sigstore, distribution3: OciRegistry, tmp_path: Path
) -> None:
    """sign switched to keyless as services.yaml says (the key dropped, SIGSTORE_* set, the
    bootstrap root.json from a ConfigMap): its projected token (audience sigstore) is its
    identity, and the Model's Signed condition names that ServiceAccount."""
    kubectl = installed.kubectl
    kubectl("create", "configmap", "sigstore-root", "-n", HOME,
            f"--from-file=root.json={node_sigstore.tuf_root}")  # fmt: skip
    env = {**node_sigstore.env(), "SIGSTORE_TUF_ROOT": "/etc/sigstore/root.json"}
    kubectl("patch", "deployment", "modelhooks-sign", "-n", HOME, "--type=json", "-p", json.dumps([
        {"op": "add", "path": "/spec/template/spec/volumes/-",
         "value": {"name": "sigstore-root", "configMap": {"name": "sigstore-root"}}},
        {"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts/-",
         "value": {"name": "sigstore-root", "mountPath": "/etc/sigstore", "readOnly": True}},
    ]))  # fmt: skip
    kubectl("set", "env", "deployment/modelhooks-sign", "-n", HOME, "MODELHOOKS_SIGNING_KEY-",
            *[f"{k}={v}" for k, v in env.items()])  # fmt: skip
    kubectl("rollout", "status", "deployment/modelhooks-sign", "-n", HOME, "--timeout=120s")

    name = f"keyless-{uuid.uuid4().hex[:8]}"
    digest = push_model(distribution3, name, name, tmp_path)
    objects = _models(installed)
    _create(objects, name, f"{distribution3.host}/{name}:1", "1",
            signing={"enabled": True, "method": "keyless"})  # fmt: skip
    _notify_push(installed, distribution3, name, digest)
    model = installed.until(
        f"{name} Ready, signed keylessly",
        lambda: (m := _model(objects, name)) and _conditions(m).get("Ready") == "True" and m,
        timeout=120,
    )
    signed = next(c for c in model["status"]["conditions"] if c["type"] == "Signed")
    assert node_sigstore.identity(HOME, "modelhooks-sign") in signed["message"], signed
    objects.delete_namespaced_custom_object(GROUP, VERSION, MODELS, "models", name)
    _no_denials(installed)


def _no_denials(installed: Installed) -> None:
    """Every RBAC denial a Pod met, by Pod, with the verb the apiserver refused."""
    denied = {
        pod: [line for line in text.splitlines() if re.search(r"forbidden|\b403\b", line, re.I)]
        for pod, text in installed.logs().items()
    }
    denied = {pod: lines for pod, lines in denied.items() if lines}
    assert not denied, "RBAC denials:\n" + "\n".join(
        f"{pod}: {line[:400]}" for pod, lines in denied.items() for line in lines
    )
