"""Object stores by URI: `gs://bucket/key`, `s3://bucket/key`, `file:///path`.

With the embedded default (`store.backend=local`) every bucket of every scheme is a
directory under `$MODELHOOKS_HOME/store`, so real-shaped GCS and S3 notifications work
against local files. With `cloud`, gs:// goes to GCS and s3:// to S3. Clients are built
on first use (heavy SDKs stay unimported until a function needs them).
"""

from __future__ import annotations

from pathlib import Path
from threading import Lock
from urllib.parse import urlsplit

from functions.errors import BadRequest
from functions.ports import ObjectStore
from functions.settings import Settings

__all__ = ["Stores", "split_uri"]


def split_uri(uri: str) -> tuple[str, str, str]:
    """`gs://b/k/` → ("gs", "b", "k/"); `file:///data/m/` → ("file", "data", "m/")."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        bucket, _, key = parts.path.lstrip("/").partition("/")
    elif parts.scheme in ("gs", "s3"):
        bucket, key = parts.netloc, parts.path.lstrip("/")
    else:
        raise BadRequest(f"unsupported object URI {uri!r} (use gs://, s3:// or file://)")
    if not bucket:
        raise BadRequest(f"object URI {uri!r} names no bucket")
    return parts.scheme, bucket, key


class Stores:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._made: dict[str, ObjectStore] = {}
        self._lock = Lock()

    def resolve(self, uri: str) -> tuple[ObjectStore, str, str]:
        scheme, bucket, key = split_uri(uri)
        return self.for_scheme(scheme), bucket, key

    def for_scheme(self, scheme: str) -> ObjectStore:
        with self._lock:
            if scheme not in self._made:
                self._made[scheme] = self._make(scheme)
            return self._made[scheme]

    def _make(self, scheme: str) -> ObjectStore:
        from functions.adapters.object_store.local import LocalObjectStore

        if scheme == "file":
            return LocalObjectStore(Path("/"))
        if self.settings.store.backend == "local":
            return LocalObjectStore(self.settings.home / "store")
        if scheme == "gs":
            from functions.adapters.object_store.gcs import GcsObjectStore

            return GcsObjectStore()
        from functions.adapters.object_store.s3 import S3ObjectStore

        return S3ObjectStore(endpoint_url=self.settings.store.s3_endpoint_url or None)
