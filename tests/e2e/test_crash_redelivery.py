"""At-least-once with a crash in the middle: `modelhooks serve` (SQLite) takes a shuffled,
duplicated event set from 6 concurrent clients, is killed with SIGKILL mid-stream,
restarted, and everything unanswered is redelivered (plus some answered ones again). The
registry ends in the state of applying the set in time order, and stays readable."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.delivery.encoding import structured
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
from tests.contract.register_order import T0, apply_all, in_time_order, snapshot
from tests.e2e.conftest import Served
from tests.e2e.packaging import free_port
from tests.fakes.memory_registry import InMemoryModelRegistry

pytestmark = pytest.mark.e2e


def event_set(seed: int, models: int = 40) -> list[CanonicalEvent]:
    rng = random.Random(seed)
    events: list[CanonicalEvent] = []
    for m in range(models):
        name = f"crash-m{m}"
        for v in range(rng.randint(1, 4)):
            at = T0 + timedelta(minutes=rng.randint(0, 60))
            uri = f"gs://models/models/{name}/{v}/"
            data: Any = ArtifactPushed(
                model=name,
                version=str(v),
                uri=uri,
                digest=f"content-sha256:{name}-{v}",
                store="gcs",
            )
            events.append(
                CanonicalEvent(
                    id=f"{name}-p{v}", source="crash", type=data.TYPE, data=data, time=at
                )
            )
        for d in range(rng.randint(0, 2)):
            at = T0 + timedelta(minutes=rng.randint(0, 60))
            data = ModelDeleted(name=name)
            events.append(
                CanonicalEvent(
                    id=f"{name}-d{d}", source="crash", type=data.TYPE, data=data, time=at
                )
            )
    deliveries = events + rng.sample(events, len(events) * 3 // 10)  # 30 % exact duplicates
    rng.shuffle(deliveries)
    return deliveries


def post(url: str, event: CanonicalEvent) -> bool:
    body = json.dumps(structured(event)).encode()
    req = urllib.request.Request(
        f"{url}/functions/register",
        data=body,
        headers={"Content-Type": "application/cloudevents+json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return bool(resp.status < 300)
    except (urllib.error.URLError, OSError):
        return False


def test_a_kill_mid_stream_and_a_redelivery_end_in_the_time_ordered_state(
    serve: Callable[..., Served],
) -> None:
    deliveries = event_set(seed=7)
    port = free_port()
    served = serve(port)
    answered: set[int] = set()
    lock = threading.Lock()
    killed = threading.Event()

    def send(index: int) -> None:
        if killed.is_set():
            return
        if post(served.url, deliveries[index]):
            with lock:
                answered.add(index)
                if len(answered) == len(deliveries) * 2 // 5:
                    os.kill(served.process.pid, signal.SIGKILL)
                    killed.set()

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(send, range(len(deliveries))))
    assert killed.is_set(), "the server was not killed mid-stream"
    served.process.wait(timeout=10)
    assert 0 < len(answered) < len(deliveries)

    again = serve(port)  # same port, same home: the registry as the crash left it
    assert again.home == served.home
    rng = random.Random(11)
    redeliver = [i for i in range(len(deliveries)) if i not in answered]
    redeliver += rng.sample(sorted(answered), len(answered) // 4)
    rng.shuffle(redeliver)
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda i: post(again.url, deliveries[i]), redeliver))
    assert all(results), f"{results.count(False)} redeliveries failed:\n{again.logs()}"

    reference = InMemoryModelRegistry()
    apply_all(reference, in_time_order(deliveries))
    names = {
        e.data.model if isinstance(e.data, ArtifactPushed) else e.data.name for e in deliveries
    }  # type: ignore[union-attr]
    registry = SqliteModelRegistry(again.home / "registry.db")
    try:
        assert snapshot(registry, names) == snapshot(reference, names)
    finally:
        registry.close()
