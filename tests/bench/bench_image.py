"""Cold start in the container image (infra/image/Dockerfile), as the Knative Services start
it: `functions-framework --target register` in the image the image test builds, next to
tests/bench/anchors/bare.py's `hello` started in the same image (mounted), each sent the
image test's CloudEvent; runs alternate target and anchor.

The figure is the CPU time (user + system, from each process's CPU-time clock, as
bench_cold_start reads it) the container's functions-framework process and its gunicorn
worker have used from their start to the first answered event, read inside the container.
The image runs with PYTHONDONTWRITEBYTECODE as a non-root user: what it does not ship
compiled is compiled at every start (with none shipped, register took ~480 ms here and
hello ~410, in one run next to 190-250 and 180-200 with it).

Run: `python -m tests.bench.bench_image [--runs N]` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from tests.bench import Goal

if TYPE_CHECKING:
    from tests.servers.containers import Podman

ANCHORS = Path(__file__).resolve().parent / "anchors"

# Run inside the container: start the target, post the event until it is answered, print
# the CPU seconds of the process tree by then.
_INSIDE = r"""
import base64, ctypes, json, os, socket, subprocess, sys, time, urllib.request
target, source, event = sys.argv[1], sys.argv[2], json.loads(base64.b64decode(sys.argv[3]))
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
command = ["functions-framework", "--target", target, "--signature-type", "http",
           "--host", "127.0.0.1", "--port", str(port)] + (["--source", source] if source else [])
proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
libc = ctypes.CDLL(None, use_errno=True)
def tree(pid):
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        for task in os.listdir(f"/proc/{found[-1]}/task"):
            try:
                todo += map(int, open(f"/proc/{found[-1]}/task/{task}/children").read().split())
            except OSError:
                pass
    return found
def cpu(pid):
    total = 0.0
    for each in tree(pid):
        clock = ctypes.c_int()
        if libc.clock_getcpuclockid(each, ctypes.byref(clock)) == 0:
            try:
                total += time.clock_gettime(clock.value)
            except OSError:
                pass
    return total
try:
    while True:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/", method="POST",
                                         data=event["body"].encode(), headers=event["headers"])
        try:
            urllib.request.urlopen(request, timeout=30).read()
            print(cpu(proc.pid))
            break
        except urllib.error.HTTPError as e:
            sys.exit(f"{target} answered {e.code}")
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"{target} exited {proc.returncode}")
            time.sleep(0.005)
finally:
    proc.terminate()
    proc.wait()
"""


def _event() -> str:
    from tests.e2e.packaging import pushed_event

    headers, body = pushed_event()
    # named by its content, as the ingress hands a push on (the image's store is empty)
    data = {**json.loads(body), "digest": f"content-sha256:{'0' * 64}"}
    event = {"headers": headers, "body": json.dumps(data)}
    return base64.b64encode(json.dumps(event).encode()).decode()


def main(argv: list[str] | None = None) -> list[Goal]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args(argv)
    from tests.e2e.packaging import build_image
    from tests.servers.containers import Podman

    podman = Podman.configured()
    with tempfile.TemporaryDirectory() as tmp:
        print("building the image as the image test builds it …", flush=True)
        image = build_image(podman, Path(tmp))
        try:
            return _measure(podman, image, args.runs)
        finally:
            podman("rmi", "-f", image, check=False)


def _measure(podman: Podman, image: str, runs: int) -> list[Goal]:
    event = _event()

    def once(target: str, source: str) -> float:
        run = podman(
            "run", "--rm", "--network=host", "-v", f"{ANCHORS}:/anchors:ro", image,
            "/opt/modelhooks/bin/python", "-c", _INSIDE, target, source, event,
            check=False,
        )  # fmt: skip
        if run.returncode:
            raise RuntimeError(f"{target} in {image}: exit {run.returncode}\n{run.stderr[-2000:]}")
        return float(run.stdout.strip())

    times: dict[str, list[float]] = {"register": [], "hello": []}
    for _ in range(runs):
        times["register"].append(once("register", ""))
        times["hello"].append(once("hello", "/anchors/bare.py"))
    f, h = (statistics.median(times[name]) for name in ("register", "hello"))
    fmin, hmin = (min(times[name]) for name in ("register", "hello"))
    print(
        f"cold start in the image (median of {runs}; CPU of functions-framework and its "
        "worker, start → first answered CloudEvent)"
    )
    print(f"  register  {f * 1000:5.0f} ms (min {fmin * 1000:.0f})")
    print(f"  ff hello  {h * 1000:5.0f} ms (min {hmin * 1000:.0f})   ratio {f / h:.2f}x")
    return [
        Goal(
            "cold start: register in the image",
            f"CPU {f / h:.2f}x ({f * 1000:.0f} ms)",
            "measured",
            True,
            anchor=f"ff hello in the image, CPU {h * 1000:.0f} ms",
        )
    ]


if __name__ == "__main__":
    sys.exit(0 if all(g.met for g in main()) else 1)
