"""`LocalObjectStore`: buckets are directories under a root (the embedded default).

Real-shaped GCS and S3 notifications (bucket + object name) work against local files: a
bucket `models` is the directory `<root>/models`. A file's generation is its modification
time in nanoseconds and size, which changes whenever the file is rewritten.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from modelhooks.core.errors import BadRequest, Conflict, NotFound
from modelhooks.core.records import ObjectInfo

__all__ = ["LocalObjectStore"]


class LocalObjectStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, bucket: str, key: str = "") -> Path:
        """The local path of an object, refusing names that escape the bucket."""
        if not bucket or "/" in bucket or bucket in (".", ".."):
            raise BadRequest(f"invalid bucket name {bucket!r}")
        parts = [p for p in key.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise BadRequest(f"invalid object name {key!r}")
        return self.root.joinpath(bucket, *parts)

    def stat(self, bucket: str, key: str) -> ObjectInfo | None:
        p = self.path(bucket, key)
        if not p.is_file():
            return None
        return self._info(bucket, key, p)

    def list(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        base = self.path(bucket)
        if not base.is_dir():
            return
        keys = []
        for dirpath, _dirs, files in os.walk(base):
            rel = Path(dirpath).relative_to(base).as_posix()
            for f in files:
                key = f if rel == "." else f"{rel}/{f}"
                if key.startswith(prefix):
                    keys.append(key)
        for key in sorted(keys):
            yield self._info(bucket, key, base / key)

    def read_range(self, bucket: str, key: str, start: int, length: int) -> bytes:
        try:
            with self.path(bucket, key).open("rb") as f:
                f.seek(start)
                return f.read(length)
        except FileNotFoundError:
            raise NotFound(f"no object {key!r} in bucket {bucket!r}") from None

    def put(self, bucket: str, key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
        p = self.path(bucket, key)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        tmp = Path(name)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if if_absent:
            try:
                os.link(tmp, p)  # atomic create-if-absent
            except FileExistsError:
                raise Conflict(f"object {key!r} already exists in bucket {bucket!r}") from None
            finally:
                tmp.unlink()
        else:
            os.replace(tmp, p)
        return self._info(bucket, key, p)

    def delete(self, bucket: str, key: str) -> None:
        self.path(bucket, key).unlink(missing_ok=True)

    @staticmethod
    def _info(bucket: str, key: str, p: Path) -> ObjectInfo:
        st = p.stat()
        return ObjectInfo(
            bucket=bucket, key=key, size=st.st_size, generation=f"{st.st_mtime_ns}-{st.st_size}"
        )
