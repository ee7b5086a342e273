"""Hash a model where it lies, through the ObjectReader port: one streamed read per unit,
bounded memory, nothing written to disk.

Each unit (a file, or a shard in shard mode) is read by ONE request (`read_chunks`: a
ranged GET streamed a piece at a time, or a local file read into a reused buffer) and
hashed piece by piece by the worker that reads it: hashlib and blake3 release the GIL, and
the socket's buffer keeps the link busy while a piece is hashed. `workers` units are in
flight at once, as they are listed (a small file is one short GET); memory is therefore
bounded by `workers * chunk_size` whatever the model size (4x that for blake3). A blake3
unit is hashed on one core, unless it is too big for the others to balance (`_Plan`: one
big file; the last big one), then by blake3's threads in pieces of 4 chunks.

>>> manifest = hash_model(store, "models", "bert/1/", HashOptions().serialization())  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

import msgspec

from modelhooks.adapters.signing.manifest import (
    DEFAULT_IGNORED,
    HashType,
    Manifest,
    Method,
    Resource,
    Serialization,
    is_ignored,
)
from modelhooks.core.errors import ContentChanged, PayloadTooLarge, Transient

if TYPE_CHECKING:
    from modelhooks.core.ports import ObjectReader
    from modelhooks.core.records import ObjectInfo

__all__ = ["HashOptions", "Progress", "hash_model", "list_model", "model_name", "read_object"]

MiB = 1 << 20
_RESUMES = 5  # how many times one unit's broken stream is resumed
_WIDE = 4  # a unit hashed by blake3's threads reads pieces of this many chunks


class Progress(Protocol):
    """Told the model's size once listed, then every hashed chunk (from many threads)."""

    def start(self, total_bytes: int) -> None: ...

    def advance(self, n: int) -> None: ...


class _Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> object: ...

    def hexdigest(self) -> str: ...


class HashOptions(msgspec.Struct, frozen=True):
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
    # Tuning; None = auto. Each worker streams one unit (one request) and holds at most
    # one piece of `chunk_size` bytes; a remote store gets more workers than cores so that
    # small files (one short GET each) keep many requests in flight.
    chunk_size: int | None = None  # auto: 1 MiB (stays in cache between read and hash)
    workers: int | None = None  # auto: CPUs + 4 locally (more units than cores balances the
    # tail), 4 * CPUs + 4 remote (latency: one request per small file)

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
        cpus = _cpus()
        # a local store's module is imported by whoever made one (cold start: not by signing)
        local_module = sys.modules.get("modelhooks.adapters.object_store.local")
        local = local_module is not None and isinstance(store, local_module.LocalObjectStore)
        return msgspec.structs.replace(
            self,
            chunk_size=self.chunk_size or MiB,
            workers=self.workers or min(32, cpus + 4 if local else 4 * cpus + 4),
        )

    def max_buffered(self, store: ObjectReader) -> int:
        """Upper bound of the bytes one `hash_model` call holds in memory for `store` (a
        blake3 unit hashed by blake3's threads reads `_WIDE` chunks at a time)."""
        t = self.tuned(store)
        wide = _WIDE if self.hash_type == "blake3" else 1
        return (t.workers or 1) * (t.chunk_size or 1) * wide


@functools.cache
def _cpus() -> int:
    """The machine's CPUs, read once (os.cpu_count reads a file each time)."""
    return os.cpu_count() or 2


def _new_hasher(hash_type: HashType, *, threads: bool = False) -> _Hasher:
    """`threads`: a blake3 hasher spreads each piece over every core (its own thread pool)."""
    if hash_type == "blake3":
        import blake3  # lazily: only blake3 users pay for it

        return blake3.blake3(max_threads=blake3.blake3.AUTO if threads else 1)
    return hashlib.sha256()


_Unit = tuple[str, str, int, int]  # resource name, key, start, end


class _Plan:
    """The units, and which of them get blake3's own threads: a unit larger than a core's
    share of the bytes not hashed yet when it starts (one big file; the last big one once
    the others are done), which nothing else could keep the other cores busy beside. The
    others are hashed one core each, side by side, which costs the least per byte: blake3
    hands each piece to its pool and waits for it, and on idle cores its threads sleep and
    wake for every piece (with the cores to itself, a threaded unit read in 1 MiB pieces
    cost 1.7-3x the CPU per byte of a one-core one). The rule this replaced, "more than a
    core's share of the bytes from it on", counted the units in flight as done: five 512
    MiB files hashed side by side gave the last one threads. Decided once the listing is
    known whole (a list: at once; a streamed listing: when it ends); until then a unit is
    one core's."""

    def __init__(self, units: Iterable[_Unit], cpus: int) -> None:
        self._units, self._cpus = units, cpus
        self._total: int | None = None
        self._hashed = 0
        self._lock = threading.Lock()
        if isinstance(units, Sequence):
            self._total = sum(end - start for _, _, start, end in units)

    def __iter__(self) -> Iterator[_Unit]:
        total = 0
        for unit in self._units:
            total += unit[3] - unit[2]
            yield unit
        if self._total is None:
            self._total = total

    def hashed(self, n: int) -> None:
        """`n` more bytes were hashed (by any unit)."""
        with self._lock:
            self._hashed += n

    def threads(self, size: int) -> bool | None:
        """Whether a unit of `size` bytes starting now gets blake3's threads; None while
        the listing goes on."""
        total = self._total
        return None if total is None else size * self._cpus > total - self._hashed


def _prefix(prefix: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


def model_name(bucket: str, prefix: str) -> str:
    """The subject name model_signing would use: the model directory's last component."""
    return prefix.strip("/").rsplit("/", 1)[-1] or bucket


def list_model(
    store: ObjectReader,
    bucket: str,
    prefix: str,
    ignored: tuple[str, ...],
    *,
    seen: set[str] | None = None,
    every: list[ObjectInfo] | None = None,
) -> list[tuple[str, ObjectInfo]]:
    """(model-relative name, info) of every object of the model that is not ignored; the
    key of every object listed, ignored ones too, added to `seen` if given, and its info
    to `every`."""
    return list(_listed(store, bucket, prefix, ignored, seen, every))


def _listed(
    store: ObjectReader,
    bucket: str,
    prefix: str,
    ignored: tuple[str, ...],
    seen: set[str] | None = None,
    every: list[ObjectInfo] | None = None,
) -> Iterator[tuple[str, ObjectInfo]]:
    root = _prefix(prefix)
    for info in store.list(bucket, root):  # page by page: hashing starts with the first
        if seen is not None:
            seen.add(info.key)
        if every is not None:
            every.append(info)
        name = info.key[len(root) :]
        if not name or name.endswith("/") or is_ignored(name, ignored):
            continue  # directory placeholders and ignored paths
        yield name, info


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
    files: Iterable[tuple[str, ObjectInfo]], serialization: Serialization
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


def hash_model(
    store: ObjectReader,
    bucket: str,
    prefix: str,
    serialization: Serialization,
    *,
    options: HashOptions | None = None,
    ignore: tuple[str, ...] = (),
    progress: Progress | None = None,
    files: Iterable[tuple[str, ObjectInfo]] | None = None,
) -> Manifest:
    """The manifest of the model under `bucket/prefix`, hashed as `serialization` says.

    Ignores `serialization.ignore_paths`, git metadata and the extra `ignore` names.
    ContentChanged (a Conflict) when an object shrinks while it is read. `files`: the
    model's listing when the caller has it (list_model, with the same ignored names), not
    listed again.
    """
    opts = (options or HashOptions()).tuned(store)
    chunk = opts.chunk_size or MiB
    ignored = (*serialization.ignore_paths, *DEFAULT_IGNORED, *ignore)
    listed = _listed(store, bucket, prefix, ignored) if files is None else files
    units: Iterable[_Unit] = _units(listed, serialization)
    if files is not None or progress is not None:  # a listing at hand is decided at once
        units = list(units)
    if progress is not None:  # told the total first
        progress.start(sum(end - start for _, _, start, end in units))
    plan = _Plan(units, _cpus())
    spread = serialization.hash_type == "blake3"  # only blake3 can spread over the cores

    failed = threading.Event()

    def hash_unit(unit: _Unit) -> Resource:
        name, key, start, end = unit
        threads = plan.threads(end - start) if spread else False
        # a threaded unit reads wider pieces: blake3's pool is woken, and waited for, once a
        # piece (4 MiB: 24 % less CPU per byte than 1 MiB with the cores to itself, the same
        # on a busy machine)
        piece = chunk * _WIDE if threads else chunk
        hasher: _Hasher | None = None  # made with the first piece: by then the end of a
        done = resumed = 0  # short streamed listing is known (a one-file model gets threads)
        try:
            while True:
                before = done
                pieces = store.read_chunks(bucket, key, start + done, end - start - done, piece)
                try:
                    for data in pieces:
                        if failed.is_set():  # another unit failed: the result is lost anyway
                            break
                        if hasher is None:
                            if threads is None:
                                threads = bool(plan.threads(end - start))
                            hasher = _new_hasher(serialization.hash_type, threads=threads)
                        hasher.update(data)
                        done += len(data)
                        plan.hashed(len(data))
                        if progress is not None:
                            progress.advance(len(data))
                    break
                except Transient:
                    # a stream that broke after it made progress goes on from where it
                    # stopped (a big file is not hashed again from its start by the
                    # redelivery); a request that fails outright is the caller's to retry
                    if done == before or resumed >= _RESUMES or failed.is_set():
                        raise
                    resumed += 1
                finally:
                    getattr(pieces, "close", lambda: None)()  # ends the request
            if done != end - start and not failed.is_set():
                raise ContentChanged(
                    f"{key} changed while it was being hashed",
                    bucket=bucket,
                    key=key,
                    offset=start + done,
                )
        except BaseException:
            failed.set()
            raise
        if hasher is None:  # an empty unit
            hasher = _new_hasher(serialization.hash_type)
        return Resource(name, serialization.algorithm, hasher.hexdigest())

    # A first unit of one piece is hashed by this thread: a model of one small file costs
    # a read, not a thread started and two hand-overs (each a wait for the GIL when the
    # process is busy); a big first unit goes to the pool, where the rest joins it.
    pending = iter(plan)
    resources: tuple[Resource, ...] = ()
    first = next(pending, None)
    if first is not None and first[3] - first[2] <= chunk:
        resources, first = (hash_unit(first),), next(pending, None)
    if first is None:
        return Manifest(model_name(bucket, prefix), serialization, resources)
    with ThreadPoolExecutor(opts.workers or 1, "mh-hash") as hashers:
        try:  # units are submitted as they are listed
            resources += tuple(hashers.map(hash_unit, itertools.chain([first], pending)))
        except BaseException:  # e.g. Ctrl-C in this thread: the workers stop at their
            failed.set()  # next piece instead of hashing the rest before the pool joins
            raise

    return Manifest(model_name(bucket, prefix), serialization, resources)
