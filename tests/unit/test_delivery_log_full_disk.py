"""The delivery log's group commit outlives a full disk: in a real process whose files may
not grow (RLIMIT_FSIZE: what ENOSPC is to SQLite, without root or a small file system), a
flush that fails is an ERROR line, its records stay pending, and once there is room again
they and the later ones are written within moments, not at the 256th delivery."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import resource, signal, sys, time
from pathlib import Path
from modelhooks.adapters.idempotency.sqlite import SqliteDeliveryLog
from modelhooks.core.logs import configure

configure("WARNING")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, as on a full disk
log = SqliteDeliveryLog(Path(sys.argv[1]), 1000)
log.put(("register", "s", "before"), "d", b"[]")
log.flush()
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))  # the disk is full
log.put(("register", "s", "during"), "d", b"x" * 200_000)
time.sleep(0.4)  # the group commit fails, and fails again
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
log.put(("register", "s", "after"), "d", b"[]")
time.sleep(1.0)  # no close(): what a crash now would leave
print("ALIVE" if log._flusher and log._flusher.is_alive() else "DEAD", flush=True)
import os; os._exit(0)
"""


def test_the_group_commit_survives_a_full_disk_and_writes_what_it_could_not(
    tmp_path: Path,
) -> None:
    path = tmp_path / "deliveries.db"
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ALIVE", run.stderr  # the thread died on the first failure
    with sqlite3.connect(path) as db:
        ids = sorted(row[0] for row in db.execute("SELECT id FROM deliveries"))
    db.close()
    assert ids == ["after", "before", "during"]
    lines = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    errors = [line for line in lines if line["severity"] == "ERROR"]
    assert errors and errors[0]["failures"] == 1 and "not written" in errors[0]["message"]
    assert lines[-1]["severity"] == "WARNING" and "written again" in lines[-1]["message"]
