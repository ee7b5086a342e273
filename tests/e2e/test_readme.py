"""The README's "Try it" blocks, run as a newcomer runs them: from a checkout-like directory
(`.venv` and `events/` of this one), against `modelhooks serve` started as `make run`
starts it, command by command, each expected to succeed. The blocks are the ones marked
`<!-- readme-test: NAME -->`; only the port differs (a free one for 8080)."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.packaging import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- readme-test: (?P<name>\w+) -->\n```sh\n(?P<body>.*?)```", re.S)


def blocks() -> dict[str, list[str]]:
    text = (ROOT / "README.md").read_text()
    return {m["name"]: m["body"].strip().splitlines() for m in BLOCK.finditer(text)}


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "events").symlink_to(ROOT / "events")
    return tmp_path


class Server:
    def __init__(self, cwd: Path, port: int) -> None:
        self.cwd, self.port, self.proc = cwd, port, None

    def start(self, run_args: str = "") -> None:
        """What `make run RUN_ARGS=…` runs (Makefile: HOST, PORT)."""
        argv = [".venv/bin/modelhooks", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with (self.cwd / "serve.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [*argv, *shlex.split(run_args)], cwd=self.cwd, stdout=log, stderr=log
            )
        run_until(self.cwd, f"curl -sf http://127.0.0.1:{self.port}/healthz", lambda out: True)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def server(checkout: Path) -> Iterator[Server]:
    server = Server(checkout, free_port())
    yield server
    server.stop()


def run(cwd: Path, line: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True)


def run_until(cwd: Path, line: str, ok: Callable[[str], bool], timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    while True:
        done = run(cwd, line)
        if done.returncode == 0 and ok(done.stdout):
            return done.stdout
        if time.monotonic() > deadline:
            raise AssertionError(f"{line!r} did not succeed:\n{done.stdout}\n{done.stderr}")
        time.sleep(0.3)


def test_the_try_it_section_works_as_written(checkout: Path, server: Server) -> None:
    steps = blocks()
    assert set(steps) >= {"drop", "replay", "sign"}, steps
    port = str(server.port)
    server.start()

    for line in steps["drop"]:  # verbatim, once each: the block itself waits for the scan
        done = run(checkout, line)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    assert "demo" in done.stdout, f"the drop block's last line does not list demo:\n{done.stdout}"

    for line in steps["replay"]:
        done = run(checkout, line.replace("8080", port))
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"

    for line in steps["sign"]:
        if line.startswith("make run"):  # stop the first server, start it with the key
            server.stop()
            server.start(re.search(r'RUN_ARGS="([^"]*)"', line)[1])  # type: ignore[index]
            continue
        run_until(checkout, line, lambda out: True)
    upstream = (
        ".venv/bin/model_signing verify key .modelhooks/store/models/models/demo/1 "
        "--signature .modelhooks/store/models/models/demo/1/model.sig "
        "--public_key .modelhooks/key.pub"
    )
    assert upstream in (ROOT / "README.md").read_text()
    assert run(checkout, upstream).returncode == 0
