"""cleanup killed (SIGKILL) between its listing and its deletes, then the events delivered
again, duplicated and shuffled: nothing outside the policy is deleted, and the end state is
the one the same events leave without the crash (a run on a twin of the store, alongside).

(prune killed between its untags and its manifest deletes leaves those manifests untagged,
which the distribution API cannot list: the registry's garbage collection reclaims them;
see modelhooks.handlers.prune)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from modelhooks import bootstrap
from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.bootstrap import build
from modelhooks.core.settings import load_settings
from modelhooks.delivery.encoding import structured
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
from tests.contract.register_order import snapshot

pytestmark = pytest.mark.integration

OLD = datetime(2026, 1, 1, tzinfo=UTC)

CLEANUP_KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from modelhooks.adapters.object_store.local import LocalObjectStore
    from modelhooks.bootstrap import build
    from modelhooks.core.settings import load_settings
    from modelhooks.delivery.dedupe import _replies

    home, events = sys.argv[1], _replies(sys.argv[2].encode())
    deleting = LocalObjectStore.delete_many

    def killed(self, bucket, objects, *, versions=False):
        deleting(self, bucket, objects[: len(objects) // 2], versions=versions)
        os.kill(os.getpid(), signal.SIGKILL)

    LocalObjectStore.delete_many = killed
    broker = build(load_settings(env={"MODELHOOKS_HOME": home})).broker()
    for event in events:
        broker.publish(event)
    """
)


def _cleanup_events(home: Path) -> list[CanonicalEvent]:
    """Versions of `bert` pushed before and after its deletion (policy Delete), and `gpt`,
    live, laid in `home`'s store; the deletion last."""
    events = []
    for model, hours in (("bert", (0, 3, 6, 12)), ("gpt", (1, 2))):
        for n, h in enumerate(hours):
            for name in ("weights.bin", "config.json", "_SUCCESS"):
                lay = home / "store" / "models" / "models" / model / str(n)
                lay.mkdir(parents=True, exist_ok=True)
                (lay / name).write_bytes(f"{model} {n} {name}".encode())
            data = ArtifactPushed(
                model=model, version=str(n), uri=f"gs://models/models/{model}/{n}/",
                digest=f"gcs-generation:{n}", store="gcs",
            )  # fmt: skip
            events.append(CanonicalEvent(id=f"{model}-{n}", source="t", type=data.TYPE,
                                         data=data, time=OLD + timedelta(hours=h)))  # fmt: skip
    gone = ModelDeleted(name="bert", spec={"deletionPolicy": "Delete"})
    return [*events, CanonicalEvent(id="bert-d", source="t", type=gone.TYPE, data=gone,
                                    time=OLD + timedelta(hours=10))]  # fmt: skip


def _end_state(home: Path) -> tuple[Any, ...]:
    store = home / "store"
    files = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    registry = SqliteModelRegistry(home / "registry.db")
    try:
        states = {  # not the digests: a local file's generation is its own (mtime)
            name: (state, {v: s for v, (s, _) in versions.items()})
            for name, (state, versions) in snapshot(registry, {"bert", "gpt"}).items()
        }
        return files, states
    finally:
        registry.close()


def test_cleanup_killed_between_its_listing_and_its_deletes(tmp_path: Path) -> None:
    """The pushes, then the deletion, whose cleanup is killed halfway through its deletes;
    then every event again, duplicated and shuffled, on a restarted process: the end state
    of the same deliveries without the kill, and nothing of a live version deleted."""
    crashed, twin = tmp_path / "crashed", tmp_path / "twin"
    first = _cleanup_events(crashed)
    _cleanup_events(twin)
    body = json.dumps([structured(e) for e in first])
    child = subprocess.run(
        [sys.executable, "-c", CLEANUP_KILLED, str(crashed), body],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    left = {p.name for p in (crashed / "store" / "models" / "models" / "bert").rglob("*")}
    assert "weights.bin" in left or "config.json" in left, "killed before all went"
    rng = random.Random(8)
    again = first + rng.sample(first, 4)
    rng.shuffle(again)
    for home, deliveries in ((crashed, again), (twin, first + again)):
        broker = build(load_settings(env={"MODELHOOKS_HOME": str(home)})).broker()
        for event in deliveries:
            assert all(o.status < 300 for o in broker.publish(event)), event.id
        bootstrap.reset()
    files, registered = _end_state(crashed)
    assert (files, registered) == _end_state(twin)
    kept = {f.rsplit("/", 1)[0] for f in files}
    assert kept == {"models/models/bert/3", "models/models/gpt/0", "models/models/gpt/1"}
