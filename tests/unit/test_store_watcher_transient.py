"""A real `modelhooks serve` whose local-store push is refused as transient (its registry's
disk full: the process's files may not grow, RLIMIT_FSIZE set on it from outside) announces
that push again once there is room, as a platform redelivers a 5xx: it was remembered as
seen at the first try, and registered only by a restart or by touching the marker again."""

from __future__ import annotations

import logging
import resource
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.adapters.object_store.watch import LocalStoreWatcher
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import CanonicalEvent
from tests.local_store import lay_model
from tests.unit.test_cli_signals import Running, running  # noqa: F401 (fixture)


def _registered(home: Path, model: str) -> Callable[[], bool]:
    def check() -> bool:
        if not (home / "registry.db").exists():  # serve makes it, not this test
            return False
        registry = SqliteModelRegistry(home / "registry.db")
        try:
            return registry.get_model(model) is not None
        finally:
            registry.close()

    return check


def test_a_push_refused_as_transient_is_announced_again(
    running: Callable[..., Running],  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    (lay_model(home, "models", "models/first/1") / "_SUCCESS").touch()
    serve = running("serve", "--port", "0", "--serve-watch-interval", "0.2")
    serve.wait_for(_registered(home, "first"), "the first model registered")

    soft, hard = resource.prlimit(serve.proc.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(serve.proc.pid, resource.RLIMIT_FSIZE, (0, hard))  # the disk is full
    try:
        (lay_model(home, "models", "models/second/1") / "_SUCCESS").touch()
        serve.wait_for(lambda: b"register transient" in serve.err, "register refused")
    finally:
        resource.prlimit(serve.proc.pid, resource.RLIMIT_FSIZE, (soft, hard))  # room again
    serve.wait_for(_registered(home, "second"), "the second model registered", timeout=15)
    assert b"announced again in 0.2 s" in serve.err


def test_a_push_whose_publishing_raises_is_announced_again_later_and_the_others_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`publish` raising, instead of answering 5xx, is transient for that push alone: an ERROR
    line, announced again after the interval as a 5xx is, while the other pushes of the scan
    are announced; it raised out of the scan, the pushes after it waited for the next one,
    and it was announced again at every scan with no wait."""
    store = tmp_path / "store"
    for name in ("a", "b", "c"):
        (lay_model(store.parent, "models", f"models/{name}/1") / "_SUCCESS").touch()
    tried: list[str] = []

    def publish(event: CanonicalEvent) -> None:
        name = event.subject.split("/")[2]  # type: ignore[union-attr]
        tried.append(name)
        if name == "b" and tried.count("b") == 1:
            raise OSError(28, "No space left on device")

    watcher = LocalStoreWatcher(store, ObjectLayout(), publish, 0.5)
    with caplog.at_level(logging.ERROR, logger="modelhooks"):
        assert watcher.poll() == 3 and sorted(tried) == ["a", "b", "c"]
        (error,) = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert error.getMessage() == (
            "objects/models/b/1/_SUCCESS: publishing it failed (OSError: [Errno 28] No space "
            "left on device), announced again in 0.5 s"
        )
        assert watcher.poll() == 0  # not before its wait
        time.sleep(0.55)
        assert watcher.poll() == 1 and tried[3:] == ["b"]
        assert watcher.poll() == 0  # delivered now: seen
