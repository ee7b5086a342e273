"""The dead-letter store on a full disk: in a real process whose files may not grow
(RLIMIT_FSIZE), an event that cannot be written whole is not written at all (the sink
answers 500 and the Broker sends it again), and the next event, once there is room, is a
line `modelhooks replay` reads: it went on the failed write's half line, unreadable, though
the sink had answered 202 to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from modelhooks.cli.replay import read_documents

SCRIPT = """
import resource, sys
from pathlib import Path
from modelhooks.delivery.dead_letter import DeadLetterStore

store = DeadLetterStore(Path(sys.argv[1]))
store.store([{"specversion": "1.0", "id": "before", "data": "x"}])
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
size = sum(p.stat().st_size for p in store.directory.iterdir())
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 4096, hard))  # the disk is (nearly) full
try:
    store.store([{"specversion": "1.0", "id": "big", "data": "y" * 100_000}])
except OSError as exc:
    print("refused:", exc.strerror, file=sys.stderr)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
store.store([{"specversion": "1.0", "id": "after", "data": "z"}])
"""


def test_an_event_not_written_whole_leaves_nothing_behind(tmp_path: Path) -> None:
    directory = tmp_path / "dead-letter"
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "refused: File too large" in run.stderr
    docs = [doc for _, doc in read_documents(str(directory))]
    assert [doc.get("id") if isinstance(doc, dict) else repr(doc) for doc in docs] == [
        "before",
        "after",
    ]
