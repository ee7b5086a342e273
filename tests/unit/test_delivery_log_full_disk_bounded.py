"""While the disk stays full, the delivery log's records not written are bounded and no
delivery is refused for them: in a real process whose files may not grow (RLIMIT_FSIZE),
every put past the 256th flushed at once, raised (the delivery, its effect done, answered
503) and rewrote all that was pending (3,000 deliveries: 11 s), which grew without end.
The log keeps the latest `size` records only, so the pending keep as many."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import resource, signal, sys, time
from pathlib import Path
from modelhooks.adapters.idempotency.sqlite import SqliteDeliveryLog
from modelhooks.core.logs import configure

configure("CRITICAL")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, as on a full disk
log = SqliteDeliveryLog(Path(sys.argv[1]), 500)
log.put(("register", "s", "before"), "d", b"[]")
log.flush()
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))  # the disk is full
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


def test_a_full_disk_refuses_no_delivery_and_keeps_the_latest_records(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.db"
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    raised, pending, *found = run.stdout.split()
    assert (raised, pending) == ("0", "500"), run.stdout
    assert found == ["False", "False", "True", "True"]  # the latest 500 are found
    with sqlite3.connect(path) as db:
        ids = {row[0] for row in db.execute("SELECT id FROM deliveries")}
    db.close()
    assert ids == {"before"} | {f"r{n}" for n in range(1500, 2000)}
