"""The harness's cached venvs (tests/e2e/packaging.py): a venv another process is using is
not removed by this one's prune, however many newer venvs there are."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.e2e import packaging

ROOT = Path(__file__).resolve().parents[2]


def _venv(venvs: Path, key: str, age: float) -> Path:
    where = venvs / key
    (where / "bin").mkdir(parents=True)
    (where / ".complete").touch()
    os.utime(where, (time.time() - age, time.time() - age))
    return where


def test_a_venv_in_use_by_another_process_is_not_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venvs = tmp_path / "venvs"
    used = _venv(venvs, "folder-used", age=100)
    user = subprocess.Popen(  # a bench holding its venv between runs
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import sys
                from pathlib import Path
                from tests.e2e import packaging
                packaging.VENVS = Path({str(venvs)!r})
                print(packaging.cached_venv("folder-used"), flush=True)
                sys.stdin.read()
            """),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert user.stdout is not None and user.stdout.readline().strip() == str(used / "bin")
        os.utime(used, (time.time() - 100, time.time() - 100))  # the oldest again
        monkeypatch.setattr(packaging, "VENVS", venvs)
        monkeypatch.setattr(packaging, "KEEP", 2)
        for n in range(3):
            _venv(venvs, f"folder-new{n}", age=10 - n)
        packaging._prune_venvs()
        left = sorted(p.name for p in venvs.iterdir() if p.is_dir())
        assert left == ["folder-new1", "folder-new2", "folder-used"]
    finally:
        user.communicate("")
    packaging._prune_venvs()  # no longer in use: pruned as the oldest
    assert not used.exists()
    # each pruned venv's .use file goes with it (one was left per venv ever made)
    assert sorted(p.name for p in venvs.glob("*.use")) == []


def test_a_use_file_left_by_a_venv_pruned_before_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venvs = tmp_path / "venvs"
    _venv(venvs, "folder-live", age=1)
    (venvs / "folder-gone.use").touch()  # its venv removed by an older harness
    (venvs / "folder-live.use").touch()
    monkeypatch.setattr(packaging, "VENVS", venvs)
    packaging._prune_venvs()
    assert sorted(p.name for p in venvs.glob("*.use")) == ["folder-live.use"]
    assert (venvs / "folder-live").is_dir()
