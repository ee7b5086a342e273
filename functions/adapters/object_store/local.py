"""`LocalObjectStore`: buckets are directories under a root (the embedded default).

Real-shaped GCS and S3 notifications (bucket + object name) work against local files: a
bucket `models` is the directory `<root>/models`. A file's generation is its modification
time in nanoseconds and size, which changes whenever the file is rewritten. No old
revisions are kept: `list_versions` is `list`, and `delete_many` removes a file only while
its generation is still the one listed.

Only regular files are objects. Names taken from events never leave the root: a symbolic
link anywhere on the way (bucket, model or version directory, or the file itself), a FIFO,
a socket or a device is refused with BadRequest, so nothing outside the root is read or
written and nothing blocks. `allow_symlinks=True` (the `sign`/`verify` commands' explicit
option for a local directory) follows links to regular files.
"""

from __future__ import annotations

import contextlib
import errno
import io
import mmap
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from modelhooks.core.errors import BadRequest, Conflict, NotFound, Unavailable
from modelhooks.core.records import ObjectInfo

__all__ = ["LocalObjectStore"]

# A put writes an unnamed file in the object's directory (O_TMPFILE) and links it into place
# once written: a process killed while writing leaves nothing there (a named leftover is an
# extra file to upstream `model_signing verify` for ever). A replacing put links it under
# `.<name>.<random><_WRITING>` first and renames that into place; where O_TMPFILE is not
# supported, or its file cannot be linked through /proc, the data is written under that
# name. Such a file is never an object, and no listing shows it (a concurrent delivery's
# content digest or signature listing would otherwise name a file that is gone a moment
# later).
_WRITING = ".modelhooks-writing"
_ALIGNED = 1 << 20  # reads this long or longer go through a page-aligned buffer (read_chunks)
_spare = threading.local()  # .buffer: the thread's page-aligned buffer, between its reads
# False once an unnamed file could not be linked into place here (no /proc mounted: a
# chroot, a minimal sandbox; linkat(2) through it refused): every put then names its file
_unnamed_files = True


class _Unlinkable(Exception):
    """An unnamed file was written but cannot be linked into place (nothing was placed)."""


def _writing(directory: int, name: str) -> tuple[int, str | None]:
    """A file to write an object's data to in the open `directory`: unnamed, or where the
    file system has no O_TMPFILE, named `.<name>.<random><_WRITING>`. (descriptor, its name
    or None)"""
    flag = getattr(os, "O_TMPFILE", 0) if _unnamed_files else 0
    if flag:
        try:
            return os.open(".", flag | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=directory), None
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    tmp = f".{name}.{os.urandom(6).hex()}{_WRITING}"  # as mkstemp names one, in `directory`
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(tmp, flags, 0o600, dir_fd=directory), tmp


def _link(tmp: str | None, fd: int, directory: int, name: str) -> None:
    """Link the written file (`tmp`, or the unnamed `fd`) as `name` in the open `directory`.
    An unnamed one through /proc with AT_SYMLINK_FOLLOW: os.link calls link(2), which would
    link the /proc entry itself, unless given a directory descriptor (then linkat(2))."""
    if tmp is not None:
        os.link(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
        return
    try:
        os.link(f"{_FD}/{fd}", name, dst_dir_fd=directory, follow_symlinks=True)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno in _REFUSED_THROUGH_PROC or not os.path.isdir(_FD):
            raise _Unlinkable(exc) from exc  # no /proc, or linking through it refused
        raise  # this link failed (its directory removed meanwhile, no space): as any put's


_FD = "/proc/self/fd"
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# what a kernel or sandbox answers a link through /proc it does not make
_REFUSED_THROUGH_PROC = frozenset({errno.EXDEV, errno.EPERM, errno.EINVAL, errno.ENOSYS})


class LocalObjectStore:
    def __init__(self, root: Path, *, allow_symlinks: bool = False) -> None:
        self.root = Path(root)
        self._root = str(self.root)
        self.allow_symlinks = allow_symlinks

    def path(self, bucket: str, key: str = "") -> Path:
        """The local path of an object, refusing names that escape the bucket and, unless
        symlinks are allowed, any symbolic link on the way."""
        return Path(self._checked(bucket, key))

    def _checked(self, bucket: str, key: str, *, leaf: bool = True) -> str:
        """path() as a string (no Path built: this is on every call's way). `leaf=False`
        leaves the last name unchecked, for a caller that never follows it (an lstat, an
        open with O_NOFOLLOW): one system call fewer."""
        self._checked_names(bucket, key)
        parts = [p for p in key.split("/") if p]
        full = os.path.join(self._root, bucket, *parts)
        if not self.allow_symlinks:
            here = self._root
            for part in (bucket, *parts) if leaf or not parts else (bucket, *parts[:-1]):
                here = os.path.join(here, part)
                try:
                    mode = os.lstat(here).st_mode
                except (FileNotFoundError, NotADirectoryError):
                    break  # nothing further down exists: no link either
                except OSError as exc:  # a name too long
                    raise BadRequest(f"{bucket}/{key}: {exc.strerror}", key=key) from None
                if stat.S_ISLNK(mode):
                    raise BadRequest(f"{bucket}/{key}: {here} is a symbolic link", key=key)
        return full

    def _names(self, bucket: str, key: str) -> tuple[list[str], str]:
        """(the folders on the way, the object's own name) of `key` in `bucket`, checked
        as _checked checks them; BadRequest for a key that names no object."""
        self._checked_names(bucket, key)
        *folders, name = [p for p in key.split("/") if p] or [""]
        if not name:
            raise BadRequest(f"invalid object name {key!r}")
        return folders, name

    @staticmethod
    def _checked_names(bucket: str, key: str) -> None:
        """BadRequest for a bucket or key that names a way out of the bucket."""
        if not bucket or "/" in bucket or bucket in (".", "..") or "\0" in bucket:
            raise BadRequest(f"invalid bucket name {bucket!r}")
        if any(p in (".", "..") or "\0" in p for p in key.split("/")):
            raise BadRequest(f"invalid object name {key!r}")

    def _folder(self, bucket: str, folders: list[str], key: str, *, make: bool = False) -> int:
        """A descriptor of the folder `folders` names in `bucket`, opened one name at a time
        from the root, each in the one before and, unless symlinks are allowed, none that
        is a link (O_NOFOLLOW): what is done next in it (an open, a write, an unlink) cannot
        leave the root, as one by the whole path did when a folder on the way was made a
        link after the names were looked at (lstat). `make`: missing folders are made.
        Raises FileNotFoundError or NotADirectoryError for what is not there, BadRequest for
        a link or a name too long."""
        flags = _FOLDER | (0 if self.allow_symlinks else os.O_NOFOLLOW)
        fd = os.open(self._root, _FOLDER)
        try:
            for name in (bucket, *folders):
                try:
                    inner = os.open(name, flags, dir_fd=fd)
                except FileNotFoundError:
                    if not make:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, dir_fd=fd)
                    inner = os.open(name, flags, dir_fd=fd)
                except NotADirectoryError:  # a file on the way, or (O_DIRECTORY) a link
                    if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                        why = f"{bucket}/{key}: {name} is a symbolic link"
                        raise BadRequest(why, key=key) from None
                    raise  # a file: not there, as for a missing folder
                except OSError as exc:  # ELOOP: a link; ENAMETOOLONG
                    if exc.errno == errno.ELOOP:
                        why = f"{bucket}/{key}: {name} is a symbolic link"
                        raise BadRequest(why, key=key) from None
                    raise BadRequest(f"{bucket}/{key}: {exc.strerror}", key=key) from None
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd

    def stat(self, bucket: str, key: str) -> ObjectInfo | None:
        # the last name is lstat-ed by _stat (a link there is refused), not twice
        return self._stat(self._checked(bucket, key, leaf=False), bucket, key)

    def _stat(self, p: Path | str, bucket: str, key: str) -> ObjectInfo | None:
        try:
            st = os.stat(p) if self.allow_symlinks else os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:  # a name too long, a loop
            raise BadRequest(f"{bucket}/{key}: {exc.strerror}", key=key) from None
        if stat.S_ISDIR(st.st_mode):
            return None
        self._regular(st, bucket, key)
        return self._info(bucket, key, st)

    def list(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under `prefix`: only the prefix's own directory is walked."""
        head, _, _ = prefix.rpartition("/")
        if self.allow_symlinks:
            yield from self._list_following(bucket, prefix, head)
            return
        self._checked_names(bucket, head)
        try:
            start = self._folder(bucket, [p for p in head.split("/") if p], head)
        except (FileNotFoundError, NotADirectoryError):
            return
        found = []
        try:
            # a walk of folders held open (fwalk: each opened in the one before, and skipped
            # if it is not the folder the listing saw): a folder made a link to the outside
            # between the listing of its parent and the walk's entering it was walked by its
            # path, and the files outside were listed (their names and sizes then named the
            # version); each file is looked at (lstat) in its folder, a link refused
            for dirpath, dirs, files, folder in os.fwalk(".", dir_fd=start):
                rel = "/".join(p for p in (head, dirpath[2:]) if p)
                for name in [*files, *dirs]:
                    if name.startswith(".") and name.endswith(_WRITING):
                        continue  # a put in progress
                    key = f"{rel}/{name}" if rel else name
                    if key.startswith(prefix):
                        info = self._stat_in(folder, name, bucket, key)
                        if info is not None:
                            found.append(info)
        finally:
            os.close(start)
        yield from sorted(found, key=lambda info: info.key)

    def _stat_in(self, folder: int, name: str, bucket: str, key: str) -> ObjectInfo | None:
        """stat() of `name` in the open `folder`: None for a folder or what is gone."""
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:  # a name too long
            raise BadRequest(f"{bucket}/{key}: {exc.strerror}", key=key) from None
        if stat.S_ISDIR(st.st_mode):
            return None
        self._regular(st, bucket, key)
        return self._info(bucket, key, st)

    def _list_following(self, bucket: str, prefix: str, head: str) -> Iterator[ObjectInfo]:
        """list() where symbolic links are allowed (followed)."""
        start = self._checked(bucket, head)
        if not os.path.isdir(start):
            return
        base = os.path.join(self._root, bucket)
        found = []
        for dirpath, _dirs, files in os.walk(start, followlinks=True):
            rel = dirpath[len(base) + 1 :]  # under base: the walk joins names onto start
            for name in files:
                if name.startswith(".") and name.endswith(_WRITING):
                    continue  # a put in progress
                key = f"{rel}/{name}" if rel else name
                if key.startswith(prefix):
                    found.append((key, os.path.join(dirpath, name)))
        for key, path in sorted(found):
            info = self._stat(path, bucket, key)
            if info is not None:
                yield info

    def read_range(self, bucket: str, key: str, start: int, length: int) -> bytes:
        with self.open(bucket, key) as f:
            f.seek(start)
            return f.read(length)

    def read_chunks(
        self, bucket: str, key: str, start: int, length: int, chunk_size: int
    ) -> Iterator[memoryview]:
        """The range read into one reused buffer: no allocation (and no page faults) per
        piece, which is what the page-cache copy of a local disk costs most. For a read of
        `_ALIGNED` bytes or more the buffer is anonymous memory, page-aligned: the kernel's
        copy into a buffer 16 bytes past a page (where malloc puts a large bytearray) costs
        ~1.3x the CPU, 8 bytes past ~2x (measured, AVX-512 EPYC). That mapping is the
        thread's, kept for its next read (one per thread, as large as its largest piece,
        freed with the thread): mapping, faulting in and unmapping it for every file (its
        unmapping interrupts every core running the process) cost 2.6x the CPU of hashing
        300 files of 2 MiB with blake3. A piece is valid until this thread reads the next
        one, from this object or another. A smaller read (a small file) keeps a bytearray,
        cheaper than a first mapping. No file is mapped: a file truncated meanwhile cannot
        fault the process."""
        size = max(1, min(chunk_size, length))
        if length < _ALIGNED:
            yield from self._read_into(memoryview(bytearray(size)), bucket, key, start, length)
            return
        spare: memoryview | None = getattr(_spare, "buffer", None)
        _spare.buffer = None  # taken: a read within this one maps its own
        buffer = spare if spare is not None and len(spare) >= size else None
        if buffer is None:
            buffer = memoryview(mmap.mmap(-1, size))
        try:
            yield from self._read_into(buffer[:size], bucket, key, start, length)
        finally:
            _spare.buffer = buffer

    def _read_into(
        self, buffer: memoryview, bucket: str, key: str, start: int, length: int
    ) -> Iterator[memoryview]:
        with self.open(bucket, key) as f:
            f.seek(start)
            while length > 0:
                n = f.readinto(buffer[: min(len(buffer), length)])
                if not n:
                    return
                length -= n
                yield buffer[:n]

    def open(self, bucket: str, key: str) -> io.FileIO:
        """The object's file, unbuffered, once it is known to be a regular file (opened
        without blocking, so a FIFO cannot hang the caller, and without following a link)."""
        flags = os.O_RDONLY | os.O_NONBLOCK | (0 if self.allow_symlinks else os.O_NOFOLLOW)
        folders, name = self._names(bucket, key)
        try:
            folder = self._folder(bucket, folders, key)
            try:  # O_NOFOLLOW refuses a link as the last name
                fd = os.open(name, flags, dir_fd=folder)
            finally:
                os.close(folder)
        except FileNotFoundError:
            raise NotFound(f"no object {key!r} in bucket {bucket!r}") from None
        except OSError as exc:  # ELOOP: a symbolic link; ENAMETOOLONG; EISDIR
            if exc.errno == errno.ELOOP:
                raise BadRequest(f"{bucket}/{key} is a symbolic link", key=key) from None
            raise BadRequest(f"{bucket}/{key}: {exc.strerror}", key=key) from None
        try:
            self._regular(os.fstat(fd), bucket, key)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return io.FileIO(fd, "rb")

    def put(self, bucket: str, key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
        global _unnamed_files
        try:
            return self._put(bucket, key, data, if_absent)
        except _Unlinkable:  # nothing placed: written again, under a name, from now on
            _unnamed_files = False
            return self._put(bucket, key, data, if_absent)

    def _put(self, bucket: str, key: str, data: bytes, if_absent: bool) -> ObjectInfo:
        folders, name = self._names(bucket, key)
        folder = self._folder(bucket, folders, key, make=True)  # a new prefix's are made
        try:
            return self._put_in(folder, bucket, key, name, data, if_absent)
        finally:
            os.close(folder)

    def _put_in(
        self, folder: int, bucket: str, key: str, name: str, data: bytes, if_absent: bool
    ) -> ObjectInfo:
        fd, tmp = _writing(folder, name)
        try:
            with open(fd, "wb", closefd=False) as f:
                f.write(data)
            if if_absent:
                try:  # atomic create-if-absent
                    _link(tmp, fd, folder, name)
                except FileExistsError:
                    raise Conflict(f"object {key!r} already exists in bucket {bucket!r}") from None
            else:
                if tmp is None:  # named only now, written whole
                    named = f".{name}.{os.urandom(6).hex()}{_WRITING}"
                    _link(None, fd, folder, named)
                    tmp = named
                os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        finally:
            os.close(fd)
            if tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=folder)
        return self._info(bucket, key, os.stat(name, dir_fd=folder, follow_symlinks=False))

    def delete(self, bucket: str, key: str) -> None:
        folders, name = self._names(bucket, key)
        try:
            folder = self._folder(bucket, folders, key)
        except (FileNotFoundError, NotADirectoryError):
            return  # gone already
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode) and not self.allow_symlinks:
                raise BadRequest(f"{bucket}/{key} is a symbolic link", key=key)
            os.unlink(name, dir_fd=folder)
        except FileNotFoundError:
            return
        finally:
            os.close(folder)

    def list_versions(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        """`list`: a directory keeps no old revisions (every object is current)."""
        return self.list(bucket, prefix)

    def delete_many(
        self, bucket: str, objects: Sequence[ObjectInfo], *, versions: bool = False
    ) -> dict[str, str]:
        """Delete each file while its generation is still the listed one (a rewritten file
        stays and is reported); `versions` changes nothing, there are no old revisions.

        The check and the unlink are two system calls: a rewrite landing between them is
        lost, a window of microseconds in a store one process owns. A generation is only as
        fine as the file system's timestamps (a few ms): a same-size rewrite within that
        tick is not seen as a change.
        """
        self.path(bucket)  # an invalid bucket refuses the whole call
        refused: dict[str, str] = {}
        failed = 0
        for obj in objects:
            try:
                reason = self._delete_listed(bucket, obj)
                if reason:
                    refused[obj.key] = reason
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone already: success
            except BadRequest as exc:  # a link on the way, an invalid name
                refused[obj.key] = f"refused: {exc}"
            except PermissionError as exc:
                refused[obj.key] = f"access denied: {exc.strerror}"
            except OSError as exc:
                if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP):
                    refused[obj.key] = f"refused: {exc.strerror}"
                else:  # EIO, ENOSPC on the journal: worth another delivery
                    failed += 1
        if failed:
            raise Unavailable(
                f"could not delete {failed} of {len(objects)} objects in {bucket!r};"
                " the rest was attempted",
                bucket=bucket,
                failed=failed,
            )
        return refused

    def _delete_listed(self, bucket: str, obj: ObjectInfo) -> str:
        """Unlink `obj` while its generation is the listed one, in its folder held open;
        why it was left ("" when it went, or was a folder)."""
        folders, name = self._names(bucket, obj.key)
        folder = self._folder(bucket, folders, obj.key)
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                return ""  # not an object: nothing to delete
            if stat.S_ISLNK(st.st_mode) and not self.allow_symlinks:
                return f"refused: {bucket}/{obj.key} is a symbolic link"
            if obj.generation and self._info(bucket, obj.key, st).generation != obj.generation:
                return f"changed since listed (generation {obj.generation})"
            os.unlink(name, dir_fd=folder)
            return ""
        finally:
            os.close(folder)

    @staticmethod
    def _regular(st: os.stat_result, bucket: str, key: str) -> None:
        if stat.S_ISLNK(st.st_mode):
            raise BadRequest(f"{bucket}/{key} is a symbolic link", key=key)
        if not stat.S_ISREG(st.st_mode):
            raise BadRequest(f"{bucket}/{key} is not a regular file", key=key)

    @staticmethod
    def _info(bucket: str, key: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(
            bucket=bucket, key=key, size=st.st_size, generation=f"{st.st_mtime_ns}-{st.st_size}"
        )
