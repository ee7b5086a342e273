"""`modelhooks registry import` of what is no export: refused as bad input (exit 2) naming
it, read bounded."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from modelhooks.cli import main, registry


def run(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    return code, err.getvalue()


def test_json_nested_past_the_parser_is_bad_input(home: Path, tmp_path: Path) -> None:
    """It was an internal error (RecursionError), exit 70."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    code, said = run("registry", "import", str(deep), "--home", str(home))
    assert code == 2 and said.startswith(f"bad_request: {deep}: not JSON ("), said


def test_an_export_that_never_ends_is_read_bounded(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`registry import - < /dev/zero` was read without end."""
    monkeypatch.setattr(registry, "MAX_EXPORT_BYTES", 1000)
    monkeypatch.setattr("sys.stdin", io.StringIO("\0" * 5000))
    code, said = run("registry", "import", "-", "--home", str(home))
    assert (code, said) == (2, "bad_request: -: not JSON (over 1000 characters: not an export)\n")
