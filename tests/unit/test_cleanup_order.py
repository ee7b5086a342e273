"""cleanup's effect does not depend on delivery order (hypothesis): pushes of a model's
versions and its deletion (policy Delete), shuffled and duplicated, routed as the broker
does (register's replies reach cleanup): whatever the order, exactly the versions pushed
before the deletion lose their objects."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.bootstrap import build
from modelhooks.core.settings import load_settings
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
from tests.fakes.broker import route_to_cleanup
from tests.fakes.memory_registry import InMemoryModelRegistry

T0 = datetime(2026, 11, 1, tzinfo=UTC)
DELETED = T0 + timedelta(hours=10)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    hours=st.lists(st.integers(0, 20).filter(lambda h: h != 10), min_size=1, max_size=5),
    order=st.randoms(),
    duplicates=st.lists(st.integers(0, 10), max_size=4),
)
def test_the_versions_pushed_before_the_deletion_go_whatever_the_order(
    tmp_path_factory: object, hours: list[int], order: random.Random, duplicates: list[int]
) -> None:
    home: Path = tmp_path_factory.mktemp("order")  # type: ignore[attr-defined]
    root = home / "store" / "models"
    app = build(load_settings(env={"MODELHOOKS_HOME": str(home)}), registry=InMemoryModelRegistry())
    register, cleanup = app.function("register"), app.function("cleanup")
    events = []
    for n, h in enumerate(hours):
        for name in ("weights.bin", "_SUCCESS"):
            (root / f"bert/{n}").mkdir(parents=True, exist_ok=True)
            (root / f"bert/{n}/{name}").write_bytes(b"x")
        data = ArtifactPushed(
            model="bert", version=str(n), uri=f"file://{root}/bert/{n}/",
            digest=f"local-generation:{n}", store="local",
        )  # fmt: skip
        events.append(CanonicalEvent(id=f"p{n}", source="t", type=data.TYPE, data=data,
                                     time=T0 + timedelta(hours=h)))  # fmt: skip
    gone = ModelDeleted(name="bert", namespace="default", spec={"deletionPolicy": "Delete"})
    events.append(CanonicalEvent(id="d", source="t", type=gone.TYPE, data=gone, time=DELETED))
    route_to_cleanup(events, register, cleanup, order=order, duplicates=duplicates)
    for n, h in enumerate(hours):
        left = sorted(p.name for p in (root / f"bert/{n}").iterdir())
        assert left == ([] if h < 10 else ["_SUCCESS", "weights.bin"]), (n, h)
