"""The functions as Pods on the harness's node (the install without Knative,
tests/e2e/pods.py) next to the same chain in one `modelhooks serve` process, on the same
node's apiserver in the same run: a Model created → Ready (watch-models → register →
notify), one Model at a time; then the memory of the node's own processes and of each
function's Pod.

The serve chain runs first (its watch-models watches one namespace; the Pods' those opted in,
as `install` opts in the Models' one), then the install, then the Pods' chain. The image is built as the image test builds it.

Run: `python -m tests.bench.bench_pods [--models N]` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bench import Goal
from tests.bench.bench_node import _rss_mib
from tests.servers import node as nodes

CRDS = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "crds"


def _model_to_ready(api: Any, namespace: str, reference: str, timeout: float = 120) -> float:
    """Seconds from creating a Model (Retain, unsigned) to its Ready condition True."""
    from kubernetes import client

    from modelhooks.adapters.model_registry.kubernetes import GROUP, VERSION

    objects = client.CustomObjectsApi(api)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "models", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Model",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"oci": {"reference": reference}}, "version": "1"},
    })  # fmt: skip
    while time.monotonic() - started < timeout:
        model = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, "models", name)
        conditions = (model.get("status") or {}).get("conditions", [])
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return time.monotonic() - started
        time.sleep(0.05)
    raise RuntimeError(f"Model {namespace}/{name} not Ready after {timeout:.0f}s")


def _serve_chain(node: nodes.Node, reference: str, count: int, work: Path) -> list[float]:
    """`modelhooks serve` + `modelhooks watch-models --raw` (one namespace) on the node's
    apiserver, as tests/e2e/test_model_chain.py runs them."""
    from kubernetes import client

    from tests.e2e.conftest import MODELHOOKS
    from tests.e2e.packaging import free_port, wait_healthy

    namespace = "bench-serve"
    kubeconfig = str(node.kube.write_kubeconfig(work / "serve.kubeconfig"))
    port = free_port()
    with node.kube.api_client() as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
        log = (work / "serve.log").open("wb")
        serve = subprocess.Popen(
            [MODELHOOKS, "serve", "--port", str(port), "--home", str(work / "home"),
             "--registry-backend", "kubernetes", "--registry-kubeconfig", kubeconfig,
             "--notify-kubeconfig", kubeconfig, "--cleanup-kubeconfig", kubeconfig,
             "--store-allow-local-targets", "true", "--signing-enabled", "false"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        watch = subprocess.Popen(
            [MODELHOOKS, "watch-models", "--kubeconfig", kubeconfig, "--namespace", namespace,
             "--raw", "--to", f"http://127.0.0.1:{port}/"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_healthy(f"http://127.0.0.1:{port}/", serve, work / "serve.log")
            return [_model_to_ready(api, namespace, reference) for _ in range(count)]
        finally:
            for process in (watch, serve):
                process.terminate()
                process.wait(timeout=10)
            log.close()


def _pod_memory(node: nodes.Node, api: Any, namespace: str) -> dict[str, float]:
    """RSS (MiB) of each Pod's processes in `namespace`, by Pod name (cgroup → Pod uid)."""
    from kubernetes import client

    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    by_uid = {p.metadata.uid.replace("-", "_"): p.metadata.name for p in pods}
    by_uid |= {p.metadata.uid: p.metadata.name for p in pods}
    memory: dict[str, float] = {}
    for pid in nodes.cgroup_pids(node.cgroup_root):
        try:
            groups = Path(f"/proc/{pid}/cgroup").read_text()
            rss = _rss_mib(pid)
        except OSError:
            continue
        for uid, name in by_uid.items():
            if f"pod{uid}" in groups:
                memory[name] = memory.get(name, 0.0) + rss
                break
    return memory


def main(argv: list[str]) -> list[Goal]:
    from tests.e2e.packaging import build_image
    from tests.e2e.pods import HOME, MODELS, install, push_model
    from tests.servers.containers import Podman
    from tests.servers.registries import start_distribution3

    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_pods")
    parser.add_argument("--models", type=int, default=5)
    args = parser.parse_args(argv)
    podman = Podman.configured()
    with tempfile.TemporaryDirectory(prefix="bench-pods-") as name:
        work = Path(name)
        started = time.monotonic()
        image = build_image(podman, work / "image")
        print(f"  image built in {time.monotonic() - started:.0f}s")
        stops: list[Callable[[], None]] = []
        try:
            (work / "registry").mkdir()
            registry, processes = start_distribution3(work / "registry")
            stops += [p.stop for p in processes]
            node, processes = nodes.start_node(work / "node")
            stops += [p.stop for p in processes]
            reference = f"{registry.host}/bench/model:1"
            push_model(registry, "bench/model", "weights", work)
            node.kube.install_crd(CRDS / "model.yaml", "models")
            for crd, plural in (("registeredmodel", "registeredmodels"),
                                ("modelversion", "modelversions")):  # fmt: skip
                node.kube.install_crd(CRDS / f"{crd}.yaml", plural)
            served = _serve_chain(node, reference, args.models, work)
            started = time.monotonic()
            with install(node, image, podman, work / "pods") as installed:
                print(
                    f"  the install without Knative Available in {time.monotonic() - started:.0f}s"
                )
                pods = [
                    _model_to_ready(installed.api, MODELS, reference) for _ in range(args.models)
                ]
                memory = _pod_memory(node, installed.api, HOME)
            node_mib = {n: _rss_mib(pid) for n, pid in node.pids.items()}
        finally:
            for stop in reversed(stops):
                stop()
            podman("rmi", "-f", image, check=False)
    print(f"  Model created → Ready, {args.models} Models one at a time (s):")
    for label, times in (("functions as Pods", pods), ("one modelhooks serve", served)):
        print(f"    {label:22} median {statistics.median(times):.2f}  max {max(times):.2f}  "
              f"({', '.join(f'{t:.2f}' for t in times)})")  # fmt: skip
    print("  memory (RSS, MiB) of each function's Pod:")
    for pod, mib in sorted(memory.items()):
        print(f"    {pod.rsplit('-', 2)[0]:28} {mib:6.0f}")
    print(f"    {'all Pods':28} {sum(memory.values()):6.0f}")
    print(f"    {'the node (its processes)':28} {sum(node_mib.values()):6.0f}")
    return []


if __name__ == "__main__":
    main(sys.argv[1:])
