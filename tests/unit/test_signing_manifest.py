"""The streamed manifest is the manifest model_signing computes for the same files."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from model_signing import hashing

from modelhooks.adapters.object_store.local import LocalObjectStore
from modelhooks.adapters.signing import HashOptions, Manifest, Resource, Serialization, hash_model
from modelhooks.adapters.signing.local import local_model
from modelhooks.core.errors import BadRequest, Conflict, Unavailable, VerificationFailed
from modelhooks.core.records import ObjectInfo
from tests.unit.signing_material import write_model


def upstream(model: Path, config: hashing.Config) -> dict[str, str]:
    manifest = config.set_ignored_paths(paths=["model.sig", "_SUCCESS"]).hash(model)
    return {rd.identifier: rd.digest.digest_hex for rd in manifest.resource_descriptors()}


def ours(model: Path, options: HashOptions) -> Manifest:
    store, bucket, prefix = local_model(model)
    return hash_model(store, bucket, prefix, options.serialization(), options=options)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_model(tmp_path / "bert")


@pytest.mark.parametrize(
    ("options", "config"),
    [
        (HashOptions(), hashing.Config().use_file_serialization()),
        (HashOptions(chunk_size=4096, workers=2), hashing.Config().use_file_serialization()),
        (
            HashOptions(method="shards", shard_size=4096),
            hashing.Config().use_shard_serialization(shard_size=4096),
        ),
        (
            HashOptions(hash_type="blake3"),
            hashing.Config().use_file_serialization(hashing_algorithm="blake3"),
        ),
    ],
    ids=["files", "small-chunks", "shards", "blake3"],
)
def test_same_digests_as_model_signing(
    model: Path, options: HashOptions, config: hashing.Config
) -> None:
    (model / "model.sig").write_text("{}")  # ignored by both
    (model / "_SUCCESS").write_text("")
    (model / ".git").mkdir()
    (model / ".git" / "HEAD").write_text("ref")
    manifest = ours(model, options)
    assert {r.name: r.digest for r in manifest.resources} == upstream(model, config)
    assert manifest.model_name == "bert"


def test_root_digest_and_order_follow_path_components(model: Path) -> None:
    names = [r.name for r in ours(model, HashOptions()).resources]
    assert names.index("a/b.bin") < names.index("a.txt")  # "a" < "a.txt", unlike strings


def test_statement_round_trip_and_upstream_payload(model: Path) -> None:
    from model_signing._signing import signing

    manifest = ours(model, HashOptions(method="shards", shard_size=4096))
    assert Manifest.from_statement(manifest.statement()) == manifest
    # model_signing parses our statement into the same manifest (and root digest check).
    import json

    parsed = signing.dsse_payload_to_manifest(json.loads(manifest.statement()))
    assert {str(rd.identifier) for rd in parsed.resource_descriptors()} == {
        r.name for r in manifest.resources
    }


def test_shard_size_written_as_float_by_upstream_is_accepted() -> None:
    s = Serialization.from_json(
        {"method": "shards", "hash_type": "sha256", "shard_size": 1024.0, "allow_symlinks": False}
    )
    assert s.shard_size == 1024 and s.algorithm == "sha256-sharded-1024"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b.replace(b"model_signing/signature/v1.0", b"model_signing/other/v9"),
        lambda b: b.replace(b'"digest": "0', b'"digest": "1', 1),
        lambda b: b"not json",
    ],
    ids=["predicate-type", "inconsistent-root", "garbage"],
)
def test_bad_statements_are_refused(mutate: object) -> None:
    manifest = Manifest("m", Serialization(), (Resource("a", "sha256", "0" * 64),))
    with pytest.raises(VerificationFailed):
        Manifest.from_statement(mutate(manifest.statement()))  # type: ignore[operator]


def test_diff_names_files() -> None:
    s = Serialization()
    signed = Manifest("m", s, (Resource("a", "sha256", "00"), Resource("b", "sha256", "11")))
    now = Manifest("m", s, (Resource("a", "sha256", "01"), Resource("c", "sha256", "22")))
    assert signed.diff(now) == {"missing": ["b"], "extra": ["c"], "modified": ["a"]}


def test_symlinks_refused_unless_allowed(model: Path) -> None:
    (model / "link").symlink_to(model / "a.txt")
    with pytest.raises(BadRequest) as e:
        local_model(model)
    assert e.value.details["symlinks"] == ["link"]
    m = ours_allowing(model)
    assert "link" in {r.name for r in m.resources}


def ours_allowing(model: Path) -> Manifest:
    store, bucket, prefix = local_model(model, allow_symlinks=True)
    opts = HashOptions(allow_symlinks=True)
    return hash_model(store, bucket, prefix, opts.serialization(), options=opts)


class CountingStore(LocalObjectStore):
    """Counts the streams in flight and the largest piece, to check the memory bound."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.lock = threading.Lock()
        self.inflight = self.peak = self.largest = self.streams = 0

    def read_chunks(
        self, bucket: str, key: str, start: int, length: int, chunk_size: int
    ) -> Iterator[memoryview]:
        with self.lock:
            self.inflight += 1
            self.streams += 1
            self.peak = max(self.peak, self.inflight)
        try:
            for piece in super().read_chunks(bucket, key, start, length, chunk_size):
                self.largest = max(self.largest, len(piece))
                yield piece
        finally:
            with self.lock:
                self.inflight -= 1


def test_memory_is_bounded_one_stream_per_unit(tmp_path: Path) -> None:
    for i in range(4):
        (tmp_path / "m" / f"f{i}").parent.mkdir(exist_ok=True)
        (tmp_path / "m" / f"f{i}").write_bytes(bytes([i]) * 200_000)
    store = CountingStore(tmp_path)
    opts = HashOptions(chunk_size=1024, workers=2)
    hash_model(store, "m", "", opts.serialization(), options=opts)
    assert store.streams == 4  # one request per file, not one per chunk
    assert 0 < store.peak <= 2 and store.largest == 1024
    assert opts.max_buffered(store) == 2 * 1024


def test_a_local_read_lands_in_a_page_aligned_buffer(tmp_path: Path) -> None:
    """The kernel's page-cache copy into a buffer 16 bytes past a page (a bytearray's, from
    malloc) costs ~1.3x the CPU of an aligned one; 8 bytes past, ~2x: a read of 1 MiB or
    more gets a page-aligned buffer."""
    import ctypes
    import mmap

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w").write_bytes(b"w" * 3_000_000)
    store = LocalObjectStore(tmp_path)
    pieces = store.read_chunks("m", "w", 0, 3_000_000, 1 << 20)
    piece = next(pieces)
    assert ctypes.addressof(ctypes.c_char.from_buffer(piece)) % mmap.PAGESIZE == 0
    assert len(piece) == 1 << 20
    pieces.close()
    # a small read keeps a bytearray: mapping memory costs ~20 us of system calls and faults
    (small,) = store.read_chunks("m", "w", 0, 1000, 1 << 20)
    assert isinstance(small.obj, bytearray) and bytes(small) == b"w" * 1000


def test_a_thread_reads_every_file_into_the_same_buffer(tmp_path: Path) -> None:
    """Mapping, faulting in and unmapping a buffer for every file cost 2.6x the CPU of
    hashing 300 files of 2 MiB: a thread keeps its buffer for its next read; a read within
    another, or in another thread, has its own."""
    from concurrent.futures import ThreadPoolExecutor

    (tmp_path / "m").mkdir()
    for name in "abc":
        (tmp_path / "m" / name).write_bytes(name.encode() * 1_500_000)
    store = LocalObjectStore(tmp_path)
    first = [
        bytes(p[:1]) + bytes(p[-1:]) for p in store.read_chunks("m", "a", 0, 1_500_000, 1 << 20)
    ]
    (piece,) = store.read_chunks("m", "b", 0, 1 << 20, 1 << 20)
    mapping = piece.obj  # kept alive: a new mapping could not take its place
    assert first == [b"aa", b"aa"] and bytes(piece[-1:]) == b"b"
    (again,) = store.read_chunks("m", "c", 0, 1 << 20, 1 << 20)
    assert again.obj is mapping and bytes(again[:1]) == b"c"  # the same buffer, refilled

    outer = store.read_chunks("m", "a", 0, 1 << 20, 1 << 20)
    (a,) = [next(outer)]
    (b,) = store.read_chunks("m", "b", 0, 1 << 20, 1 << 20)
    assert a.obj is not b.obj and bytes(a[-1:]) == b"a"  # nested: a buffer of its own
    outer.close()
    with ThreadPoolExecutor(1) as other:
        theirs = other.submit(lambda: next(store.read_chunks("m", "c", 0, 1 << 20, 1 << 20)))
        assert theirs.result().obj not in (a.obj, b.obj)


class PagedStore(LocalObjectStore):
    """Lists its first object, then waits until some object is being read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reading = threading.Event()

    def list(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        listed = super().list(bucket, prefix)
        yield next(listed)
        assert self.reading.wait(10), "nothing was hashed before the listing ended"
        yield from listed

    def read_chunks(
        self, bucket: str, key: str, start: int, length: int, chunk_size: int
    ) -> Iterator[memoryview]:
        self.reading.set()
        yield from super().read_chunks(bucket, key, start, length, chunk_size)


def test_hashing_starts_while_the_listing_goes_on(model: Path) -> None:
    store = PagedStore(model.parent)
    opts = HashOptions()
    manifest = hash_model(store, model.name, "", opts.serialization(), options=opts)
    assert {r.name: r.digest for r in manifest.resources} == upstream(
        model, hashing.Config().use_file_serialization()
    )


class ShrinkingStore(LocalObjectStore):
    def list(self, bucket: str, prefix: str = "") -> object:  # type: ignore[override]
        for info in super().list(bucket, prefix):
            yield ObjectInfo(info.bucket, info.key, info.size + 10, info.generation)


def test_object_changing_while_hashed_is_a_conflict(model: Path) -> None:
    store = ShrinkingStore(model.parent)
    with pytest.raises(Conflict):
        hash_model(store, model.name, "", HashOptions().serialization())


class FailingStore(LocalObjectStore):
    """Fails reading one object; counts the pieces read of the others."""

    reads = 0

    def read_chunks(
        self, bucket: str, key: str, start: int, length: int, chunk_size: int
    ) -> Iterator[memoryview]:
        if key == "f0":
            raise Unavailable("backend down")
        for piece in super().read_chunks(bucket, key, start, length, chunk_size):
            FailingStore.reads += 1
            time.sleep(0.0005)
            yield piece


def test_a_failing_read_stops_the_other_units(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    for i in range(3):
        (tmp_path / "m" / f"f{i}").write_bytes(b"x" * 1_000_000)
    opts = HashOptions(chunk_size=1000, workers=3)
    with pytest.raises(Unavailable):
        hash_model(FailingStore(tmp_path), "m", "", opts.serialization(), options=opts)
    assert FailingStore.reads < 2 * 1000


class BreakingStore(LocalObjectStore):
    """Each stream breaks (Unavailable) after `pieces` pieces, `breaks` times in all."""

    def __init__(self, root: Path, pieces: int, breaks: int) -> None:
        super().__init__(root)
        self.pieces, self.breaks = pieces, breaks
        self.starts: list[int] = []

    def read_chunks(
        self, bucket: str, key: str, start: int, length: int, chunk_size: int
    ) -> Iterator[memoryview]:
        self.starts.append(start)
        for n, piece in enumerate(super().read_chunks(bucket, key, start, length, chunk_size)):
            if n == self.pieces and self.breaks:
                self.breaks -= 1
                raise Unavailable("connection reset mid-body")
            yield piece


def test_a_stream_broken_midway_goes_on_from_where_it_stopped(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "weights").write_bytes(bytes(range(256)) * 4000)
    opts = HashOptions(chunk_size=1000, workers=1)
    whole = hash_model(LocalObjectStore(tmp_path), "m", "", opts.serialization(), options=opts)
    store = BreakingStore(tmp_path, pieces=300, breaks=2)
    resumed = hash_model(store, "m", "", opts.serialization(), options=opts)
    assert resumed.resources == whole.resources
    assert store.starts == [0, 300_000, 600_000]  # never from the start again

    endless = BreakingStore(tmp_path, pieces=100, breaks=100)
    with pytest.raises(Unavailable):  # bounded: it gives up, and the platform redelivers
        hash_model(endless, "m", "", opts.serialization(), options=opts)
    assert len(endless.starts) == 6


class RecordingStore(LocalObjectStore):
    """Records the listings asked for and the threads that read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listings: list[str] = []
        self.readers: set[str] = set()

    def list(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        self.listings.append(prefix)
        return super().list(bucket, prefix)

    def read_chunks(
        self, bucket: str, key: str, start: int, length: int, chunk_size: int
    ) -> Iterator[memoryview]:
        self.readers.add(threading.current_thread().name)
        return super().read_chunks(bucket, key, start, length, chunk_size)


def test_a_model_of_one_small_file_is_hashed_without_a_thread(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "weights").write_bytes(b"w" * 1000)
    store = RecordingStore(tmp_path)
    opts = HashOptions(chunk_size=1000)
    manifest = hash_model(store, "m", "", opts.serialization(), options=opts)
    assert store.readers == {threading.current_thread().name}
    assert [r.name for r in manifest.resources] == ["weights"]

    (tmp_path / "m" / "more").write_bytes(b"m" * 1001)  # a second unit: the pool, as listed
    store = RecordingStore(tmp_path)
    manifest = hash_model(store, "m", "", opts.serialization(), options=opts)
    assert [r.name for r in manifest.resources] == ["more", "weights"]
    assert store.readers and threading.current_thread().name not in store.readers


def test_sign_hashes_the_listing_it_compares(model: Path, tmp_path: Path) -> None:
    """Two listings, one before hashing (what is hashed) and one after (nothing changed)."""
    from modelhooks.adapters.signing import KeySigner, sign_model
    from tests.unit.signing_material import make_key

    expected = upstream(model, hashing.Config().use_file_serialization())
    store = RecordingStore(model.parent)
    signer = KeySigner.from_file(make_key(tmp_path).private)
    signed = sign_model(store, model.name, "", signer)
    assert store.listings == ["", ""]
    assert {r.name: r.digest for r in signed.manifest.resources} == expected


class KeyedStore(LocalObjectStore):
    """Knows which object each thread reads and the largest piece of each; with `together`,
    no piece comes out until that many objects are being read (all units in flight)."""

    def __init__(self, root: Path, together: int = 1) -> None:
        super().__init__(root)
        self.reading = threading.local()
        self.largest: dict[str, int] = {}
        self.together = threading.Barrier(together, timeout=10)

    def read_chunks(
        self, bucket: str, key: str, start: int, length: int, chunk_size: int
    ) -> Iterator[memoryview]:
        self.reading.key = key
        self.together.wait()
        for piece in super().read_chunks(bucket, key, start, length, chunk_size):
            self.largest[key] = max(self.largest.get(key, 0), len(piece))
            yield piece


@pytest.mark.parametrize(
    ("sizes", "workers", "expected"),
    [
        ([5000] * 5, 5, set()),
        ([21000, 5000, 5000, 5000, 5000], 5, {"a"}),
        ([5000] * 5, 1, {"e"}),
    ],
    ids=["all-in-flight", "more-than-a-core-s-share", "the-last-one-alone"],
)
def test_blake3_spreads_over_the_cores_only_what_no_other_unit_can_balance(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sizes: list[int],
    workers: int,
    expected: set[str],
) -> None:
    """On 2 cores, a unit gets blake3's threads when it is more than half the bytes not
    hashed yet as it starts: five equal files hashed side by side get none (the last one
    got them when the bytes "from it on" were counted, as if the four in flight were done),
    one by one the last one does, and so does one bigger than all the others. A threaded
    unit reads pieces of 4 chunks."""
    from modelhooks.adapters.signing import streaming
    from modelhooks.adapters.signing.streaming import list_model

    model = tmp_path / "m"
    model.mkdir()
    names = "abcde"
    for name, size in zip(names, sizes, strict=True):
        (model / name).write_bytes(name.encode() * size)
    store = KeyedStore(tmp_path, together=workers)
    threaded: dict[str, bool] = {}
    new_hasher = streaming._new_hasher

    def spy(hash_type: str, *, threads: bool = False) -> object:
        threaded[store.reading.key] = threads
        return new_hasher(hash_type, threads=threads)  # type: ignore[arg-type]

    monkeypatch.setattr(streaming, "_new_hasher", spy)
    monkeypatch.setattr(streaming, "_cpus", lambda: 2)
    opts = HashOptions(hash_type="blake3", chunk_size=1024, workers=workers)
    serialization = opts.serialization()
    files = list_model(store, "m", "", serialization.ignore_paths)  # as sign passes them
    manifest = hash_model(store, "m", "", serialization, options=opts, files=files)
    assert {k for k, t in threaded.items() if t} == expected and len(threaded) == 5
    assert store.largest == {n: 4096 if n in expected else 1024 for n in names}
    assert max(store.largest.values()) * workers <= opts.max_buffered(store)
    config = hashing.Config().use_file_serialization(hashing_algorithm="blake3")
    assert {r.name: r.digest for r in manifest.resources} == upstream(model, config)


def test_a_streamed_listing_decides_the_threads_when_it_ends() -> None:
    from modelhooks.adapters.signing.streaming import _Plan

    units = [("a", "a", 0, 10), ("b", "b", 0, 10), ("c", "c", 0, 30)]
    plan = _Plan(iter(units), 2)
    listed = iter(plan)
    assert next(listed) == units[0]
    assert plan.threads(10) is None  # more may come: one core
    assert list(listed) == units[1:]
    assert [plan.threads(n) for n in (10, 25, 26)] == [False, False, True]  # of 50 bytes
    plan.hashed(20)  # a and b are done: c is more than a core's share of what is left
    assert plan.threads(30) is True and plan.threads(15) is False
    assert _Plan(units, 2).threads(26) is True  # a listing at hand: decided at once
