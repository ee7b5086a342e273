"""SQLite in WAL mode with its checkpoints off the request path.

By default the connection whose commit fills the write-ahead log past 1,000 pages copies it
back into the database, fsyncs included, inside that commit: every few hundred deliveries one
of them waits tens of milliseconds, holding the lock every other delivery waits on. Here the
serving connection never checkpoints; a thread with its own connection does, PASSIVE (it
waits for no reader or writer), every `every` seconds. Commits keep the durability
`synchronous=NORMAL` gives in WAL mode.

The checkpointer lives as long as its connection, in the process that made it: a process
forked since (gunicorn's worker, under functions-framework) makes its own connections
(bootstrap builds its wiring anew there: SQLite connections do not cross a fork), and the
checkpointers it inherited are forgotten, never run. At exit each is stopped and joined
before the interpreter goes (no thread left inside SQLite).
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
from pathlib import Path

import msgspec

__all__ = ["Checkpointer", "connect"]


class Checkpointer(msgspec.Struct, eq=False):  # a Struct: cheaper to make than a dataclass
    """The thread checkpointing one database; `close()` stops it and waits for it (its
    connection closes, and with it the log's files go: nothing writes after that)."""

    path: Path
    every: float
    stop: threading.Event = msgspec.field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(
            target=_checkpoints,
            args=(self.path, self.every, self.stop),
            name=f"checkpoint {self.path.name}",
            daemon=True,
        )
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        thread = self.thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=5)


_live: set[Checkpointer] = set()
_lock = threading.Lock()


def connect(path: Path, every: float = 0.5) -> tuple[sqlite3.Connection, Checkpointer]:
    """A connection to `path` (WAL, synchronous=NORMAL, no checkpoints of its own, usable
    from any thread under the caller's lock) and its checkpointer (close it first)."""
    db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    checkpointer = Checkpointer(path, every)
    with _lock:
        _live.add(checkpointer)
    checkpointer.start()
    return db, checkpointer


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


def _running() -> list[Checkpointer]:
    """The checkpointers whose connection is open (forgetting the stopped ones)."""
    with _lock:
        _live.difference_update([c for c in _live if c.stop.is_set()])
        return list(_live)


def _forget_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a fork copies the lock as it was, perhaps held
    _live.clear()  # the parent's: their threads did not survive the fork


def _stop_all() -> None:
    running = _running()
    for checkpointer in running:
        checkpointer.stop.set()
    for checkpointer in running:
        checkpointer.close()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(_stop_all)
