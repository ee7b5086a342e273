"""`SqliteDeliveryLog`: the deliveries already handled, kept across restarts next to the
embedded registry (`$MODELHOOKS_HOME/deliveries.db`), bounded to the most recent `size`.

A redelivery after a restart then answers the first delivery's replies, and an event id
reused with other content is still recognised (a Conflict), as within one process.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from modelhooks.core.errors import Unavailable

__all__ = ["SqliteDeliveryLog"]

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
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._puts = 0

    def get(self, key: tuple[str, str, str]) -> tuple[str, bytes] | None:
        with self._lock:
            row = self._run(
                "SELECT digest, replies FROM deliveries WHERE function=? AND source=? AND id=?",
                key,
            ).fetchone()
        return (str(row[0]), bytes(row[1])) if row else None

    def put(self, key: tuple[str, str, str], digest: str, replies: bytes) -> None:
        with self._lock:
            self._run(
                "INSERT OR IGNORE INTO deliveries(function, source, id, digest, replies) "
                "VALUES (?,?,?,?,?)",
                (*key, digest, replies),
            )
            self._puts += 1
            if self._puts % 1000 == 0:  # keep the most recent `size`
                self._run(
                    "DELETE FROM deliveries WHERE seq <= (SELECT MAX(seq) FROM deliveries) - ?",
                    (self.size,),
                )

    def close(self) -> None:
        self._db.close()

    def _run(self, sql: str, params: tuple[object, ...]) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, params)
        except sqlite3.Error as exc:
            raise Unavailable(f"delivery log: {exc}") from None
