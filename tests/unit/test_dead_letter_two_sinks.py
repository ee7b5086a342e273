"""Two dead-letter sinks appending to one file (two replicas on one volume, an old pod still
stopping): one's write failing (the disk full) takes nothing of the other's with it."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from modelhooks.cli.replay import read_documents
from modelhooks.delivery import dead_letter
from modelhooks.delivery.dead_letter import DeadLetterStore


def test_a_failed_write_cuts_off_no_line_of_another_sink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failing sink cut the file back to where its write began: the other's line,
    appended meanwhile and answered 202, went with it."""
    directory = tmp_path / "dead-letter"
    mine, other = DeadLetterStore(directory), DeadLetterStore(directory)  # own locks each
    mine._echo = other._echo = False
    mine.store([{"specversion": "1.0", "id": "first"}])
    write = os.write
    others: list[threading.Thread] = []

    def full_disk_for_mine(fd: int, data: bytes | memoryview) -> int:
        if b'"mine"' not in bytes(data):
            return write(fd, data)
        appends = threading.Thread(
            target=other.store, args=([{"specversion": "1.0", "id": "other"}],)
        )
        appends.start()  # the other sink's event arrives now
        others.append(appends)
        appends.join(0.5)  # done by then when nothing holds it back
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dead_letter.os, "write", full_disk_for_mine)
    with pytest.raises(OSError):
        mine.store([{"specversion": "1.0", "id": "mine"}])
    for appends in others:
        appends.join(10)
    docs = [doc for _, doc in read_documents(str(directory))]
    assert [doc["id"] for doc in docs] == ["first", "other"]
