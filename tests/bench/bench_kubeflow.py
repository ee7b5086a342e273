"""The Kubeflow Model Registry backend at scale, side by side in one run (issue 20):

    python -m tests.bench.bench_kubeflow [--pushes N] [--clients 8] [--models 100]

(`MODELHOOKS_BENCH_KUBEFLOW_PUSHES=10000` raises the default 2,000 to the issue's size.)

On a fresh model-registry v0.3.0 + PostgreSQL 15 (the harness's), `modelhooks serve
--registry-backend kubeflow` takes N distinct pushes (N/models versions of each of
`--models` models, every one named by its content already and carrying the time it was
pushed, as the broker hands on what Knative sources and registry webhooks send) from
`--clients` keep-alive clients. Printed: deliveries/s, the registry's requests per
delivery (counted in its log) and the register latency p50/p99 per block of 1,000
deliveries (N/10 below 10,000), so growth with the registry's size shows; next to it `modelhooks serve` on SQLite under the same load, and the upstream
Python client's (`model-registry` 0.3.0) own registration loop on the same server: its
`register_model` 500s on v0.3.0 + PostgreSQL (its version lookup by name and parent,
SQLSTATE 42P01), so the loop is what it does minus that lookup (model by name or created,
version, artifact), one client as a user's script runs it. Then `registry list --json`
over the whole registry: time to its first row and to its end.

Goals (the issue's): ≥ 100 deliveries/s; p99 ≤ 200 ms in every block; flat (the last
block's p50 within 1.5x of the first's); `registry list --json` ≤ 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.bench import Goal

MODELHOOKS = str(Path(sys.executable).with_name("modelhooks"))
DEFAULT_PUSHES = int(os.environ.get("MODELHOOKS_BENCH_KUBEFLOW_PUSHES", "2000"))


def _free_port() -> int:
    from tests.servers._proc import free_port

    return free_port()


def _serve(home: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    proc = subprocess.Popen(
        [MODELHOOKS, "serve", "--port", str(port), "--home", str(home)],
        env={**environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"modelhooks serve did not start ({proc.poll()})")


def _push(run: str, n: int, models: int) -> tuple[dict[str, str], bytes]:
    model = f"bench-{run}-{n % models}"
    data = {
        "model": model,
        "version": str(n),
        "uri": f"gs://models/models/{model}/{n}/",
        "digest": f"content-sha256:{n:064x}",
        "store": "gcs",
    }
    headers = {
        "Content-Type": "application/json",
        "ce-specversion": "1.0",
        "ce-id": f"{run}-{n}",
        "ce-source": "/bench",
        "ce-type": "dev.modelhooks.artifact.pushed",
        # a real push carries its time (a version keeps it; the model is not written)
        "ce-time": datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
    }
    return headers, json.dumps(data).encode()


def deliver(port: int, pushes: int, clients: int, models: int) -> tuple[float, list[float]]:
    """(deliveries/s, each delivery's seconds in delivery order): `clients` keep-alive
    connections, each taking the next push; a 5xx is redelivered (counted in its time)."""
    run = uuid.uuid4().hex[:6]
    latencies = [0.0] * pushes
    counter = iter(range(pushes))
    lock = threading.Lock()

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while True:
            with lock:
                n = next(counter, None)
            if n is None:
                conn.close()
                return
            headers, body = _push(run, n, models)
            t0 = time.perf_counter()
            for _ in range(20):
                conn.request("POST", "/functions/register", body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                if response.status < 500:
                    break
            if response.status >= 300:
                raise RuntimeError(f"push {n} answered {response.status}")
            latencies[n] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(client) for _ in range(clients)]:
            future.result()
    return pushes / (time.perf_counter() - t0), latencies


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system, with reaped children) of the process `pid` and all its
    descendants (a server and what it forks: PostgreSQL's backends, each in its own session)."""
    stats: dict[int, list[str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            stats[int(stat.parent.name)] = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
    tree, grew = {pid}, True
    while grew:
        more = {p for p, fields in stats.items() if int(fields[1]) in tree} - tree
        tree |= more
        grew = bool(more)
    ticks = sum(int(f) for p in tree if p in stats for f in stats[p][11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of the process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(f) for f in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def requests_logged(log: Path) -> int:
    """The REST requests the model registry logged so far (one line each)."""
    text = log.read_text(errors="replace")
    return sum(text.count(f'"{method} http') for method in ("GET", "POST", "PATCH", "DELETE"))


def blocks(latencies: list[float], size: int) -> list[tuple[float, float]]:
    """(p50, p99) in ms per block of `size` deliveries."""
    out = []
    for start in range(0, len(latencies), size):
        block = sorted(latencies[start : start + size])
        p99 = block[min(len(block) - 1, int(len(block) * 0.99))]
        out.append((statistics.median(block) * 1000, p99 * 1000))
    return out


def upstream_loop(url: str, registrations: int) -> tuple[float, list[float]]:
    """Upstream's client registering `registrations` versions one after another (its
    register_model minus the version lookup v0.3.0 cannot run)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from model_registry import ModelRegistry
        from model_registry.types import ModelArtifact, ModelVersion, RegisteredModel

    host, port = url.rsplit(":", 1)
    client = ModelRegistry(
        host, int(port), author="bench", is_secure=False, user_token="t", async_runner=asyncio.run
    )
    api, run = client._api, uuid.uuid4().hex[:6]
    times = []
    t0 = time.perf_counter()
    for n in range(registrations):
        t = time.perf_counter()
        name = f"upstream-{run}-{n % 10}"
        rm = asyncio.run(api.get_registered_model_by_params(name)) or asyncio.run(
            api.upsert_registered_model(RegisteredModel(name=name, owner="bench"))
        )
        mv = asyncio.run(api.upsert_model_version(ModelVersion(name=str(n), author="b"), rm.id))
        artifact = ModelArtifact(name=name, uri=f"s3://b/{n}", model_format_name="onnx")
        asyncio.run(api.upsert_model_version_artifact(artifact, mv.id))
        times.append(time.perf_counter() - t)
    return registrations / (time.perf_counter() - t0), times


def list_json(url: str) -> tuple[float, float, int]:
    """(seconds to the first row, to the end, rows) of `registry list --json`."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    environ |= {"MODELHOOKS_REGISTRY_BACKEND": "kubeflow", "MODELHOOKS_REGISTRY_URL": url}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [MODELHOOKS, "registry", "list", "--json"], env=environ, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # "["
    proc.stdout.readline()
    first = time.perf_counter() - t0
    rows = 1 + sum(1 for line in proc.stdout if line.startswith(b"  {"))
    if proc.wait() != 0:
        raise RuntimeError("registry list failed")
    return first, time.perf_counter() - t0, rows


def _timed(label: str, fn: Callable[[], Any]) -> Any:
    print(f"  ({label} …)", flush=True)
    return fn()


def main(argv: list[str] | None = None) -> list[Goal]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--pushes", type=int, default=DEFAULT_PUSHES)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--models", type=int, default=100)
    p.add_argument("--upstream", type=int, default=300, help="registrations of upstream's loop")
    p.add_argument(
        "--connections", type=int, default=2, help="serve's registry.connections (default 2)"
    )
    args = p.parse_args(argv)
    from tests.servers._proc import Process
    from tests.servers.model_registry import start_model_registry

    size = 1000 if args.pushes >= 10_000 else max(1, args.pushes // 10)
    with tempfile.TemporaryDirectory(prefix="bench-kubeflow-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        server, processes = start_model_registry(work)
        print(
            f"model-registry {server.version} + PostgreSQL up in {time.perf_counter() - t0:.1f} s"
        )
        servers: list[subprocess.Popen[bytes]] = []
        try:
            env = {
                "MODELHOOKS_REGISTRY_BACKEND": "kubeflow",
                "MODELHOOKS_REGISTRY_URL": server.url,
                "MODELHOOKS_REGISTRY_CONNECTIONS": str(args.connections),
            }
            kf, kf_port = _serve(work / "kubeflow-home", env)
            sq, sq_port = _serve(work / "sqlite-home", {})
            servers += [kf, sq]
            deliver(kf_port, 50, args.clients, args.models)  # warm-up: imports, connections
            deliver(sq_port, 50, args.clients, args.models)
            logged = requests_logged(server.log_files[0])
            # who spends the cores: the servers' process trees, serve, the clients (this process)
            roots = {"model-registry": processes[1].pid, "PostgreSQL": processes[0].pid}
            used = {name: tree_cpu(pid) for name, pid in roots.items()}
            serve_before, clients_before = process_cpu(kf.pid), time.process_time()
            kf_rate, kf_lat = _timed(
                f"{args.pushes} pushes into Kubeflow",
                lambda: deliver(kf_port, args.pushes, args.clients, args.models),
            )
            kf_requests = (requests_logged(server.log_files[0]) - logged) / args.pushes
            used = {name: tree_cpu(pid) - used[name] for name, pid in roots.items()}
            used["serve"] = process_cpu(kf.pid) - serve_before
            used["clients"] = time.process_time() - clients_before
            sq_rate, sq_lat = _timed(
                f"{args.pushes} pushes into SQLite",
                lambda: deliver(sq_port, args.pushes, args.clients, args.models),
            )
            up_rate, up_lat = _timed(
                f"upstream's loop, {args.upstream} registrations",
                lambda: upstream_loop(server.url, args.upstream),
            )
            first, total, rows = _timed("registry list --json", lambda: list_json(server.url))
        finally:
            for proc in servers:
                proc.terminate()
                proc.wait(10)
            for process in reversed(processes):
                assert isinstance(process, Process)
                process.stop()

    kf_blocks, sq_blocks = blocks(kf_lat, size), blocks(sq_lat, size)
    print(
        f"register, {args.pushes} distinct pushes over {args.models} models, {args.clients} "
        f"keep-alive clients (`modelhooks serve`, {args.connections} registry connections), "
        f"p50/p99 ms per {size} deliveries:"
    )
    print(f"  {'deliveries':>11}  {'kubeflow p50':>12} {'p99':>7}   {'sqlite p50':>10} {'p99':>7}")
    for i, ((kp50, kp99), (sp50, sp99)) in enumerate(zip(kf_blocks, sq_blocks, strict=True)):
        upto = min((i + 1) * size, args.pushes)
        print(f"  {upto:>11}  {kp50:12.1f} {kp99:7.1f}   {sp50:10.1f} {sp99:7.1f}")
    print(f"  deliveries/s: kubeflow {kf_rate:.0f}, sqlite {sq_rate:.0f}")
    print(f"  kubeflow: {kf_requests:.2f} registry requests per delivery (its log)")
    cores = os.cpu_count() or 1
    print(
        "  kubeflow: CPU per delivery: "
        + ", ".join(f"{name} {1000 * s / args.pushes:.1f} ms" for name, s in used.items())
        + f"; total {1000 * sum(used.values()) / args.pushes:.1f} ms: {cores} cores do at most "
        f"{cores * args.pushes / sum(used.values()):.0f} deliveries/s"
    )
    up_sorted = sorted(up_lat)
    print(
        f"  anchor: upstream client loop (1 client) {up_rate:.1f} registrations/s, p50 "
        f"{statistics.median(up_lat) * 1000:.1f} ms, p99 "
        f"{up_sorted[int(len(up_sorted) * 0.99) - 1] * 1000:.1f} ms"
    )
    print(
        f"registry list --json ({rows} rows, {args.pushes + args.upstream + 100} versions): "
        f"first row {first:.2f} s, all {total:.2f} s"
    )
    worst = max(p99 for _, p99 in kf_blocks)
    flat = kf_blocks[-1][0] / kf_blocks[0][0]
    return [
        Goal("kubeflow: deliveries/s", f"{kf_rate:.0f}/s", ">= 100/s", kf_rate >= 100),
        Goal("kubeflow: register p99 (worst block)", f"{worst:.0f} ms", "<= 200 ms", worst <= 200),
        Goal("kubeflow: last block p50 / first", f"{flat:.2f}x", "<= 1.5x", flat <= 1.5),
        Goal("kubeflow: registry list --json", f"{total:.1f} s", "<= 10 s", total <= 10),
    ]


if __name__ == "__main__":
    sys.exit(0 if all(g.met for g in main()) else 1)
