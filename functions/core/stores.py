"""Object stores by URI: `gs://bucket/key`, `s3://bucket/key`, `file:///path`.

With the embedded default (`store.backend=local`) every bucket of every scheme is a
directory under `$MODELHOOKS_HOME/store`, so real-shaped GCS and S3 notifications work
against local files. With `cloud`, gs:// goes to GCS and s3:// to S3. Clients are built
on first use (heavy SDKs stay unimported until a function needs them).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from threading import Lock
from urllib.parse import urlsplit

from modelhooks.core.errors import BadRequest, Forbidden
from modelhooks.core.ports import ObjectStore
from modelhooks.core.settings import Settings

__all__ = ["Stores", "split_uri"]

_LOCAL_NAMES = {"localhost", "metadata", "metadata.google.internal", "instance-data"}


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
        """The store, bucket and key of a URI taken from an event. `file://` URIs must lie
        in the local store ($MODELHOOKS_HOME/store): an event never names the rest of the
        filesystem."""
        scheme, bucket, key = split_uri(uri)
        if scheme == "file":
            root = (self.settings.home / "store").resolve()
            path = Path(urlsplit(uri).path).resolve()
            if not path.is_relative_to(root):
                raise Forbidden(f"{uri} is outside the local store {root}", uri=uri)
            rel = path.relative_to(root).as_posix()
            bucket, _, key = rel.partition("/")
            if uri.endswith("/") and key:
                key += "/"
            return self.for_scheme("local"), bucket, key
        return self.for_scheme(scheme), bucket, key

    def check_host(self, uri: str) -> None:
        """Refuse a URI from an event that names this machine or the cloud metadata
        service (unless store.allow_local_targets): a function must not be steered at them.
        Host names are judged as written; they are not resolved."""
        host = (urlsplit(uri).hostname or "").lower()
        if self.settings.store.allow_local_targets or not host:
            return
        if host in _LOCAL_NAMES or host.endswith((".localhost", ".internal")):
            raise Forbidden(f"{uri} names a local or metadata host", host=host)
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return
        if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast:
            raise Forbidden(f"{uri} names a loopback or link-local address", host=host)

    def for_scheme(self, scheme: str) -> ObjectStore:
        with self._lock:
            if scheme not in self._made:
                self._made[scheme] = self._make(scheme)
            return self._made[scheme]

    def _make(self, scheme: str) -> ObjectStore:
        from modelhooks.adapters.object_store.local import LocalObjectStore

        if scheme == "local" or self.settings.store.backend == "local":
            return LocalObjectStore(self.settings.home / "store")
        if scheme == "gs":
            from modelhooks.adapters.object_store.gcs import GcsObjectStore

            return GcsObjectStore()
        from modelhooks.adapters.object_store.s3 import S3ObjectStore

        return S3ObjectStore(endpoint_url=self.settings.store.s3_endpoint_url or None)
