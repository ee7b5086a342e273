"""What flows from a source to a destination: model files, each a path relative to the
model, a size and a way to open it at an offset (a stream, never the whole file)."""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import os
import posixpath
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from modelhooks.core.errors import BadRequest

__all__ = ["CHUNK", "FileEntry", "HashingReader", "Journal", "Progress", "Sha256", "safe_path"]

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


class Sha256:
    """sha256 whose state can be saved and restored, so an interrupted upload resumes without
    reading again what it had sent: OpenSSL's SHA256_CTX through ctypes (the libcrypto
    Python's own hashlib links); hashlib's where that is absent (`state()` is then None and
    a resume reads the source again from its start)."""

    _lib: Any = None

    def __init__(self, state: str | None = None) -> None:
        lib = Sha256._load()
        if lib is None:
            self._ctx: Any = None
            self._fallback = hashlib.sha256()
            return
        self._ctx = ctypes.create_string_buffer(_CTX_SIZE)
        if state:
            ctypes.memmove(self._ctx, bytes.fromhex(state), _CTX_SIZE)
        else:
            lib.SHA256_Init(self._ctx)

    @classmethod
    def _load(cls) -> Any:
        if cls._lib is None:
            name = ctypes.util.find_library("crypto")
            try:
                lib = ctypes.CDLL(name) if name else None
            except OSError:
                lib = None
            if lib is not None and not all(
                hasattr(lib, f) for f in ("SHA256_Init", "SHA256_Update", "SHA256_Final")
            ):
                lib = None
            cls._lib = lib or False
        return cls._lib or None

    def update(self, data: bytes) -> None:
        if self._ctx is None:
            self._fallback.update(data)
        else:
            self._lib.SHA256_Update(self._ctx, data, ctypes.c_size_t(len(data)))

    def state(self) -> str | None:
        return None if self._ctx is None else bytes(self._ctx.raw).hex()

    def hexdigest(self) -> str:
        if self._ctx is None:
            return self._fallback.hexdigest()
        ctx = ctypes.create_string_buffer(self._ctx.raw, _CTX_SIZE)  # Final ends a context
        out = ctypes.create_string_buffer(32)
        self._lib.SHA256_Final(out, ctx)
        return out.raw.hex()


_CTX_SIZE = 112  # sizeof(SHA256_CTX): 8 + 2 + 16 words of state and data, num, md_len


class HashingReader:
    """Reads a file (`source`: a stream, or `open(offset)` opened on the first read), at most
    `size` bytes, with the sha256 of what passed; `resume(offset, state)` before the first
    read starts at `offset` with the hash state saved there. Closes the stream on exit."""

    def __init__(
        self, source: IO[bytes] | Callable[[int], IO[bytes]], size: int | None = None
    ) -> None:
        self._stream: IO[bytes] | None = None if callable(source) else source
        self._open = source if callable(source) else None
        self._left = size
        self.hash = Sha256()
        self.count = 0

    def resume(self, offset: int, state: str) -> None:
        assert self._open is not None and self.count == 0, "resume before reading"
        self.hash, self.count = Sha256(state), offset
        if self._left is not None:
            self._left -= offset

    def __enter__(self) -> HashingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stream is not None:
            self._stream.close()

    def read(self, n: int = CHUNK) -> bytes:
        if self._left is not None:
            n = min(n, self._left)
            if n <= 0:
                return b""
        if self._stream is None:
            assert self._open is not None
            self._stream = self._open(self.count)
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


class Journal:
    """The small state of a resumable copy (MODEL_SYNC_STORAGE_PATH): JSON entries by key,
    each write atomic (a kill leaves the old or the new file, never half of one). None: no
    journal (nothing is kept)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, Any] = {}
        if path is not None and path.is_file():
            try:
                self._entries = dict(json.loads(path.read_text()).get("entries", {}))
            except (ValueError, AttributeError):
                self._entries = {}  # a damaged journal: start over (correct, only slower)

    def get(self, key: str) -> Any:
        return self._entries.get(key)

    def items(self, prefix: str) -> list[tuple[str, Any]]:
        return [(k, v) for k, v in self._entries.items() if k.startswith(prefix)]

    def put(self, key: str, value: Any) -> None:
        self._entries[key] = value
        self._save()

    def drop(self, key: str) -> None:
        if self._entries.pop(key, None) is not None:
            self._save()

    def clear(self) -> None:
        self._entries = {}
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # one temporary file per writer: two concurrent copies of one transfer (two Jobs, two
        # deliveries in one process) each replace the journal whole, never the other's half
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"entries": self._entries}))
        tmp.replace(self.path)
