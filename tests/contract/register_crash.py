"""`register` killed between its writes, then delivered again: the property for registries
without rollback (Kubeflow over REST, the Kubernetes resources, the in-memory fake). Every
prefix of a delivery's writes, followed later by the whole delivery (at least once), in any
order among the other events (duplicated), leaves the state of applying the events once
each in time order: each model's and version's state and facts, and each version's
artifacts.

Used by tests/unit/test_register_crash_property.py (the fake) and the Kubeflow and
Kubernetes registries' integration tests, and over Models created, deleted and created again
by tests/contract/register_recreated.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from hypothesis import strategies as st

from modelhooks.core.errors import ModelhooksError
from modelhooks.core.ports import ModelRegistry
from modelhooks.events.model import CanonicalEvent
from tests.contract.register_order import Scenario, apply, apply_all, in_time_order

__all__ = ["Dying", "Events", "Killed", "killed_and_redelivered", "state", "time_ordered_state"]

WRITES = frozenset(
    {"create_model", "update_model", "create_version", "update_version", "upsert_artifact"}
)
FACTS = ("digest", "uri", "store", "namespace")  # and every modelhooks.* property


class Killed(BaseException):
    """The process died here (SIGKILL): nothing of the delivery runs after it."""


class Dying:
    """A registry killed before its `left`-th write from now (None: never)."""

    def __init__(self, registry: ModelRegistry) -> None:
        self.registry = registry
        self.left: int | None = None

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.registry, name)
        if name not in WRITES:
            return found

        def write(*args: Any, **kwargs: Any) -> Any:
            if self.left is not None:
                if self.left <= 1:
                    self.left = None
                    raise Killed(name)
                self.left -= 1
            return found(*args, **kwargs)

        return write


def _facts(props: Any) -> dict[str, str]:
    return {k: str(v) for k, v in props.items() if k in FACTS or k.startswith("modelhooks.")}


def state(registry: ModelRegistry, names: set[str]) -> dict[str, Any]:
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
                _facts(v.custom_properties),
                sorted(
                    (a.name, a.uri, a.digest, a.state.value) for a in registry.list_artifacts(v.id)
                ),
            )
            for v in registry.list_versions(model.id)
        }
        out[name] = (model.state.value, _facts(model.custom_properties), versions)
    return out


def time_ordered_state(scenario: Scenario) -> dict[str, Any]:
    from tests.fakes.memory_registry import InMemoryModelRegistry

    reference = InMemoryModelRegistry()
    apply_all(reference, in_time_order(scenario.events))
    return state(reference, scenario.names())


class Events(Protocol):
    """A scenario: its deliveries (register_order's Scenario, register_recreated's)."""

    @property
    def events(self) -> tuple[CanonicalEvent, ...]: ...


def killed_and_redelivered(
    registry: ModelRegistry,
    scenario: Events,
    draw: Callable[..., Any],
    *,
    deliver: Callable[[ModelRegistry, CanonicalEvent], None] = apply,
    answered: list[CanonicalEvent] | None = None,
) -> int:
    """Deliver the scenario's events (by `deliver`) in a drawn order, each killed before a
    drawn write or not; a killed one (not answered) is delivered again at a drawn later
    place, one answered 5xx (a lost race) at the end. How many were killed; `answered`
    gets the deliveries in the order they were answered."""
    dying = Dying(registry)
    queue = list(draw(st.permutations(scenario.events), label="order"))
    kills = retries = 0
    while queue:
        event = queue.pop(0)
        dying.left = draw(st.one_of(st.none(), st.integers(1, 6)), label="killed before write")
        try:
            deliver(dying, event)  # type: ignore[arg-type]
        except Killed:
            kills += 1
            queue.insert(draw(st.integers(0, len(queue)), label="redelivered at"), event)
        except ModelhooksError:
            queue.append(event)
            retries += 1
            assert retries < 1000, "a delivery never took effect"
        else:
            if answered is not None:
                answered.append(event)
        dying.left = None
    return kills
