"""serve's local store watcher among hostile entries: a FIFO, a socket, dangling and looping
links, a name that is no UTF-8, 255-byte names, a `_SUCCESS` that is a folder, and a folder
nested past PATH_MAX (4,096 bytes, where listing it fails with ENAMETOOLONG): each is passed
by or announced, and the other markers are announced, every scan. The folder past PATH_MAX
failed every scan, so no marker was ever announced again; then it was passed by with no word,
so nobody knew why a marker under it was never announced: now a WARNING names it, once."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import pytest

from modelhooks.adapters.object_store.watch import LocalStoreWatcher
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import CanonicalEvent


def _version(store: Path, name: str) -> Path:
    folder = store / "models" / "models" / name / "1"
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_bytes(b"w")
    return folder


def _nested_past_path_max(folder: Path) -> None:
    """20 folders of 255-byte names, one in the other (made relative to each other's fd)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        for _ in range(20):
            os.mkdir("d" * 255, dir_fd=fd)
            inner = os.open("d" * 255, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.mknod("_SUCCESS", dir_fd=fd)
    finally:
        os.close(fd)


def test_hostile_entries_never_stop_the_scan(tmp_path: Path) -> None:
    store = tmp_path / "store"
    os.mkfifo(_version(store, "fifo") / "_SUCCESS")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(_version(store, "socket") / "_SUCCESS"))
    os.symlink("/nonexistent", _version(store, "dangling") / "_SUCCESS")
    looping = _version(store, "looping")
    os.symlink(looping / "_SUCCESS", looping / "_SUCCESS")
    os.symlink(looping, looping / "itself")
    (_version(store, os.fsdecode(b"not-utf8-\xff")) / "_SUCCESS").touch()
    (_version(store, "n" * 255) / "_SUCCESS").touch()
    (_version(store, "folder") / "_SUCCESS").mkdir()
    _nested_past_path_max(store / "models" / "models")
    (_version(store, "good") / "_SUCCESS").touch()

    announced: list[CanonicalEvent] = []
    watcher = LocalStoreWatcher(store, ObjectLayout(), announced.append, 1.0)
    try:
        assert watcher.poll() == 6
        names = sorted(e.subject.split("/")[2] for e in announced)  # type: ignore[union-attr]
        assert names == sorted(
            ["fifo", "socket", "folder", "good", "n" * 255, os.fsdecode(b"not-utf8-\xff")]
        )
        (_version(store, "later") / "_SUCCESS").touch()
        assert watcher.poll() == 1 and announced[-1].subject == "objects/models/later/1/_SUCCESS"
    finally:
        unix.close()


def _rename_chain(folder: Path, levels: int, old: str, new: str) -> None:
    """The first `levels` folders of the chain below `folder` renamed from `old` to `new`."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.rename(old, new, src_dir_fd=fd, dst_dir_fd=fd)
            inner = os.open(new, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def test_a_folder_that_cannot_be_listed_is_one_warning_until_it_could_be(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A marker under a folder the scan cannot list is never announced: a WARNING says which
    folder, once (not at every scan), and again if it could be listed and then not again."""
    store = tmp_path / "store"
    (_version(store, "good") / "_SUCCESS").touch()
    models = store / "models" / "models"
    _nested_past_path_max(models)

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    watcher = LocalStoreWatcher(store, ObjectLayout(), lambda event: None, 1.0)
    with caplog.at_level(logging.WARNING, logger="modelhooks"):
        assert watcher.poll() == 1
        assert len(warned()) == 1 and "cannot be listed (File name too long)" in warned()[0]
        assert warned()[0].startswith(f"{models}/{'d' * 255}/")
        watcher.poll()
        assert len(warned()) == 1  # not at every scan
        _rename_chain(models, 8, "d" * 255, "s")  # short enough to list
        watcher.poll()
        assert len(warned()) == 1
        _rename_chain(models, 8, "s", "d" * 255)  # past PATH_MAX again
        watcher.poll()
        watcher.poll()
        assert len(warned()) == 2 and warned()[1] == warned()[0]
