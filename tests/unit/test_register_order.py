"""Order independence of `register` on SQLite and on the in-memory fake: permutations,
duplicates and concurrent interleavings of one event set all end in the state of applying
it in time order (tests/contract/register_order.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.core.ports import ModelRegistry
from tests.contract.register_order import (
    Scenario,
    apply_all,
    expected,
    scenarios,
    snapshot,
)
from tests.fakes.memory_registry import InMemoryModelRegistry


def sqlite() -> SqliteModelRegistry:
    return SqliteModelRegistry(Path(tempfile.mkdtemp(prefix="order-")) / "registry.db")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), data=st.data())
def test_any_order_and_multiplicity_ends_in_the_time_ordered_state(
    scenario: Scenario, data: st.DataObject
) -> None:
    order = data.draw(st.permutations(scenario.events), label="order")
    for registry in (InMemoryModelRegistry(), sqlite()):
        apply_all(registry, order)
        assert snapshot(registry, scenario.names()) == expected(scenario), type(registry)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(max_events=40), data=st.data())
def test_concurrent_interleavings_end_in_the_time_ordered_state(
    scenario: Scenario, data: st.DataObject
) -> None:
    order = data.draw(st.permutations(scenario.events), label="order")
    registry: ModelRegistry = sqlite()
    apply_all(registry, order, workers=8)
    assert snapshot(registry, scenario.names()) == expected(scenario)
