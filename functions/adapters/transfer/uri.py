"""The `uri` source: an http(s) URL of one file or of a zip / tar(.gz|.bz2|.xz) archive,
streamed through the guarded opener (loopback, link-local, private and metadata addresses
refused unless allowed). Archives are unpacked on the fly: tar as a stream, zip through
HTTP range requests (its directory is at the end). Refused: absolute and `..` member
paths, links leaving the model, and decompression bombs (a member or the whole unpacking
larger than `ratio` times what was downloaded, past the first `slack` bytes). With
`sha256`, the bytes served must match it or the copy fails before anything is
registered (zip: checked in a first streaming pass, before unpacking)."""

from __future__ import annotations

import hashlib
import io
import logging
import posixpath
import tarfile
import zipfile
from collections.abc import Iterator
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from modelhooks.adapters.transfer.files import CHUNK, FileEntry, safe_path
from modelhooks.core.errors import BadRequest, NotFound, Unavailable

__all__ = ["UriSource"]

_log = logging.getLogger("modelhooks.transfer")
_TAR = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")


class _Counting(io.RawIOBase):
    """The HTTP body, counted and hashed as it passes."""

    def __init__(self, body: Any) -> None:
        self._body, self.count, self.hash = body, 0, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._body.read(len(buffer))
        buffer[: len(data)] = data
        self.count += len(data)
        self.hash.update(data)
        return len(data)


class _Ranges(io.RawIOBase):
    """A seekable file over HTTP range requests (for zip's central directory)."""

    def __init__(self, source: UriSource, size: int) -> None:
        self._source, self._size, self._pos = source, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        if self._pos >= self._size:
            return 0
        n = min(len(buffer), self._size - self._pos)
        with self._source.get(self._pos, n) as resp:
            data = resp.read(n)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


class _Bounded(io.RawIOBase):
    """A member's stream that refuses to produce more than `limit` bytes (a bomb)."""

    def __init__(self, stream: IO[bytes], limit: int, what: str) -> None:
        self._stream, self._left, self._what = stream, limit, what

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._stream.read(len(buffer))
        self._left -= len(data)
        if self._left < 0:
            raise BadRequest(f"{self._what}: unpacks larger than it claims (a bomb?)")
        buffer[: len(data)] = data
        return len(data)


class UriSource:
    def __init__(
        self,
        uri: str,
        *,
        allow_local: bool = False,
        allowed_hosts: frozenset[str] = frozenset(),
        sha256: str = "",
        ratio: int = 200,
        slack: int = 64 * 1024 * 1024,
    ) -> None:
        from modelhooks.adapters.net import guarded_opener

        try:
            parts = urlsplit(uri)
            _ = parts.port  # a port that is no number, or out of range: ValueError
        except ValueError as exc:  # a bracketed host that is no IP address, …
            raise BadRequest(f"source uri {uri!r} is not a valid URL: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadRequest(f"source uri {uri!r}: only http:// and https:// URLs are supported")
        # what http.client refuses when the request is made (InvalidURL, UnicodeEncodeError:
        # a 500): spaces, control and non-ASCII characters, and credentials it would not send
        if not uri.isascii() or not uri.isprintable() or " " in uri or "@" in parts.netloc:
            raise BadRequest(
                f"source uri {uri!r}: percent-encode spaces, control and non-ASCII characters; "
                "credentials in the URL are not sent"
            )
        self.uri, self.sha256 = uri, sha256.lower().removeprefix("sha256:")
        self.ratio, self.slack = ratio, slack
        self._open = guarded_opener(allow_local=allow_local, allowed_hosts=allowed_hosts).open
        self.name = posixpath.basename(unquote(parts.path)) or "model"

    def get(self, start: int = 0, length: int | None = None) -> Any:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.uri)
        if start or length is not None:
            end = "" if length is None else str(start + length - 1)
            req.add_header("Range", f"bytes={start}-{end}")
        try:
            return self._open(req, timeout=60)
        except urllib.error.HTTPError as exc:
            cls = NotFound if exc.code == 404 else Unavailable if exc.code >= 500 else BadRequest
            raise cls(f"{self.uri}: HTTP {exc.code}", status=exc.code) from None
        except OSError as exc:
            raise Unavailable(f"{self.uri} did not answer", reason=str(exc)) from None

    def files(self) -> Iterator[FileEntry]:
        lower = self.name.lower()
        if lower.endswith(".zip"):
            yield from self._zip()
        elif lower.endswith(_TAR):
            yield from self._tar()
        else:
            yield from self._single()

    def _check(self, counted: _Counting) -> None:
        if self.sha256 and counted.hash.hexdigest() != self.sha256:
            raise BadRequest(
                f"{self.uri}: checksum mismatch: expected sha256 {self.sha256}, "
                f"got {counted.hash.hexdigest()}",
                field="source_uri_sha256",
            )

    def _single(self) -> Iterator[FileEntry]:
        resp = self.get()
        size = int(resp.headers.get("Content-Length") or -1)
        counted = _Counting(resp)
        reader = io.BufferedReader(counted, CHUNK)
        yield FileEntry(self.name, size, lambda _o: reader, self.uri, seekable=False)
        resp.close()
        self._check(counted)

    def _tar(self) -> Iterator[FileEntry]:
        resp = self.get()
        counted = _Counting(resp)
        produced = 0
        with tarfile.open(fileobj=io.BufferedReader(counted, CHUNK), mode="r|*") as tar:
            for member in tar:
                name = safe_path(member.name, self.uri)
                if member.issym() or member.islnk():
                    self._link(name, member.linkname, member.issym())
                    continue
                if not member.isfile():
                    continue
                produced += member.size
                if produced > self.slack and produced > self.ratio * max(counted.count, 1):
                    raise BadRequest(
                        f"{self.uri}: unpacks {self.ratio}x larger than it is (a bomb?)"
                    )
                stream = tar.extractfile(member)
                assert stream is not None
                yield FileEntry(name, member.size, lambda _o, s=stream: s, seekable=False)  # type: ignore[misc]
        resp.close()
        self._check(counted)

    def _link(self, name: str, target: str, symbolic: bool) -> None:
        base = posixpath.dirname(name) if symbolic else ""
        resolved = posixpath.normpath(posixpath.join(base, target))
        if target.startswith("/") or resolved == ".." or resolved.startswith("../"):
            raise BadRequest(f"{self.uri}: link {name!r} -> {target!r} leaves the model")
        _log.warning("%s: link %s -> %s inside the model skipped", self.uri, name, target)

    def _zip(self) -> Iterator[FileEntry]:
        head = self.get(0, 1)
        total = head.headers.get("Content-Range", "").rpartition("/")[2]
        head.close()
        if head.status != 206 or not (total.isascii() and total.isdigit()):
            raise BadRequest(f"{self.uri}: the server does not serve ranges: a zip cannot stream")
        size = int(total)
        if self.sha256:  # one streaming pass first: nothing unpacks from unchecked bytes
            counted = _Counting(self.get())
            while counted.read(CHUNK):
                pass
            self._check(counted)
        archive = zipfile.ZipFile(io.BufferedReader(_Ranges(self, size), CHUNK))
        for info in archive.infolist():
            name = safe_path(info.filename, self.uri)
            mode = (info.external_attr >> 16) & 0o170000
            if mode == 0o120000:  # a symbolic link: its target is the content
                self._link(name, archive.read(info).decode(errors="replace"), True)
                continue
            if info.is_dir():
                continue
            if info.file_size > self.slack and info.file_size > self.ratio * max(
                info.compress_size, 1
            ):
                raise BadRequest(f"{self.uri}: {name} unpacks {self.ratio}x larger (a bomb?)")

            def open_member(_offset: int, info: zipfile.ZipInfo = info) -> IO[bytes]:
                raw = _Bounded(archive.open(info), info.file_size, f"{self.uri}: {info.filename}")
                return io.BufferedReader(raw, CHUNK)

            yield FileEntry(name, info.file_size, open_member, f"crc32:{info.CRC}", seekable=False)
