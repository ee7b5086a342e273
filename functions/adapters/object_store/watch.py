"""Watch the local store for ready markers: the embedded stand-in for bucket notifications.

Every `serve.watch_interval` seconds the store under `$MODELHOOKS_HOME/store` is scanned;
a ready marker that is new or rewritten becomes an `artifact.pushed` event, as a bucket
notification would: named by the marker's generation, dated by its modification time. The
delivery names it by its content (modelhooks.core.content), as it does a GCS or S3 push, so
touching the marker of unchanged content registers nothing new. A restart re-announces
what is there with the same ids and times: the delivery's dedupe recognises each one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from modelhooks.core.logs import log
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ArtifactPushed, CanonicalEvent

__all__ = ["LocalStoreWatcher", "scan"]


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


class LocalStoreWatcher:
    def __init__(
        self,
        root: Path,
        layout: ObjectLayout,
        publish: Callable[[CanonicalEvent], object],
        interval: float,
    ) -> None:
        self.root, self.layout, self.publish, self.interval = root, layout, publish, interval
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="store-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def poll(self) -> int:
        """Publish what is new since the last poll; returns how many events."""
        fresh = [e for e in scan(self.root, self.layout) if e.id not in self._seen]
        for event in fresh:
            self._seen.add(event.id)
            log(logging.INFO, f"ready marker found: {event.subject}", event_id=event.id)
            self.publish(event)
        return len(fresh)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # keep watching; the next scan retries
                log(logging.ERROR, "store scan failed", exc_info=exc)
            self._stop.wait(self.interval)
