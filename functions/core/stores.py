"""Object stores by URI: `gs://bucket/key`, `s3://bucket/key`, `file:///path`.

The composition root decides which store serves each scheme (with the embedded default,
`store.backend=local`, every bucket of every scheme is a directory under
`$MODELHOOKS_HOME/store`, so real-shaped GCS and S3 notifications work against local files)
and hands `Stores` a factory per scheme; each store is built on first use, so heavy SDKs
stay unimported until a function needs them. `Stores` validates what events name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from threading import Lock
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, urlsplit

from modelhooks.core.addresses import ALLOW_HINT, refusal
from modelhooks.core.errors import BadRequest, Forbidden
from modelhooks.events.model import BUCKET_NAME, MAX_BUCKET

if TYPE_CHECKING:
    from modelhooks.core.ports import ObjectStore

__all__ = ["Stores", "split_uri"]


def _parts(uri: str) -> SplitResult:
    """urlsplit, whose ValueError (a bracketed host that is no IP address, a netloc that
    NFKC normalization changes) is bad input."""
    try:
        return urlsplit(uri)
    except ValueError as exc:
        raise BadRequest(f"{uri!r} is not a valid URI: {exc}", uri=uri) from None


def split_uri(uri: str) -> tuple[str, str, str]:
    """`gs://b/k/` → ("gs", "b", "k/"); `file:///data/m/` → ("file", "data", "m/").

    A gs:// or s3:// URI is its bucket up to the first '/' and the key after it, as written:
    an object's name may hold '#', '?' or '%' (a URL parser ended the key there, or the
    bucket: `gs://b#x/m/` was the whole of bucket b), so a bucket is refused unless it is a
    bucket name (letters, digits, '.', '-', '_')."""
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.lower()
    if sep and scheme in ("gs", "s3"):
        bucket, _, key = rest.partition("/")
        if bucket and (len(bucket) > MAX_BUCKET or not _BUCKET.fullmatch(bucket)):
            raise BadRequest(f"object URI {uri!r}: {bucket!r} is not a bucket name", uri=uri)
    elif (parts := _parts(uri)).scheme == "file":
        scheme, (bucket, _, key) = "file", parts.path.lstrip("/").partition("/")
    else:
        raise BadRequest(f"unsupported object URI {uri!r} (use gs://, s3:// or file://)")
    if not bucket:
        raise BadRequest(f"object URI {uri!r} names no bucket")
    return scheme, bucket, key


_BUCKET = re.compile(BUCKET_NAME)  # a transfer's bucket is the same name (events.model)


class Stores:
    """`factories` maps "file", "gs" and "s3" to what builds their store; `local_root` is the
    directory file:// URIs must stay inside."""

    def __init__(
        self,
        factories: Mapping[str, Callable[[], ObjectStore]],
        *,
        local_root: Path,
        allow_local_targets: bool = False,
        allowed_hosts: frozenset[str] = frozenset(),
    ) -> None:
        self.factories = dict(factories)
        self.local_root = local_root
        self.allow_local_targets = allow_local_targets
        self.allowed_hosts = allowed_hosts
        self._made: dict[str, ObjectStore] = {}
        self._lock = Lock()

    def replacing(self, scheme: str, store: ObjectStore) -> Stores:
        """A copy with the same rules in which `store` serves `scheme` (e.g. with a Model's
        own credentials); the other schemes keep the stores built already."""
        copy = Stores(
            self.factories,
            local_root=self.local_root,
            allow_local_targets=self.allow_local_targets,
            allowed_hosts=self.allowed_hosts,
        )
        with self._lock:
            copy._made = {**self._made, scheme: store}
        return copy

    def resolve(self, uri: str) -> tuple[ObjectStore, str, str]:
        """The store, bucket and key of a URI taken from an event. `file://` URIs must lie
        in the local store ($MODELHOOKS_HOME/store): an event never names the rest of the
        filesystem."""
        scheme, bucket, key = split_uri(uri)
        if scheme == "file":
            bucket, key = self._local_key(uri)
            return self.for_scheme("file"), bucket, key
        return self.for_scheme(scheme), bucket, key

    def _local_key(self, uri: str) -> tuple[str, str]:
        """(bucket, key) of a file:// URI, which must lie inside the local store."""
        root = self.local_root.resolve()
        try:
            path = Path(_parts(uri).path).resolve()
        except (OSError, RuntimeError, ValueError) as exc:  # symlink loops, NUL
            raise BadRequest(f"{uri!r} cannot be resolved: {exc}", uri=uri) from None
        if not path.is_relative_to(root):
            raise Forbidden(f"{uri} is outside the local store {root}", uri=uri)
        bucket, _, key = path.relative_to(root).as_posix().partition("/")
        if uri.endswith("/") and key:
            key += "/"
        return bucket, key

    def check_location(self, uri: str) -> None:
        """A location taken from an event that a function may record or act on: gs://, s3://,
        oci:// (not a local or metadata host) or file:// inside the local store; Forbidden or
        BadRequest otherwise. Nothing is built or read."""
        scheme = _parts(uri).scheme
        if scheme == "oci":
            self.check_host(uri)
            return
        if scheme not in ("gs", "s3", "file"):
            raise BadRequest(
                f"unsupported location {uri!r} (use gs://, s3://, oci:// or file://)", uri=uri
            )
        split_uri(uri)
        if scheme == "file":
            self._local_key(uri)

    def check_host(self, uri: str) -> None:
        """Refuse a URI from an event that names this machine, a private network or the
        cloud metadata service, in any notation (unless store.allow_local_targets): a
        function must not be steered at them. Judged as written; the connection itself
        checks what the name resolves to (modelhooks.adapters.net)."""
        netloc = _parts(uri).netloc.rpartition("@")[2]
        host = netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc
        if self.allow_local_targets or netloc.lower() in self.allowed_hosts:
            return
        if host.lower() in self.allowed_hosts:
            return
        if not host:
            raise BadRequest(f"{uri} names no host", uri=uri)
        reason = refusal(host.split("]")[0] + "]" if host.startswith("[") else host)
        if reason:
            raise Forbidden(f"{uri} names a {reason}", host=host, hint=ALLOW_HINT)

    def for_scheme(self, scheme: str) -> ObjectStore:
        with self._lock:
            if scheme not in self._made:
                if scheme not in self.factories:
                    raise BadRequest(f"no object store serves {scheme}:// URIs")
                self._made[scheme] = self.factories[scheme]()
            return self._made[scheme]
