"""The embedded store under any sequence of what a user does to it — write weights, write
the ready marker, remove the marker, restart `serve` — answers every announcement 2xx or
409 (never a 5xx), registers a version only when its prefix held a model, and names it by
the content it held when first registered: a touched marker never changes or duplicates it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks import bootstrap
from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.adapters.object_store.local import LocalObjectStore
from modelhooks.adapters.object_store.watch import LocalStoreWatcher
from modelhooks.bootstrap import build
from modelhooks.core.content import content_digest
from modelhooks.core.settings import load_settings

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(["a.bin", "b.bin"]), st.binary(max_size=8)),
        st.tuples(st.just("remove"), st.sampled_from(["a.bin", "b.bin"]), st.just(b"")),
        st.tuples(st.just("mark"), st.just(""), st.binary(max_size=4)),
        st.tuples(st.just("unmark"), st.just(""), st.just(b"")),
        st.tuples(st.just("restart"), st.just(""), st.just(b"")),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_any_sequence_of_drops_marks_and_restarts(ops: list[tuple[str, str, bytes]]) -> None:
    home = Path(tempfile.mkdtemp())
    try:
        run(home, ops)
    finally:
        bootstrap.reset()
        shutil.rmtree(home)


def run(home: Path, ops: list[tuple[str, str, bytes]]) -> None:
    version = home / "store" / "models" / "models" / "demo" / "1"
    version.mkdir(parents=True)
    app = build(load_settings(env={"MODELHOOKS_HOME": str(home)}))
    statuses: list[int] = []
    registered: str | None = None  # the content digest of the first registration

    def publish(event: object) -> None:
        statuses.extend(o.status for o in broker.publish(event))  # type: ignore[arg-type]

    broker = app.broker()
    watcher = LocalStoreWatcher(home / "store", app.delivery.layout, publish, 1.0)
    for op, name, data in ops:
        if op == "write":
            (version / name).write_bytes(data)
        elif op == "remove":
            (version / name).unlink(missing_ok=True)
        elif op == "mark":
            (version / "_SUCCESS").write_bytes(data)
        elif op == "unmark":
            (version / "_SUCCESS").unlink(missing_ok=True)
        else:  # a restart: a new process on the same state
            bootstrap.reset()
            app = build(load_settings(env={"MODELHOOKS_HOME": str(home)}))
            broker = app.broker()
            watcher = LocalStoreWatcher(home / "store", app.delivery.layout, publish, 1.0)
        now = current_digest(home)
        before = len(statuses)
        announced = watcher.poll()
        if announced and registered is None and now and 200 <= statuses[-1] < 300:
            registered = now
        assert all(s < 300 or s == 409 for s in statuses[before:]), (op, statuses[before:])
        if any(s == 409 for s in statuses[before:]):
            assert registered is not None and now != registered  # only changed content
    assert stored_digest(home) == registered


def current_digest(home: Path) -> str:
    store = LocalObjectStore(home / "store")
    listing = store.list("models", "models/demo/1/")
    return content_digest(listing, "models/demo/1/", {"_SUCCESS", "model.sig"})


def stored_digest(home: Path) -> str | None:
    db = home / "registry.db"
    if not db.exists():
        return None
    registry = SqliteModelRegistry(db)
    try:
        model = registry.get_model("demo")
        if model is None:
            return None
        (version,) = registry.list_versions(model.id)
        return version.custom_properties["digest"]
    finally:
        registry.close()
