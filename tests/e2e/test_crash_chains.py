"""The chains beyond register with a crash in the middle (tests/e2e/crash.py): shuffled,
duplicated deliveries from concurrent clients, `modelhooks serve` killed with SIGKILL
mid-stream, restarted, everything unanswered delivered again with some answered ones.

- the signing chain (`serve --signing-key`, SQLite, the local store): every version pushed
  and not deleted ends signed once, with a signature that verifies over its files as they
  are; a deleted model's versions keep no file, no signature and no signature record;
  nothing half-written is left or taken as signed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.adapters.object_store.local import LocalObjectStore
from modelhooks.adapters.signing import KeyVerifier, verify_model
from modelhooks.core.records import ModelState
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
from tests.contract.register_order import T0, apply_all, in_time_order
from tests.e2e.conftest import Served
from tests.e2e.crash import body_of, crash_and_redeliver
from tests.e2e.packaging import free_port
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.local_store import lay_model
from tests.unit.signing_material import make_key

pytestmark = pytest.mark.e2e

DELETE = {"deletionPolicy": "Delete"}
ROUTES = ("register", "sign")


def signing_set(home: Path, seed: int, models: int = 24) -> list[CanonicalEvent]:
    """Models of 1 to 3 versions laid in `home`'s store, a push of each at a random time, a
    deletion (policy Delete) of a third of the models, 30 % of the events again; shuffled."""
    rng = random.Random(seed)
    events: list[CanonicalEvent] = []
    for m in range(models):
        name = f"chain-m{m}"
        for v in range(rng.randint(1, 3)):
            content = f"weights of {name} {v} ".encode() * rng.randint(1, 64)
            lay_model(home, "models", f"models/{name}/{v}", content=content)
            data: Any = ArtifactPushed(
                model=name,
                version=str(v),
                uri=f"gs://models/models/{name}/{v}/",
                digest=f"gcs-generation:{m * 10 + v + 1}",  # named by its content at ingress
                store="gcs",
            )
            at = T0 + timedelta(minutes=rng.randint(0, 60))
            events.append(CanonicalEvent(id=f"{name}-p{v}", source="crash", type=data.TYPE,
                                         data=data, time=at))  # fmt: skip
        if rng.random() < 1 / 3:
            data = ModelDeleted(name=name, spec=DELETE)
            at = T0 + timedelta(minutes=rng.randint(0, 60))
            events.append(CanonicalEvent(id=f"{name}-d", source="crash", type=data.TYPE,
                                         data=data, time=at))  # fmt: skip
    deliveries = events + rng.sample(events, len(events) * 3 // 10)
    rng.shuffle(deliveries)
    return deliveries


def live_versions(deliveries: list[CanonicalEvent]) -> set[tuple[str, str]]:
    """(model, version) of every version live once the set is applied in time order."""
    reference = InMemoryModelRegistry()
    apply_all(reference, in_time_order(deliveries))
    live = set()
    for event in deliveries:
        if isinstance(event.data, ArtifactPushed):
            model = reference.get_model(event.data.model)
            version = reference.get_version(model.id, event.data.version) if model else None
            if version is not None and version.state == ModelState.LIVE:
                live.add((event.data.model, event.data.version))
    return live


def test_the_signing_chain_survives_a_kill_mid_stream(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    key = make_key(tmp_path)
    port = free_port()
    home = tmp_path / f"home-{port}"  # the serve fixture's home for this port
    deliveries = signing_set(home, seed=3)
    crash = crash_and_redeliver(serve, deliveries, "--signing-key", str(key.private), port=port)
    assert all(200 <= s < 300 for s in crash.statuses), f"{crash.statuses}\n{crash.again.logs()}"

    live = live_versions(deliveries)
    pushed = {
        (e.data.model, e.data.version) for e in deliveries if isinstance(e.data, ArtifactPushed)
    }
    assert live and pushed - live, "the set has versions of both kinds"
    store = LocalObjectStore(home / "store")
    registry = SqliteModelRegistry(home / "registry.db")
    try:
        for name, v in sorted(pushed):
            where = home / "store" / "models" / "models" / name / v
            files = sorted(p.name for p in where.iterdir()) if where.exists() else []
            model = registry.get_model(name)
            version = registry.get_version(model.id, v) if model else None
            props = version.custom_properties if version else {}
            if (name, v) in live:
                assert version is not None and version.state == ModelState.LIVE, (name, v)
                assert files == ["model.sig", "model.sig.binding", "weights.bin"] or files == [
                    "model.sig",
                    "weights.bin",
                ], (name, v, files)
                verified = verify_model(
                    store, "models", f"models/{name}/{v}/", KeyVerifier(key.public)
                )
                assert props["signature.root_digest"] == f"sha256:{verified.root_digest}"
                assert props["signature.artifact_digest"] == props["digest"]
                assert props["signature.uri"] == f"gs://models/models/{name}/{v}/model.sig"
            else:  # deleted: nothing of it left, no signature recorded for files now gone
                assert files == [], (name, v, files)
                assert version is None or version.state == ModelState.ARCHIVED, (name, v)
                assert not any(k.startswith("signature.") for k in props), (name, v, props)
    finally:
        registry.close()


def _answer(url: str, body: bytes) -> tuple[int, dict[str, str], Any]:
    """(status, ce-* headers, body as JSON) of one delivery."""
    req = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/cloudevents+json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        headers = {k.lower(): v for k, v in resp.headers.items() if k.lower().startswith("ce-")}
        return resp.status, headers, json.loads(resp.read() or b"null")


def _recorded(home: Path, event_id: str) -> bool:
    """Whether the delivery log holds a record of `event_id` (as a restart reads it)."""
    db = home / "deliveries.db"
    if not db.exists():
        return False
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return bool(conn.execute("SELECT 1 FROM deliveries WHERE id=?", (event_id,)).fetchone())


def test_a_kill_between_the_effect_and_its_record_neither_doubles_it_nor_changes_the_reply(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    """The delivery log writes its records a moment after the answer (group commit): a kill
    then loses the record of an effect that committed. The redelivery of that id runs the
    functions again on the state they left: one registration, the signature as written, and
    the answer the first delivery got."""
    key = make_key(tmp_path)
    port = free_port()
    home = tmp_path / f"home-{port}"
    flags = ("--signing-key", str(key.private))
    served = serve(port, *flags)
    for attempt in range(20):  # the kill lands before the group commit almost always
        name = f"bert{attempt}"
        lay_model(home, "models", f"models/{name}/1", content=f"weights {attempt}".encode())
        data = ArtifactPushed(
            model=name, version="1", uri=f"gs://models/models/{name}/1/", digest="gcs-generation:1",
            store="gcs",
        )  # fmt: skip
        event = CanonicalEvent(id=f"push-{attempt}", source="crash", type=data.TYPE, data=data,
                               time=T0)  # fmt: skip
        # as the platform delivers it to each function's own endpoint: the reply is the answer
        first = [_answer(f"{served.url}/functions/{fn}", body_of(event)) for fn in ROUTES]
        os.kill(served.process.pid, signal.SIGKILL)
        served.process.wait(timeout=10)
        if not _recorded(home, event.id):
            break
        served = serve(port, *flags)
    else:
        pytest.fail("every record was written before the kill")
    where = home / "store" / "models" / "models" / name / "1"
    signature = (where / "model.sig").read_bytes()

    again = serve(port, *flags)
    assert [_answer(f"{again.url}/functions/{fn}", body_of(event)) for fn in ROUTES] == first
    assert (where / "model.sig").read_bytes() == signature  # not signed again
    registry = SqliteModelRegistry(home / "registry.db")
    try:
        model = registry.get_model(name)
        assert model is not None
        (version,) = registry.list_versions(model.id)
        assert len(registry.list_artifacts(version.id)) == 1
    finally:
        registry.close()
