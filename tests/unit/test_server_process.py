"""The test-server harness: a server that never gets ready is not left running."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers._proc import Process, ServerFailed


def test_a_server_never_ready_is_stopped_and_its_log_quoted(tmp_path: Path) -> None:
    process = Process(
        "sleeper", ["sh", "-c", "echo starting; exec sleep 60"], log_path=tmp_path / "log"
    )
    with pytest.raises(ServerFailed, match=r"sleeper not ready after 0s(.|\n)*starting"):
        process.wait_ready(lambda: False, timeout=0.5)
    assert not process.alive()


def test_a_server_that_exits_is_reported_with_its_status(tmp_path: Path) -> None:
    process = Process("quitter", ["sh", "-c", "echo bad flag; exit 3"], log_path=tmp_path / "log")
    with pytest.raises(ServerFailed, match=r"quitter exited with 3(.|\n)*bad flag"):
        process.wait_ready(lambda: False, timeout=10)


def test_a_ready_server_keeps_running(tmp_path: Path) -> None:
    process = Process("sleeper", ["sleep", "60"], log_path=tmp_path / "log")
    try:
        assert process.wait_ready(lambda: True, timeout=5) >= 0
        assert process.alive()
    finally:
        process.stop()
    assert not process.alive()
