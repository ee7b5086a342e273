"""Ctrl-C in a real `modelhooks` process: it stops promptly, says what was done, exits 130
and prints no traceback (modelhooks.cli.main)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from modelhooks.events import samples
from tests.unit.signing_material import make_key

MODELHOOKS = str(Path(sys.executable).parent / "modelhooks")
SAMPLES = Path(samples.__file__).parent


class Running:
    """A `modelhooks` process whose stderr is collected as it comes (progress bars end
    their updates with \\r, not lines)."""

    def __init__(self, home: Path, *argv: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
        self.proc = subprocess.Popen(
            [MODELHOOKS, *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**env, "MODELHOOKS_HOME": str(home), "PYTHONUNBUFFERED": "1"},
        )
        self.err = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:
            while chunk := os.read(self.proc.stderr.fileno(), 65536):
                self.err += chunk

    def wait_for(self, ready: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"no {what} (exit {self.proc.poll()}):\n{self.stderr()[-3000:]}")
            time.sleep(0.05)

    def interrupt(self, within: float) -> tuple[int, float]:
        """SIGINT, as Ctrl-C sends it; (exit status, seconds it took to exit)."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"still running {within} s after Ctrl-C:\n{self.stderr()[-3000:]}")
        self._reader.join(timeout=5)
        return code, time.monotonic() - start

    def stderr(self) -> str:
        return self.err.decode(errors="replace")

    def last_line(self) -> str:
        return self.stderr().replace("\r", "\n").strip().splitlines()[-1]


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(*argv: str) -> Running:
        started.append(Running(tmp_path / "home", *argv))
        return started[-1]

    yield start
    for r in started:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()
        r._reader.join(timeout=5)


def test_ctrl_c_in_a_rate_limited_replay(running: Callable[..., Running], tmp_path: Path) -> None:
    replay = running(
        "replay", str(SAMPLES), "--rate", "2", "--quiet", "--ingress-registry-host", "h"
    )
    replay.wait_for((tmp_path / "home" / "registry.db").exists, "registry (sending started)")
    time.sleep(1.2)
    code, _ = replay.interrupt(within=10)
    assert code == 130, replay.stderr()
    assert "Traceback" not in replay.stderr()
    last = replay.last_line()
    assert re.fullmatch(r"interrupted: sent \d+, .* of \d+ events; replaying again is safe", last)


def test_ctrl_c_while_signing_a_large_file_stops_hashing(
    running: Callable[..., Running], tmp_path: Path
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    with open(model / "weights.bin", "wb") as f:  # sparse: 64 GiB to hash, nothing on disk
        f.truncate(64 << 30)
    key = make_key(tmp_path)
    sign = running("sign", str(model), "--key", str(key.private))
    sign.wait_for(lambda: b"hashing:" in sign.err, "progress")
    code, took = sign.interrupt(within=15)  # hashing it all takes minutes
    assert code == 130, sign.stderr()
    assert "Traceback" not in sign.stderr()
    last = sign.last_line()
    assert last.startswith("interrupted: hashing: ") and "of 64.0GB; nothing was signed" in last
    assert not (model / "model.sig").exists()
    assert took < 15


def test_ctrl_c_stops_serve(running: Callable[..., Running]) -> None:
    serve = running("serve", "--port", "0")
    serve.wait_for(lambda: b"signing:" in serve.err, "banner")
    code, _ = serve.interrupt(within=15)
    assert code == 130, serve.stderr()
    assert "Traceback" not in serve.stderr()
    assert serve.last_line() == "interrupted: stopped serving"
