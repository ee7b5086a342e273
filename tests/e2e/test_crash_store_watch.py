"""serve's local-store watcher killed with SIGKILL mid-scan, while pushes it announced are
being registered, then restarted on the same home: every ready marker ends registered
exactly once (one version, one artifact), and after the restart nothing is registered twice
(each marker's push handled at most once more: the one whose record the kill lost)."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from tests.e2e.conftest import Served
from tests.e2e.packaging import free_port
from tests.local_store import lay_model

pytestmark = pytest.mark.e2e

MODELS = 200


def _versions(home: Path) -> int:
    db = home / "registry.db"
    if not db.exists():
        return 0
    with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(db)) as conn:
        return int(conn.execute("SELECT count(*) FROM model_versions").fetchone()[0])
    return 0


def _registered(log: str) -> collections.Counter[str]:
    """How many times register took effect ("ok") on each push, by event id."""
    done: collections.Counter[str] = collections.Counter()
    for line in log.splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            if doc.get("function") == "register" and doc.get("outcome") == "ok":
                done[doc["event_id"]] += 1
    return done


def test_a_kill_mid_scan_registers_every_marker_once(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    port = free_port()
    home = tmp_path / f"home-{port}"
    served = serve(port, "--serve-watch-interval", "0.2")
    folders = [
        lay_model(home, "models", f"models/w{m}/1", content=f"weights {m}".encode() * 50)
        for m in range(MODELS)
    ]
    for where in folders:  # all ready at once: one scan announces them
        (where / "_SUCCESS").touch()
    deadline = time.monotonic() + 30
    while _versions(home) < MODELS // 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(served.process.pid, signal.SIGKILL)  # mid-scan: pushes announced, some registered
    served.process.wait(timeout=10)
    before = served.log.read_text()
    assert 0 < _versions(home) < MODELS, before[-3000:]

    again = serve(port, "--serve-watch-interval", "0.2")
    again.wait_for(f"{MODELS} versions", lambda: _versions(home) == MODELS)
    time.sleep(1)  # scans again: nothing more
    registry = SqliteModelRegistry(home / "registry.db")
    try:
        models = registry.list_models()
        assert sorted(m.name for m in models) == sorted(f"w{m}" for m in range(MODELS))
        for model in models:
            (version,) = registry.list_versions(model.id)
            assert len(registry.list_artifacts(version.id)) == 1, model.name
    finally:
        registry.close()
    first, second = _registered(before), _registered(again.log.read_text())
    assert max(second.values(), default=0) <= 1, second  # no push took effect twice after it
    assert len(set(first) | set(second)) == MODELS  # one push a marker, under its one id
