"""`register` killed between its writes, then delivered again (at least once), ends as if it
had never been killed: a registry over REST (Kubeflow) or the Kubernetes API has no
rollback, so a delivery killed after creating the RegisteredModel, the ModelVersion, or
writing a deletion's time, leaves those writes behind. The in-memory fake keeps them too
(its transaction does not roll back), so the property here is the one Kubeflow needs: every
prefix of a delivery's writes, followed later by the whole delivery, in any order among the
other events (duplicated), leaves the state of applying the events once each in time order:
each model's and version's state and facts, and each version's artifact."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.core.errors import ModelhooksError
from modelhooks.core.ports import ModelRegistry
from tests.contract.register_order import (
    Scenario,
    apply,
    apply_all,
    in_time_order,
    scenarios,
)
from tests.fakes.memory_registry import InMemoryModelRegistry

WRITES = ("create_model", "update_model", "create_version", "update_version", "upsert_artifact")


class Killed(BaseException):
    """The process died here (SIGKILL): no handler of the delivery runs after it."""


class Dying(InMemoryModelRegistry):
    """The fake, killed before its `left`-th write from now (None: never)."""

    left: int | None = None

    def __getattribute__(self, name: str) -> Any:
        found = super().__getattribute__(name)
        if name not in WRITES:
            return found

        def write(*args: Any, **kwargs: Any) -> Any:
            left = self.left
            if left is not None:
                if left <= 1:
                    self.left = None
                    raise Killed(name)
                self.left = left - 1
            return found(*args, **kwargs)

        return write


def full_snapshot(registry: ModelRegistry, names: set[str]) -> dict[str, Any]:
    """Every model's state and facts, its versions' too, and each version's artifacts (name,
    uri, digest, state): what a half-done delivery could leave different."""
    out: dict[str, Any] = {}
    for name in sorted(names):
        model = registry.get_model(name)
        if model is None:
            continue
        versions = {
            v.name: (
                v.state.value,
                dict(v.custom_properties),
                sorted(
                    (a.name, a.uri, a.digest, a.state.value) for a in registry.list_artifacts(v.id)
                ),
            )
            for v in registry.list_versions(model.id)
        }
        out[name] = (model.state.value, dict(model.custom_properties), versions)
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(max_events=16), data=st.data())
def test_a_delivery_killed_between_its_writes_and_delivered_again_ends_as_never_killed(
    scenario: Scenario, data: st.DataObject
) -> None:
    queue = list(data.draw(st.permutations(scenario.events), label="order"))
    registry = Dying()
    draw: Callable[..., Any] = data.draw
    kills = retries = 0
    while queue:
        event = queue.pop(0)
        registry.left = draw(st.one_of(st.none(), st.integers(1, 6)), label="killed before write")
        try:
            apply(registry, event)
        except Killed:
            kills += 1  # not answered: delivered again, later, among the others
            queue.insert(draw(st.integers(0, len(queue)), label="redelivered at"), event)
        except ModelhooksError:  # a lost race answers 5xx: redelivered too
            queue.append(event)
            retries += 1
            assert retries < 1000, "a delivery never took effect"
        registry.left = None
    reference = InMemoryModelRegistry()
    apply_all(reference, in_time_order(scenario.events))
    names = scenario.names()
    assert full_snapshot(registry, names) == full_snapshot(reference, names), kills
