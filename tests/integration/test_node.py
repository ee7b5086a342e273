"""The harness's node runs real Pods (tests/servers/node.py): a Pod to completion with its
logs read through the kubelet, a hostNetwork Pod calling the apiserver with its projected
ServiceAccount token, a Deployment's Pod Ready, an OCI image volume mounted, and a stopped
node leaving nothing behind."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers.node import Node, leftovers, start_node

pytestmark = pytest.mark.integration


def _until(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if value := check():
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not after {timeout:.0f}s")
        time.sleep(0.3)


@pytest.fixture
def core(node: Node) -> Iterator[Any]:
    from kubernetes import client

    with node.kube.api_client() as api:
        yield client.CoreV1Api(api)


@pytest.fixture
def namespace(node: Node, core: Any) -> str:
    """A fresh namespace whose ``default`` ServiceAccount exists (Pods need it)."""
    from kubernetes.client.exceptions import ApiException

    name = f"node-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": name}})

    def account() -> bool:
        try:
            return bool(core.read_namespaced_service_account("default", name))
        except ApiException:
            return False

    _until(f"ServiceAccount {name}/default", account, 30)
    return name


def _pod(name: str, image: str, args: list[str], **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": image, "args": args, **spec.pop("container", {})}
    return {
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def _finished(core: Any, namespace: str, name: str, timeout: float = 60) -> str:
    """The phase a Pod ended in (Succeeded/Failed) and its logs read through the kubelet."""
    phase = _until(
        f"Pod {namespace}/{name} finished",
        lambda: (
            core.read_namespaced_pod(name, namespace).status.phase in ("Succeeded", "Failed")
            and core.read_namespaced_pod(name, namespace).status.phase
        ),
        timeout,
    )
    logs = core.read_namespaced_pod_log(name, namespace)
    assert phase == "Succeeded", f"Pod {name} {phase}; logs:\n{logs}"
    return str(logs)


def test_a_pod_on_the_bridge_runs_to_completion_and_its_logs_are_read(
    node: Node, core: Any, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, _pod("hello", node.probe_image, ["cat", "/etc/hostname"]))
    assert _finished(core, namespace, "hello").strip() == "/etc/hostname: hello"
    pod = core.read_namespaced_pod("hello", namespace)
    assert pod.status.pod_ip.startswith("10.244."), pod.status.pod_ip  # the bridge's subnet


def test_a_host_network_pod_calls_the_apiserver_as_its_service_account(
    node: Node, core: Any, namespace: str
) -> None:
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "prober"}})
    pod = _pod(
        "whoami",
        node.probe_image,
        ["whoami"],
        hostNetwork=True,
        serviceAccountName="prober",
        container={"env": node.pod_env},
    )
    core.create_namespaced_pod(namespace, pod)
    logs = _finished(core, namespace, "whoami")
    assert f'"username":"system:serviceaccount:{namespace}:prober"' in logs, logs
    # the projected token names the Pod it was issued to
    assert '"authentication.kubernetes.io/pod-name":["whoami"]' in logs, logs


def test_a_deployment_pod_becomes_ready(node: Node, namespace: str) -> None:
    from kubernetes import client

    labels = {"app": "sleeper"}
    deployment = {
        "metadata": {"name": "sleeper"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": node.probe_image, "args": ["sleep"]}],
                },
            },
        },
    }
    with node.kube.api_client() as api:
        apps = client.AppsV1Api(api)
        apps.create_namespaced_deployment(namespace, deployment)
        _until(
            "Deployment sleeper ready",
            lambda: (
                (apps.read_namespaced_deployment("sleeper", namespace).status.ready_replicas or 0)
                == 1
            ),
        )
        pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector="app=sleeper")
        assert [p.status.phase for p in pods.items] == ["Running"]


def test_an_image_volume_mounts_a_model_artifact(node: Node, core: Any, namespace: str) -> None:
    model = node.push_artifact(
        f"models/{namespace}",
        {"model/weights.bin": b"0123456789", "model/config.json": b'{"layers": 2}'},
    )
    pod = _pod(
        "reader",
        node.probe_image,
        ["cat", "/models"],
        container={"volumeMounts": [{"name": "model", "mountPath": "/models"}]},
        volumes=[{"name": "model", "image": {"reference": model, "pullPolicy": "Always"}}],
    )
    core.create_namespaced_pod(namespace, pod)
    logs = _finished(core, namespace, "reader").splitlines()
    assert logs == [
        '/models/model/config.json: {"layers": 2}',
        "/models/model/weights.bin: 0123456789",
    ]


def test_a_stopped_node_leaves_nothing_behind(node: Node, tmp_path: Path) -> None:
    """A node of its own (the session's keeps running): a Pod runs, the node stops, and no
    mount, process, bridge or cgroup of it remains."""
    from kubernetes import client

    started = time.monotonic()
    own, processes = start_node(tmp_path)
    try:
        startup = time.monotonic() - started
        with own.kube.api_client() as api:
            core = client.CoreV1Api(api)
            core.create_namespaced_pod("default", _pod("sleeper", own.probe_image, ["sleep"]))
            _until(
                "Pod sleeper running",
                lambda: core.read_namespaced_pod("sleeper", "default").status.phase == "Running",
            )
        assert leftovers(own), "a running node shows its mounts, processes, bridge, cgroups"
    finally:
        for process in reversed(processes):
            process.stop()
    assert leftovers(own) == []
    assert startup <= 30, f"the node took {startup:.0f}s to start (30 s at most)"
