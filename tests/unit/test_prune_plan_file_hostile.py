"""`modelhooks prune apply --plan FILE` with a file that is no plan: bad input naming it
(exit 2), read bounded, never an internal error."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from modelhooks.cli import main, prune


def apply(plan: Path) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["prune", "apply", "oci://127.0.0.1:1/m", "--plan", str(plan)])
    return code, err.getvalue()


def test_a_plan_nested_past_the_parser_is_bad_input(home: Path, tmp_path: Path) -> None:
    """It exited 70 (RecursionError: 'a bug in modelhooks')."""
    plan = tmp_path / "plan.json"
    plan.write_text("[" * 100_000)
    code, said = apply(plan)
    assert code == 2 and said.startswith(f"bad_request: {plan}: not a plan"), said


def test_a_plan_that_never_ends_is_read_bounded(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--plan /dev/zero` was read without end."""
    monkeypatch.setattr(prune, "MAX_PLAN_BYTES", 1000)
    plan = tmp_path / "plan.json"
    plan.symlink_to("/dev/zero")
    code, said = apply(plan)
    assert code == 2 and "(over 1000 characters)" in said, said
