"""Spine benchmarks, each printed next to its anchor, measured side by side in one run.

- cold start: process start → first answered CloudEvent, `register` vs a bare
  functions-framework hello function (goal ≤ 1.2x);
- throughput: events/s and p50/p99 latency of `register` on SQLite, as a functions-framework
  target and on `modelhooks serve` (no Flask, no functions-framework: the floor of a target),
  vs a bare functions-framework echo, under wrk (a C load generator, so the client is not the
  bottleneck; every request a unique artifact.pushed: tests/bench/wrk/unique_pushes.lua),
  goal ≥ 0.8x.

Run: `python -m tests.bench.bench_spine [--runs N] [--seconds S] [--concurrency C]`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

from tests.bench import Goal

ROOT = Path(__file__).resolve().parents[2]
ANCHORS = Path(__file__).resolve().parent / "anchors" / "bare.py"
WRK = Path(__file__).resolve().parent / "wrk" / "unique_pushes.lua"
FF = str(Path(sys.executable).with_name("functions-framework"))
MODELHOOKS = str(Path(sys.executable).with_name("modelhooks"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pushed_event(n: int) -> tuple[dict[str, str], bytes]:
    """A unique artifact.pushed in binary mode: every request registers a new version. It is
    named by its content already, as the ingress hands it to `register` in the cluster."""
    data = {
        "model": "bench",
        "version": str(n),
        "uri": f"gs://models/models/bench/{n}/",
        "digest": f"content-sha256:{n:064x}",
        "store": "gcs",
    }
    headers = {
        "Content-Type": "application/json",
        "ce-specversion": "1.0",
        "ce-id": f"bench-{uuid.uuid4()}",
        "ce-source": "/bench",
        "ce-type": "dev.modelhooks.artifact.pushed",
    }
    return headers, json.dumps(data).encode()


def start(target: str, source: Path, port: int, home: str) -> subprocess.Popen[bytes]:
    """functions-framework serving `target` of `source` on `port`."""
    argv = [FF, "--target", target, "--source", str(source), "--host", "127.0.0.1"]
    return _launch([*argv, "--port", str(port)], home)


def _launch(argv: list[str], home: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MODELHOOKS_HOME": home}
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


class Server(NamedTuple):
    """A server under wrk: started on a port with a home, posted to at `path`."""

    start: Callable[[int, str], subprocess.Popen[bytes]]
    path: str = "/"


def ff(target: str, source: Path) -> Server:
    return Server(lambda port, home: start(target, source, port, home))


def serve() -> Server:
    """`modelhooks serve` on its defaults (every function in one process, uvicorn on uvloop
    and a pool of 8 threads: no Flask, no functions-framework), posted to register's own
    path: one function, as a functions-framework target is."""
    argv = [MODELHOOKS, "serve", "--host", "127.0.0.1"]
    return Server(
        lambda port, home: _launch([*argv, "--port", str(port)], home), "/functions/register"
    )


def post(port: int, headers: dict[str, str], body: bytes, timeout: float = 5) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/", body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def cold_start(target: str, source: Path) -> float:
    """Seconds from process start to the first answered CloudEvent."""
    port = free_port()
    with tempfile.TemporaryDirectory() as home:
        headers, body = pushed_event(0)
        t0 = time.perf_counter()
        proc = start(target, source, port, home)
        try:
            while True:
                try:
                    status = post(port, headers, body)
                except OSError:
                    if proc.poll() is not None:
                        raise RuntimeError(f"{target} exited with {proc.returncode}") from None
                    time.sleep(0.005)
                    continue
                if status >= 300:
                    raise RuntimeError(f"{target} answered {status}")
                return time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait()


class Run(NamedTuple):
    rate: float  # events/s
    p50: float  # ms
    p99: float  # ms
    cpu: float  # ms of CPU per event
    system: float  # the share of that CPU spent in the kernel
    switches: float  # context switches per event


def throughput(server: Server, seconds: float, concurrency: int) -> Run:
    """One run under wrk: `concurrency` keep-alive connections. The CPU is the serving
    processes' (functions-framework's and its worker's, or serve's): unlike the rate, it holds on a
    machine busy with other work. Their context switches (every thread's) say how often a
    request's thread gave the GIL away (each SQLite statement, each write, each wait)."""
    from tests.servers.recipes import RECIPES

    RECIPES["wrk"].obtain()
    port = free_port()
    with tempfile.TemporaryDirectory() as home:
        proc = server.start(port, home)
        url = f"http://127.0.0.1:{port}{server.path}"
        try:
            _wait_ready(port, proc)
            warm = ["wrk", "-t1", f"-c{concurrency}", "-d1s", "-s", str(WRK)]
            subprocess.run([*warm, url], check=True, capture_output=True)
            before, switches = _cpu_seconds(proc.pid), _switches(proc.pid)
            load = ["wrk", "-t2", f"-c{concurrency}", f"-d{seconds:g}s", "--latency"]
            out = subprocess.run(
                [*load, "-s", str(WRK), url],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            after, switches = _cpu_seconds(proc.pid), _switches(proc.pid) - switches
        finally:
            proc.terminate()
            proc.wait()
    if "Non-2xx" in out:
        raise RuntimeError(f"{server.path} on {proc.args}: some requests failed\n{out}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])  # type: ignore[index]
    count = int(re.search(r"(\d+) requests in", out)[1])  # type: ignore[index]
    user, system = after[0] - before[0], after[1] - before[1]
    return Run(
        rate,
        _latency(out, "50%"),
        _latency(out, "99%"),
        (user + system) * 1000 / count,
        system / ((user + system) or 1),
        switches / count,
    )


def _serving(pid: int) -> list[int]:
    """`pid` and its children that are running (gunicorn's worker)."""
    return [pid, *map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU of the serving processes."""
    tick = os.sysconf("SC_CLK_TCK")
    user = system = 0.0
    for each in _serving(pid):
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        user, system = user + int(fields[11]) / tick, system + int(fields[12]) / tick
    return user, system


def _switches(pid: int) -> int:
    """Context switches (voluntary and not) of every thread of the serving processes."""
    total = 0
    for each in _serving(pid):
        for task in Path(f"/proc/{each}/task").iterdir():
            try:
                status = (task / "status").read_text()
            except FileNotFoundError:  # a thread that ended meanwhile
                continue
            total += sum(int(n) for n in re.findall(r"ctxt_switches:\s+(\d+)", status))
    return total


def _latency(out: str, pct: str) -> float:
    value, unit = re.search(rf"{re.escape(pct)}\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def _wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(2000):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}") from None
            time.sleep(0.01)
    raise RuntimeError("server did not start")


T = TypeVar("T")


def alternate(runs: int, *measures: Callable[[], T]) -> list[list[T]]:
    """Interleave the measurements so drift on the machine hits each alike."""
    results: list[list[T]] = [[] for _ in measures]
    for _ in range(runs):
        for measure, result in zip(measures, results, strict=True):
            result.append(measure())
    return results


def main(argv: list[str] | None = None) -> list[Goal]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=8)
    args = p.parse_args(argv)
    main_py = ROOT / "functions" / "main.py"

    reg, hello = alternate(
        args.runs, lambda: cold_start("register", main_py), lambda: cold_start("hello", ANCHORS)
    )
    r, h = statistics.median(reg), statistics.median(hello)
    print(f"cold start (median of {args.runs}, process start → first answered CloudEvent)")
    print(
        f"  register            {r * 1000:8.0f} ms   (min {min(reg) * 1000:.0f}, max {max(reg) * 1000:.0f})"
    )
    print(
        f"  anchor: ff hello    {h * 1000:8.0f} ms   (min {min(hello) * 1000:.0f}, max {max(hello) * 1000:.0f})"
    )
    print(
        f"  ratio               {r / h:8.2f} x   goal ≤ 1.2x  {'MET' if r / h <= 1.2 else 'MISSED'}"
    )

    ff_t, serve_t, echo_t = alternate(
        3,
        lambda: throughput(ff("register", main_py), args.seconds, args.concurrency),
        lambda: throughput(serve(), args.seconds, args.concurrency),
        lambda: throughput(ff("echo", ANCHORS), args.seconds, args.concurrency),
    )
    print(
        f"throughput (wrk, median of 3 x {args.seconds:.0f} s, {args.concurrency} keep-alive "
        "connections, every request a new version)"
    )
    rows = (
        ("register: ff target", ff_t),
        ("register: serve", serve_t),
        ("anchor: ff echo", echo_t),
    )
    for label, runs in rows:
        rate, p50, p99, *_ = sorted(runs)[1]
        cpu, system, switches = (statistics.median(r[i] for r in runs) for i in (3, 4, 5))
        print(
            f"  {label:20}  {rate:8.0f} events/s   p50 {p50:6.2f} ms   p99 {p99:6.2f} ms"
            f"   CPU {cpu:5.3f} ms/event ({system:3.0%} system, {switches:4.1f} switches)"
        )
    et, ec = statistics.median(r.rate for r in echo_t), statistics.median(r.cpu for r in echo_t)
    echo = sorted(echo_t)[1]
    goals = [
        Goal(
            "cold start: register / ff hello",
            f"{r / h:.2f}x ({r * 1000:.0f} ms)",
            "<= 1.2x",
            r / h <= 1.2,
            anchor=f"ff hello {h * 1000:.0f} ms",
        )
    ]
    for name, runs in (("functions-framework target", ff_t), ("modelhooks serve", serve_t)):
        rt, rc = statistics.median(r.rate for r in runs), statistics.median(r.cpu for r in runs)
        print(
            f"  ratio, {name:26} {rt / et:5.2f} x   goal ≥ 0.8x  {'MET' if rt / et >= 0.8 else 'MISSED'}"
            f"   (by CPU/event {ec / rc:.2f} x)"
        )
        goals.append(
            Goal(
                f"throughput: register ({name}) / ff echo",
                f"{rt / et:.2f}x ({rt:.0f}/s, p99 {sorted(runs)[1].p99:.1f} ms, CPU {rc:.2f} ms/event)",
                ">= 0.8x",
                rt / et >= 0.8,
                anchor=f"ff echo {et:.0f}/s, p99 {echo.p99:.1f} ms, CPU {ec:.2f} ms/event",
            )
        )
    return goals


if __name__ == "__main__":
    sys.exit(0 if all(g.met for g in main()) else 1)
