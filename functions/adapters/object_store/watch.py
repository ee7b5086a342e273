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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from modelhooks.core.logs import log
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ArtifactPushed, CanonicalEvent

__all__ = ["LocalStoreWatcher", "scan"]

LONGEST = 300.0  # s: the longest wait before a push refused as transient is announced again


def scan(root: Path, layout: ObjectLayout) -> Iterator[CanonicalEvent]:
    """One canonical `artifact.pushed` per ready marker under `root/<bucket>/`."""
    if not root.is_dir():
        return
    for marker in sorted(root.glob(f"*/**/{layout.marker}")):
        rel = marker.relative_to(root).as_posix()
        bucket, _, key = rel.partition("/")
        path = layout.match(key)
        if path is None:
            continue
        st = marker.stat()
        generation = f"{st.st_mtime_ns}-{st.st_size}"
        prefix = marker.parent.resolve()
        data = ArtifactPushed(
            model=path.name,
            version=path.version,
            uri=f"{prefix.as_uri()}/",
            digest=f"local-generation:{generation}",
            store="local",
        )
        event = CanonicalEvent.new(
            data,
            source=f"file://{root.resolve()}/{bucket}",
            subject=f"objects/{key}",
            id=f"local:{bucket}/{key}#{generation}",
        )
        yield event.replace(time=datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC))


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
        now, found = time.monotonic(), list(scan(self.root, self.layout))
        ids = {e.id for e in found}
        self._seen &= ids  # a marker gone or rewritten never comes back with its id
        self._again = {i: again for i, again in self._again.items() if i in ids}
        fresh = [
            e
            for e in found
            if e.id not in self._seen and self._again.get(e.id, (now, 0.0))[0] <= now
        ]
        for event in fresh:
            if event.id not in self._again:
                log(logging.INFO, f"ready marker found: {event.subject}", event_id=event.id)
            if any(_transient(outcome) for outcome in self.publish(event) or ()):
                wait = min(
                    max(self._again.get(event.id, (0.0, 0.0))[1] * 2, self.interval), LONGEST
                )
                self._again[event.id] = (time.monotonic() + wait, wait)
                log(
                    logging.ERROR,
                    f"{event.subject}: refused as transient, announced again in {wait:g} s",
                    event_id=event.id,
                    retry_in=wait,
                )
            else:
                self._seen.add(event.id)
                self._again.pop(event.id, None)
        return len(fresh)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # keep watching; the next scan retries
                log(logging.ERROR, "store scan failed", exc_info=exc)
            self._stop.wait(self.interval)
