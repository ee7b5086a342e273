"""The embedded registry and delivery log checkpoint their write-ahead log off the request
path: a commit never copies the log back into the database (with its fsyncs, under the lock
every delivery waits on); a thread of their own does, soon after."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from modelhooks.adapters import sqlite_wal
from modelhooks.adapters.idempotency.sqlite import SqliteDeliveryLog
from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry


def _grows(path: Path, size: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.stat().st_size > size:
            return True
        time.sleep(0.02)
    return False


def test_registry_commits_do_not_checkpoint_and_the_log_is_checkpointed_soon(
    tmp_path: Path,
) -> None:
    registry = SqliteModelRegistry(tmp_path / "registry.db")
    try:
        assert registry._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        model = registry.create_model("m", properties={})
        size = (tmp_path / "registry.db").stat().st_size
        for n in range(300):  # far fewer pages than the default checkpoint's 1,000
            with registry.transaction():
                registry.create_version(model.id, str(n), properties={"digest": "x" * 64})
        assert _grows(tmp_path / "registry.db", size), "the WAL was never checkpointed"
        assert len(registry.list_versions(model.id)) == 300
    finally:
        registry.close()


def test_the_delivery_log_checkpoints_off_its_flush(tmp_path: Path) -> None:
    log = SqliteDeliveryLog(tmp_path / "deliveries.db", size=1000)
    try:
        assert log._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        size = (tmp_path / "deliveries.db").stat().st_size
        for n in range(300):
            log.put(("register", "/bench", str(n)), "d", b"[]" * 100)
        log.flush()
        assert _grows(tmp_path / "deliveries.db", size), "the WAL was never checkpointed"
        assert log.get(("register", "/bench", "7")) == ("d", b"[]" * 100)
    finally:
        log.close()


def test_a_forked_process_checkpoints_its_own_and_exits_cleanly(tmp_path: Path) -> None:
    """gunicorn forks its worker after functions-framework built the function (and its
    delivery log): the worker runs none of the checkpointers it inherited (their threads
    are gone, their connections the parent's), builds its own log, which commits and
    checkpoints by itself, and stops its threads at exit."""
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import os, sqlite3, sys, threading, time
        from pathlib import Path
        from modelhooks.adapters.idempotency.sqlite import SqliteDeliveryLog
        path = Path({str(tmp_path / "forked.db")!r})
        log = SqliteDeliveryLog(path, size=1000)
        log._db  # opened before the fork (a log opens its file when first used)
        pid = os.fork()
        if pid == 0:  # the worker: its own log (bootstrap builds anew after a fork)
            assert [t for t in threading.enumerate() if t.name.startswith("checkpoint")] == []
            size = path.stat().st_size
            mine = SqliteDeliveryLog(path, size=1000)
            for n in range(300):
                mine.put(("register", "/fork", str(n)), "d", b"[]" * 100)
            deadline = time.monotonic() + 5  # committed by its own thread, then checkpointed
            while path.stat().st_size <= size and time.monotonic() < deadline:
                time.sleep(0.02)
            rows = sqlite3.connect(path).execute("SELECT COUNT(*) FROM deliveries").fetchone()
            sys.exit(0 if path.stat().st_size > size and rows == (300,) else 3)
        log._checkpoints.close()  # the parent's checkpointer stops: only the worker's is left
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr.decode()[-2000:])
    assert os.path.getsize(tmp_path / "forked.db") > 0


def test_the_log_is_started_over_while_commits_keep_coming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A steady stream of commits left a PASSIVE checkpoint no moment to start the log over:
    it grew by every commit, without end (hundreds of MB a minute under load). Past
    RESTART_PAGES the checkpoint empties it, between two commits, while they keep coming."""
    monkeypatch.setattr(sqlite_wal, "RESTART_PAGES", 64)  # 256 KiB: soon
    registry = SqliteModelRegistry(tmp_path / "registry.db")
    wal = tmp_path / "registry.db-wal"
    try:
        model = registry.create_model("m", properties={})
        last = shrank = n = 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (shrank and n > 2000):
            with registry.transaction():
                registry.create_version(model.id, str(n), properties={"digest": "x" * 64})
            n += 1
            size = wal.stat().st_size
            shrank, last = shrank or size < last, size
        assert shrank, f"the log only grew: {last} bytes after {n} commits"
        assert len(registry.list_versions(model.id)) == n  # every commit kept
    finally:
        registry.close()
