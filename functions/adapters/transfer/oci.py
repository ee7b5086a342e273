"""OCI sources and destinations of a transfer, streaming through the distribution API
(chunked blob uploads: POST, PATCH per `CHUNK`, PUT with the digest computed on the way;
blobs read by ranged GETs).

Destination formats:
- `image` (upstream's): the model layered on the base image (its layers mounted from the
  base repository on the same registry, else streamed across), one uncompressed tar layer
  per file holding `models/<path>`, and an image config whose `rootfs.diff_ids` lists
  them, so the result runs, and mounts as a Kubernetes image volume.
- `artifact`: one plain layer per file named by `org.opencontainers.image.title` (ORAS's
  shape, what `modelhooks sign oci://…` hashes), with the empty config.
Every model layer is annotated with its file's path, sha256 and source revision, so a
re-run skips what the tag (or the journal of an interrupted run, `journal`) already has
of the same source revision when its blob is still present.

Sources: a model's tag or digest in either shape (titled plain layers; tar layers whose
`models/` members are the model, as upstream's images).
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from modelhooks.adapters.oci.distribution import (
    EMPTY,
    OCI_INDEX,
    OCI_MANIFEST,
    TITLE,
    DistributionRegistry,
)
from modelhooks.adapters.transfer.files import (
    CHUNK,
    FileEntry,
    HashingReader,
    Journal,
    Progress,
    Sha256,
    safe_path,
)
from modelhooks.core.errors import BadRequest, NotFound, Unavailable
from modelhooks.events.model import is_pullable_digest

__all__ = ["OciEnd", "RangeReader"]

LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
PATH, SHA, FROM = (
    "dev.modelhooks.transfer.path",
    "dev.modelhooks.transfer.sha256",
    "dev.modelhooks.transfer.source",
)
_DOCKER = {
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar": LAYER_TAR,
    "application/vnd.docker.container.image.v1+json": CONFIG,
}
MODELS = "models/"


@dataclass
class _Upload:
    """A blob upload in progress: where it continues, how much the registry has, the
    digest of that much (and its saved state, for the journal)."""

    location: str
    offset: int
    hash: Sha256
    state: str | None = None


def _tar_header(path: str, size: int) -> bytes:
    if size < 0:
        raise BadRequest(f"{path}: an OCI image layer needs the file's size in advance")
    info = tarfile.TarInfo(MODELS + path)
    info.size, info.mode, info.mtime = size, 0o644, 0
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _skip(chunks: Iterator[bytes], n: int) -> Iterator[bytes]:
    """`chunks` without their first `n` bytes (what the registry already has)."""
    for chunk in chunks:
        if n >= len(chunk):
            n -= len(chunk)
            continue
        yield chunk[n:]
        n = 0


class RangeReader(io.RawIOBase):
    """A blob read by ranged GETs of at most `CHUNK`."""

    def __init__(
        self, client: DistributionRegistry, repo: str, digest: str, size: int, start: int = 0
    ) -> None:
        self._client, self._repo, self._digest = client, repo, digest
        self._size, self._pos = size, start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), CHUNK, self._size - self._pos)
        if n <= 0:
            return 0
        data = self._client.blob_range(self._repo, self._digest, self._pos, n)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _header(headers: dict[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), "")


class OciEnd:
    def __init__(
        self,
        client: DistributionRegistry,
        repo: str,
        ref: str,
        *,
        host: str = "",
        fmt: str = "image",
        base: tuple[DistributionRegistry, str, str] | None = None,
        base_host: str = "",
        journal: Path | None = None,
    ) -> None:
        self.client, self.repo, self.ref, self.host = client, repo, ref, host
        self.fmt, self.base, self.base_host = fmt, base, base_host
        self.journal = Journal(journal)
        self.layers: dict[str, dict[str, Any]] = {}  # path → descriptor, as written
        self._previous: dict[str, dict[str, Any]] | None = None

    @property
    def uri(self) -> str:
        sep = "@" if is_pullable_digest(self.ref) else ":"
        return f"oci://{self.host}/{self.repo}{sep}{self.ref}"

    # -- source -------------------------------------------------------------------------
    def files(self) -> Iterator[FileEntry]:
        manifest, _, _ = self.client.manifest(self.repo, self.ref)
        manifest = self._platform(self.client, self.repo, manifest)
        found = False
        for layer in manifest.get("layers", []):
            notes = layer.get("annotations") or {}
            digest, size = str(layer["digest"]), int(layer["size"])
            if (
                "tar" in str(layer.get("mediaType", ""))
                and PATH not in notes
                and TITLE not in notes
            ):
                for entry in self._tar_members(digest, size):
                    found = True
                    yield entry
            elif "tar" in str(layer.get("mediaType", "")) and PATH in notes:
                found = True
                yield self._our_layer(digest, size, notes)
            elif TITLE in notes:
                found = True
                yield FileEntry(
                    safe_path(notes[TITLE], self.uri),
                    size,
                    lambda o, d=digest, s=size: io.BufferedReader(
                        RangeReader(self.client, self.repo, d, s, o), CHUNK
                    ),  # type: ignore[misc]
                    digest,
                    sha256=digest.removeprefix("sha256:"),
                )
        if not found:
            raise NotFound(
                f"{self.uri}: no model files (no titled layers, no models/ in its layers)"
            )

    def _our_layer(self, digest: str, size: int, notes: dict[str, str]) -> FileEntry:
        """A layer `transfer` wrote (one file): read in place by ranges, so a resumed copy
        starts anywhere in it."""
        head = self.client.blob_range(self.repo, digest, 0, min(size, 64 * 1024))
        with tarfile.open(fileobj=io.BytesIO(head), mode="r:") as tar:
            member = tar.next()
        if member is None or not member.isfile():
            raise BadRequest(f"{self.uri}: layer {digest} holds no file")
        start, length = member.offset_data, member.size

        def open_at(offset: int) -> IO[bytes]:
            reader = RangeReader(self.client, self.repo, digest, start + length, start + offset)
            return io.BufferedReader(reader, CHUNK)

        return FileEntry(safe_path(notes[PATH], self.uri), length, open_at, digest)

    def _tar_members(self, digest: str, size: int) -> Iterator[FileEntry]:
        stream = io.BufferedReader(RangeReader(self.client, self.repo, digest, size), CHUNK)
        with tarfile.open(fileobj=stream, mode="r|*") as tar:
            for member in tar:
                name = member.name.lstrip("./").lstrip("/")
                if not member.isfile() or not name.startswith(MODELS):
                    continue
                data = tar.extractfile(member)
                assert data is not None
                yield FileEntry(
                    safe_path(name[len(MODELS) :], self.uri),
                    member.size,
                    lambda _o, s=data: s,  # type: ignore[misc]
                    f"{digest}:{name}",
                    seekable=False,
                )

    @staticmethod
    def _platform(
        client: DistributionRegistry, repo: str, manifest: dict[str, Any]
    ) -> dict[str, Any]:
        """An image index's linux/amd64 manifest (else its first)."""
        if manifest.get("mediaType") != OCI_INDEX and "manifests" not in manifest:
            return manifest
        entries = manifest.get("manifests") or []
        if not entries:
            raise NotFound(f"{repo}: an empty image index")
        pick = next(
            (m for m in entries if (m.get("platform") or {}).get("architecture") == "amd64"),
            entries[0],
        )
        return client.manifest(repo, pick["digest"])[0]

    # -- destination --------------------------------------------------------------------
    def existing(self, path: str) -> tuple[int, str, str] | None:
        if self._previous is None:
            self._previous = self._load_previous()
        layer = self._previous.get(path)
        if layer is None:
            return None
        status = self.client.request("HEAD", f"/v2/{self.repo}/blobs/{layer['digest']}")[0]
        if status != 200:
            return None
        self.layers[path] = layer  # kept unless the file is written again
        notes = layer["annotations"]
        return int(notes.get("dev.modelhooks.transfer.size", -1)), notes[SHA], notes.get(FROM, "")

    def _load_previous(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        try:
            manifest, _, _ = self.client.manifest(self.repo, self.ref)
            layers = manifest.get("layers", [])
        except NotFound:
            layers = []
        layers = [*layers, *(layer for _, layer in self.journal.items("layer:"))]
        for layer in layers:
            notes = layer.get("annotations") or {}
            if PATH in notes and SHA in notes:
                found[notes[PATH]] = layer
        return found

    def write(self, entry: FileEntry, reader: HashingReader, progress: Progress) -> str:
        path = safe_path(entry.path, self.uri)
        upload = self._resume(path, entry, reader, progress)
        if self.fmt == "image":
            media, chunks = LAYER_TAR, self._tar_chunks(path, entry, reader, progress)
        else:
            media, chunks = "application/octet-stream", self._raw_chunks(reader, progress)
        header = len(_tar_header(path, entry.size)) if self.fmt == "image" else 0
        if upload is not None:  # resumed: the file from where it stopped, its header sent
            chunks = _skip(chunks, header)
        else:
            upload = self._start()

        def checkpoint(up: _Upload) -> None:
            data_offset = up.offset - header
            if up.state is None or data_offset != reader.count or data_offset > entry.size:
                return
            if not (entry.fingerprint and entry.seekable and reader.hash.state()):
                return
            self.journal.put(
                f"partial:{path}",
                {"source": entry.fingerprint, "fmt": self.fmt, "location": up.location,
                 "offset": up.offset, "layer_state": up.state, "data_offset": data_offset,
                 "file_state": reader.hash.state()},
            )  # fmt: skip

        digest, size = self._send(upload, chunks, checkpoint)
        sha = reader.hash.hexdigest()
        notes = {
            PATH: path,
            SHA: sha,
            FROM: entry.fingerprint,
            "dev.modelhooks.transfer.size": str(reader.count),
        }
        if self.fmt == "artifact":
            notes[TITLE] = path
        self.layers[path] = {
            "mediaType": media,
            "digest": digest,
            "size": size,
            "annotations": notes,
        }
        self.journal.drop(f"partial:{path}")
        self.journal.put(f"layer:{path}", self.layers[path])
        return sha

    def _resume(
        self, path: str, entry: FileEntry, reader: HashingReader, progress: Progress
    ) -> _Upload | None:
        """The interrupted upload of this file from the same source revision, where the
        registry still has what the journal says it received; the reader moved past it."""
        saved = self.journal.get(f"partial:{path}")
        if not saved or saved.get("source") != entry.fingerprint or saved.get("fmt") != self.fmt:
            return None
        status, headers, _ = self.client.request("GET", self._url(saved["location"]))
        received = _header(headers, "Range").rpartition("-")[2]
        if (
            status != 204
            or not (received.isascii() and received.isdigit())
            or int(received) + 1 != saved["offset"]
        ):
            self.journal.drop(f"partial:{path}")  # gone (expired, garbage-collected): restart
            return None
        reader.resume(saved["data_offset"], saved["file_state"])
        progress.advance(saved["data_offset"])
        location = _header(headers, "Location") or saved["location"]
        return _Upload(location, saved["offset"], Sha256(saved["layer_state"]))

    @staticmethod
    def _raw_chunks(reader: HashingReader, progress: Progress) -> Iterator[bytes]:
        while data := reader.read_exact(CHUNK):
            progress.advance(len(data))
            yield data

    @staticmethod
    def _tar_chunks(
        path: str, entry: FileEntry, reader: HashingReader, progress: Progress
    ) -> Iterator[bytes]:
        """The layer of one file: its tar header, its bytes (from where `reader` stands),
        the padding and the end of the archive."""
        yield _tar_header(path, entry.size)
        sent = reader.count
        while (
            data := reader.read_exact(min(CHUNK, entry.size - sent)) if sent < entry.size else b""
        ):
            sent += len(data)
            progress.advance(len(data))
            yield data
        if sent != entry.size:
            raise Unavailable(f"{path}: the source ended after {sent} of {entry.size} bytes")
        yield b"\0" * ((-entry.size) % 512) + b"\0" * 1024

    def _start(self) -> _Upload:
        status, headers, body = self.client.request("POST", f"/v2/{self.repo}/blobs/uploads/")
        self.client._check(status, body, "blob upload")
        return _Upload(_header(headers, "Location"), 0, Sha256())

    def _upload(self, chunks: Iterator[bytes]) -> tuple[str, int]:
        """Stream `chunks` as one new blob; (digest, size)."""
        return self._send(self._start(), chunks, None)

    def _send(
        self,
        up: _Upload,
        chunks: Iterator[bytes],
        checkpoint: Callable[[_Upload], None] | None,
    ) -> tuple[str, int]:
        """PATCH `chunks` (in pieces of at least `CHUNK`) from `up.offset`, a checkpoint after
        each, then PUT with the digest; (digest, size)."""
        pending = b""
        for chunk in chunks:
            pending += chunk
            if len(pending) < CHUNK:
                continue
            self._patch_pending(up, pending)
            pending = b""
            if checkpoint is not None:
                up.state = up.hash.state()
                checkpoint(up)
        if pending:
            self._patch_pending(up, pending)
        name = "sha256:" + up.hash.hexdigest()
        sep = "&" if "?" in up.location else "?"
        status, _, body = self.client.request("PUT", f"{self._url(up.location)}{sep}digest={name}")
        self.client._check(status, body, "blob upload")
        return name, up.offset

    def _patch_pending(self, up: _Upload, data: bytes) -> None:
        up.location = self._patch(up.location, data, up.offset)
        up.hash.update(data)
        up.offset += len(data)

    def _url(self, location: str) -> str:
        return location if location.startswith("http") else f"{self.client.base_url}{location}"

    def _patch(self, location: str, data: bytes, offset: int) -> str:
        status, headers, body = self.client.request(
            "PATCH",
            self._url(location),
            data,
            Content_Type="application/octet-stream",
            Content_Range=f"{offset}-{offset + len(data) - 1}",
        )
        self.client._check(status, body, "blob upload")
        return _header(headers, "Location") or location

    def finish(self, order: list[str]) -> str:
        """Push the manifest (layers in `order`) under the tag; the model's URI by digest."""
        layers = [self.layers[p] for p in order]
        if self.fmt == "artifact":
            config = {**EMPTY, "digest": self.client.push_blob(self.repo, b"{}")}
            manifest: dict[str, Any] = {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "artifactType": "application/vnd.modelhooks.model.v1",
                "config": config,
                "layers": layers,
            }
        else:
            manifest = self._on_base(layers)
        digest = self.client.push_manifest(self.repo, self.ref, manifest)
        self.journal.clear()
        return f"oci://{self.host}/{self.repo}@{digest}"

    def _on_base(self, layers: list[dict[str, Any]]) -> dict[str, Any]:
        base_layers: list[dict[str, Any]] = []
        config: dict[str, Any] = {
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": []},
            "config": {},
        }
        if self.base is not None:
            client, repo, ref = self.base
            manifest = self._platform(client, repo, client.manifest(repo, ref)[0])
            cdesc = manifest["config"]
            config = json.loads(client.blob_range(repo, cdesc["digest"], 0, int(cdesc["size"])))
            for layer in manifest.get("layers", []):
                self._copy_blob(client, repo, layer)
                media = _DOCKER.get(layer["mediaType"], layer["mediaType"])
                base_layers.append(
                    {"mediaType": media, "digest": layer["digest"], "size": layer["size"]}
                )
        config.setdefault("rootfs", {"type": "layers", "diff_ids": []})
        config["rootfs"]["diff_ids"] = [
            *config["rootfs"].get("diff_ids", []),
            *(layer["digest"] for layer in layers),
        ]
        config.setdefault("history", [])
        config["history"] = [
            *config["history"],
            *({"created_by": f"modelhooks transfer: {x['annotations'][PATH]}"} for x in layers),
        ]
        data = json.dumps(config, separators=(",", ":")).encode()
        cdigest = self.client.push_blob(self.repo, data)
        return {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": CONFIG, "digest": cdigest, "size": len(data)},
            "layers": [*base_layers, *layers],
        }

    def _copy_blob(self, client: DistributionRegistry, repo: str, layer: dict[str, Any]) -> None:
        digest, size = str(layer["digest"]), int(layer["size"])
        if self.client.request("HEAD", f"/v2/{self.repo}/blobs/{digest}")[0] == 200:
            return
        if client.base_url == self.client.base_url:  # a cross-repository mount: no bytes move
            status, _, _ = self.client.request(
                "POST", f"/v2/{self.repo}/blobs/uploads/?mount={digest}&from={repo}"
            )
            if status == 201:
                return
        reader = RangeReader(client, repo, digest, size)

        def chunks() -> Iterator[bytes]:
            while data := reader.read(CHUNK):
                yield data

        got, _ = self._upload(chunks())
        if got != digest:
            raise Unavailable(f"base image layer {digest} arrived as {got}")
