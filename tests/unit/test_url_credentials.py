"""`--to` with credentials in the URL (`https://user:password@host/`): refused as a usage
error that does not print the password. They were never sent (the HTTP client takes the
host alone), and every failure printed the URL whole."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from modelhooks.cli import main
from modelhooks.events import samples

SOURCE = str(Path(samples.__file__).parent / "canonical-artifact-pushed.json")


@pytest.mark.parametrize("command", [["replay", SOURCE], ["watch-models"]])
def test_credentials_in_the_url_are_refused_unprinted(home: Path, command: list[str]) -> None:
    """replay sent without them and said 'stopped: http://user:hunter2@…/ did not answer'."""
    err = io.StringIO()
    with (
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
        pytest.raises(SystemExit) as exit_,
    ):
        main([*command, "--to", "http://user:hunter2@127.0.0.1:9/"])
    said = err.getvalue()
    assert exit_.value.code == 2 and "hunter2" not in said, said
    assert "'http://…@127.0.0.1:9/': credentials in a URL are not sent" in said
