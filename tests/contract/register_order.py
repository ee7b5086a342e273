"""The order property of `register`: the registry's final state is a function of the SET of
events — not of their order, their multiplicity or their interleaving — and equals the
state of applying them one by one in time order.

Used by tests/unit/test_register_order.py (SQLite and the in-memory fake) and
tests/integration/test_register_order_kubeflow.py (the real Kubeflow Model Registry).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from modelhooks.core.errors import ModelhooksError
from modelhooks.core.ports import ModelRegistry
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
from modelhooks.handlers.register import archive_model, register_model

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
Snapshot = dict[str, tuple[str, dict[str, tuple[str, str]]]]


@dataclass(frozen=True)
class Scenario:
    """Events over a few models; `prefix` keeps model names unique per example on a shared
    server."""

    events: tuple[CanonicalEvent, ...]
    prefix: str

    def names(self) -> set[str]:
        return {_name(e) for e in self.events}


def _name(event: CanonicalEvent) -> str:
    data = event.data
    return data.model if isinstance(data, ArtifactPushed) else data.name  # type: ignore[union-attr]


@st.composite
def scenarios(draw: Callable[..., Any], max_events: int = 24) -> Scenario:
    prefix = f"p{uuid.uuid4().hex[:8]}"
    models = [f"{prefix}-m{i}" for i in range(draw(st.integers(1, 3)))]
    minute = st.one_of(st.none(), st.integers(0, 30)).map(
        lambda m: None if m is None else T0 + timedelta(minutes=m)
    )
    push = st.tuples(st.just("push"), st.sampled_from(models), st.sampled_from("123"), minute)
    delete = st.tuples(st.just("delete"), st.sampled_from(models), st.just(""), minute)
    specs = draw(st.lists(st.one_of(push, push, delete), min_size=1, max_size=max_events))
    events = []
    for i, (kind, model, version, at) in enumerate(specs):
        data: Any
        if kind == "push":  # one digest per version: conflicting digests are another property
            uri = f"gs://models/models/{model}/{version}/"
            data = ArtifactPushed(
                model=model, version=version, uri=uri, digest=f"d-{model}-{version}", store="gcs"
            )
        else:
            data = ModelDeleted(name=model, namespace="default")
        events.append(CanonicalEvent(id=f"e{i}", source="prop", type=data.TYPE, data=data, time=at))
    duplicates = draw(st.lists(st.sampled_from(events), max_size=len(events) // 3 + 1))
    return Scenario(tuple(events) + tuple(duplicates), prefix)


def apply(registry: ModelRegistry, event: CanonicalEvent) -> None:
    """Deliver one event to register's logic (no dedupe: every duplicate is applied)."""
    if isinstance(event.data, ArtifactPushed):
        register_model(event, event.data, registry=registry)
    else:
        assert isinstance(event.data, ModelDeleted)
        archive_model(event, event.data, registry=registry)


def apply_all(registry: ModelRegistry, events: Iterable[CanonicalEvent], workers: int = 1) -> None:
    """Apply in this order (or interleaved over `workers` threads), redelivering what failed
    transiently, as the platform does."""

    def deliver(event: CanonicalEvent) -> None:
        for _ in range(20):
            try:
                apply(registry, event)
                return
            except ModelhooksError:  # a lost race surfaces as a retryable error
                continue
        apply(registry, event)

    if workers == 1:
        for event in events:
            deliver(event)
        return
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(deliver, list(events)))


def in_time_order(events: Sequence[CanonicalEvent]) -> list[CanonicalEvent]:
    never = datetime.max.replace(tzinfo=UTC)
    unique = {e.id: e for e in events}.values()  # duplicates add nothing in time order
    return sorted(unique, key=lambda e: (e.time or never, e.id))


def snapshot(registry: ModelRegistry, names: set[str]) -> Snapshot:
    """Model state, and each version's state and digest, for the scenario's models."""
    out: Snapshot = {}
    for name in sorted(names):
        model = registry.get_model(name)
        if model is None:
            continue
        versions = {
            v.name: (v.state.value, v.custom_properties.get("digest", ""))
            for v in registry.list_versions(model.id)
        }
        out[name] = (model.state.value, versions)
    return out


def expected(scenario: Scenario) -> Snapshot:
    """The state the scenario's events leave when applied in time order, on the fake."""
    from tests.fakes.memory_registry import InMemoryModelRegistry

    reference = InMemoryModelRegistry()
    apply_all(reference, in_time_order(scenario.events))
    return snapshot(reference, scenario.names())
