"""The embedded registry and delivery log checkpoint their write-ahead log off the request
path: a commit never copies the log back into the database (with its fsyncs, under the lock
every delivery waits on); a thread of their own does, soon after."""

from __future__ import annotations

import time
from pathlib import Path

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
