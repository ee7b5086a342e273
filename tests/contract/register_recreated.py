"""The re-creation property of `register`: a Model deleted and created again under its name
(a new uid, the same or another version) keeps what its last incarnation registered, whatever
the order, the multiplicity and the times of the deliveries. A deletion is sent again late
with a new time (the sender's clock: a watch re-sent, a relist, a set-aside lane): it names
its Model's uid, and archives only what that uid registered.

Each delivery may be killed after any prefix of its writes and delivered again later
(`recreations_killed_and_redelivered`, the crash property of
tests/contract/register_crash.py): the end state and facts are those of each answered
delivery applied once (past KEPT_UIDS Models, which uid is forgotten depends on the order).

Used by tests/unit/test_register_recreated_property.py (SQLite and the in-memory fake),
tests/integration/test_register_order_kubeflow.py (the real Kubeflow Model Registry) and
tests/integration/test_kubernetes_registry.py (the registry's CRDs on a real API server).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from hypothesis import strategies as st

from modelhooks.core.errors import ModelhooksError
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.records import DELETED_UIDS, REGISTERED_BY, UIDLESS_DELETED_AT
from modelhooks.events.model import CanonicalEvent, ModelCreated, ModelDeleted
from modelhooks.handlers.register import KEPT_UIDS, handle
from tests.contract import register_crash
from tests.contract.register_order import T0, Snapshot, snapshot

SHA = {"1": "a" * 64, "2": "b" * 64}  # one source per version name: no digest conflicts


@dataclass(frozen=True)
class Recreated:
    """Deliveries of the incarnations of one Model name; `alive`: the version names the last
    incarnation registered, if it is not deleted (what must stay LIVE)."""

    events: tuple[CanonicalEvent, ...]
    name: str
    versions: frozenset[str]
    alive: frozenset[str]

    def expected(self) -> Snapshot:
        states = {
            v: ("LIVE" if v in self.alive else "ARCHIVED", f"sha256:{SHA[v]}")
            for v in self.versions
        }
        return {self.name: ("LIVE" if self.alive else "ARCHIVED", states)}


def model_event(kind: type[ModelCreated | ModelDeleted], name: str, uid: str, version: str) -> Any:
    source = {
        "http": {"url": f"https://models.example/{name}/{version}.tgz", "sha256": SHA[version]}
    }
    return kind(name=name, namespace="default", version=version, uid=uid, spec={"source": source})


# more incarnations than register keeps uids of (KEPT_UIDS deleted ones a model, registering
# ones a version): the oldest are forgotten as deletions naming no uid
BEYOND_KEPT = st.integers(KEPT_UIDS + 2, KEPT_UIDS + 3)


@st.composite
def recreations(draw: Callable[..., Any]) -> Recreated:
    """1-3 incarnations, or more than register keeps uids of, each created then (but the
    last maybe) deleted, on one timeline (a minute apart), of version 1 or 2 (maybe all of
    one); each deletion maybe sent again later with a later time (up to past everything
    else), and any delivery duplicated."""
    name = f"r{uuid.uuid4().hex[:8]}"
    count = draw(st.one_of(st.integers(1, 3), BEYOND_KEPT), label="incarnations")
    last_deleted = draw(st.booleans(), label="last deleted")
    one_version = draw(st.booleans(), label="one version")
    events: list[CanonicalEvent] = []
    versions: list[str] = []
    minute = 0
    for i in range(count):
        version = "1" if one_version else draw(st.sampled_from("12"), label=f"version {i}")
        uid = f"{name}-uid{i}"
        versions.append(version)
        created = model_event(ModelCreated, name, uid, version)
        events.append(at_minute(f"{uid}/add", created, minute))
        minute += 1
        if i < count - 1 or last_deleted:
            deleted = model_event(ModelDeleted, name, uid, version)
            events.append(at_minute(f"{uid}/delete", deleted, minute))
            for later in draw(st.lists(st.integers(0, 4 * count + 2), max_size=2), label="again"):
                events.append(at_minute(f"{uid}/delete", deleted, minute + later))
            minute += 1
    duplicates = draw(st.lists(st.sampled_from(events), max_size=3), label="duplicates")
    alive = frozenset() if last_deleted else frozenset({versions[-1]})
    return Recreated(tuple(events + duplicates), name, frozenset(versions), alive)


def at_minute(id: str, data: Any, minute: int) -> CanonicalEvent:
    """`data`'s delivery `id`, sent `minute` minutes after T0."""
    return CanonicalEvent(
        id=id, source="watch", type=data.TYPE, data=data, time=T0 + timedelta(minutes=minute)
    )


def deliver(registry: ModelRegistry, event: CanonicalEvent) -> None:
    """register's handler as the route delivers it (no dedupe: each copy is applied), a
    transient failure (a lost race) delivered again."""
    for attempt in range(20):
        try:
            # an http source is named by its spec: no store, content or OCI client is used
            handle(
                event,
                registry=registry,
                stores=cast(Any, None),
                content=cast(Any, None),
                oci=cast(Any, None),
                check_namespace=False,
            )
            return
        except ModelhooksError:
            if attempt == 19:
                raise


def state(registry: ModelRegistry, scenario: Recreated) -> Snapshot:
    return snapshot(registry, {scenario.name})


def kept_uids(registry: ModelRegistry, name: str) -> int:
    """The most uids one of register's facts on model `name` keeps (the model's deleted ones,
    a version's registering ones): at most KEPT_UIDS, however many incarnations."""
    model = registry.get_model(name)
    assert model is not None
    facts = [model.custom_properties.get(DELETED_UIDS)] + [
        version.custom_properties.get(REGISTERED_BY) for version in registry.list_versions(model.id)
    ]
    return max(len(json.loads(fact)) if fact else 0 for fact in facts)


def recreations_killed_and_redelivered(
    registry: ModelRegistry, scenario: Recreated, draw: Callable[..., Any]
) -> int:
    """The scenario's deliveries in a drawn order, each maybe killed before a drawn write and
    delivered again at a drawn later place (register_crash.killed_and_redelivered): each
    version's state as the scenario expects, at most KEPT_UIDS uids in a fact, and the facts
    (every modelhooks.* of the model and its versions, the artifacts) those of each answered
    delivery applied once, in the order answered, on the in-memory fake. Past KEPT_UIDS
    Models, which deleted uid is forgotten (the model's deleted_uids and uidless_deleted_at)
    depends on the registrations its deletion finds, so on the order, killed or not (two
    orders without a kill differ there in about a third of such scenarios): those two are
    left out of the comparison then, the states they decide are not. How many were killed."""
    from tests.fakes.memory_registry import InMemoryModelRegistry

    answered: list[CanonicalEvent] = []
    kills = register_crash.killed_and_redelivered(
        registry, scenario, draw, deliver=deliver, answered=answered
    )
    assert state(registry, scenario) == scenario.expected(), kills
    assert kept_uids(registry, scenario.name) <= KEPT_UIDS, kills
    once = InMemoryModelRegistry()
    for event in answered:
        deliver(once, event)
    forgets = len({cast(Any, e.data).uid for e in scenario.events}) > KEPT_UIDS
    assert _facts(registry, scenario.name, forgets) == _facts(once, scenario.name, forgets), kills
    return kills


def _facts(registry: ModelRegistry, name: str, forgets: bool) -> Any:
    """register_crash.state of model `name`, without the forgetting's facts if `forgets`."""
    model_state, facts, versions = register_crash.state(registry, {name})[name]
    if forgets:
        facts = {k: v for k, v in facts.items() if k not in (DELETED_UIDS, UIDLESS_DELETED_AT)}
    return model_state, facts, versions
