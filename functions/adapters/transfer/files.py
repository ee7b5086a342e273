"""What flows from a source to a destination: model files, each a path relative to the
model, a size and a way to open it at an offset (a stream, never the whole file)."""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Protocol

from modelhooks.core.errors import BadRequest

__all__ = ["CHUNK", "FileEntry", "HashingReader", "Progress", "safe_path"]

CHUNK = 8 * 1024 * 1024  # the copy's buffer: every read and upload part is at most this


class Progress(Protocol):
    def start(self, total: int | None) -> None: ...

    def advance(self, n: int) -> None: ...


@dataclass(frozen=True)
class FileEntry:
    """One model file. `open(offset)` streams it from `offset` (sources that cannot seek
    accept only 0); `fingerprint` names this revision of the source file (a resumed copy
    keeps what it copied of the same revision); `sha256` when the source knows it."""

    path: str
    size: int
    open: Callable[[int], IO[bytes]]
    fingerprint: str = ""
    seekable: bool = True
    sha256: str = ""


def safe_path(name: str, where: str) -> str:
    """`name` as a clean relative POSIX path inside the model; BadRequest for absolute
    paths and `..` (nothing is ever written outside the destination)."""
    clean = name.replace("\\", "/")
    if clean.startswith("/") or (len(clean) > 1 and clean[1] == ":"):
        raise BadRequest(f"{where}: absolute member path {name!r} refused", member=name)
    parts = [p for p in clean.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise BadRequest(f"{where}: member path {name!r} leaves the model", member=name)
    if not parts:
        raise BadRequest(f"{where}: empty member path", member=name)
    return posixpath.join(*parts)


class HashingReader:
    """Reads `stream`, at most `size` bytes, sha256 of what passed; closes it on exit."""

    def __init__(self, stream: IO[bytes], size: int | None = None) -> None:
        self._stream, self._left = stream, size
        self.hash = hashlib.sha256()
        self.count = 0

    def __enter__(self) -> HashingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.close()

    def read(self, n: int = CHUNK) -> bytes:
        if self._left is not None:
            n = min(n, self._left)
            if n <= 0:
                return b""
        data = self._stream.read(n)
        self.hash.update(data)
        self.count += len(data)
        if self._left is not None:
            self._left -= len(data)
        return data

    def read_exact(self, n: int) -> bytes:
        """`n` bytes (fewer only at the end of the stream)."""
        parts, got = [], 0
        while got < n:
            data = self.read(n - got)
            if not data:
                break
            parts.append(data)
            got += len(data)
        return b"".join(parts)
