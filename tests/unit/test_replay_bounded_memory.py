"""`modelhooks replay` of big sources: JSON Lines parsed line by line as they are sent,
never all held; what cannot be one stored delivery (a JSON document of many megabytes,
standard input without end) is refused unparsed."""

from __future__ import annotations

import contextlib
import io
import json
import tracemalloc
from pathlib import Path

import pytest

from modelhooks.cli import main, replay
from modelhooks.events import samples


def lines_of_events(path: Path, count: int) -> int:
    event = samples.load("canonical-artifact-pushed")
    with path.open("w") as f:
        for i in range(count):
            f.write(json.dumps({**event, "id": f"e{i}"}) + "\n")
    return path.stat().st_size


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_json_lines_are_not_held_whole(home: Path, tmp_path: Path) -> None:
    """Every event of the file was held before the first was sent: 11 times the file
    (1.2 GB for 110 MB measured; a 1 GiB file, the limit, over 11 GB)."""
    size = lines_of_events(tmp_path / "events.jsonl", 4000)
    tracemalloc.start()
    try:
        code, out, err = run(
            "replay", str(tmp_path / "events.jsonl"), "--dry-run", "--home", str(home)
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 0, err
    assert out.count("\n") == 4000 and "4000 events would be sent" in err
    assert peak < 3 * size, f"peak {peak} bytes for a file of {size}"


def test_a_sent_replay_reads_twice_and_holds_nothing(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines_of_events(tmp_path / "events.jsonl", 3)
    sent: list[str] = []

    def sender(_settings: object) -> object:
        def send(event: object) -> tuple[int, str]:
            sent.append(event.id)
            return 200, ""

        return send

    from modelhooks.cli import common

    monkeypatch.setattr(common, "local_sender", sender)
    code, _, err = run("replay", str(tmp_path / "events.jsonl"), "--quiet", "--home", str(home))
    assert code == 0 and "sent 3, succeeded 3" in err, err
    assert len(sent) == 3


def test_one_json_document_of_many_megabytes_is_refused_unparsed(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JSON array of a million events (550 MB) was parsed whole: gigabytes."""
    monkeypatch.setattr(replay, "MAX_DOCUMENT_BYTES", 4096)
    event = samples.load("canonical-artifact-pushed")
    array = tmp_path / "array.json"
    array.write_text(json.dumps([{**event, "id": f"a{i}"} for i in range(20)]))
    code, out, _ = run("replay", str(array), "--dry-run", "--home", str(home))
    assert code == 2
    (said,) = [json.loads(line)["error"] for line in out.splitlines()]
    assert said.startswith(f"{array} is neither JSON nor JSON Lines: over 4096 bytes")


def test_standard_input_is_read_bounded(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay - < /dev/zero` read without end (files were refused past 1 GiB, stdin not)."""
    monkeypatch.setattr(replay, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr("sys.stdin", io.StringIO("\0" * 5000))
    code, out, _ = run("replay", "-", "--dry-run", "--home", str(home))
    assert code == 2
    assert json.loads(out)["error"] == "<stdin>: over 1000 bytes: split it"
