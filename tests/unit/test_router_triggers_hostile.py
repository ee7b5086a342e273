"""`router.triggers` naming what holds no Triggers: serve stops at start-up naming the file
and the setting, never with an internal error, never serving with nothing to run."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from modelhooks.cli import main

FILES = {
    "syntax": (b"kind: Trigger\nmetadata: [\n", "holds no Knative Triggers"),
    "nested": (b"[" * 100_000, "holds no Knative Triggers (router.triggers): nested too deep"),
    "binary": (b"\xff\xfe", "holds no Knative Triggers (router.triggers): not UTF-8 text"),
    "shape": (b"kind: Trigger\nmetadata: 5\n", "a Trigger of another shape"),
    "none": (b"kind: ConfigMap\nmetadata: {name: x}\n", "no Trigger labelled"),
}


@pytest.mark.parametrize("kind", sorted(FILES))
def test_serve_stops_naming_the_trigger_file(home: Path, tmp_path: Path, kind: str) -> None:
    """The first four exited 70 ('a bug in modelhooks'); the last served, routing every
    event to no function."""
    content, reason = FILES[kind]
    triggers = tmp_path / "triggers.yaml"
    triggers.write_bytes(content)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(
            ["serve", "--port", "0", "--router-triggers", str(triggers), "--home", str(home)]
        )
    said = err.getvalue()
    assert code == 2 and said.startswith("config_error: ") and reason in said, said
    assert str(triggers) in said
