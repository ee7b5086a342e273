"""`modelhooks replay` over a directory holding a folder it cannot list (nested past
PATH_MAX, 4,096 bytes: ENAMETOOLONG): that folder is reported as a document that cannot be
read, and the rest is sent. Its walk raised, and the whole replay stopped with nothing sent."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from modelhooks.cli import main
from modelhooks.events import samples


def test_a_folder_past_path_max_is_reported_and_the_rest_is_sent(
    sample_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = tmp_path / "stored"
    stored.mkdir()
    (stored / "a.json").write_text(json.dumps(samples.load("canonical-artifact-pushed")))
    fd = os.open(stored, os.O_RDONLY)
    try:  # 20 folders of 255-byte names, one in the other, made relative to each other
        for _ in range(20):
            os.mkdir("d" * 255, dir_fd=fd)
            inner = os.open("d" * 255, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    (stored / "z.json").write_text(json.dumps(samples.load("canonical-artifact-pushed")))

    status = main(["replay", "--home", str(sample_models), "--quiet", str(stored)])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "sent 2, succeeded 2, failed 1" in err  # the same event twice: one registration
    assert "File name too long" in err and "Traceback" not in err
