"""`SqliteDeliveryLog`: the deliveries already handled, kept across restarts next to the
embedded registry (`$MODELHOOKS_HOME/deliveries.db`), bounded to the most recent `size`.

A redelivery after a restart then answers the first delivery's replies, and an event id
reused with other content is still recognised (a Conflict), as within one process.

Records are written by group commit: concurrent deliveries' records go in one transaction,
at most `FLUSH_SECONDS` after they were handled (or at once past `FLUSH_COUNT`). A crash
can lose that last fraction of a second of records; then those deliveries, redelivered,
run again, which every effect's idempotency makes harmless. (Recent deliveries are in the
process's own memory as well: see modelhooks.delivery.dedupe.)

A lookup holds no lock across SQLite: it looks at the records not written yet (under the
lock, briefly), then reads with its thread's own connection (WAL readers wait for nobody).
Records stay where lookups see them until their transaction committed, so a record is
always either in memory or readable.

Nothing is opened, and no thread started, until the first record is written (the file, the
group commit) or looked up in a file that exists: a process that only checks its wiring
(functions-framework's master) opens nothing, and one whose home holds no log yet (a fresh
Cloud Run instance) answers its first lookups without SQLite.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from modelhooks.adapters.sqlite_wal import Checkpointer, Database
from modelhooks.core.errors import Unavailable
from modelhooks.core.logs import log

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SqliteDeliveryLog"]

FLUSH_SECONDS = 0.05
FLUSH_COUNT = 256
RETRY_SECONDS = 5.0  # the longest wait between writes that fail

_SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  function TEXT NOT NULL, source TEXT NOT NULL, id TEXT NOT NULL,
  digest TEXT NOT NULL, replies BLOB NOT NULL,
  UNIQUE (function, source, id));
"""


class SqliteDeliveryLog:
    def __init__(self, path: Path, size: int) -> None:
        self.size = size
        # checkpoints off the flush: a commit never copies the write-ahead log back
        self._database = Database(path, _SCHEMA)  # opened by the first flush (or lookup)
        self.path = self._database.path
        self._lock = threading.Lock()  # the records not written yet
        self._writing = threading.Lock()  # one flush at a time
        self._puts = 0
        self._exists = False  # the file exists (a lookup before it finds nothing)
        # by key, as the table keeps them (the first for a key): a lookup is one probe, not
        # a scan of the records not written yet (up to FLUSH_COUNT of them)
        self._pending: dict[tuple[str, str, str], tuple[str, bytes]] = {}
        self._flushing: dict[tuple[str, str, str], tuple[str, bytes]] = {}  # until committed
        self._readers = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._closed = threading.Event()
        self._flusher: threading.Thread | None = None  # started by the first put
        self._failing = False  # the last write failed (the disk full): the group commit retries

    @property
    def _db(self) -> sqlite3.Connection:
        return self._database.connection()

    @property
    def _checkpoints(self) -> Checkpointer:
        return self._database.checkpointer

    def get(self, key: tuple[str, str, str]) -> tuple[str, bytes] | None:
        with self._lock:
            pending = self._flushing.get(key) or self._pending.get(key)  # the first first
        if pending is not None:
            return pending
        if not self._exists:  # nothing was ever written there: not worth opening
            if not self.path.exists():
                return None
            self._exists = True
        try:
            self._database.connection()  # the schema (the file may be another process's, new)
            row = (
                self._reader()
                .execute(
                    "SELECT digest, replies FROM deliveries WHERE function=? AND source=? AND id=?",
                    key,
                )
                .fetchone()
            )
        except Exception as exc:
            import sqlite3  # imported by then: the connection is its

            if isinstance(exc, sqlite3.Error):
                raise Unavailable(f"delivery log: {exc}") from None
            raise
        return (str(row[0]), bytes(row[1])) if row else None

    def put(self, key: tuple[str, str, str], digest: str, replies: bytes) -> None:
        with self._lock:
            self._pending.setdefault(key, (digest, replies))
            while len(self._pending) > max(self.size, FLUSH_COUNT):  # the oldest: the table
                del self._pending[next(iter(self._pending))]  # keeps the latest `size` only
            full = len(self._pending) >= FLUSH_COUNT and not self._failing
            if self._flusher is None:  # the group commit, from the first record on
                self._flusher = threading.Thread(
                    target=self._flush_every, name="delivery-log", daemon=True
                )
                self._flusher.start()
        if full:  # a write that fails is the group commit's to retry and say: the
            # delivery, whose effect is done, is not answered 503 for it
            with contextlib.suppress(Exception):
                self.flush()

    def flush(self) -> None:
        """Write what is pending now (tests; shutdown)."""
        with self._writing:
            self._flush()

    def close(self) -> None:
        self._closed.set()
        with self._writing:
            self._flush()
            self._database.close()
            with self._lock:
                for reader in self._opened:
                    reader.close()
                self._opened.clear()

    def _reader(self) -> sqlite3.Connection:
        """This thread's read-only connection (a process forked since opens its own)."""
        pid, db = getattr(self._readers, "db", (None, None))
        if db is None or pid != os.getpid():
            import sqlite3

            db = sqlite3.connect(
                self.path, timeout=30, isolation_level=None, check_same_thread=False
            )  # closed by close(), from another thread
            db.execute("PRAGMA query_only=ON")
            self._readers.db = (os.getpid(), db)
            with self._lock:
                self._opened.append(db)
        return db

    def _flush_every(self) -> None:
        """The group commit until close(). A write that fails (the disk full, the file made
        read-only) is an ERROR line, and its records stay pending (and found by lookups)
        until a later one writes them, the waits doubling up to RETRY_SECONDS meanwhile: the
        thread ended there, and records were written only by a put finding FLUSH_COUNT
        pending (every 256th delivery), so a crash lost up to 255 of them, not 50 ms'."""
        wait, failures = FLUSH_SECONDS, 0
        while not self._closed.wait(wait):
            with self._writing:
                if self._closed.is_set():
                    return
                try:
                    self._flush()
                except Exception as exc:
                    failures, wait = failures + 1, min(wait * 2, RETRY_SECONDS)
                    log(
                        logging.ERROR,
                        f"delivery log {self.path}: {len(self._pending)} record(s) not written, "
                        f"tried again in {wait:g} s: {exc}",
                        path=str(self.path),
                        failures=failures,
                    )
                    continue
            if failures:
                log(
                    logging.WARNING, f"delivery log {self.path}: written again", path=str(self.path)
                )
                wait, failures = FLUSH_SECONDS, 0

    def _flush(self) -> None:  # under self._writing
        with self._lock:
            pending, self._pending = self._pending, {}
            self._flushing = pending
        if not pending:
            return
        rows = [(*key, digest, replies) for key, (digest, replies) in pending.items()]
        written = False
        try:
            self._run("BEGIN IMMEDIATE", ())
            try:
                self._db.executemany(
                    "INSERT OR IGNORE INTO deliveries(function, source, id, digest, replies) "
                    "VALUES (?,?,?,?,?)",
                    rows,
                )
                self._puts += len(rows)
                if self._puts >= 1000:  # keep the most recent `size`
                    self._puts = 0
                    self._db.execute(
                        "DELETE FROM deliveries WHERE seq <= (SELECT MAX(seq) FROM deliveries) - ?",
                        (self.size,),
                    )
                self._run("COMMIT", ())
                written = True
            except BaseException:
                self._db.rollback()
                raise
        finally:
            with self._lock:
                self._failing = not written
                if not written:  # kept for the next flush, the earlier records first (and
                    for key, record in self._pending.items():  # a key's first record)
                        pending.setdefault(key, record)
                    self._pending = pending
                self._flushing = {}

    def _run(self, sql: str, params: tuple[object, ...]) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, params)  # opened by the first
        except Exception as exc:
            import sqlite3  # imported by then, unless opening failed

            if isinstance(exc, sqlite3.Error):
                raise Unavailable(f"delivery log: {exc}") from None
            raise
