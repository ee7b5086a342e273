"""The dead-letter store after a crash: a real process killed (SIGKILL) while it appends a big
event leaves a half line; the sink restarted, the next event it keeps is a line of its own
that `modelhooks replay` reads: it went on the half line, and replay could read neither
(the sink had answered 202 to it)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from modelhooks.cli.replay import read_documents
from modelhooks.delivery.dead_letter import DeadLetterStore

SCRIPT = """
import sys
from pathlib import Path
from modelhooks.delivery.dead_letter import DeadLetterStore

store = DeadLetterStore(Path(sys.argv[1]), _echo=False)
store.store([{"specversion": "1.0", "id": "before", "data": "x"}])
print("big", flush=True)
store.store([{"specversion": "1.0", "id": "big", "data": "y" * 32_000_000}])
"""


def _killed_mid_write(directory: Path) -> Path:
    """The day's file, as a sink killed while appending the big event left it."""
    for _ in range(5):  # the kill lands mid-write almost always
        shutil.rmtree(directory, ignore_errors=True)
        sink = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(directory)], stdout=subprocess.PIPE
        )
        assert sink.stdout is not None
        assert sink.stdout.readline() == b"big\n"
        (path,) = directory.iterdir()
        size, deadline = path.stat().st_size, time.monotonic() + 10
        while path.stat().st_size == size and time.monotonic() < deadline:
            pass  # the big event's write began
        os.kill(sink.pid, signal.SIGKILL)
        sink.wait(timeout=10)
        sink.stdout.close()
        if not path.read_bytes().endswith(b"\n"):
            return path
    raise AssertionError("the big event was written whole before every kill")


def test_the_event_kept_after_a_crash_mid_write_is_a_line_of_its_own(tmp_path: Path) -> None:
    directory = tmp_path / "dead-letter"
    path = _killed_mid_write(directory)
    store = DeadLetterStore(directory, _echo=False)  # the sink restarted
    assert store.store([{"specversion": "1.0", "id": "after", "data": "z"}]) == path
    docs = [doc for _, doc in read_documents(str(directory))]
    ids = [doc["id"] for doc in docs if isinstance(doc, dict)]
    assert ids == ["before", "after"]
    assert len(docs) == 3  # the half line, told as one that cannot be read
