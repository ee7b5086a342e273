"""A folder of the local store made a symbolic link to the outside between the store's check
and its use (a pusher racing the store: the link swapped in once the folders on the way were
looked at): nothing outside the root is read, written or deleted.

The store looked at each name on the way (lstat), then opened, wrote or unlinked the object
by its whole path, which followed a link swapped in meanwhile. The race is played here at
the worst moment, every time: the version folder is swapped right after the store first
looks at it or opens it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.object_store.local import LocalObjectStore
from modelhooks.core.errors import BadRequest
from modelhooks.core.records import ObjectInfo

SECRET = b"outside the store"


@pytest.fixture
def swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], Path]:
    """The store's root with `models/m/1/w.bin` in it and, outside it, a folder holding
    `w.bin` (SECRET); once armed, the first time the store looks at or opens the version
    folder `m/1`, the pusher moves it aside and puts a link to the outside folder there."""
    root = tmp_path / "store"
    version = root / "models" / "m" / "1"
    version.mkdir(parents=True)
    (version / "w.bin").write_bytes(b"inside")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "w.bin").write_bytes(SECRET)
    swapped: list[bool] = []

    def pusher() -> None:
        if not swapped:
            swapped.append(True)
            version.rename(version.with_name("1.real"))
            version.symlink_to(outside)

    def is_version(path: Any, dir_fd: int | None) -> bool:
        if dir_fd is not None:  # a name in a folder the store holds open
            return os.fspath(path) == "1" and os.readlink(f"/proc/self/fd/{dir_fd}").endswith("/m")
        return os.fspath(path) == str(version)

    lstat, open_ = os.lstat, os.open

    def looked(path: Any, *args: Any, dir_fd: int | None = None, **kwargs: Any) -> Any:
        result = lstat(path, *args, dir_fd=dir_fd, **kwargs)
        if is_version(path, dir_fd):
            pusher()
        return result

    def opened(path: Any, flags: int, *args: Any, dir_fd: int | None = None, **kw: Any) -> int:
        fd = open_(path, flags, *args, dir_fd=dir_fd, **kw)
        if is_version(path, dir_fd):
            pusher()
        return fd

    def arm() -> Path:
        monkeypatch.setattr(os, "lstat", looked)
        monkeypatch.setattr(os, "open", opened)
        return outside

    return arm


def _read(store: LocalObjectStore) -> bytes | None:
    try:
        return store.read_range("models", "m/1/w.bin", 0, 100)
    except BadRequest:
        return None


def test_a_read_never_returns_what_is_outside(tmp_path: Path, swap: Callable[[], Path]) -> None:
    store = LocalObjectStore(tmp_path / "store")
    swap()
    assert _read(store) in (b"inside", None)


def test_a_put_never_writes_outside(tmp_path: Path, swap: Callable[[], Path]) -> None:
    store = LocalObjectStore(tmp_path / "store")
    outside = swap()
    with contextlib.suppress(BadRequest):
        store.put("models", "m/1/model.sig", b"sig")
    assert sorted(p.name for p in outside.iterdir()) == ["w.bin"]


@pytest.mark.parametrize("many", [True, False], ids=["delete_many", "delete"])
def test_a_delete_never_deletes_outside(
    tmp_path: Path, swap: Callable[[], Path], many: bool
) -> None:
    store = LocalObjectStore(tmp_path / "store")
    outside = swap()
    with contextlib.suppress(BadRequest):
        if many:
            store.delete_many("models", [ObjectInfo("models", "m/1/w.bin", 6, "")])
        else:
            store.delete("models", "m/1/w.bin")
    assert (outside / "w.bin").read_bytes() == SECRET


def test_a_folder_that_is_a_link_is_refused_by_every_operation(tmp_path: Path) -> None:
    """Opened with O_DIRECTORY|O_NOFOLLOW, a link answers ENOTDIR (not ELOOP): taken for
    a file on the way, a put raised NotADirectoryError (a 500), and a delete said 'gone'."""
    root, outside = tmp_path / "store", tmp_path / "outside"
    (root / "models" / "m").mkdir(parents=True)
    outside.mkdir()
    (outside / "w.bin").write_bytes(SECRET)
    (root / "models" / "m" / "1").symlink_to(outside)
    store = LocalObjectStore(root)
    for call in (
        lambda: store.put("models", "m/1/model.sig", b"sig"),
        lambda: store.delete("models", "m/1/w.bin"),
        lambda: store.read_range("models", "m/1/w.bin", 0, 10),
    ):
        with pytest.raises(BadRequest, match="symbolic link"):
            call()
    refused = store.delete_many("models", [ObjectInfo("models", "m/1/w.bin", 6, "")])
    assert "symbolic link" in refused["m/1/w.bin"]
    assert sorted(p.name for p in outside.iterdir()) == ["w.bin"]


def test_a_listing_never_names_what_is_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk entered a folder by its path after it was listed: made a link to the outside
    in between, the files there were listed, and their names and sizes named the version."""
    root, outside = tmp_path / "store", tmp_path / "outside"
    version = root / "models" / "m" / "1"
    version.mkdir(parents=True)
    (version / "w.bin").write_bytes(b"inside")
    outside.mkdir()
    (outside / "secret.bin").write_bytes(SECRET)
    scandir, swapped = os.scandir, []

    def pusher(path: Any = ".") -> Any:  # swaps the version as the walk is about to read it
        if not swapped and (path == str(version) or isinstance(path, int)):
            swapped.append(True)
            version.rename(version.with_name("1.real"))
            version.symlink_to(outside)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", pusher)
    store = LocalObjectStore(root)
    try:
        keys = [info.key for info in store.list("models", "m/1/")]
    except BadRequest:
        keys = []
    assert swapped and "m/1/secret.bin" not in keys
