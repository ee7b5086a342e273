"""Watch the local store for ready markers: the embedded stand-in for bucket notifications.

Every `serve.watch_interval` seconds the store under `$MODELHOOKS_HOME/store` is scanned;
a ready marker that is new or rewritten becomes an `artifact.pushed` event, as a bucket
notification would: named by the marker's generation, dated by its modification time. The
delivery names it by its content (modelhooks.core.content), as it does a GCS or S3 push, so
touching the marker of unchanged content registers nothing new. A restart re-announces
what is there with the same ids and times: the delivery's dedupe recognises each one.

A push that a function refused as transient (5xx, 429: the registry's disk full or locked)
is announced again, as a platform redelivers: after one interval, then twice as long each
time up to `LONGEST` (an ERROR line says when), until no function refuses it so or its
marker changes. Only the markers still there are remembered.

A push whose publishing raises (instead of answering 5xx) is announced again the same way,
the other pushes of the scan going on.

A scan lists each folder once and stats each marker, and makes events for new markers
only; a folder it cannot list (past PATH_MAX, unreadable, gone meanwhile) is passed by, with
a WARNING the first scan it cannot list it (unreadable, past PATH_MAX: not when it is gone),
and again only after a scan that could; the wait between scans stretches with a large store
(`SPARE`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from modelhooks.core.logs import log
from modelhooks.events.layout import ModelPath, ObjectLayout
from modelhooks.events.model import ArtifactPushed, CanonicalEvent

__all__ = ["LocalStoreWatcher", "scan"]

LONGEST = 300.0  # s: the longest wait before a push refused as transient is announced again
SPARE = 4  # the wait between scans is at least this many times the last listing's


class _Marker(NamedTuple):
    id: str
    bucket: str
    key: str
    path: ModelPath
    rel: str  # the marker's path under the store
    mtime_ns: int
    generation: str


def _markers(
    root: Path, layout: ObjectLayout, unlisted: dict[str, OSError] | None = None
) -> Iterator[_Marker]:
    """The ready markers under `root/<bucket>/`, each named by its generation: a listing and
    a stat each, nothing more (the events are made for the new ones only). A marker gone
    between the two (removed, its folder replaced by a file) is skipped: the next scan
    sees what is there. `unlisted` gets the folders that could not be listed (`_walk`)."""
    for rel, st in sorted(_walk(root, layout.marker, {} if unlisted is None else unlisted)):
        bucket, _, key = rel.partition("/")
        path = layout.match(key)
        if path is None:
            continue
        generation = f"{st.st_mtime_ns}-{st.st_size}"
        yield _Marker(
            f"local:{bucket}/{key}#{generation}",
            bucket,
            key,
            path,
            rel,
            st.st_mtime_ns,
            generation,
        )


def _walk(root: Path, name: str, unlisted: dict[str, OSError]) -> list[tuple[str, os.stat_result]]:
    """(path relative to `root`, stat) of each entry called `name` below a folder of `root`
    (a bucket: a symbolic link to one is followed, not those below it), one listing per
    folder and one stat per marker. A folder that cannot be listed (unreadable, gone, made
    a file meanwhile) and a marker that cannot be stat'ed (a dangling link) are passed by;
    the folders that exist but cannot be listed are put in `unlisted`, with the error."""
    found: list[tuple[str, os.stat_result]] = []
    folders = [
        (entry.path, entry.name)
        for entry in _entries(str(root), unlisted)
        if _is_dir(entry, follow=True)
    ]
    while folders:
        folder, rel = folders.pop()
        for entry in _entries(folder, unlisted):
            if entry.name == name:
                with contextlib.suppress(OSError):
                    found.append((f"{rel}/{name}", entry.stat()))
            if _is_dir(entry, follow=False):
                folders.append((entry.path, f"{rel}/{entry.name}"))
    return found


def _entries(folder: str, unlisted: dict[str, OSError]) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except (FileNotFoundError, NotADirectoryError):  # gone, or made a file, meanwhile
        return []
    except OSError as exc:  # unreadable, past PATH_MAX, …: there, but its markers unseen
        unlisted[folder] = exc
        return []


def _is_dir(entry: os.DirEntry[str], *, follow: bool) -> bool:
    try:
        return entry.is_dir(follow_symlinks=follow)
    except OSError:
        return False


def _event(root: Path, found: _Marker) -> CanonicalEvent:
    """The canonical `artifact.pushed` of a ready marker (`root`: the store, resolved)."""
    data = ArtifactPushed(
        model=found.path.name,
        version=found.path.version,
        uri=f"{(root / found.rel).parent.resolve().as_uri()}/",
        digest=f"local-generation:{found.generation}",
        store="local",
    )
    event = CanonicalEvent.new(
        data,
        source=f"file://{root}/{found.bucket}",
        subject=f"objects/{found.key}",
        id=found.id,
    )
    return event.replace(time=datetime.fromtimestamp(found.mtime_ns / 1e9, UTC))


def scan(root: Path, layout: ObjectLayout) -> Iterator[CanonicalEvent]:
    """One canonical `artifact.pushed` per ready marker under `root/<bucket>/`."""
    resolved = root.resolve()
    for found in _markers(root, layout):
        yield _event(resolved, found)


def _transient(outcome: object) -> bool:
    """Whether a delivery's outcome asks for a redelivery (5xx, 429), as a platform reads it."""
    status = getattr(outcome, "status", 200)
    return isinstance(status, int) and (status >= 500 or status == 429)


class LocalStoreWatcher:
    def __init__(
        self,
        root: Path,
        layout: ObjectLayout,
        publish: Callable[[CanonicalEvent], Iterable[object] | None],
        interval: float,
    ) -> None:
        self.root, self.layout, self.publish, self.interval = root, layout, publish, interval
        self._seen: set[str] = set()
        self._again: dict[str, tuple[float, float]] = {}  # id → (when, wait): refused as transient
        self._unlisted: set[str] = set()  # the folders the last scan could not list
        self.scanned_in = 0.0  # seconds the last listing of the store took
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="store-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def poll(self) -> int:
        """Publish what is new since the last poll, and what a function refused as transient
        whose time has come again; returns how many events."""
        unlisted: dict[str, OSError] = {}
        now, found = time.monotonic(), list(_markers(self.root, self.layout, unlisted))
        self.scanned_in = time.monotonic() - now
        for folder, exc in unlisted.items():
            if folder not in self._unlisted:
                log(
                    logging.WARNING,
                    f"{folder}: cannot be listed ({exc.strerror or exc}): a ready marker under "
                    "it is not announced (said again only if it is listed, then not again)",
                    folder=folder,
                    reason=exc.strerror or str(exc),
                )
        self._unlisted = set(unlisted)
        ids = {m.id for m in found}
        self._seen &= ids  # a marker gone or rewritten never comes back with its id
        self._again = {i: again for i, again in self._again.items() if i in ids}
        root = self.root.resolve()
        fresh = [
            _event(root, m)
            for m in found
            if m.id not in self._seen and self._again.get(m.id, (now, 0.0))[0] <= now
        ]
        for event in fresh:
            if event.id not in self._again:
                log(logging.INFO, f"ready marker found: {event.subject}", event_id=event.id)
            failed, error = self._publish(event)
            if failed:
                wait = min(
                    max(self._again.get(event.id, (0.0, 0.0))[1] * 2, self.interval), LONGEST
                )
                self._again[event.id] = (time.monotonic() + wait, wait)
                log(
                    logging.ERROR,
                    f"{event.subject}: {failed}, announced again in {wait:g} s",
                    event_id=event.id,
                    retry_in=wait,
                    exc_info=error,
                )
            else:
                self._seen.add(event.id)
                self._again.pop(event.id, None)
        return len(fresh)

    def _publish(self, event: CanonicalEvent) -> tuple[str, Exception | None]:
        """Why `event` must be announced again ("": it need not), and what was raised: a
        function refused it as transient (5xx, 429), or publishing it raised, which is
        taken as transient for that event alone (the scan's other events go on)."""
        try:
            if any(_transient(outcome) for outcome in self.publish(event) or ()):
                return "refused as transient", None
        except Exception as exc:
            return f"publishing it failed ({type(exc).__name__}: {exc})", exc
        return "", None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # keep watching; the next scan retries
                log(logging.ERROR, "store scan failed", exc_info=exc)
            # a large store takes long to list (~0.5 s for 20,000 versions): the wait is at
            # least SPARE times the listing's, so scanning takes at most 1/(SPARE+1) of a core
            # whatever the store's size (25,000 versions unchanged took 72 % of one:
            # tests/bench/bench_store_scan.py)
            self._stop.wait(max(self.interval, SPARE * self.scanned_in))
