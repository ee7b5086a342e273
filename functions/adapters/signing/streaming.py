"""Hash a model where it lies, through the ObjectReader port: parallel ranged reads, bounded
memory, nothing written to disk.

Each unit (a file, or a shard in shard mode) is hashed in order by one worker, which keeps
`readahead` ranges of `chunk_size` bytes in flight on a shared reader pool (or, for a local
disk, reads synchronously). Memory is therefore bounded by
`workers * (readahead + 1) * chunk_size` whatever the model size.

>>> manifest = hash_model(store, "models", "bert/1/", HashOptions().serialization())  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol

from modelhooks.adapters.object_store.local import LocalObjectStore
from modelhooks.adapters.signing.manifest import (
    DEFAULT_IGNORED,
    HashType,
    Manifest,
    Method,
    Resource,
    Serialization,
    is_ignored,
)
from modelhooks.core.errors import Conflict, PayloadTooLarge
from modelhooks.core.ports import ObjectReader
from modelhooks.core.records import ObjectInfo

__all__ = ["HashOptions", "Progress", "hash_model", "list_model", "model_name", "read_object"]

MiB = 1 << 20


class Progress(Protocol):
    """Told the model's size once listed, then every hashed chunk (from many threads)."""

    def start(self, total_bytes: int) -> None: ...

    def advance(self, n: int) -> None: ...


class _Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> object: ...

    def hexdigest(self) -> str: ...


@dataclass(frozen=True)
class HashOptions:
    """What to hash and how hard to push the store.

    `signature_name`, its binding statement (`<signature_name>.binding`) and `ready_marker`
    are always left out of the manifest (and recorded in its ignore_paths, so
    `model_signing verify` leaves them out too).
    """

    hash_type: HashType = "sha256"
    method: Method = "files"
    shard_size: int = 1_000_000_000
    allow_symlinks: bool = False
    signature_name: str = "model.sig"
    ready_marker: str = "_SUCCESS"
    ignore_paths: tuple[str, ...] = ()
    # Tuning; None = auto. A local disk is read synchronously by each worker (page-cache
    # copies gain nothing from prefetching); a remote store keeps `readahead` ranged GETs
    # in flight per worker to hide latency.
    chunk_size: int | None = None  # auto: 1 MiB local (stays in cache), 8 MiB remote
    workers: int | None = None  # auto: CPUs + 4 (more units than cores balances the tail)
    readahead: int | None = None  # auto: 0 local, 1 remote

    def serialization(self) -> Serialization:
        # the binding statement next to the signature (modelhooks.adapters.signing.binding)
        binding = f"{self.signature_name}.binding" if self.signature_name else ""
        ignored = {
            self.signature_name,
            binding,
            self.ready_marker,
            *DEFAULT_IGNORED,
            *self.ignore_paths,
        }
        return Serialization(
            method=self.method,
            hash_type=self.hash_type,
            shard_size=self.shard_size if self.method == "shards" else None,
            allow_symlinks=self.allow_symlinks,
            ignore_paths=tuple(sorted(p for p in ignored if p)),
        )

    def tuned(self, store: ObjectReader) -> HashOptions:
        """These options with every `None` tuning knob decided for `store`."""
        local = isinstance(store, LocalObjectStore)
        return replace(
            self,
            chunk_size=self.chunk_size or (MiB if local else 8 * MiB),
            workers=self.workers or min(32, (os.cpu_count() or 2) + 4),
            readahead=self.readahead if self.readahead is not None else (0 if local else 1),
        )

    def max_buffered(self, store: ObjectReader) -> int:
        """Upper bound of the bytes one `hash_model` call holds in memory for `store`."""
        t = self.tuned(store)
        return (t.workers or 1) * ((t.readahead or 0) + 1) * (t.chunk_size or 1)


def _new_hasher(hash_type: HashType) -> _Hasher:
    if hash_type == "blake3":
        import blake3  # lazily: only blake3 users pay for it

        return blake3.blake3(max_threads=blake3.blake3.AUTO)
    return hashlib.sha256()


def _prefix(prefix: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


def model_name(bucket: str, prefix: str) -> str:
    """The subject name model_signing would use: the model directory's last component."""
    return prefix.strip("/").rsplit("/", 1)[-1] or bucket


def list_model(
    store: ObjectReader, bucket: str, prefix: str, ignored: tuple[str, ...]
) -> list[tuple[str, ObjectInfo]]:
    """(model-relative name, info) of every object of the model that is not ignored."""
    root = _prefix(prefix)
    found = []
    for info in store.list(bucket, root):
        name = info.key[len(root) :]
        if not name or name.endswith("/") or is_ignored(name, ignored):
            continue  # directory placeholders and ignored paths
        found.append((name, info))
    return found


def read_object(store: ObjectReader, bucket: str, key: str, *, limit: int = 16 * MiB) -> bytes:
    """A whole (small) object, through ranged reads."""
    data = bytearray()
    while True:
        part = store.read_range(bucket, key, len(data), min(MiB, limit + 1 - len(data)))
        data += part
        if len(part) < MiB or len(data) > limit:
            break
    if len(data) > limit:
        raise PayloadTooLarge(f"{key} is larger than {limit} bytes", bucket=bucket, key=key)
    return bytes(data)


def _units(
    files: list[tuple[str, ObjectInfo]], serialization: Serialization
) -> Iterator[tuple[str, str, int, int]]:
    """(resource name, key, start, end) for every unit to hash."""
    for name, info in files:
        if serialization.method == "files":
            yield name, info.key, 0, info.size
            continue
        step = serialization.shard_size or 1
        for start in range(0, info.size, step):  # empty files have no shard, as upstream
            end = min(start + step, info.size)
            yield f"{name}:{start}:{end}", info.key, start, end


def _plain_reads(store: LocalObjectStore) -> bool:
    """True when reads are the local store's own (a subclass may wrap them)."""
    return type(store).read_range is LocalObjectStore.read_range


def _local_chunks(
    store: LocalObjectStore, bucket: str, key: str, start: int, end: int, chunk: int
) -> Iterator[memoryview]:
    """A local file read into one reused buffer: no allocation (and no page faults) per
    chunk, which is what the page-cache copy of a local disk costs most. Each view is
    valid until the next one is taken."""
    buffer = memoryview(bytearray(chunk))
    with store.open(bucket, key) as f:
        f.seek(start)
        offset = start
        while offset < end:
            n = f.readinto(buffer[: min(chunk, end - offset)])
            if not n:
                raise Conflict(
                    f"{key} changed while it was being hashed",
                    bucket=bucket,
                    key=key,
                    offset=offset,
                )
            offset += n
            yield buffer[:n]


def hash_model(
    store: ObjectReader,
    bucket: str,
    prefix: str,
    serialization: Serialization,
    *,
    options: HashOptions | None = None,
    ignore: tuple[str, ...] = (),
    progress: Progress | None = None,
) -> Manifest:
    """The manifest of the model under `bucket/prefix`, hashed as `serialization` says.

    Ignores `serialization.ignore_paths`, git metadata and the extra `ignore` names.
    Conflict when an object shrinks while it is read.
    """
    opts = (options or HashOptions()).tuned(store)
    chunk, readahead = opts.chunk_size or MiB, opts.readahead or 0
    ignored = (*serialization.ignore_paths, *DEFAULT_IGNORED, *ignore)
    files = list_model(store, bucket, prefix, ignored)
    units = list(_units(files, serialization))
    workers = max(1, min(opts.workers or 1, len(units)))
    if progress is not None:
        progress.start(sum(end - start for _, _, start, end in units))

    failed = threading.Event()
    with ThreadPoolExecutor(workers * readahead or 1, "mh-read") as readers:

        def read(key: str, start: int, length: int) -> bytes:
            data = store.read_range(bucket, key, start, length)
            if len(data) != length:
                raise Conflict(
                    f"{key} changed while it was being hashed",
                    bucket=bucket,
                    key=key,
                    offset=start,
                )
            return data

        def chunks(key: str, start: int, end: int) -> Iterator[bytes | memoryview]:
            offsets = range(start, end, chunk)
            if isinstance(store, LocalObjectStore) and _plain_reads(store):
                yield from _local_chunks(store, bucket, key, start, end, chunk)
                return
            if readahead == 0:  # synchronous reads in the hashing thread
                for offset in offsets:
                    yield read(key, offset, min(chunk, end - offset))
                return
            pending, window = iter(offsets), deque[Future[bytes]]()

            def submit() -> None:
                offset = next(pending, None)
                if offset is not None:
                    window.append(readers.submit(read, key, offset, min(chunk, end - offset)))

            for _ in range(readahead):
                submit()
            while window:
                data = window.popleft().result()
                submit()
                yield data

        def hash_unit(unit: tuple[str, str, int, int]) -> Resource:
            name, key, start, end = unit
            hasher = _new_hasher(serialization.hash_type)
            try:
                for data in chunks(key, start, end):
                    if failed.is_set():  # another unit failed: the result is lost anyway
                        break
                    hasher.update(data)
                    if progress is not None:
                        progress.advance(len(data))
            except BaseException:
                failed.set()
                raise
            return Resource(name, serialization.algorithm, hasher.hexdigest())

        with ThreadPoolExecutor(workers, "mh-hash") as hashers:
            try:
                resources = tuple(hashers.map(hash_unit, units))
            except BaseException:  # e.g. Ctrl-C in this thread: the workers stop at their
                failed.set()  # next chunk instead of hashing the rest before the pool joins
                raise

    return Manifest(model_name(bucket, prefix), serialization, resources)
