"""The dead-letter sink's file replaced by what is not one it made: a link is not
followed (the events went into whatever it named), a directory or a FIFO keeps nothing;
each answers 503 naming the file, and the sink keeps events again once it is gone."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from modelhooks.cli.replay import read_documents
from modelhooks.delivery.dead_letter import DeadLetterStore, routes
from modelhooks.delivery.routes import RouteAuth
from modelhooks.events import samples

HEADERS = {"Content-Type": "application/cloudevents+json"}


def deliver(directory: Path) -> tuple[int, str]:
    handle = routes(RouteAuth.from_settings("none", ""), DeadLetterStore(directory))
    body = json.dumps(samples.load("canonical-artifact-pushed")).encode()
    answer = handle("POST", "/", HEADERS, body)
    return answer.status, answer.body.decode()


PUT_IN_PLACE = {
    "link": lambda day: day.symlink_to(day.parent.parent / "victim.txt"),
    "directory": lambda day: day.mkdir(),
    "fifo": lambda day: os.mkfifo(day),
}


@pytest.mark.parametrize("kind", sorted(PUT_IN_PLACE))
def test_what_is_not_the_sinks_file_keeps_nothing(tmp_path: Path, kind: str) -> None:
    directory = tmp_path / "dead-letter"
    directory.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    day = directory / f"{datetime.now(UTC):%Y-%m-%d}.jsonl"
    PUT_IN_PLACE[kind](day)
    outcome: list[tuple[int, str]] = []
    worker = threading.Thread(target=lambda: outcome.append(deliver(directory)), daemon=True)
    worker.start()
    worker.join(10)  # a FIFO's writer may wait for a reader
    assert outcome, "the sink hung"
    status, body = outcome[0]
    assert status == 503 and f"{day} is not a regular file" in body, body
    assert victim.read_text() == "precious\n"  # a link's target untouched
    if day.is_dir() and not day.is_symlink():
        day.rmdir()
    else:
        day.unlink()
    assert deliver(directory)[0] == 202
    docs = [doc for _, doc in read_documents(str(directory))]
    assert [doc["id"] for doc in docs] == ["replay-0001"]
