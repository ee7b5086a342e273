"""Where an unnamed file (O_TMPFILE) can be made but not linked into place through
/proc/self/fd (no /proc mounted: a chroot, a minimal sandbox; a kernel or sandbox refusing
linkat(2) through it), the local store writes a named file as where O_TMPFILE is missing:
every put failed there with an internal error (a 500, redelivered for good)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from modelhooks.adapters.object_store import local
from modelhooks.adapters.object_store.local import LocalObjectStore
from modelhooks.core.errors import Conflict


@pytest.fixture
def no_proc(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """link(2) through /proc/self/fd refused, as without /proc: the paths so asked for."""
    link, asked = os.link, []

    def refused(src: object, *args: object, **kwargs: object) -> None:
        if str(src).startswith("/proc/self/fd/"):
            asked.append(str(src))
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", src)
        link(src, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", refused)
    monkeypatch.setattr(local, "_unnamed_files", True, raising=False)
    return asked


@pytest.mark.parametrize("if_absent", [True, False], ids=["if-absent", "replace"])
def test_a_put_without_proc_writes_a_named_file(
    tmp_path: Path, no_proc: list[str], if_absent: bool
) -> None:
    store = LocalObjectStore(tmp_path)
    where = tmp_path / "models" / "m" / "1"
    if not if_absent:
        where.mkdir(parents=True)
        (where / "model.sig").write_bytes(b"old")
    info = store.put("models", "m/1/model.sig", b"sig", if_absent=if_absent)
    assert info.size == 3
    assert (where / "model.sig").read_bytes() == b"sig"
    assert sorted(p.name for p in where.iterdir()) == ["model.sig"]  # nothing left over
    # the next put asks /proc no more, and create-if-absent still refuses what is there
    asked = len(no_proc)
    with pytest.raises(Conflict):
        store.put("models", "m/1/model.sig", b"other", if_absent=True)
    store.put("models", "m/1/weights.bin", b"w")
    assert len(no_proc) == asked
    assert (where / "model.sig").read_bytes() == b"sig"
    assert sorted(p.name for p in where.iterdir()) == ["model.sig", "weights.bin"]
