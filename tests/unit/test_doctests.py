"""Every example in the package's docstrings holds: each module whose docstrings show a
`>>>` example is found and its examples run (a sketch says `# doctest: +SKIP`)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ((ROOT / "functions", "modelhooks"), (ROOT / "events", "modelhooks.events"))


def _modules() -> list[str]:
    found = []
    for base, package in PACKAGES:
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts or ">>> " not in path.read_text():
                continue
            parts = [p for p in path.relative_to(base).with_suffix("").parts if p != "__init__"]
            found.append(".".join([package, *parts]))
    return found


def test_the_modules_with_examples_are_found() -> None:
    assert {"modelhooks.core.records", "modelhooks.events.model"} <= set(_modules())


@pytest.mark.parametrize("module", _modules())
def test_docstring_examples_hold(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed"
