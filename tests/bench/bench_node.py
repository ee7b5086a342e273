"""The harness's node (tests/servers/node.py): start-up time and memory.

Start-up is `start_node` from nothing to a Ready Node with the ``default`` ServiceAccount
(cached binaries; ``--cold`` first builds every piece into an empty cache, the Go build
cache staying warm, and reports that too). Memory is the RSS of each process of the node
(etcd, apiserver, controller-manager, scheduler, containerd, kubelet, registry), then of
containerd's shims and the Pods' processes, with ``--pods`` sleeping Pods running.

Run: `python -m tests.bench.bench_node [--runs N] [--pods N] [--cold]` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.bench import Goal
from tests.servers import node as nodes

STARTUP_GOAL = 30.0


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cold_build() -> float:
    from tests.servers.recipes import RECIPES, GoBuild

    with tempfile.TemporaryDirectory(prefix="bench-node-cache-") as cache:
        previous = os.environ.get("MODELHOOKS_CACHE")
        os.environ["MODELHOOKS_CACHE"] = cache
        try:
            started = time.monotonic()
            for name in nodes.NEEDS:
                if isinstance(RECIPES[name], GoBuild):
                    RECIPES[name].obtain()
            return time.monotonic() - started
        finally:
            if previous is None:
                os.environ.pop("MODELHOOKS_CACHE")
            else:
                os.environ["MODELHOOKS_CACHE"] = previous


def _run_pods(node: nodes.Node, count: int) -> None:
    from kubernetes import client

    with node.kube.api_client() as api:
        core = client.CoreV1Api(api)
        for index in range(count):
            core.create_namespaced_pod(
                "default",
                {
                    "metadata": {"name": f"sleeper-{index}"},
                    "spec": {
                        "containers": [
                            {"name": "main", "image": node.probe_image, "args": ["sleep"]}
                        ]
                    },
                },
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pods = core.list_namespaced_pod("default").items
            if len(pods) == count and all(p.status.phase == "Running" for p in pods):
                return
            time.sleep(0.3)
        raise RuntimeError(f"{count} Pods not Running after 60s")


def main(argv: list[str]) -> list[Goal]:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_node")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pods", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also build every piece afresh")
    args = parser.parse_args(argv)
    if args.cold:
        print(f"  cold build of the node's Go pieces (warm Go cache): {_cold_build():.0f}s")
    startups: list[float] = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-node-") as work:
            started = time.monotonic()
            node, processes = nodes.start_node(Path(work))
            try:
                startups.append(time.monotonic() - started)
                if run == args.runs - 1:
                    _memory(node, args.pods)
            finally:
                for process in reversed(processes):
                    process.stop()
            left = nodes.leftovers(node)
            if left:
                raise RuntimeError(f"the node left {left}")
    median = statistics.median(startups)
    print(
        f"  start-up, cached builds: median {median:.1f}s over {len(startups)} "
        f"({', '.join(f'{s:.1f}' for s in startups)})"
    )
    return [
        Goal(
            "node start-up (cached builds)",
            f"{median:.1f}s",
            f"<= {STARTUP_GOAL:.0f}s",
            median <= STARTUP_GOAL,
        )
    ]


def _memory(node: nodes.Node, pods: int) -> None:
    idle = {name: _rss_mib(pid) for name, pid in node.pids.items()}
    print("  memory (RSS, MiB), idle node:")
    for name, mib in sorted(idle.items(), key=lambda item: -item[1]):
        print(f"    {name:24} {mib:6.0f}")
    print(f"    {'total':24} {sum(idle.values()):6.0f}")
    _run_pods(node, pods)
    shims = [
        p
        for p in nodes.processes_naming(str(node.workdir / "containerd"))
        if p not in node.pids.values()
    ]
    in_pods = nodes.cgroup_pids(node.cgroup_root)
    shim_mib = sum(_rss_mib(p) for p in shims)
    pod_mib = sum(_rss_mib(p) for p in in_pods)
    grown = sum(_rss_mib(pid) for pid in node.pids.values()) - sum(idle.values())
    print(
        f"  with {pods} sleeping Pods: shims {shim_mib:.0f} MiB ({len(shims)}), the Pods' "
        f"processes {pod_mib:.0f} MiB ({len(in_pods)}), the node's own processes +{grown:.0f} MiB; "
        f"per Pod {(shim_mib + pod_mib + grown) / pods:.1f} MiB"
    )


if __name__ == "__main__":
    import sys

    goals = main(sys.argv[1:])
    for goal in goals:
        print(goal.line())
