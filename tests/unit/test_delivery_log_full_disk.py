"""The delivery log on a full disk, in a real process whose files may not grow (RLIMIT_FSIZE:
what ENOSPC is to SQLite, without root or a small file system):

- its group commit outlives it: a flush that fails is an ERROR line, its records stay
  pending, and once there is room again they and the later ones are written within moments,
  not at the 256th delivery;
- while it stays full, the records not written are bounded and no delivery is refused for
  them: every put past the 256th flushed at once, raised (the delivery, its effect done,
  answered 503) and rewrote all that was pending (3,000 deliveries: 11 s), which grew
  without end. The log keeps the latest `size` records only, so the pending keep as many."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

# a log of `size` records with one written, then a full disk
FULL = """
import resource, signal, sys, time
from pathlib import Path
from modelhooks.adapters.idempotency.sqlite import SqliteDeliveryLog
from modelhooks.core.logs import configure

configure(sys.argv[3])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, as on a full disk
log = SqliteDeliveryLog(Path(sys.argv[1]), int(sys.argv[2]))
log.put(("register", "s", "before"), "d", b"[]")
log.flush()
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))  # the disk is full
"""

SURVIVES = (
    FULL
    + """
log.put(("register", "s", "during"), "d", b"x" * 200_000)
time.sleep(0.4)  # the group commit fails, and fails again
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
log.put(("register", "s", "after"), "d", b"[]")
time.sleep(1.0)  # no close(): what a crash now would leave
print("ALIVE" if log._flusher and log._flusher.is_alive() else "DEAD", flush=True)
import os; os._exit(0)
"""
)


def test_the_group_commit_survives_a_full_disk_and_writes_what_it_could_not(
    tmp_path: Path,
) -> None:
    path = tmp_path / "deliveries.db"
    run = _full_disk(SURVIVES, path, 1000, "WARNING")
    assert run.stdout.strip() == "ALIVE", run.stderr  # the thread died on the first failure
    with sqlite3.connect(path) as db:
        ids = sorted(row[0] for row in db.execute("SELECT id FROM deliveries"))
    db.close()
    assert ids == ["after", "before", "during"]
    lines = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    errors = [line for line in lines if line["severity"] == "ERROR"]
    assert errors and errors[0]["failures"] == 1 and "not written" in errors[0]["message"]
    assert lines[-1]["severity"] == "WARNING" and "written again" in lines[-1]["message"]


BOUNDED = (
    FULL
    + """
raised = 0
for n in range(2000):
    try:
        log.put(("register", "s", f"r{n}"), "d", b"x" * 1000)
    except Exception:
        raised += 1
found = [log.get(("register", "s", f"r{n}")) is not None for n in (0, 1499, 1500, 1999)]
print(raised, len(log._pending), *found, flush=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
time.sleep(6.0)  # the group commit's wait is 5 s at most
import os; os._exit(0)
"""
)


def test_a_full_disk_refuses_no_delivery_and_keeps_the_latest_records(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.db"
    raised, pending, *found = _full_disk(BOUNDED, path, 500, "CRITICAL").stdout.split()
    assert (raised, pending) == ("0", "500")
    assert found == ["False", "False", "True", "True"]  # the latest 500 are found
    with sqlite3.connect(path) as db:
        ids = {row[0] for row in db.execute("SELECT id FROM deliveries")}
    db.close()
    assert ids == {"before"} | {f"r{n}" for n in range(1500, 2000)}


def _full_disk(script: str, path: Path, size: int, level: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", script, str(path), str(size), level]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run
