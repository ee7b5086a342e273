"""SQLite in WAL mode with its checkpoints off the request path.

By default the connection whose commit fills the write-ahead log past 1,000 pages copies it
back into the database, fsyncs included, inside that commit: every few hundred deliveries one
of them waits tens of milliseconds, holding the lock every other delivery waits on. Here the
serving connection never checkpoints; a thread with its own connection does, PASSIVE (it
waits for no reader or writer), every `every` seconds. Commits keep the durability
`synchronous=NORMAL` gives in WAL mode.

A PASSIVE checkpoint copies the log back but cannot start it over: under a steady stream of
commits the next one always finds pages not copied yet and appends, so the log grew without
end (~20 KB a registration: 380 MB in 12 s of register at full speed, on Cloud Run's
in-memory disk). Past `RESTART_PAGES` the checkpoint is TRUNCATE: it waits, a moment at most
(`RESTART_WAIT`), for the commit in progress, copies the rest and empties the file; the
next commit starts the log afresh. A moment it cannot have is tried again next round.

The checkpointer lives as long as its connection, in the process that made it: a process
forked since (gunicorn's worker, under functions-framework) makes its own connections
(bootstrap builds its wiring anew there: SQLite connections do not cross a fork), and the
checkpointers it inherited are forgotten, never run. At exit each is stopped and joined
before the interpreter goes (no thread left inside SQLite).

A `Database` opens its file on first use, not when it is made: functions-framework builds a
target's wiring in gunicorn's master only to check it, then forks the worker, which builds its
own; the master opened both databases, ran their schemas and started their checkpointers for
nothing (~2.5 ms of CPU of every cold start, and `sqlite3`'s import). What can be checked
without SQLite is checked when it is made: a home where the file cannot be made or written,
or a file that is no SQLite database, still stops start-up.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from modelhooks.core.errors import ConfigError

if TYPE_CHECKING:
    import sqlite3

__all__ = ["Checkpointer", "Database", "connect"]

_HEADER = b"SQLite format 3\x00"  # what an SQLite database file starts with
RESTART_PAGES = 4096  # ~16 MiB of 4 KiB pages in the log: start it over
RESTART_WAIT = 0.05  # seconds the checkpoint waits for the writer and readers (writers wait)


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
    import sqlite3  # when a process first opens a database (see the module's docstring)

    db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    checkpointer = Checkpointer(path, every)
    with _lock:
        _live.add(checkpointer)
    checkpointer.start()
    return db, checkpointer


class Database:
    """The SQLite file at `path`, in WAL mode with `script` run on it (its schema), opened by
    the first `connection()`: making one opens nothing (see the module's docstring)."""

    def __init__(self, path: Path, script: str) -> None:
        self.path = checked(Path(path))
        self._script = script
        self._lock = threading.Lock()
        self._opened: tuple[sqlite3.Connection, Checkpointer] | None = None

    def connection(self) -> sqlite3.Connection:
        """The connection (under the caller's lock), opened and its schema made if not yet."""
        opened = self._opened
        if opened is None:
            with self._lock:
                if self._opened is None:
                    db, checkpointer = connect(self.path)
                    try:
                        db.executescript(self._script)
                    except BaseException:
                        checkpointer.close()
                        db.close()
                        raise
                    self._opened = (db, checkpointer)
                opened = self._opened
        return opened[0]

    @property
    def checkpointer(self) -> Checkpointer:
        self.connection()
        assert self._opened is not None
        return self._opened[1]

    def close(self) -> None:
        """Stop the checkpointer and close the connection (if they were opened)."""
        with self._lock:
            opened, self._opened = self._opened, None
        if opened is not None:
            opened[1].close()
            opened[0].close()


def checked(path: Path) -> Path:
    """`path`, once its folder exists and can hold a database, and what is there already is
    one (else ConfigError): what opening it would refuse, found without opening it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{path.parent}: not writable, so {path.name} cannot be kept there")
    try:
        with path.open("rb") as f:
            header = f.read(len(_HEADER))
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    if header and header != _HEADER:
        raise ConfigError(f"{path}: not an SQLite database")
    if not os.access(path, os.R_OK | os.W_OK):
        raise ConfigError(f"{path}: not writable")
    return path


def _checkpoints(path: Path, every: float, stop: threading.Event) -> None:
    """Checkpoints every `every` s until `stop`. Its connection is opened in the loop: one
    that failed (the process out of file descriptors under a burst of connections) ended the
    thread, and the log then grew without end for the life of the process."""
    import sqlite3

    db: sqlite3.Connection | None = None
    try:
        while not stop.wait(every):
            try:
                if db is None:
                    db = sqlite3.connect(
                        path, timeout=RESTART_WAIT, isolation_level=None, check_same_thread=False
                    )
                busy, pages, _copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if not busy and pages > RESTART_PAGES:  # busy: the writer or a reader is long
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.Error:  # busy, gone or not opened: the next round tries again
                continue
    finally:
        if db is not None:
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
