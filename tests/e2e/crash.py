"""A crash in the middle of a delivery stream, for any `modelhooks serve` configuration:
concurrent clients POST a shuffled, duplicated set of deliveries, the server is killed with
SIGKILL once a share of them was answered, restarted on the same port and home, and
everything unanswered is delivered again, with some answered ones (at least once).

Used by test_crash_redelivery.py (register on SQLite, Kubernetes and Kubeflow, the
delivery log) and test_crash_chains.py (the signing chain, cleanup and prune)."""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from modelhooks.delivery.encoding import structured
from modelhooks.events.model import CanonicalEvent
from tests.e2e.conftest import Served
from tests.e2e.packaging import free_port

__all__ = ["Crash", "body_of", "crash_and_redeliver", "post"]

Delivery = CanonicalEvent | dict[str, Any]


def body_of(delivery: Delivery) -> bytes:
    """A structured CloudEvent's bytes (a canonical event, or a CloudEvent document)."""
    doc = structured(delivery) if isinstance(delivery, CanonicalEvent) else delivery
    return json.dumps(doc).encode()


def post(url: str, delivery: Delivery, timeout: float = 30) -> int:
    """POST one delivery as the platform does: its status, 0 when nothing answered."""
    req = urllib.request.Request(
        url,
        data=body_of(delivery),
        headers={"Content-Type": "application/cloudevents+json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, http.client.HTTPException):  # killed before or while it answered
        return 0


@dataclass
class Crash:
    """What the crash left: the server restarted after it, the deliveries answered before
    it, and every redelivery's final status."""

    again: Served
    answered: set[int]
    statuses: list[int]


def crash_and_redeliver(
    serve: Callable[..., Served],
    deliveries: Sequence[Delivery],
    *flags: str,
    path: str = "/",
    env: dict[str, str] | None = None,
    port: int | None = None,
    clients: int = 6,
    share: float = 0.4,
    seed: int = 11,
    attempts: int = 1,
) -> Crash:
    """Deliver from `clients` threads, SIGKILL serve once `share` of them were answered 2xx,
    restart it and redeliver the unanswered and a quarter of the answered, shuffled. A
    redelivery answered 5xx, 429 or not at all is sent again, up to `attempts` times in all
    (the platform's retries)."""
    port = port or free_port()
    served = serve(port, *flags, env=env)
    answered: set[int] = set()
    lock = threading.Lock()
    killed = threading.Event()
    kill_at = max(1, int(len(deliveries) * share))

    def send(index: int) -> None:
        if killed.is_set():
            return
        if 200 <= post(served.url + path, deliveries[index]) < 300:
            with lock:
                answered.add(index)
                if len(answered) == kill_at:
                    os.kill(served.process.pid, signal.SIGKILL)
                    killed.set()

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, range(len(deliveries))))
    assert killed.is_set(), f"the server was not killed mid-stream:\n{served.logs()}"
    served.process.wait(timeout=10)
    assert 0 < len(answered) < len(deliveries)

    again = serve(port, *flags, env=env)  # same port, same home: the state the crash left
    assert again.home == served.home
    rng = random.Random(seed)
    redeliver = [i for i in range(len(deliveries)) if i not in answered]
    redeliver += rng.sample(sorted(answered), len(answered) // 4)
    rng.shuffle(redeliver)

    def resend(index: int) -> int:
        status = 0
        for _ in range(attempts):
            status = post(again.url + path, deliveries[index])
            if status != 0 and status != 429 and status < 500:
                break
        return status

    with ThreadPoolExecutor(clients) as pool:
        statuses = list(pool.map(resend, redeliver))
    return Crash(again, answered, statuses)
