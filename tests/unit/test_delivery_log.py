"""The SQLite delivery log: a lookup never waits for a flush, and a record is found at every
moment between its put and its commit (in memory until it is readable)."""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path

from modelhooks.adapters.idempotency.sqlite import SqliteDeliveryLog


def test_a_lookup_does_not_wait_for_a_flush(tmp_path: Path) -> None:
    log = SqliteDeliveryLog(tmp_path / "deliveries.db", size=1000)
    other = sqlite3.connect(tmp_path / "deliveries.db", isolation_level=None)
    try:
        log.put(("register", "/s", "written"), "d1", b"[]")
        log.flush()
        log.put(("register", "/s", "pending"), "d2", b"[1]")
        other.execute("BEGIN IMMEDIATE")  # the flush below waits for this writer
        flushing = threading.Thread(target=log.flush)
        flushing.start()
        found: dict[str, object] = {}

        def look() -> None:
            for name in ("written", "pending", "unknown"):
                found[name] = log.get(("register", "/s", name))

        looking = threading.Thread(target=look)
        looking.start()
        looking.join(timeout=10)
        assert not looking.is_alive(), "a lookup waited for the flush"
        assert found == {"written": ("d1", b"[]"), "pending": ("d2", b"[1]"), "unknown": None}
        other.execute("COMMIT")
        flushing.join(timeout=30)
        assert log.get(("register", "/s", "pending")) == ("d2", b"[1]")
    finally:
        other.close()
        log.close()


def test_a_record_is_found_from_its_put_on(tmp_path: Path) -> None:
    log = SqliteDeliveryLog(tmp_path / "deliveries.db", size=100_000)
    put = 0  # keys 0 .. put-1 are recorded
    missed: list[int] = []

    def write() -> None:
        nonlocal put
        for n in range(3000):
            log.put(("sign", "/s", str(n)), "d", b"[]")
            put = n + 1

    def read(seed: int) -> None:
        rng = random.Random(seed)
        while put < 3000:
            if put and log.get(("sign", "/s", str(n := rng.randrange(put)))) is None:
                missed.append(n)

    threads = [
        threading.Thread(target=write),
        *(threading.Thread(target=read, args=(s,)) for s in range(3)),
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not missed
        log.flush()
        assert all(log.get(("sign", "/s", str(n))) for n in range(0, 3000, 97))
    finally:
        log.close()


def test_a_key_put_twice_answers_its_first_record_before_and_after_the_flush(
    tmp_path: Path,
) -> None:
    """Two deliveries of one event that both missed put both: the table keeps the first
    (INSERT OR IGNORE), and so does the lookup before the flush."""
    log = SqliteDeliveryLog(tmp_path / "deliveries.db", size=1000)
    try:
        log.put(("register", "/s", "twice"), "d", b"[1]")
        log.put(("register", "/s", "twice"), "d", b"[2]")
        before = log.get(("register", "/s", "twice"))
        log.flush()
        assert before == log.get(("register", "/s", "twice")) == ("d", b"[1]")
    finally:
        log.close()
