"""`register` killed between its writes, then delivered again (at least once), ends as if it
had never been killed (tests/contract/register_crash.py), on the in-memory fake: its
transaction does not roll back, as Kubeflow's REST writes and the Kubernetes resources do
not, so a delivery killed after creating the RegisteredModel, the ModelVersion, or writing
a deletion's time, leaves those writes behind for the redelivery to find."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.contract.register_crash import killed_and_redelivered, state, time_ordered_state
from tests.contract.register_order import Scenario, scenarios
from tests.fakes.memory_registry import InMemoryModelRegistry


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(max_events=16), data=st.data())
def test_a_delivery_killed_between_its_writes_and_delivered_again_ends_as_never_killed(
    scenario: Scenario, data: st.DataObject
) -> None:
    registry = InMemoryModelRegistry()
    kills = killed_and_redelivered(registry, scenario, data.draw)
    assert state(registry, scenario.names()) == time_ordered_state(scenario), kills
