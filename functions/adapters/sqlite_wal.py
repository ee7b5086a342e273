"""SQLite in WAL mode with its checkpoints off the request path.

By default the connection whose commit fills the write-ahead log past 1,000 pages copies it
back into the database, fsyncs included, inside that commit: every few hundred deliveries one
of them waits tens of milliseconds, holding the lock every other delivery waits on. Here the
serving connection never checkpoints; a thread with its own connection does, PASSIVE (it
waits for no reader or writer), every `every` seconds. Commits keep the durability
`synchronous=NORMAL` gives in WAL mode.

The checkpointer lives as long as its connection, in whichever process uses it: a process
forked after the connection was made (gunicorn's worker, under functions-framework) starts
its own, or nothing would ever checkpoint there and the log would grow without end; and at
exit each is stopped and joined before the interpreter goes (no thread left inside SQLite).
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["connect"]


@dataclass(eq=False)
class _Checkpointer:
    path: Path
    every: float
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(
            target=_checkpoints,
            args=(self.path, self.every, self.stop),
            name=f"checkpoint {self.path.name}",
            daemon=True,
        )
        self.thread.start()


_live: set[_Checkpointer] = set()
_lock = threading.Lock()


def connect(path: Path, every: float = 0.5) -> tuple[sqlite3.Connection, threading.Event]:
    """A connection to `path` (WAL, synchronous=NORMAL, no checkpoints of its own, usable
    from any thread under the caller's lock) and the event that stops its checkpointer."""
    db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    checkpointer = _Checkpointer(path, every)
    with _lock:
        _live.add(checkpointer)
    checkpointer.start()
    return db, checkpointer.stop


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


def _running() -> list[_Checkpointer]:
    """The checkpointers whose connection is open (forgetting the stopped ones)."""
    with _lock:
        _live.difference_update([c for c in _live if c.stop.is_set()])
        return list(_live)


def _restart_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a fork copies the lock as it was, perhaps held
    for checkpointer in _running():
        checkpointer.start()  # threads do not survive a fork


def _stop_all() -> None:
    running = _running()
    for checkpointer in running:
        checkpointer.stop.set()
    for checkpointer in running:
        if checkpointer.thread is not None and checkpointer.thread.is_alive():
            checkpointer.thread.join(timeout=5)


os.register_at_fork(after_in_child=_restart_in_child)
atexit.register(_stop_all)
