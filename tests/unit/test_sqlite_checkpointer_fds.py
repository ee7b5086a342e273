"""The checkpoint thread outlives a process out of file descriptors: in a real process whose
descriptors run out just after the serving connection opened (RLIMIT_NOFILE), the thread
cannot open its own connection; once there are descriptors again it checkpoints. It ended
there, and the write-ahead log grew without end for the life of the process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import os, resource, sqlite3, sys, threading, time
from pathlib import Path
from modelhooks.adapters.sqlite_wal import connect

path = Path(sys.argv[1])
made = sqlite3.connect(path)  # a database in WAL mode already: opening it takes 3 descriptors
made.execute("PRAGMA journal_mode=WAL")
made.execute("CREATE TABLE t (x)")
made.close()
failed = []
threading.excepthook = lambda hook: failed.append(repr(hook.exc_value))


def free(count):
    found, fd = [], 0
    while len(found) < count:
        try:
            os.fstat(fd)
        except OSError:
            found.append(fd)
        fd += 1
    return found


soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (free(4)[-1], hard))  # 3 more descriptors, no 4th
db, checkpointer = connect(path, every=0.1)
time.sleep(0.5)  # the checkpointer cannot open its connection
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
size = path.stat().st_size
for _ in range(200):
    db.execute("INSERT INTO t VALUES (?)", ("x" * 500,))
deadline = time.monotonic() + 5
while path.stat().st_size <= size and time.monotonic() < deadline:
    time.sleep(0.05)
print(checkpointer.thread.is_alive(), path.stat().st_size > size, failed)
checkpointer.close()
db.close()
"""


def test_the_checkpointer_outlives_a_process_out_of_file_descriptors(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "registry.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    alive, checkpointed, failed = run.stdout.strip().split(" ", 2)
    assert (alive, checkpointed, failed) == ("True", "True", "[]"), run.stdout + run.stderr
