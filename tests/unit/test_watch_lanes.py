"""watch-models sends the events of different Models at once and one Model's in order, sets a
Model whose delivery failed transiently aside without holding up the others, and saves its
position only when every event before it was sent (a crash re-sends, never skips)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from modelhooks.adapters.kubernetes.model_source import ModelWatcher, WatchState, _Lanes
from modelhooks.core.errors import Unavailable


def _lanes(workers: int) -> tuple[_Lanes, list[str]]:
    calls: list[str] = []
    return _Lanes(
        workers, on_settled=lambda: calls.append("settled"), on_failure=lambda: None
    ), calls


def test_one_keys_calls_run_in_order_and_other_keys_at_once() -> None:
    lanes, _ = _lanes(4)
    seen: list[tuple[str, int]] = []
    both_running = threading.Barrier(2, timeout=5)

    def call(key: str, n: int) -> None:
        if n == 0:
            both_running.wait()  # a and b run together, or this times out
        time.sleep(0.01 * (3 - n))  # later calls are quicker: order must still hold
        seen.append((key, n))

    for n in range(3):
        for key in ("a", "b"):
            lanes.submit(key, lambda key=key, n=n: call(key, n))
    lanes.drain()
    lanes.raise_failure()
    for key in ("a", "b"):
        assert [n for k, n in seen if k == key] == [0, 1, 2]


def test_a_call_waiting_for_its_key_holds_no_worker() -> None:
    """A Model's next event (its echoed status update) waits for its create without taking
    one of the workers: another Model's event goes meanwhile."""
    lanes, _ = _lanes(2)
    release, other_ran = threading.Event(), threading.Event()
    order: list[str] = []
    lanes.submit("a", lambda: (release.wait(10), order.append("a1")))
    lanes.submit("a", lambda: order.append("a2"))
    lanes.submit("b", other_ran.set)
    try:
        assert other_ran.wait(5), "b waited behind a's queued call"
    finally:
        release.set()
    lanes.drain()
    lanes.raise_failure()
    assert order == ["a1", "a2"]


def test_a_failure_stops_what_follows_and_is_raised() -> None:
    stopped = threading.Event()
    lanes = _Lanes(2, on_settled=lambda: None, on_failure=stopped.set)
    ran: list[int] = []

    def fail() -> None:
        raise RuntimeError("the broker did not answer")

    lanes.submit("a", fail)
    assert stopped.wait(5)
    with pytest.raises(RuntimeError, match="did not answer"):
        lanes.submit("b", lambda: ran.append(1))
    lanes.drain()
    assert ran == []
    with pytest.raises(RuntimeError):
        lanes.raise_failure()


def test_a_key_set_aside_holds_up_no_other_and_keeps_its_order() -> None:
    ran: list[str] = []
    failures = iter([True, True, False])
    settled = threading.Event()

    def flaky() -> None:
        if next(failures):
            raise Unavailable("HTTP 503: refused")
        ran.append("a1")

    lanes = _Lanes(1, settled.set, lambda: None, waits=(0.05, 0.1))
    lanes.submit("a", flaky, "ml/a")
    lanes.submit("a", lambda: ran.append("a2"), "ml/a")
    lanes.submit("b", lambda: ran.append("b1"), "ml/b")
    deadline = time.monotonic() + 10
    while len(ran) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    lanes.drain()
    assert ran == ["b1", "a1", "a2"]  # b went on while a was aside; a's calls in order
    assert lanes.set_aside == 2 and lanes.settled() and settled.is_set()


class _Api:
    class configuration:  # what ModelWatcher reads of an ApiClient
        host = "https://kube.test"


def _model(uid: str, rv: str) -> dict[str, object]:
    return {
        "apiVersion": "modelhooks.dev/v1alpha1",
        "kind": "Model",
        "metadata": {"name": uid, "namespace": "ml", "uid": uid, "resourceVersion": rv},
        "spec": {"version": "1"},
    }


def test_the_position_is_saved_only_once_every_event_before_it_was_sent(tmp_path: Path) -> None:
    state = tmp_path / "watch.json"
    release = threading.Event()
    sent: list[str] = []

    def send(event: dict[str, object]) -> None:
        release.wait(5)
        sent.append(str(event["subject"]))

    watcher = ModelWatcher(_Api(), send, state_file=state, concurrency=4)
    watcher.state.resource_version = "10"
    watcher._emit("add", _model("m1", "11"))
    watcher.state.resource_version = "11"
    watcher._save()
    assert not state.exists()  # m1 is in flight: saving now could skip it after a crash
    release.set()
    watcher._lanes.drain()
    saved = WatchState.load(state, None)
    assert saved.resource_version == "11" and set(saved.sent) == {"m1"}
    assert len(sent) == 1
