"""SQLite in WAL mode with its checkpoints off the request path.

By default the connection whose commit fills the write-ahead log past 1,000 pages copies it
back into the database, fsyncs included, inside that commit: every few hundred deliveries one
of them waits tens of milliseconds, holding the lock every other delivery waits on. Here the
serving connection never checkpoints; a thread with its own connection does, PASSIVE (it
waits for no reader or writer), every `every` seconds. Commits keep the durability
`synchronous=NORMAL` gives in WAL mode.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

__all__ = ["connect"]


def connect(path: Path, every: float = 0.5) -> tuple[sqlite3.Connection, threading.Event]:
    """A connection to `path` (WAL, synchronous=NORMAL, no checkpoints of its own, usable
    from any thread under the caller's lock) and the event that stops its checkpointer."""
    db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    stop = threading.Event()
    thread = threading.Thread(
        target=_checkpoints, args=(path, every, stop), name=f"checkpoint {path.name}", daemon=True
    )
    thread.start()
    return db, stop


def _checkpoints(path: Path, every: float, stop: threading.Event) -> None:
    db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    try:
        while not stop.wait(every):
            try:
                db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error:  # busy or gone: the next round tries again
                continue
    finally:
        db.close()
