"""transfer's streaming copy against the real servers: MinIO, fake-gcs-server, distribution
v3, and an http server of this process (ranges, archives). Every model is checked byte for
byte at the other end; OCI images are checked as images (base layers, diff_ids)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import os
import secrets
import socketserver
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.object_store.gcs import GcsObjectStore
from modelhooks.adapters.object_store.s3 import S3ObjectStore
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import OCI_MANIFEST, DistributionRegistry
from modelhooks.adapters.transfer.files import CHUNK, FileEntry, Sha256
from modelhooks.adapters.transfer.oci import LAYER_TAR, OciEnd
from modelhooks.adapters.transfer.run import copy
from modelhooks.adapters.transfer.stores import GcsEnd, LocalEnd, S3End
from modelhooks.adapters.transfer.uri import UriSource
from modelhooks.core.errors import BadRequest, Forbidden
from tests.servers.objectstores import FakeGcs, Minio
from tests.servers.registries import OciRegistry

pytestmark = pytest.mark.integration


class Counter:
    def __init__(self) -> None:
        self.total, self.started = 0, False

    def start(self, total: int | None) -> None:
        self.started = True

    def advance(self, n: int) -> None:
        self.total += n


def model_dir(root: Path, big: int = 0) -> dict[str, bytes]:
    files = {
        "config.json": b'{"arch": "bert"}',
        "tokenizer/vocab.txt": b"a\nb\nc\n" * 1000,
        "weights.bin": os.urandom(big or 300_000),
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def bucket(minio: Minio) -> Iterator[tuple[S3ObjectStore, str]]:
    name = f"transfer-{secrets.token_hex(5)}"
    with minio.s3_client() as client:
        client.create_bucket(Bucket=name)
        yield S3ObjectStore(client), name


def push_base(registry: OciRegistry, repo: str) -> str:
    """A tiny base image (one gzip layer with etc/base) on `registry`; its reference."""
    client = DistributionRegistry(registry.url)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("etc/base")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"base\n"))
    layer = gzip.compress(raw.getvalue())
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["sh"]},
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()],
            },
        }
    ).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": client.push_blob(repo, config),
            "size": len(config),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": client.push_blob(repo, layer),
                "size": len(layer),
            }
        ],
    }
    client.push_manifest(repo, "latest", manifest)
    return f"{registry.host}/{repo}:latest"


def oci_end(registry: OciRegistry, repo: str, tag: str, **kw: Any) -> OciEnd:
    client, r, ref = OciClients().for_uri(f"oci://{registry.host}/{repo}:{tag}")
    return OciEnd(client, r, ref, host=registry.host, **kw)


def test_s3_to_oci_image_on_its_base_and_back_to_local(
    tmp_path: Path, bucket: tuple[S3ObjectStore, str], distribution3: OciRegistry
) -> None:
    store, name = bucket
    src = tmp_path / "src"
    files = model_dir(src)
    copy(LocalEnd(str(src)), S3End(store, name, "bert/1"), Counter())
    suffix = secrets.token_hex(4)
    base_ref = push_base(distribution3, f"base-{suffix}")
    base = OciClients().for_uri(f"oci://{base_ref}")
    dest = oci_end(distribution3, f"models/bert-{suffix}", "v1", base=base, fmt="image")
    progress = Counter()
    copied = copy(S3End(store, name, "bert/1"), dest, progress)
    uri = dest.finish(copied.order)
    assert uri.startswith(f"oci://{distribution3.host}/models/bert-{suffix}@sha256:")
    assert progress.total == sum(len(b) for b in files.values())
    assert {p: s for p, (_, s) in copied.files.items()} == {
        p: hashlib.sha256(b).hexdigest() for p, b in files.items()
    }

    client = DistributionRegistry(distribution3.url)
    manifest, _, _ = client.manifest(f"models/bert-{suffix}", "v1")
    layers = manifest["layers"]
    assert layers[0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"  # the base's
    assert [x["mediaType"] for x in layers[1:]] == [LAYER_TAR] * 3
    config = json.loads(
        client.blob_range(f"models/bert-{suffix}", manifest["config"]["digest"], 0, 10_000)
    )
    assert config["config"]["Cmd"] == ["sh"]  # the base image's config kept
    assert config["rootfs"]["diff_ids"][1:] == [x["digest"] for x in layers[1:]]
    one = client.blob_range(f"models/bert-{suffix}", layers[1]["digest"], 0, 10_000_000)
    with tarfile.open(fileobj=io.BytesIO(one)) as tar:
        assert tar.getnames() == ["models/config.json"]

    out = tmp_path / "out"
    copy(oci_end(distribution3, f"models/bert-{suffix}", "v1"), LocalEnd(str(out)), Counter())
    assert read_tree(out) == files


def test_oci_artifact_to_s3_multipart_and_gcs(
    tmp_path: Path,
    bucket: tuple[S3ObjectStore, str],
    distribution3: OciRegistry,
    fake_gcs: FakeGcs,
) -> None:
    src = tmp_path / "src"
    files = model_dir(src, big=2 * CHUNK + 12345)  # three S3 parts
    repo = f"models/artifact-{secrets.token_hex(4)}"
    dest = oci_end(distribution3, repo, "v1", fmt="artifact")
    dest.finish(copy(LocalEnd(str(src)), dest, Counter()).order)

    store, name = bucket
    copy(oci_end(distribution3, repo, "v1"), S3End(store, name, "m/1"), Counter())
    head = store.client.head_object(Bucket=name, Key="m/1/weights.bin")
    assert head["ETag"].strip('"').endswith("-3")  # a multipart upload
    tags = store.client.get_object_tagging(Bucket=name, Key="m/1/weights.bin")["TagSet"]
    assert tags == [{"Key": "sha256", "Value": hashlib.sha256(files["weights.bin"]).hexdigest()}]

    client = fake_gcs.storage_client()
    gbucket = f"transfer-{secrets.token_hex(5)}"
    client.create_bucket(gbucket)
    gcs = GcsObjectStore(client)
    copy(S3End(store, name, "m/1"), GcsEnd(gcs, gbucket, "m/1"), Counter())
    out = tmp_path / "out"
    copy(GcsEnd(gcs, gbucket, "m/1"), LocalEnd(str(out)), Counter())
    assert read_tree(out) == files


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with single byte ranges (zip reads its directory at the end)."""

    def log_message(self, *args: Any) -> None:
        pass

    def send_head(self) -> Any:
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return None
        data = path.read_bytes()
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes="):
            start_s, _, end_s = ranged[6:].partition("-")
            start = int(start_s)
            end = min(int(end_s) if end_s else len(data) - 1, len(data) - 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            body = data[start : end + 1]
        else:
            self.send_response(200)
            body = data
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    root = tmp_path / "www"
    root.mkdir()

    def handler(*args: Any) -> _RangeHandler:
        return _RangeHandler(*args, directory=str(root))

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()


def make_tar(path: Path, files: dict[str, bytes], mode: str = "w:gz") -> None:
    with tarfile.open(path, mode) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_uri_archives_unpack_streaming_into_s3(
    tmp_path: Path, web: tuple[Path, str], bucket: tuple[S3ObjectStore, str]
) -> None:
    root, base = web
    files = model_dir(tmp_path / "m")
    make_tar(root / "bert.tar.gz", files)
    with zipfile.ZipFile(root / "bert.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    (root / "single.bin").write_bytes(files["weights.bin"])
    store, name = bucket
    for archive in ("bert.tar.gz", "bert.zip"):
        sha = hashlib.sha256((root / archive).read_bytes()).hexdigest()
        src = UriSource(f"{base}/{archive}", allow_local=True, sha256=sha)
        copy(src, S3End(store, name, archive), Counter())
        out = tmp_path / f"out-{archive}"
        copy(S3End(store, name, archive), LocalEnd(str(out)), Counter())
        assert read_tree(out) == files
    copy(UriSource(f"{base}/single.bin", allow_local=True), S3End(store, name, "one"), Counter())
    got = store.client.get_object(Bucket=name, Key="one/single.bin")["Body"].read()
    assert got == files["weights.bin"]


def test_uri_refusals(tmp_path: Path, web: tuple[Path, str]) -> None:
    root, base = web
    out = tmp_path / "out"

    def run(name: str, **kw: Any) -> None:
        copy(UriSource(f"{base}/{name}", allow_local=True, **kw), LocalEnd(str(out)), Counter())

    with pytest.raises(Forbidden, match="loopback"):
        copy(UriSource(f"{base}/x.tar"), LocalEnd(str(out)), Counter())

    make_tar(root / "dotdot.tar", {"../evil": b"x"}, "w")
    with pytest.raises(BadRequest, match="leaves the model"):
        run("dotdot.tar")
    make_tar(root / "abs.tar.gz", {"/etc/evil": b"x"})
    with pytest.raises(BadRequest, match="absolute"):
        run("abs.tar.gz")
    with tarfile.open(root / "link.tar", "w") as tar:
        link = tarfile.TarInfo("weights")
        link.type, link.linkname = tarfile.SYMTYPE, "../../etc/passwd"
        tar.addfile(link)
    with pytest.raises(BadRequest, match="leaves the model"):
        run("link.tar")
    with zipfile.ZipFile(root / "slip.zip", "w") as z:
        z.writestr("a/../../evil", b"x")
    with pytest.raises(BadRequest, match="leaves the model"):
        run("slip.zip")
    make_tar(root / "bomb.tar.gz", {"zeros": b"\0" * 5_000_000})
    with pytest.raises(BadRequest, match="bomb"):
        run("bomb.tar.gz", slack=1_000_000)
    with zipfile.ZipFile(root / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("zeros", b"\0" * 5_000_000)
    with pytest.raises(BadRequest, match="bomb"):
        run("bomb.zip", slack=1_000_000)
    make_tar(root / "ok.tar.gz", {"a": b"a"})
    with pytest.raises(BadRequest, match="checksum mismatch"):
        run("ok.tar.gz", sha256="0" * 64)
    assert not (tmp_path / "evil").exists() and not Path("/etc/evil").exists()


class Interrupted(Exception):
    pass


class StopAfter:
    """A source that fails after `limit` bytes (a killed pod), then reads whole again."""

    def __init__(self, source: Any, limit: int) -> None:
        self.source, self.limit, self.read = source, limit, 0

    def files(self) -> Iterator[FileEntry]:
        for entry in self.source.files():
            yield FileEntry(
                entry.path,
                entry.size,
                lambda o, e=entry: _Failing(e.open(o), self),  # type: ignore[misc]
                entry.fingerprint,
            )


class _Failing(io.RawIOBase):
    def __init__(self, stream: Any, owner: StopAfter) -> None:
        self.stream, self.owner = stream, owner

    def close(self) -> None:
        self.stream.close()
        super().close()

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        data: bytes = self.stream.read(n)
        self.owner.read += len(data)
        if self.owner.read > self.owner.limit:
            raise Interrupted("killed")
        return data


def one_file(src: Path, size: int) -> bytes:
    """`src`/weights.bin of `size` random bytes; its bytes."""
    data = os.urandom(size)
    src.mkdir()
    (src / "weights.bin").write_bytes(data)
    return data


def part_numbers(store: S3ObjectStore) -> list[int]:
    """The PartNumber of every part `store`'s client uploads from now on, in order."""
    sent: list[int] = []
    upload_part = store.client.upload_part

    def counting(**kw: Any) -> Any:
        sent.append(kw["PartNumber"])
        return upload_part(**kw)

    store.client.upload_part = counting
    return sent


def test_s3_multipart_resume_sends_only_the_missing_parts(
    tmp_path: Path, bucket: tuple[S3ObjectStore, str]
) -> None:
    store, name = bucket
    src = tmp_path / "src"
    data = one_file(src, 4 * CHUNK + 1000)
    sent = part_numbers(store)
    with pytest.raises(Interrupted):
        copy(StopAfter(LocalEnd(str(src)), 2 * CHUNK + 10), S3End(store, name, "m"), Counter())
    assert sent == [1, 2]
    sent.clear()
    copied = copy(LocalEnd(str(src)), S3End(store, name, "m"), Counter())
    assert sent == [3, 4, 5]  # parts 1 and 2 were there, with the source's bytes
    got = store.client.get_object(Bucket=name, Key="m/weights.bin")["Body"].read()
    assert got == data
    assert copied.files["weights.bin"][1] == hashlib.sha256(data).hexdigest()
    sent.clear()
    again = copy(LocalEnd(str(src)), S3End(store, name, "m"), Counter())
    assert (sent, again.skipped) == ([], ["weights.bin"])  # done: nothing sent


def test_oci_resume_keeps_the_layers_already_pushed(
    tmp_path: Path, distribution3: OciRegistry
) -> None:
    src = tmp_path / "src"
    files = model_dir(src)
    repo = f"models/resume-{secrets.token_hex(4)}"
    journal = tmp_path / "state" / "oci.json"
    first = oci_end(distribution3, repo, "v1", fmt="image", journal=journal)
    pushed = len(files["config.json"]) + len(files["weights.bin"])  # the first two, in walk order
    with pytest.raises(Interrupted):  # killed in the third file
        copy(StopAfter(LocalEnd(str(src)), pushed + 10), first, Counter())
    assert journal.is_file()
    second = oci_end(distribution3, repo, "v1", fmt="image", journal=journal)
    copied = copy(LocalEnd(str(src)), second, Counter())
    assert copied.skipped == ["config.json", "weights.bin"]
    second.finish(copied.order)
    assert not journal.exists()
    out = tmp_path / "out"
    copy(oci_end(distribution3, repo, "v1"), LocalEnd(str(out)), Counter())
    assert read_tree(out) == files
    third = copy(LocalEnd(str(src)), oci_end(distribution3, repo, "v1", fmt="image"), Counter())
    assert third.skipped == ["config.json", "weights.bin", "tokenizer/vocab.txt"]


def test_s3_resume_with_the_journal_reads_and_sends_only_the_rest(
    tmp_path: Path, bucket: tuple[S3ObjectStore, str]
) -> None:
    store, name = bucket
    src = tmp_path / "src"
    data = one_file(src, 4 * CHUNK + 1000)
    journal = tmp_path / "state" / "s3.json"
    sent = part_numbers(store)
    with pytest.raises(Interrupted):
        copy(
            StopAfter(LocalEnd(str(src)), 2 * CHUNK + 10),
            S3End(store, name, "m", journal),
            Counter(),
        )
    sent.clear()
    again = StopAfter(LocalEnd(str(src)), len(data) * 2)
    progress = Counter()
    copied = copy(again, S3End(store, name, "m", journal), progress)
    assert sent == [3, 4, 5]
    assert again.read == len(data) - 2 * CHUNK  # the first two parts not even read
    assert progress.total == len(data)
    assert copied.files["weights.bin"][1] == hashlib.sha256(data).hexdigest()  # resumed hash
    got = store.client.get_object(Bucket=name, Key="m/weights.bin")["Body"].read()
    assert got == data
    assert json.loads(journal.read_text())["entries"] == {}


def test_oci_resume_inside_a_file_continues_the_registrys_upload(
    tmp_path: Path, distribution3: OciRegistry, bucket: tuple[S3ObjectStore, str]
) -> None:
    src = tmp_path / "src"
    data = one_file(src, 3 * CHUNK + 777)
    repo = f"models/partial-{secrets.token_hex(4)}"
    journal = tmp_path / "state" / "oci.json"
    with pytest.raises(Interrupted):  # two PATCHes in the registry, then killed
        copy(
            StopAfter(LocalEnd(str(src)), 2 * CHUNK + 10),
            oci_end(distribution3, repo, "v1", journal=journal),
            Counter(),
        )
    saved = json.loads(journal.read_text())["entries"]["partial:weights.bin"]
    assert saved["data_offset"] > 0
    again = StopAfter(LocalEnd(str(src)), len(data) * 2)
    dest = oci_end(distribution3, repo, "v1", journal=journal)
    copied = copy(again, dest, Counter())
    assert again.read == len(data) - saved["data_offset"]  # what was sent is not read again
    assert copied.files["weights.bin"][1] == hashlib.sha256(data).hexdigest()
    dest.finish(copied.order)  # the registry checked the digest
    out = tmp_path / "out"
    copy(oci_end(distribution3, repo, "v1"), LocalEnd(str(out)), Counter())
    assert (out / "weights.bin").read_bytes() == data

    # OCI → S3 resumes inside the file too: the layer is read by ranges from where it stopped
    store, name = bucket
    s3_journal = tmp_path / "state" / "s3.json"
    with pytest.raises(Interrupted):
        copy(
            StopAfter(oci_end(distribution3, repo, "v1"), 2 * CHUNK + 10),
            S3End(store, name, "m", s3_journal),
            Counter(),
        )
    again = StopAfter(oci_end(distribution3, repo, "v1"), len(data) * 2)
    copy(again, S3End(store, name, "m", s3_journal), Counter())
    assert again.read == len(data) - 2 * CHUNK
    assert store.client.get_object(Bucket=name, Key="m/weights.bin")["Body"].read() == data


GCS_SERVERS = {"fake_gcs": "fake-gcs-server", "gcs_emulator": "gcp-storage-emulator"}


@pytest.fixture(params=sorted(GCS_SERVERS))
def gcs_server(request: pytest.FixtureRequest) -> tuple[str, FakeGcs]:
    """Each GCS server of the harness: (its name, it)."""
    server: FakeGcs = request.getfixturevalue(request.param)
    return GCS_SERVERS[request.param], server


@pytest.fixture
def gcs_bucket(gcs_server: tuple[str, FakeGcs]) -> tuple[GcsObjectStore, str]:
    client = gcs_server[1].storage_client()
    name = f"transfer-{secrets.token_hex(5)}"
    client.create_bucket(name)
    return GcsObjectStore(client), name


@pytest.fixture
def gcs_status_query(gcs_server: tuple[str, FakeGcs]) -> str:
    """ "" where the server answers a resumable upload's status query as GCS does (PUT with
    `Content-Range: bytes */*` → 308 with the `Range` committed, the session still open),
    else exactly what it did instead."""
    server_name, server = gcs_server
    client = server.storage_client()
    bucket = client.create_bucket(f"probe-{secrets.token_hex(5)}")
    session = bucket.blob("k").create_resumable_upload_session(client=client, checksum=None)
    piece = 256 * 1024
    put = client._http.put
    first = put(session, data=b"x" * piece, headers={"Content-Range": f"bytes 0-{piece - 1}/*"})
    status = put(session, data=b"", headers={"Content-Range": "bytes */*"})
    after = put(session, data=b"", headers={"Content-Range": "bytes */*"})
    answers = [(r.status_code, r.headers.get("Range")) for r in (first, status, after)]
    if answers == [(308, f"bytes=0-{piece - 1}")] * 3:
        return ""
    blob = bucket.get_blob("k")
    made = f"finalized the object from the bytes so far ({blob.size} bytes)" if blob else ""
    return (
        f"{server_name} does not answer a resumable upload's status query as GCS does: "
        f"after a first {piece}-byte piece (answered {answers[0]}), PUT `Content-Range: "
        f"bytes */*` answered {answers[1]} and {made or 'made no object'}, the session then "
        f"answering {answers[2][0]}, instead of 308 with the Range committed and the session "
        "kept: resuming inside a file is exercised on the other GCS server only"
    )


def _interrupted_upload(
    tmp_path: Path, store: GcsObjectStore, name: str
) -> tuple[Path, bytes, Path]:
    """A one-file model copied to gs://name/m/ and killed after two pieces went up: (its
    source folder, its bytes, the journal that recorded the upload)."""
    src = tmp_path / "src"
    data = one_file(src, 3 * CHUNK + 777)
    journal = tmp_path / "state" / "gcs.json"
    with pytest.raises(Interrupted):  # two pieces committed, then killed
        copy(
            StopAfter(LocalEnd(str(src)), 2 * CHUNK + 10),
            GcsEnd(store, name, "m", journal),
            Counter(),
        )
    return src, data, journal


def test_gcs_resume_inside_a_file_continues_the_session(
    tmp_path: Path, gcs_bucket: tuple[GcsObjectStore, str], gcs_status_query: str
) -> None:
    if gcs_status_query:
        pytest.skip(gcs_status_query)
    store, name = gcs_bucket
    src, data, journal = _interrupted_upload(tmp_path, store, name)
    saved = json.loads(journal.read_text())["entries"]["upload:m/weights.bin"]
    assert saved["offset"] == 2 * CHUNK
    again = StopAfter(LocalEnd(str(src)), len(data) * 2)
    progress = Counter()
    copied = copy(again, GcsEnd(store, name, "m", journal), progress)
    assert again.read == len(data) - 2 * CHUNK  # what was committed is not read again
    assert progress.total == len(data)
    assert copied.files["weights.bin"][1] == hashlib.sha256(data).hexdigest()  # resumed hash
    blob = store.client.bucket(name).get_blob("m/weights.bin")
    assert blob.download_as_bytes() == data
    assert blob.metadata["sha256"] == hashlib.sha256(data).hexdigest()
    assert json.loads(journal.read_text())["entries"] == {}


def test_gcs_resume_with_a_session_gone_starts_the_file_over(
    tmp_path: Path, gcs_bucket: tuple[GcsObjectStore, str]
) -> None:
    store, name = gcs_bucket
    src, data, journal = _interrupted_upload(tmp_path, store, name)
    state = json.loads(journal.read_text())
    saved = state["entries"]["upload:m/weights.bin"]
    assert saved["offset"] == 2 * CHUNK and "upload_id=" in saved["session"]
    # the session expired (GCS keeps one a week): the server no longer knows its id
    saved["session"] = saved["session"].replace("upload_id=", "upload_id=expired")
    journal.write_text(json.dumps(state))
    again = StopAfter(LocalEnd(str(src)), len(data) * 2)
    progress = Counter()
    copied = copy(again, GcsEnd(store, name, "m", journal), progress)
    assert again.read == len(data)  # the whole file, from its start
    assert progress.total == len(data)
    assert copied.files["weights.bin"][1] == hashlib.sha256(data).hexdigest()
    assert store.client.bucket(name).get_blob("m/weights.bin").download_as_bytes() == data
    assert json.loads(journal.read_text())["entries"] == {}
    done = copy(LocalEnd(str(src)), GcsEnd(store, name, "m", journal), Counter())
    assert done.skipped == ["weights.bin"]


def test_gcs_resume_hashes_what_the_session_committed_after_the_journal(
    tmp_path: Path, gcs_bucket: tuple[GcsObjectStore, str], gcs_status_query: str
) -> None:
    """Killed after GCS committed a piece but before the journal recorded it: the session
    says how much it holds; that piece is read to hash it, not sent again."""
    if gcs_status_query:
        pytest.skip(gcs_status_query)
    store, name = gcs_bucket
    src, data, journal = _interrupted_upload(tmp_path, store, name)
    state = json.loads(journal.read_text())
    saved = state["entries"]["upload:m/weights.bin"]
    first = Sha256()
    first.update(data[:CHUNK])
    saved["offset"], saved["file_state"] = CHUNK, first.state()  # one piece behind GCS
    journal.write_text(json.dumps(state))
    again = StopAfter(LocalEnd(str(src)), len(data) * 2)
    sent: list[int] = []
    session_put = store.client._http.put

    def counting(url: str, data: bytes = b"", **kw: Any) -> Any:
        sent.append(len(data))
        return session_put(url, data=data, **kw)

    store.client._http.put = counting
    copied = copy(again, GcsEnd(store, name, "m", journal), Counter())
    assert again.read == len(data) - CHUNK  # the second piece read to hash it …
    assert sum(sent) == len(data) - 2 * CHUNK  # … but not sent again
    assert copied.files["weights.bin"][1] == hashlib.sha256(data).hexdigest()
    assert store.client.bucket(name).get_blob("m/weights.bin").download_as_bytes() == data
