"""The threads admission's store and registry calls run on, one pool per process, and the
calls a review gave up on, counted per registry or bucket.

A review answers by its deadline whatever its calls do, and a call that has not answered by
then goes on in its thread until the socket gives up (60 s a read, 120 s in all). With a
pool per review, a registry that accepts and never answers held 8 threads and 8 connections
per review, for a minute each (100 reviews: 800 threads alive), so a stream of Pods naming
it grew threads without bound until none could be started and every review failed. Here a
place (scheme and registry host, or bucket) with `per_place` calls given up on and still
running is not called again until one ends (Unavailable at once: the policy's
failurePolicy decides), and every call runs on one pool of `size` threads: a call waits for
a thread, within its review's deadline, rather than start one more.

>>> future = CALLS.submit(place(uri), verifier.resolve, uri)  # doctest: +SKIP
>>> CALLS.abandon(place(uri), future)  # past the deadline  # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from modelhooks.core.errors import Unavailable

__all__ = ["CALLS", "Calls", "place"]

T = TypeVar("T")


def place(uri: str) -> str:
    """Where a call for `uri` goes: its scheme and registry host or bucket."""
    scheme, _, rest = uri.partition("://")
    return f"{scheme}://{rest.partition('/')[0]}" if rest else uri.partition(":")[0]


class Calls:
    def __init__(self, size: int = 64, per_place: int = 8) -> None:
        self.size, self.per_place = size, per_place
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        self._abandoned: Counter[str] = Counter()

    def submit(self, where: str, fn: Callable[..., T], *args: Any) -> Future[T]:
        """`fn(*args)` on a thread of the process's pool; failed at once (Unavailable) when
        `where` has `per_place` calls given up on still running."""
        with self._lock:
            if self._pool is None or self._pid != os.getpid():  # none yet, or forked since
                self._pool = ThreadPoolExecutor(self.size, thread_name_prefix="admission")
                self._pid, self._abandoned = os.getpid(), Counter()
            if self._abandoned[where] < self.per_place:
                return self._pool.submit(fn, *args)
        refused: Future[T] = Future()
        refused.set_exception(
            Unavailable(
                f"{where} has not answered {self.per_place} calls still outstanding: not asked "
                "again until it does"
            )
        )
        return refused

    def abandon(self, where: str, future: Future[Any]) -> None:
        """`future` is no longer waited for: cancelled when it has not started, else counted
        against `where` until it ends."""
        if future.cancel() or future.done():
            return
        with self._lock:
            self._abandoned[where] += 1
        future.add_done_callback(lambda _: self._release(where))

    def abandoned(self, where: str) -> int:
        with self._lock:
            return self._abandoned[where]

    def _release(self, where: str) -> None:
        with self._lock:
            self._abandoned[where] -= 1
            if self._abandoned[where] <= 0:
                del self._abandoned[where]


CALLS = Calls()  # its pool is built on the first call, in the process that makes it
