"""Object-store and local sources and destinations of a transfer: S3 (MinIO), GCS and a
local / PVC directory, each streaming in `CHUNK`-sized pieces.

Resume: every written object carries its sha256 and the source revision it came from
(S3 user metadata, or an object tag once a multipart upload completes; GCS metadata), so a re-run skips files already copied from the same
source revision; S3 files larger than one part go up as multipart uploads, and a re-run
continues the open upload (listing its parts), sending only the parts whose MD5 (their
ETag) differs from the source's bytes. GCS files go up as resumable uploads, and a re-run
continues the session the journal recorded, from what GCS says it committed.

Claim: an S3 or GCS destination belongs to the first source copied into it. Before
anything is registered or copied, a run creates `<key>.transfer-claim` beside the
destination's prefix (outside it: no reader of the model sees it) with a conditional write
(S3 `If-None-Match: *`, GCS `ifGenerationMatch=0`), naming its source and run. A run of
the same source finds its own claim and goes on (a redelivery, a crash and a retry resume
as before); a run of another source finds it and is refused (Conflict naming the
destination and the claim), whether the other run is copying, crashed or done: two
sources' files never mix in one destination, nor does each mark its artifact LIVE over
the other's. Nothing deletes a claim but a person handing the destination to another
source (the refusal says how), and the run that created it when it failed for good
before its source showed a file (a source misspelled, empty, not there or denied:
nothing was copied, and the source meant takes the destination on the next run); a
transient failure keeps it, as does one after the first file (its run of the same source
resumes).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from modelhooks.adapters.transfer.files import (
    CHUNK,
    FileEntry,
    HashingReader,
    Journal,
    Progress,
    safe_path,
)
from modelhooks.core.errors import Conflict, NotFound, Unavailable

__all__ = ["CLAIM", "GcsEnd", "LocalEnd", "S3End", "claim", "release"]

_SHA, _FROM = "sha256", "transfer-source"
CLAIM = ".transfer-claim"  # the claim object's suffix: `<destination key>.transfer-claim`


def _rel(key: str, prefix: str) -> str:
    if not prefix or key == prefix:
        return posixpath.basename(key)
    return safe_path(key[len(prefix.rstrip("/")) + 1 :], prefix)


def _key(prefix: str, path: str) -> str:
    return f"{prefix.rstrip('/')}/{path}" if prefix else path


def claim(store: Any, scheme: str, bucket: str, prefix: str, source: str, run: str) -> bool:
    """The destination `prefix` claimed for `source` (see the module): created (True), or
    found naming `source` (False); Conflict when it names another source. `run` says which
    run claimed it (the delivery, or the Job's host and pid), for the person reading a
    refusal."""
    key = f"{prefix}{CLAIM}"
    where, destination = f"{scheme}://{bucket}/{key}", f"{scheme}://{bucket}/{prefix}"
    under = destination if not prefix else f"{destination}/"  # the bucket's root: s3://b/
    since = datetime.now(UTC).isoformat(timespec="seconds")
    mine = json.dumps({"source": source, "run": run, "since": since}).encode()
    for _ in range(3):  # a claim deleted between the write and the read: write it again
        try:
            store.put(bucket, key, mine, if_absent=True)
            return True
        except Conflict:
            pass
        try:
            held = store.read_range(bucket, key, 0, 1 << 16)
        except NotFound:
            continue
        try:
            found = json.loads(held)
        except ValueError:
            found = None
        if not isinstance(found, dict) or not isinstance(found.get("source"), str):
            found = {"source": "(unreadable: no transfer wrote it)"}  # refuses every source
        elif found["source"] == source:
            return False
        raise Conflict(
            f"{destination}: the destination is claimed by another source ({found['source']},"
            f" run {found.get('run', '?')}, claimed {found.get('since', '?')}; {where}): one "
            f"destination takes one source, so {source} is not copied there. Choose another "
            f"destination, or, once no transfer of {found['source']} runs and its copy is "
            f"not wanted, delete {where} and the objects under {under}",
            field="destination",
            destination=destination,
            claim=where,
            claimed_by=str(found["source"]),
        )
    raise Unavailable(f"{where}: the claim changed three times while read; try again")


def release(store: Any, bucket: str, prefix: str) -> None:
    """The claim of `prefix` deleted: by the run that created it, when it failed for good
    before its source showed a file (nothing of it was copied: a source misspelled, empty,
    not there or denied), so the destination is free for the source meant (see the module)."""
    store.delete(bucket, f"{prefix}{CLAIM}")


class S3End:
    """`s3://bucket/key`: a source (the object `key`, or every object under `key/`) or a
    destination (files under `key/`)."""

    def __init__(self, store: Any, bucket: str, key: str, journal: Path | None = None) -> None:
        self.store, self.bucket, self.prefix = store, bucket, key.strip("/")
        self.journal = Journal(journal)

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def claim(self, source: str, run: str) -> bool:
        return claim(self.store, "s3", self.bucket, self.prefix, source, run)

    def release(self) -> None:
        release(self.store, self.bucket, self.prefix)

    def _err(self, exc: Exception, key: str = "") -> Exception:
        from modelhooks.adapters.object_store.s3 import s3_error

        return s3_error(exc, self.bucket, key)

    def files(self) -> Iterator[FileEntry]:
        client = self.store.client
        found = False
        for prefix in (f"{self.prefix}/" if self.prefix else "", self.prefix):
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            try:
                for page in pages:
                    for obj in page.get("Contents", []):
                        key = obj["Key"]
                        if prefix == self.prefix and key != self.prefix:
                            continue  # the single-object case is the exact key only
                        if key.endswith("/"):
                            continue
                        found = True
                        yield FileEntry(
                            _rel(key, self.prefix if prefix != self.prefix else ""),
                            int(obj["Size"]),
                            lambda offset, k=key: self._open(k, offset),  # type: ignore[misc]
                            f"s3:{obj['ETag'].strip(chr(34))}",
                        )
            except Exception as exc:
                if getattr(exc, "response", None) is None:
                    raise
                raise self._err(exc, prefix) from None
            if found:
                return
        raise NotFound(f"{self.uri}: no such object or prefix")

    def _open(self, key: str, offset: int) -> IO[bytes]:
        kwargs = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            return self.store.client.get_object(Bucket=self.bucket, Key=key, **kwargs)["Body"]  # type: ignore[no-any-return]
        except Exception as exc:
            raise self._err(exc, key) from None

    def existing(self, path: str) -> tuple[int, str, str] | None:
        """(size, sha256, source revision) of a file written before, or None."""
        key = _key(self.prefix, path)
        try:
            head = self.store.client.head_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if getattr(exc, "response", {}).get("Error", {}).get("Code") in (
                "404",
                "NoSuchKey",
                "NotFound",
            ):
                return None
            raise self._err(exc, key) from None
        meta = head.get("Metadata", {})
        sha = meta.get(_SHA, "")
        if not sha:  # a multipart upload's: tagged once complete
            tags = self.store.client.get_object_tagging(Bucket=self.bucket, Key=key)["TagSet"]
            sha = next((t["Value"] for t in tags if t["Key"] == _SHA), "")
        return int(head["ContentLength"]), sha, meta.get(_FROM, "")

    def write(
        self, entry: FileEntry, reader: HashingReader, progress: Progress, part: int = CHUNK
    ) -> str:
        key = _key(self.prefix, entry.path)
        client = self.store.client
        meta = {_FROM: entry.fingerprint}
        try:
            if entry.size >= 0 and entry.size <= part:
                data = reader.read_exact(part + 1)
                meta[_SHA] = reader.hash.hexdigest()
                client.put_object(Bucket=self.bucket, Key=key, Body=data, Metadata=meta)
                progress.advance(len(data))
                return meta[_SHA]
            return self._multipart(entry, key, reader, meta, progress, part)
        except Exception as exc:
            if getattr(exc, "response", None) is None:
                raise
            raise self._err(exc, key) from None

    def _multipart(
        self,
        entry: FileEntry,
        key: str,
        reader: HashingReader,
        meta: dict[str, str],
        progress: Progress,
        part: int,
    ) -> str:
        client = self.store.client
        parts: list[dict[str, Any]] = []
        upload_id, done = self._journaled(entry, key, reader, parts, part)
        if upload_id:
            progress.advance(reader.count)  # what the journal says is there: not read again
        else:
            upload_id, done = self._open_upload(key)
        if not upload_id:
            upload_id = client.create_multipart_upload(
                Bucket=self.bucket, Key=key, Metadata={**meta, "transfer-upload": "1"}
            )["UploadId"]
        number = len(parts) + 1
        while True:
            data = reader.read_exact(part)
            if not data and number > 1:
                break
            have = done.get(number)
            if have and have[1] == len(data) and have[0] == hashlib.md5(data).hexdigest():
                parts.append({"PartNumber": number, "ETag": have[0]})  # resumed: not sent again
            else:
                etag = client.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data
                )["ETag"]
                parts.append({"PartNumber": number, "ETag": etag})
            progress.advance(len(data))
            number += 1
            state = reader.hash.state()
            if state and entry.fingerprint and entry.seekable:
                self.journal.put(
                    f"upload:{key}",
                    {"source": entry.fingerprint, "upload_id": upload_id, "part": part,
                     "parts": parts, "file_state": state, "offset": reader.count},
                )  # fmt: skip
            if len(data) < part:
                break
        sha = reader.hash.hexdigest()
        client.complete_multipart_upload(
            Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
        )
        self.journal.drop(f"upload:{key}")
        # the sha256 is known only now: a tag (rewriting the metadata would copy the object)
        client.put_object_tagging(
            Bucket=self.bucket, Key=key, Tagging={"TagSet": [{"Key": _SHA, "Value": sha}]}
        )
        return sha

    def _journaled(
        self,
        entry: FileEntry,
        key: str,
        reader: HashingReader,
        parts: list[dict[str, Any]],
        part: int,
    ) -> tuple[str, dict[int, tuple[str, int]]]:
        """The upload the journal recorded for this file from the same source revision, when
        S3 still holds every part it lists: its id, the parts kept, the reader moved past
        them (their bytes are neither read nor sent again)."""
        saved = self.journal.get(f"upload:{key}")
        if not saved or saved.get("source") != entry.fingerprint or saved.get("part") != part:
            return "", {}
        try:
            listed = {
                int(p["PartNumber"]): p["ETag"]
                for page in self.store.client.get_paginator("list_parts").paginate(
                    Bucket=self.bucket, Key=key, UploadId=saved["upload_id"]
                )
                for p in page.get("Parts", [])
            }
        except Exception as exc:
            if getattr(exc, "response", None) is None:
                raise
            listed = {}  # the upload was aborted or expired: start again
        if any(listed.get(p["PartNumber"]) != p["ETag"] for p in saved["parts"]):
            self.journal.drop(f"upload:{key}")
            return "", {}
        reader.resume(saved["offset"], saved["file_state"])
        parts.extend(saved["parts"])
        return saved["upload_id"], {}

    def _open_upload(self, key: str) -> tuple[str, dict[int, tuple[str, int]]]:
        """The newest unfinished multipart upload of `key`: its id and {part number: (etag,
        size)}; ("", {}) when none. Its parts are trusted only where their ETag (the part's
        MD5) matches the source's bytes, read again anyway to hash the file."""
        client = self.store.client
        uploads = [
            u
            for u in client.list_multipart_uploads(Bucket=self.bucket, Prefix=key).get(
                "Uploads", []
            )
            if u["Key"] == key
        ]
        if not uploads:
            return "", {}
        upload = max(uploads, key=lambda u: u["Initiated"])
        parts: dict[int, tuple[str, int]] = {}
        for page in client.get_paginator("list_parts").paginate(
            Bucket=self.bucket, Key=key, UploadId=upload["UploadId"]
        ):
            for p in page.get("Parts", []):
                parts[int(p["PartNumber"])] = (p["ETag"].strip('"'), int(p["Size"]))
        return upload["UploadId"], parts


class GcsEnd:
    """`gs://bucket/key`, as S3End (GCS metadata carries the sha256 and source revision).

    A file goes up as one resumable upload (the GCS JSON API's), a `CHUNK` per PUT; after
    each piece the server confirms, the journal keeps the session URI, the bytes committed
    and the sha256 state there. A re-run asks the session how much it committed (a PUT
    with `Content-Range: bytes */*`: 308 and `Range`) and goes on from there, without
    reading again what was sent; a session that expired, is unknown or was finalized
    (404/410, or any other answer) starts the file over."""

    def __init__(self, store: Any, bucket: str, key: str, journal: Path | None = None) -> None:
        self.store, self.bucket, self.prefix = store, bucket, key.strip("/")
        self.journal = Journal(journal)

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}"

    def claim(self, source: str, run: str) -> bool:
        return claim(self.store, "gs", self.bucket, self.prefix, source, run)

    def release(self) -> None:
        release(self.store, self.bucket, self.prefix)

    def files(self) -> Iterator[FileEntry]:
        bucket = self.store.client.bucket(self.bucket)
        for prefix in (f"{self.prefix}/" if self.prefix else "", self.prefix):
            blobs = [
                b
                for b in self.store.client.list_blobs(self.bucket, prefix=prefix)
                if not b.name.endswith("/") and (prefix != self.prefix or b.name == self.prefix)
            ]
            for blob in blobs:
                yield FileEntry(
                    _rel(blob.name, self.prefix if prefix != self.prefix else ""),
                    int(blob.size),
                    lambda offset, n=blob.name, g=blob.generation: self._open(bucket, n, g, offset),  # type: ignore[misc]
                    f"gcs:{blob.generation}",
                )
            if blobs:
                return
        raise NotFound(f"{self.uri}: no such object or prefix")

    @staticmethod
    def _open(bucket: Any, name: str, generation: int, offset: int) -> IO[bytes]:
        reader = bucket.blob(name, generation=generation).open("rb", chunk_size=CHUNK)
        if offset:
            reader.seek(offset)
        return reader  # type: ignore[no-any-return]

    def existing(self, path: str) -> tuple[int, str, str] | None:
        blob = self.store.client.bucket(self.bucket).get_blob(_key(self.prefix, path))
        if blob is None:
            return None
        meta = blob.metadata or {}
        return int(blob.size), meta.get(_SHA, ""), meta.get(_FROM, "")

    def write(self, entry: FileEntry, reader: HashingReader, progress: Progress) -> str:
        key = _key(self.prefix, entry.path)
        blob = self.store.client.bucket(self.bucket).blob(key)
        session = self._journaled(entry, key, reader)
        if session:
            progress.advance(reader.count)  # committed before: neither read nor sent again
        else:
            blob.metadata = {_FROM: entry.fingerprint}
            try:
                session = blob.create_resumable_upload_session(
                    client=self.store.client, checksum=None
                )
            except Exception as exc:
                raise self._err(exc, key) from None
        while True:
            start = reader.count
            data = reader.read_exact(CHUNK)
            last = len(data) < CHUNK or 0 <= entry.size <= reader.count
            self._put(session, key, start, data, last)
            progress.advance(len(data))
            if last:
                break
            state = reader.hash.state()
            if state and entry.fingerprint and entry.seekable:
                self.journal.put(
                    f"upload:{key}",
                    {"source": entry.fingerprint, "session": session,
                     "offset": reader.count, "file_state": state},
                )  # fmt: skip
        self.journal.drop(f"upload:{key}")
        sha = reader.hash.hexdigest()
        blob.metadata = {_FROM: entry.fingerprint, _SHA: sha}
        try:
            blob.patch()  # the sha256 is known only now
        except Exception as exc:
            raise self._err(exc, key) from None
        return sha

    def _journaled(self, entry: FileEntry, key: str, reader: HashingReader) -> str:
        """The session the journal recorded for this file from the same source revision,
        when it still holds what the journal says it committed: its URI, the reader moved
        past those bytes (those committed since the last entry are read to hash them)."""
        saved = self.journal.get(f"upload:{key}")
        if not saved or saved.get("source") != entry.fingerprint or not entry.seekable:
            return ""
        status, committed = self._request(saved["session"], key, b"", "bytes */*")
        if status != 308 or committed < saved["offset"]:  # expired, unknown, finalized
            self.journal.drop(f"upload:{key}")
            return ""
        reader.resume(saved["offset"], saved["file_state"])
        while reader.count < committed:
            if not reader.read_exact(min(CHUNK, committed - reader.count)):
                raise Conflict(f"{self.uri}/{entry.path}: the session holds more than the file")
        return str(saved["session"])

    def _put(self, session: str, key: str, start: int, data: bytes, last: bool) -> None:
        """`data` at `start` of the upload (the last piece: the upload's end), sent again
        from where the server stopped when it committed only part of it."""
        end = start + len(data)
        sent = start
        while True:
            if sent < end:
                span = f"bytes {sent}-{end - 1}/{end if last else '*'}"
            else:
                span = f"bytes */{end}"  # an empty last piece: the total ends the upload
            status, committed = self._request(session, key, data[sent - start :], span)
            if status in (200, 201):
                if not last:
                    raise Conflict(f"gs://{self.bucket}/{key}: upload finalized before its end")
                return
            if status != 308:
                raise Unavailable(
                    f"gs://{self.bucket}/{key}: the resumable upload session is gone "
                    f"({status}); a re-run starts the file over",
                    bucket=self.bucket,
                    key=key,
                )
            if committed <= sent or committed > end:  # no progress, or more than sent
                raise Unavailable(
                    f"gs://{self.bucket}/{key}: the resumable upload committed {committed} "
                    f"bytes after sending {sent}..{end}",
                    bucket=self.bucket,
                    key=key,
                )
            sent = committed
            if sent == end and not last:
                return

    def _request(self, session: str, key: str, body: bytes, span: str) -> tuple[int, int]:
        """PUT `body` to the session with `Content-Range: span`: (status, bytes committed);
        200/201 (finalized), 308 (incomplete) and 404/410 (expired, unknown) are answers,
        any other status an error."""
        from google.api_core.exceptions import from_http_response

        try:
            response = self.store.client._http.put(
                session, data=body, headers={"Content-Range": span}, timeout=(10, 300)
            )
        except Exception as exc:
            raise self._err(exc, key) from None
        if response.status_code not in (200, 201, 308, 404, 410):
            raise self._err(from_http_response(response), key)  # type: ignore[no-untyped-call]
        ranged = response.headers.get("Range", "").rpartition("-")[2]
        return response.status_code, int(ranged) + 1 if ranged.isascii() and ranged.isdigit() else 0

    def _err(self, exc: Exception, key: str) -> Exception:
        from modelhooks.adapters.object_store.gcs import gcs_error

        return gcs_error(exc, self.bucket, key)


class LocalEnd:
    """A local or PVC directory (a single file as a source)."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    @property
    def uri(self) -> str:
        return str(self.root)

    def files(self) -> Iterator[FileEntry]:
        if self.root.is_file():
            yield self._entry(self.root, self.root.name)
            return
        if not self.root.is_dir():
            raise NotFound(f"{self.root}: no such file or directory")
        for dirpath, dirs, names in os.walk(self.root):
            dirs.sort()
            for name in sorted(names):
                path = Path(dirpath) / name
                if path.is_symlink() or not path.is_file():
                    continue
                yield self._entry(path, path.relative_to(self.root).as_posix())

    @staticmethod
    def _entry(path: Path, rel: str) -> FileEntry:
        st = path.stat()

        def open_at(offset: int) -> IO[bytes]:
            f = path.open("rb")
            f.seek(offset)
            return f

        return FileEntry(rel, st.st_size, open_at, f"local:{st.st_size}:{st.st_mtime_ns}")

    def existing(self, path: str) -> tuple[int, str, str] | None:
        target = self.root / path
        return (target.stat().st_size, "", "") if target.is_file() else None

    def write(self, entry: FileEntry, reader: HashingReader, progress: Progress) -> str:
        target = self.root / safe_path(entry.path, str(self.root))
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        with partial.open("wb") as out:
            while data := reader.read(CHUNK):
                out.write(data)
                progress.advance(len(data))
        os.replace(partial, target)
        return reader.hash.hexdigest()
