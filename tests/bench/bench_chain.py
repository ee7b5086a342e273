"""The signing chain under the outside probe's load (issue 22): `modelhooks serve
--signing-key` on the embedded defaults (SQLite, the local store), fed shuffled deliveries
of tiny models — pushes, 30 % of them delivered again (same id), and deletions of some
models — by 8 keep-alive clients at once. Each push runs register → sign → notify.

Printed: deliveries/s, p50/p95/p99 of a delivery, the answers by status, and serve's CPU
per delivery (user + system, over the load alone: a figure the other work on the machine
moves far less than the rates); goals ≥ 300 deliveries/s and p95 ≤ 50 ms. The anchor is the same load without signing (register alone),
in the same run.

Run: `python -m tests.bench.bench_chain [--models N] [--clients C]` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from tests.bench import Goal
from tests.bench.bench_spine import free_port
from tests.local_store import lay_model

MODELHOOKS = str(Path(sys.executable).with_name("modelhooks"))
DUPLICATES, DELETIONS = 0.3, 0.1


def _deliveries(models: int, seed: int = 7) -> list[bytes]:
    """Structured CloudEvents: a push per model, 30 % of the pushes again (same id), a
    deletion for 10 % of the models; shuffled."""
    rng = random.Random(seed)
    events = []
    for n in range(models):
        uri = f"gs://models/models/m{n}/1/"
        push = {
            "model": f"m{n}",
            "version": "1",
            "uri": uri,
            "digest": f"gcs-generation:{n + 1}",
            "store": "gcs",
        }
        events.append(_event(f"push-{n}", "dev.modelhooks.artifact.pushed", push))
        if rng.random() < DUPLICATES:
            events.append(events[-1])
        if rng.random() < DELETIONS:
            deleted = {"uri": uri, "store": "gcs"}
            events.append(_event(f"delete-{n}", "dev.modelhooks.artifact.deleted", deleted))
    rng.shuffle(events)
    return events


def _event(event_id: str, kind: str, data: dict[str, str]) -> bytes:
    doc = {"specversion": "1.0", "id": event_id, "source": "/bench", "type": kind, "data": data}
    return json.dumps(doc).encode()


def _load(port: int, bodies: list[bytes], clients: int) -> tuple[float, list[float], Counter[int]]:
    """(seconds, per-delivery latencies, answers by status) of `clients` keep-alive clients
    taking deliveries from one queue."""
    lock, latencies, statuses = threading.Lock(), [], Counter[int]()
    pending = iter(bodies)
    headers = {"Content-Type": "application/cloudevents+json"}

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while True:
            with lock:
                body = next(pending, None)
            if body is None:
                break
            started = time.perf_counter()
            conn.request("POST", "/", body, headers)
            answer = conn.getresponse()
            answer.read()
            took = time.perf_counter() - started
            with lock:
                latencies.append(took)
                statuses[answer.status] += 1
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, latencies, statuses


def _serve(home: Path, port: int, *flags: str) -> subprocess.Popen[bytes]:
    from tests.e2e.packaging import wait_healthy

    log = home / "serve.log"
    process = subprocess.Popen(
        [MODELHOOKS, "serve", "--home", str(home), "--port", str(port),
         "--serve-watch-interval", "0", "--log-level", "WARNING", *flags],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    wait_healthy(f"http://127.0.0.1:{port}/", process, log)
    return process


def _cpu_seconds(pid: int) -> float:
    """A process's user + system CPU so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(
    models: int, clients: int, signing: bool
) -> tuple[float, list[float], Counter[int], float]:
    """(seconds, latencies, answers by status, serve's CPU seconds) of one load."""
    from tests.unit.signing_material import make_key

    with tempfile.TemporaryDirectory(prefix="bench-chain-") as name:
        home = Path(name) / "home"
        for n in range(models):
            lay_model(home, "models", f"models/m{n}/1", content=f"weights {n}".encode())
        flags = ["--signing-key", str(make_key(Path(name)).private)] if signing else []
        port = free_port()
        process = _serve(home, port, *flags)
        try:
            cpu = _cpu_seconds(process.pid)
            seconds, latencies, statuses = _load(port, _deliveries(models), clients)
            return seconds, latencies, statuses, _cpu_seconds(process.pid) - cpu
        finally:
            process.terminate()
            process.wait(timeout=10)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def main(argv: list[str]) -> list[Goal]:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_chain")
    parser.add_argument("--models", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args(argv)
    figures = {}
    for label, signing in (("register alone (anchor)", False), ("with signing", True)):
        seconds, latencies, statuses, cpu = _run(args.models, args.clients, signing)
        rate = len(latencies) / seconds
        figures[signing] = (rate, _pct(latencies, 95))
        print(
            f"  {label:24} {len(latencies)} deliveries in {seconds:.1f}s = {rate:.0f}/s; "
            f"p50 {statistics.median(latencies) * 1000:.0f} ms, p95 "
            f"{_pct(latencies, 95) * 1000:.0f} ms, p99 {_pct(latencies, 99) * 1000:.0f} ms; "
            f"serve's CPU {cpu / len(latencies) * 1000:.2f} ms/delivery; "
            f"answers {dict(sorted(statuses.items()))}"
        )
    rate, p95 = figures[True]
    return [
        Goal("chain with signing: deliveries/s", f"{rate:.0f}/s", ">= 300/s", rate >= 300),
        Goal("chain with signing: p95", f"{p95 * 1000:.0f} ms", "<= 50 ms", p95 <= 0.05),
    ]


if __name__ == "__main__":
    for goal in main(sys.argv[1:]):
        print(goal.line())
