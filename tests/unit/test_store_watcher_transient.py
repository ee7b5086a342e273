"""A real `modelhooks serve` whose local-store push is refused as transient (its registry's
disk full: the process's files may not grow, RLIMIT_FSIZE set on it from outside) announces
that push again once there is room, as a platform redelivers a 5xx: it was remembered as
seen at the first try, and registered only by a restart or by touching the marker again."""

from __future__ import annotations

import resource
from collections.abc import Callable
from pathlib import Path

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
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
