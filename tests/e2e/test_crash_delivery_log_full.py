"""The delivery log on a full disk, then a crash: a real `modelhooks serve` (SQLite registry,
its delivery log next to it) whose files may not grow (RLIMIT_FSIZE set on it from outside)
while pushes are delivered one after another: the records of those answered just before
are pending when its group commit fails; room comes back and serve is killed (SIGKILL)
before they are written. Restarted, every push delivered again answers what it answered
the first time (those that took effect) or takes effect now, and no effect is doubled: one
version, one artifact each."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.events.model import ArtifactPushed, CanonicalEvent
from tests.contract.register_order import T0
from tests.e2e.crash import body_of
from tests.e2e.packaging import free_port
from tests.unit.test_cli_signals import Running, running  # noqa: F401 (fixture)

pytestmark = pytest.mark.e2e

PUSHES = 300


def _push(prefix: str, n: int) -> CanonicalEvent:
    name = f"{prefix}-m{n}"
    data = ArtifactPushed(
        model=name,
        version="1",
        uri=f"gs://models/models/{name}/1/",
        digest=f"content-sha256:{name}-1",
        store="gcs",
    )
    return CanonicalEvent(id=f"{name}-p", source="full", type=data.TYPE, data=data, time=T0)


def _answer(url: str, event: CanonicalEvent) -> tuple[int, dict[str, str], Any]:
    """(status, ce-* headers, body as JSON) of one delivery to register's own endpoint."""
    req = urllib.request.Request(
        url + "/functions/register",
        data=body_of(event),
        headers={"Content-Type": "application/cloudevents+json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            headers = {k.lower(): v for k, v in resp.headers.items() if k.lower().startswith("ce-")}
            return resp.status, headers, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:  # 503 while the registry's disk is full
        return exc.code, {}, None


def _recorded(home: Path) -> set[str]:
    """The ids the delivery log holds, as a restart reads them."""
    with (
        contextlib.suppress(sqlite3.Error),
        contextlib.closing(sqlite3.connect(home / "deliveries.db")) as db,
    ):
        return {row[0] for row in db.execute("SELECT id FROM deliveries")}
    return set()  # not made yet


def _healthy(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    return check


def test_records_lost_to_a_full_disk_and_a_kill_answer_alike_and_double_nothing(
    running: Callable[..., Running],  # noqa: F811
    tmp_path: Path,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    flags = ("serve", "--port", str(port), "--serve-watch-interval", "0")
    home = tmp_path / "home"
    pushes = [_push("full", n) for n in range(PUSHES)]
    first: dict[str, tuple[int, dict[str, str], Any]] = {}
    full = threading.Event()

    serve = running(*flags)
    serve.wait_for(_healthy(url), "serve /healthz")
    _answer(url, _push("full", 999))  # the log's file made, then written
    serve.wait_for(lambda: (home / "deliveries.db").exists() and bool(_recorded(home)), "a record")

    def deliver(chunk: list[CanonicalEvent]) -> None:  # one after another, until it fills
        for event in chunk:
            if full.is_set():
                return
            first[event.id] = _answer(url, event)

    soft, hard = resource.prlimit(serve.proc.pid, resource.RLIMIT_FSIZE)
    for attempt in range(5):  # until the disk fills with records pending (not just flushed)
        full.clear()
        chunk = pushes[attempt * PUSHES // 5 : (attempt + 1) * PUSHES // 5]
        sender = threading.Thread(target=deliver, args=(chunk,))
        sender.start()
        third = chunk[len(chunk) // 3].id
        serve.wait_for(lambda: third in first, "a third answered")  # noqa: B023
        resource.prlimit(serve.proc.pid, resource.RLIMIT_FSIZE, (0, hard))  # the disk is full
        try:
            full.set()
            sender.join(timeout=30)
            deadline = time.monotonic() + 1
            while b"not written" not in serve.err and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            resource.prlimit(serve.proc.pid, resource.RLIMIT_FSIZE, (soft, hard))  # room again
        if b"not written" in serve.err:  # the group commit failed: its records pending
            break
    else:
        pytest.fail(f"the group commit never failed:\n{serve.stderr()[-3000:]}")
    os.kill(serve.proc.pid, signal.SIGKILL)  # before the group commit tried again
    serve.proc.wait(timeout=10)
    done = {i: answer for i, answer in first.items() if answer[0] == 200}
    lost = set(done) - _recorded(home)
    assert lost, "every record was written before the kill"

    again = running(*flags)
    again.wait_for(_healthy(url), "serve /healthz again")
    answers = {event.id: _answer(url, event) for event in pushes}
    assert {i: answers[i] for i in done} == done  # what took effect answers as it did
    assert all(status == 200 for status, _, _ in answers.values()), answers
    registry = SqliteModelRegistry(home / "registry.db")
    try:
        for event in pushes:
            model = registry.get_model(event.data.model)  # type: ignore[attr-defined]
            assert model is not None
            (version,) = registry.list_versions(model.id)
            assert len(registry.list_artifacts(version.id)) == 1, event.id
    finally:
        registry.close()
