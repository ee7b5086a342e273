"""Where server binaries are cached, the build lock, and commands run with visible progress.

Layout under ``${MODELHOOKS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/modelhooks}``::

    bin/<name>-<version>     a built binary (written to a temp name, then renamed)
    build.lock               fcntl lock: one process builds at a time, the others wait
    work/                    throw-away wrapper modules while building
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path


class RecipeError(RuntimeError):
    """A step of obtaining a server failed; carries the command and its output."""

    def __init__(self, server: str, command: Sequence[str], output: str, returncode: int) -> None:
        self.server = server
        self.command = list(command)
        self.output = output
        self.returncode = returncode
        super().__init__(self.diagnostics())

    def diagnostics(self) -> str:
        tail = "\n".join(self.output.strip().splitlines()[-40:])
        return (
            f"server {self.server!r}: command failed (exit {self.returncode}):\n"
            f"  $ {shlex.join(self.command)}\n{tail}"
        )


def cache_root() -> Path:
    if explicit := os.environ.get("MODELHOOKS_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "modelhooks"


def bin_dir() -> Path:
    return cache_root() / "bin"


def log(message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"[servers {stamp}] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Hold the cache-wide build lock; waits (and says so) while another process builds."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "build.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another process is building; waiting for {root / 'build.lock'}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run(
    server: str,
    command: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    quiet: bool = False,
    heartbeat: float = 30.0,
) -> str:
    """Run one step, raising RecipeError (command + output) on failure.

    Output is streamed to stderr unless ``quiet``; either way a heartbeat line every
    ``heartbeat`` seconds says the step is alive, how many lines it printed and the last one
    (for ``go build -v`` that is the package being compiled).
    """
    log(f"{server}: $ {shlex.join(command)}")
    started = time.monotonic()
    full_env = {**os.environ, **(env or {})}
    lines: list[str] = []
    done = threading.Event()

    def beat() -> None:
        while not done.wait(heartbeat):
            last = lines[-1].strip() if lines else "-"
            elapsed = time.monotonic() - started
            log(f"{server}: still running ({elapsed:.0f}s, {len(lines)} lines; last: {last})")

    ticker = threading.Thread(target=beat, daemon=True)
    ticker.start()
    try:
        with subprocess.Popen(
            list(command),
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if not quiet:
                    print(f"    {line}", end="", file=sys.stderr, flush=True)
            returncode = proc.wait()
    finally:
        done.set()
        ticker.join()
    output = "".join(lines)
    if returncode != 0:
        raise RecipeError(server, command, output, returncode)
    log(f"{server}: step done in {time.monotonic() - started:.0f}s")
    return output
