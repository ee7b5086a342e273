"""Models to Ready through the whole Kubernetes chain (issue 12):

    python -m tests.bench.bench_models [--models 200] [--timeout 120] [--no-restart]

The harness's kube-apiserver (Model, RegisteredModel and ModelVersion CRDs) and distribution
v3; ONE image pushed with `oras`; N Models naming it by tag, each its own name and version,
signing off, deletionPolicy Retain, created one after another; ONE `modelhooks watch-models
--raw --state FILE` feeding ONE `modelhooks serve` (Kubernetes registry, notify and cleanup
on the same apiserver). Halfway through the creates the watcher is killed (SIGKILL) and
started again with its state file, unless --no-restart.

Printed: per Model, its create call → the first listing that shows Ready=True (listed every
0.1 s): p50 / p95 / p99 / max; Models Ready per second (first create → last Ready); Events by
reason. Goals: p99 ≤ 3 s and ≥ 80 Models Ready/s (issue 22), the rest "measured"; lost (a Model never
Ready within --timeout) and duplicated effects (a Model with more than one ModelVersion, or
more than one `Registered` Event) must be 0. Event names are derived from the CloudEvent's
source, id and reason, so a redelivered CloudEvent cannot add a second `Registered` Event;
a second one means a second registration was reported.
"""

from __future__ import annotations

import argparse
import collections
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.bench import Goal

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "infra" / "k8s" / "crds"
MODELHOOKS = str(Path(sys.executable).with_name("modelhooks"))
REGISTRY_NAMESPACE = "modelhooks-registry"


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


class ReadyWatch:
    """Lists the Models every `interval` s and keeps when each was first seen Ready=True."""

    def __init__(self, kube: Any, interval: float = 0.1) -> None:
        self.ready: dict[str, float] = {}
        self._kube, self._interval = kube, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from kubernetes import client

        from modelhooks.adapters.model_registry.kubernetes import GROUP, VERSION

        with self._kube.api_client() as api:
            objects = client.CustomObjectsApi(api)
            while not self._stop.is_set():
                listed = objects.list_namespaced_custom_object(GROUP, VERSION, "default", "models")
                now = time.monotonic()
                for model in listed["items"]:
                    name = model["metadata"]["name"]
                    conditions = (model.get("status") or {}).get("conditions") or []
                    if name not in self.ready and any(
                        c["type"] == "Ready" and c["status"] == "True" for c in conditions
                    ):
                        self.ready[name] = now
                self._stop.wait(self._interval)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _start_chain(kube: Any, registry: Any, tmp: Path) -> tuple[Any, list[str], str]:
    """`modelhooks serve` on the apiserver; returns it, the watcher's argv, and its URL."""
    from tests.servers._proc import Process, free_port

    kubeconfig = str(kube.write_kubeconfig(tmp / "kubeconfig"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    served = Process(
        "modelhooks serve",
        [MODELHOOKS, "serve", "--port", str(port), "--home", str(tmp / "home"),
         "--registry-backend", "kubernetes",
         "--registry-kubeconfig", kubeconfig,
         "--registry-namespace", REGISTRY_NAMESPACE,
         "--notify-kubeconfig", kubeconfig,
         "--cleanup-kubeconfig", kubeconfig,
         "--store-allow-local-targets", "true",
         "--signing-enabled", "false"],
        log_path=tmp / "serve.log",
    )  # fmt: skip
    served.wait_ready(lambda: urllib.request.urlopen(f"{url}/healthz", timeout=2).status == 200)
    watch = [MODELHOOKS, "watch-models", "--kubeconfig", kubeconfig, "--namespace", "default",
             "--state", str(tmp / "watch.state"), "--raw", "--to", url + "/"]  # fmt: skip
    return served, watch, url


def _watcher(argv: list[str], tmp: Path) -> Any:
    from tests.servers._proc import Process

    return Process("watch-models", argv, log_path=tmp / "watch.log", stop_signal=signal.SIGTERM)


def run(
    kube: Any, registry: Any, tmp: Path, models: int, timeout: float, restart: bool
) -> list[Goal]:
    from kubernetes import client

    from modelhooks.adapters.model_registry.kubernetes import GROUP, VERSION
    from tests.servers.recipes import RECIPES

    kube.install_crd(CRDS / "model.yaml", "models")
    for path, plural in (
        ("registeredmodel.yaml", "registeredmodels"),
        ("modelversion.yaml", "modelversions"),
    ):
        kube.install_crd(CRDS / path, plural)
    with kube.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=REGISTRY_NAMESPACE))
        )

    repo, weights = "bench/models", tmp / "weights.bin"
    weights.write_bytes(b"weights" * 1024)
    subprocess.run(
        [str(RECIPES["oras"].binary()), "push", "--plain-http", f"{registry.host}/{repo}:v1",
         weights.name],
        cwd=tmp, check=True, capture_output=True,
    )  # fmt: skip
    reference = f"{registry.host}/{repo}:v1"

    served, watch_argv, _ = _start_chain(kube, registry, tmp)
    watcher = _watcher(watch_argv, tmp)
    time.sleep(2)  # the watcher's first list (empty) and its watch established
    ready = ReadyWatch(kube)
    created: dict[str, float] = {}
    restarted_at = ""
    try:
        with kube.api_client() as api:
            objects = client.CustomObjectsApi(api)
            first = time.monotonic()
            for i in range(models):
                if restart and i == models // 2:
                    watcher.stop_signal = signal.SIGKILL
                    watcher.stop()
                    watcher = _watcher(watch_argv, tmp)
                    restarted_at = f"killed (SIGKILL) and restarted with --state after {i} creates"
                name = f"bench-{i:05d}"
                body = {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "Model",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {
                        "source": {"oci": {"reference": reference}},
                        "version": f"{i + 1}",
                        "deletionPolicy": "Retain",
                        "signing": {"enabled": False},
                    },
                }
                created[name] = time.monotonic()
                objects.create_namespaced_custom_object(GROUP, VERSION, "default", "models", body)
            creating = time.monotonic() - first
            deadline = time.monotonic() + timeout
            while len(ready.ready) < models and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(3)  # a late second registration or Event would show up by now
            ready.close()

            versions = objects.list_namespaced_custom_object(
                GROUP, VERSION, REGISTRY_NAMESPACE, "modelversions"
            )["items"]
            events = client.EventsV1Api(api).list_namespaced_event("default").items
    finally:
        ready.close()
        watcher.stop()
        served.stop()

    latencies = [ready.ready[n] - t for n, t in created.items() if n in ready.ready]
    lost = sorted(set(created) - set(ready.ready))
    per_model = collections.Counter(v["spec"]["modelName"] for v in versions)
    registered = collections.Counter(
        e.regarding.name for e in events if e.reason == "Registered" and e.regarding
    )
    reasons = collections.Counter(e.reason for e in events)
    twice_versions = sorted(n for n, c in per_model.items() if c > 1)
    twice_registered = sorted(n for n, c in registered.items() if c > 1)
    duplicated = sorted(set(twice_versions) | set(twice_registered))
    span = max(ready.ready.values()) - first if ready.ready else float("inf")
    rate = len(ready.ready) / span

    print(f"{models} Models created in {creating:.1f} s ({models / creating:.0f}/s), one at a time")
    if restarted_at:
        print(f"watch-models {restarted_at}")
    if latencies:
        p50, p95, p99 = (_percentile(latencies, p) for p in (50, 95, 99))
        print(
            f"create → Ready ({len(latencies)} Models): p50 {p50:.2f} s, p95 {p95:.2f} s, "
            f"p99 {p99:.2f} s, max {max(latencies):.2f} s (mean {statistics.mean(latencies):.2f} s)"
        )
    else:
        p50 = p95 = p99 = float("nan")
    print(f"throughput: {len(ready.ready)} Ready in {span:.1f} s = {rate:.1f} Models Ready/s")
    print(
        f"Events: {len(events)} ({', '.join(f'{r} {c}' for r, c in sorted(reasons.items()))}); "
        f"ModelVersions: {len(versions)} for {len(per_model)} Models"
    )
    print(
        f"events lost: {len(lost)}, duplicated effects: {len(duplicated)} "
        f"(Models with > 1 ModelVersion: {len(twice_versions)}, "
        f"with > 1 Registered Event: {len(twice_registered)}, "
        f"with no Registered Event: {models - len(registered)})"
    )
    if lost:
        print(f"  never Ready within {timeout:.0f} s: {', '.join(lost[:10])}")
    if duplicated:
        print(f"  duplicated: {', '.join(duplicated[:10])}")
        for event in events:
            if event.reason == "Registered" and event.regarding.name == duplicated[0]:
                print(f"  {duplicated[0]}: {event.metadata.name} {event.action}: {event.note}")
    return [
        Goal("models: create → Ready p50", f"{p50:.2f} s", "measured", True),
        Goal("models: create → Ready p95", f"{p95:.2f} s", "measured", True),
        Goal("models: create → Ready p99", f"{p99:.2f} s", "<= 3 s (issue 22)", p99 <= 3.0),
        Goal("models: create → Ready max", f"{max(latencies, default=0):.2f} s", "measured", True),
        Goal("models: Ready per second", f"{rate:.1f}/s", ">= 80/s (issue 22)", rate >= 80),
        Goal("models: Events", f"{len(events)}", "measured", True),
        Goal("models: events lost", f"{len(lost)}", "0", not lost),
        Goal(
            "models: registered twice (ModelVersions)",
            f"{len(twice_versions)}",
            "0",
            not twice_versions,
        ),
        Goal("models: > 1 Registered Event", f"{len(twice_registered)}", "0", not twice_registered),
    ]


def main(argv: list[str]) -> list[Goal]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=120.0, help="s after the last create")
    parser.add_argument(
        "--restart",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="kill -9 watch-models halfway and start it again with its --state file",
    )
    args = parser.parse_args(argv)
    from tests.servers.kube import start_kube
    from tests.servers.recipes import RECIPES
    from tests.servers.registries import start_distribution3

    missing = [
        r for r in ("kube-apiserver", "etcd", "distribution3", "oras") if not RECIPES[r].installed()
    ]
    if missing:
        print(f"{', '.join(missing)}: not installed (python -m tests.servers install); skipped")
        return [Goal("models (servers not installed)", "-", "measured", False)]
    with tempfile.TemporaryDirectory(prefix="bench-models-") as name:
        tmp = Path(name)
        (tmp / "kube").mkdir()
        (tmp / "registry").mkdir()
        processes = []
        try:
            kube, started = start_kube(tmp / "kube")
            processes += started
            registry, started = start_distribution3(tmp / "registry")
            processes += started
            print(
                f"kube-apiserver {kube.version} at {kube.url}; distribution v3 at {registry.url}",
                flush=True,
            )
            return run(kube, registry, tmp, args.models, args.timeout, args.restart)
        finally:
            for process in reversed(processes):
                process.stop()


if __name__ == "__main__":
    goals = main(sys.argv[1:])
    for goal in goals:
        print(goal.line())
    sys.exit(0 if all(g.met for g in goals) else 1)
