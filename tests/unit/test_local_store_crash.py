"""A process killed (SIGKILL) while the embedded store writes an object leaves nothing next
to it: a leftover `.model.sig.<random>.modelhooks-writing` was an extra file in the model's
directory for ever (upstream `model_signing verify` refuses the model: "Extra files found"),
and a deleted model's directory was never emptied. The kill comes once the data is
written, as the file is put in place."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from modelhooks.adapters.object_store.local import LocalObjectStore

    def killed(*args, **kwargs):  # the moment the written file would be put in place
        os.kill(os.getpid(), signal.SIGKILL)

    os.link = os.replace = os.rename = killed
    store = LocalObjectStore(Path(sys.argv[1]))
    store.put("models", "bert/1/model.sig", b"x" * 4096, if_absent=sys.argv[2] == "1")
    """
)


@pytest.mark.parametrize("if_absent", [True, False], ids=["if-absent", "replace"])
def test_a_put_killed_before_its_file_is_in_place_leaves_nothing(
    tmp_path: Path, if_absent: bool
) -> None:
    where = tmp_path / "models" / "bert" / "1"
    where.mkdir(parents=True)
    (where / "weights.bin").write_bytes(b"w")
    if not if_absent:
        (where / "model.sig").write_bytes(b"old")
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), "1" if if_absent else "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    left = sorted(p.name for p in where.iterdir())
    assert left == (["weights.bin"] if if_absent else ["model.sig", "weights.bin"])
    if not if_absent:
        assert (where / "model.sig").read_bytes() == b"old"
