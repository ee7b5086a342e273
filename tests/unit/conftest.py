"""Unit-layer fixtures: an isolated MODELHOOKS_HOME and fresh process-wide caches."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from modelhooks import bootstrap
from tests.local_store import SAMPLE_VERSIONS, lay_model


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A clean environment: settings come from MODELHOOKS_* set by the test alone."""
    import os

    for var in list(os.environ):
        if var.startswith("MODELHOOKS_") or var in ("K_SINK", "PORT"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("MODELHOOKS_HOME", str(tmp_path / "home"))
    bootstrap.reset()
    yield tmp_path / "home"
    bootstrap.reset()


@pytest.fixture
def configure(home: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, str]], None]:
    """Set environment settings for this test and rebuild the process's dependencies."""

    def apply(env: dict[str, str]) -> None:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        bootstrap.reset()

    return apply


@pytest.fixture
def sample_models(home: Path) -> Path:
    """`home` with the versions the samples name laid in the local store."""
    for version in SAMPLE_VERSIONS:
        lay_model(home, "models", f"models/{version}")
    return home
