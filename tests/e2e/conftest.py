"""The e2e layer: `modelhooks serve` as a real process, fed by real upstream servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from tests.e2e.packaging import build_image
from tests.servers.containers import Podman

MODELHOOKS = str(Path(sys.executable).with_name("modelhooks"))


@pytest.fixture(scope="session")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The image `make image` builds (infra/image/Dockerfile), on the mmdebstrap base (the
    Dockerfile's BASE swapped, nothing else), offline from a staged wheelhouse; built once
    a session (the image test and the functions as Pods on the node run it)."""
    tag = build_image(podman, tmp_path_factory.mktemp("image"))
    try:
        yield tag
    finally:
        podman("rmi", "-f", tag, check=False)


@dataclass
class Served:
    """A running `modelhooks serve`: its URL, state directory and log."""

    url: str
    home: Path
    log: Path
    process: subprocess.Popen[bytes]
    _registry: SqliteModelRegistry | None = field(default=None, repr=False)

    @property
    def registry(self) -> SqliteModelRegistry:
        if self._registry is None:
            self._registry = SqliteModelRegistry(self.home / "registry.db")
        return self._registry

    def registrations(self) -> list[dict[str, str]]:
        out = subprocess.run(
            [MODELHOOKS, "registry", "list", "--json", "--home", str(self.home)],
            check=True,
            capture_output=True,
            text=True,
        )
        rows: list[dict[str, str]] = json.loads(out.stdout)
        return rows

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float = 30) -> Any:
        """Poll until `check()` is truthy; fail with the server's log otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what}\n--- modelhooks serve log ---\n{self.logs()}")

    def logs(self) -> str:
        return self.log.read_text()[-6000:]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """Start `modelhooks serve` on a given port with extra flags; stopped at the end."""
    started: list[Served] = []

    def start(port: int, *flags: str, env: dict[str, str] | None = None) -> Served:
        home = tmp_path / f"home-{port}"
        log = tmp_path / f"serve-{port}.log"
        argv = [MODELHOOKS, "serve", "--port", str(port), "--home", str(home), *flags]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env={**environ, **(env or {})}
            )
        served = Served(f"http://127.0.0.1:{port}", home, log, proc)
        started.append(served)

        def healthy() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"modelhooks serve exited with {proc.returncode}:\n{served.logs()}")
            try:
                with urllib.request.urlopen(f"{served.url}/healthz", timeout=2) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False

        served.wait_for("modelhooks serve /healthz", healthy)
        return served

    yield start
    for served in started:
        served.process.terminate()
        served.process.wait(timeout=10)
        if served._registry is not None:
            served._registry.close()
