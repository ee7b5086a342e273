"""A Model deleted (policy Delete) and created again under its name with the same source, a
new uid: its source stays whatever the order of the deliveries (hypothesis). The old
Model's deletion, the new one's creation, shuffled and duplicated, routed as the broker
does (register's replies reach cleanup); cleanup reads the Models live in the cluster (the
in-memory one here; tests/integration/test_cleanup_recreated.py on the real apiserver).
Before, cleanup running before register heard of the new Model deleted its source."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.bootstrap import build
from modelhooks.core.errors import Forbidden
from modelhooks.core.settings import load_settings
from modelhooks.events.model import CanonicalEvent, ModelCreated, ModelDeleted
from modelhooks.handlers.cleanup import Target, live_sources
from tests.fakes.broker import route_to_cleanup
from tests.fakes.memory_cluster import InMemoryCluster
from tests.fakes.memory_registry import InMemoryModelRegistry

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _spec(root: Path) -> dict[str, Any]:
    return {
        "source": {"s3": {"uri": f"file://{root}/bert/1/"}},
        "version": "1",
        "deletionPolicy": "Delete",
    }


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(order=st.randoms(), duplicates=st.lists(st.integers(0, 5), max_size=4))
def test_a_recreated_models_source_stays_whatever_the_order(
    tmp_path_factory: Any, order: Any, duplicates: list[int]
) -> None:
    home: Path = tmp_path_factory.mktemp("recreated")
    root = home / "store" / "models"
    (root / "bert/1").mkdir(parents=True)
    for name in ("weights.bin", "_SUCCESS"):
        (root / f"bert/1/{name}").write_bytes(b"x")
    cluster = InMemoryCluster()
    spec = _spec(root)
    new = cluster.create("default", {"metadata": {"name": "bert"}, "spec": spec})  # the live one
    app = build(
        load_settings(env={"MODELHOOKS_HOME": str(home)}),
        registry=InMemoryModelRegistry(),
        models=cluster,
    )
    register, cleanup = app.function("register"), app.function("cleanup")

    def event(id_: str, data: Any, hours: int) -> CanonicalEvent:
        return CanonicalEvent(
            id=id_, source="t", type=data.TYPE, data=data, time=T0 + timedelta(hours=hours)
        )

    common: dict[str, Any] = {"name": "bert", "namespace": "default", "version": "1", "spec": spec}
    events = [
        event("old-created", ModelCreated(uid="old", **common), 0),
        event("old-deleted", ModelDeleted(uid="old", **common), 1),
        event("new-created", ModelCreated(uid=new["metadata"]["uid"], **common), 2),
    ]
    route_to_cleanup(events, register, cleanup, order=order, duplicates=duplicates)
    assert sorted(p.name for p in (root / "bert/1").iterdir()) == ["_SUCCESS", "weights.bin"]


def test_without_another_model_the_deleted_ones_source_goes(tmp_path: Path) -> None:
    """The rule spares only what another live Model names: the deleted one's own (Terminating,
    or gone), or one of another source, is no reason to keep it."""
    root = tmp_path / "store" / "models"
    (root / "bert/1").mkdir(parents=True)
    (root / "bert/1/weights.bin").write_bytes(b"x")
    cluster = InMemoryCluster()
    spec = _spec(root)
    other = {**spec, "source": {"s3": {"uri": f"file://{root}/gpt/1/"}}}
    cluster.create("default", {"metadata": {"name": "gpt"}, "spec": other})
    cluster.create("default", {"metadata": {"name": "bert", "finalizers": ["f"]}, "spec": spec})
    uid = cluster.list_models("default")[-1]["metadata"]["uid"]
    cluster.delete("default", "bert")  # Terminating: its finalizer waits on cleanup
    app = build(
        load_settings(env={"MODELHOOKS_HOME": str(tmp_path)}),
        registry=InMemoryModelRegistry(),
        models=cluster,
    )
    gone = ModelDeleted(name="bert", namespace="default", version="1", uid=uid, spec=spec)
    for deleted in (gone, ModelDeleted(name="bert", version="1", spec=spec)):  # uid or none
        app.function("cleanup").handle(
            CanonicalEvent(id=str(deleted.uid), source="t", type=gone.TYPE, data=deleted, time=T0)
        )
    assert not (root / "bert/1").exists() or not list((root / "bert/1").iterdir())


def test_models_it_may_not_list_delete_nothing_and_name_the_role(tmp_path: Path) -> None:
    """Not knowing which Models are live, cleanup deletes nothing: 403 naming its role."""
    root = tmp_path / "store" / "models"
    (root / "bert/1").mkdir(parents=True)
    (root / "bert/1/weights.bin").write_bytes(b"x")

    class Refusing(InMemoryCluster):
        def list_models(self, namespace: str) -> list[dict[str, Any]]:
            raise Forbidden("no", namespace=namespace)

    app = build(
        load_settings(env={"MODELHOOKS_HOME": str(tmp_path)}),
        registry=InMemoryModelRegistry(),
        models=Refusing(),
    )
    gone = ModelDeleted(name="bert", version="1", uid="u", spec=_spec(root))
    with pytest.raises(Forbidden, match="ClusterRole modelhooks-cleanup"):
        app.function("cleanup").handle(
            CanonicalEvent(id="d", source="t", type=gone.TYPE, data=gone, time=T0)
        )
    assert (root / "bert/1/weights.bin").exists()


@pytest.mark.parametrize(
    ("deleted", "live"),
    [
        (
            "r.example:5000/models/bert:v1@sha256:" + "a" * 64,
            "r.example:5000/models/bert@sha256:" + "a" * 64,
        ),
        (
            "r.example:5000/models/bert@sha256:" + "a" * 64,
            "r.example:5000/models/bert:v2@sha256:" + "a" * 64,
        ),
        ("r.example:5000/models/bert:v1@sha256:" + "a" * 64, "r.example:5000/models/bert:v1"),
    ],
)
def test_a_digest_or_tag_another_model_names_is_kept_whatever_else_its_reference_says(
    deleted: str, live: str
) -> None:
    """A reference `repo:tag@digest` is the repository `repo`: a live Model naming the same
    digest (or tag) keeps it. Before, the tag stayed in the repository's name
    (`models/bert:v1`), so no other reference of that repository overlapped it."""
    cluster = InMemoryCluster()
    cluster.create(
        "default", {"metadata": {"name": "other"}, "spec": {"source": {"oci": {"reference": live}}}}
    )
    gone = ModelDeleted(
        uid="old", name="bert", namespace="default", version="1",
        spec={"source": {"oci": {"reference": deleted}}},
    )  # fmt: skip
    target = Target(f"oci://{deleted}", "sha256:" + "a" * 64)
    assert list(live_sources(gone, [target], cluster)) == [target.uri]
