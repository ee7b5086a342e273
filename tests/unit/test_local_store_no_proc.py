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
def no_proc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """No /proc mounted: its fd directory is one that does not exist (a link through it
    fails as it would). The paths a link was asked through."""
    link, asked = os.link, []

    def counted(src: object, *args: object, **kwargs: object) -> None:
        if str(src).startswith(local._FD):
            asked.append(str(src))
        link(src, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", counted)
    monkeypatch.setattr(local, "_FD", str(tmp_path / "no-proc" / "self" / "fd"))
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


def test_a_link_that_fails_for_its_own_reason_is_that_puts_failure_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With /proc there, a link that fails for a reason of its own (its directory removed
    meanwhile by a concurrent cleanup) fails that put only: the store does not give up
    unnamed files for good (a file named while written is left behind by a crash)."""
    link = os.link

    def gone(src: object, *args: object, **kwargs: object) -> None:
        if str(src).startswith(local._FD):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", src)
        link(src, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(local, "_unnamed_files", True, raising=False)
    store = LocalObjectStore(tmp_path)
    with monkeypatch.context() as once:
        once.setattr(os, "link", gone)
        with pytest.raises(FileNotFoundError):
            store.put("models", "m/1/model.sig", b"sig", if_absent=True)
    assert local._unnamed_files is True
    store.put("models", "m/1/model.sig", b"sig", if_absent=True)
    assert sorted(p.name for p in (tmp_path / "models" / "m" / "1").iterdir()) == ["model.sig"]
