"""Order independence of `register` on the real Kubeflow Model Registry: permutations,
duplicates and concurrent interleavings (in one process) end in the state of applying the
events in time order, as on SQLite (tests/contract/register_order.py), and so do deliveries
killed between their writes and delivered again (tests/contract/register_crash.py); a Model
deleted and created again keeps its new version whatever the order and times of its
deliveries (tests/contract/register_recreated.py)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry
from modelhooks.events.model import ModelCreated, ModelDeleted
from modelhooks.handlers.register import KEPT_UIDS
from tests.contract.register_crash import killed_and_redelivered, state, time_ordered_state
from tests.contract.register_order import (
    Scenario,
    apply_all,
    expected,
    scenarios,
    snapshot,
)
from tests.contract.register_recreated import (
    SHA,
    Recreated,
    at_minute,
    deliver,
    kept_uids,
    model_event,
    recreations,
    recreations_killed_and_redelivered,
)
from tests.servers.model_registry import ModelRegistry as ModelRegistryServer

pytestmark = pytest.mark.integration

SLOW = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@SLOW
@given(scenario=scenarios(max_events=16), data=st.data())
def test_any_order_ends_in_the_time_ordered_state(
    model_registry: ModelRegistryServer, scenario: Scenario, data: st.DataObject
) -> None:
    order = data.draw(st.permutations(scenario.events), label="order")
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        apply_all(registry, order)
        assert snapshot(registry, scenario.names()) == expected(scenario)
    finally:
        registry.close()


@SLOW
@given(scenario=scenarios(max_events=16), data=st.data())
def test_concurrent_interleavings_end_in_the_time_ordered_state(
    model_registry: ModelRegistryServer, scenario: Scenario, data: st.DataObject
) -> None:
    order = data.draw(st.permutations(scenario.events), label="order")
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        apply_all(registry, order, workers=4)
        assert snapshot(registry, scenario.names()) == expected(scenario)
    finally:
        registry.close()


@settings(SLOW, max_examples=60)
@given(scenario=scenarios(max_events=12), data=st.data())
def test_a_delivery_killed_between_its_writes_and_delivered_again_ends_as_never_killed(
    model_registry: ModelRegistryServer, scenario: Scenario, data: st.DataObject
) -> None:
    """Each write stands alone over REST: a delivery killed after the RegisteredModel's
    create, the ModelVersion's, or a deletion's time leaves them; its redelivery completes
    it (tests/contract/register_crash.py)."""
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        kills = killed_and_redelivered(registry, scenario, data.draw)
        assert state(registry, scenario.names()) == time_ordered_state(scenario), kills
    finally:
        registry.close()


@SLOW
@given(scenario=recreations(), data=st.data())
def test_a_recreated_models_version_stays_whatever_the_order_and_times_of_deliveries(
    model_registry: ModelRegistryServer, scenario: Recreated, data: st.DataObject
) -> None:
    order = data.draw(st.permutations(scenario.events), label="order")
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        for event in order:
            deliver(registry, event)
        assert snapshot(registry, {scenario.name}) == scenario.expected()
        assert kept_uids(registry, scenario.name) <= KEPT_UIDS
    finally:
        registry.close()


@settings(SLOW, max_examples=40)
@given(scenario=recreations(), data=st.data())
def test_a_recreated_models_delivery_killed_between_its_writes_ends_as_applied_once(
    model_registry: ModelRegistryServer, scenario: Recreated, data: st.DataObject
) -> None:
    """Models of one name created, deleted, created again, deletions sent again late, each
    delivery maybe killed after any prefix of its REST writes and delivered again: the states
    and uid facts of each delivery applied once (tests/contract/register_recreated.py)."""
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        recreations_killed_and_redelivered(registry, scenario, data.draw)
    finally:
        registry.close()


def test_a_model_deleted_and_created_again_every_day_for_months_stays_writable(
    model_registry: ModelRegistryServer,
) -> None:
    """A pipeline deleting and creating one Model name again (a new uid each time), 100 times,
    the old deletions sent again late: what register keeps per uid stays bounded, under what
    this registry's PostgreSQL indexes (a string property past ~2,704 bytes: 500 for ever),
    and the last Model's version stays LIVE."""
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    name, uids = f"ci{uuid.uuid4().hex[:8]}", [str(uuid.uuid4()) for _ in range(101)]
    try:
        for i, uid in enumerate(uids):
            deliver(
                registry, at_minute(f"{uid}/add", model_event(ModelCreated, name, uid, "1"), 2 * i)
            )
            if uid != uids[-1]:
                deleted = model_event(ModelDeleted, name, uid, "1")
                deliver(registry, at_minute(f"{uid}/delete", deleted, 2 * i + 1))
        for uid in uids[:3] + uids[-4:-1]:  # the first and latest deletions sent again, late
            deleted = model_event(ModelDeleted, name, uid, "1")
            deliver(registry, at_minute(f"{uid}/delete", deleted, 500))
        live = {name: ("LIVE", {"1": ("LIVE", f"sha256:{SHA['1']}")})}
        assert snapshot(registry, {name}) == live
        model = registry.get_model(name)
        assert model is not None
        version = registry.get_version(model.id, "1")
        assert version is not None
        sizes = {
            k: len(v.encode())
            for k, v in {**model.custom_properties, **version.custom_properties}.items()
        }
        assert max(sizes.values()) < 2_000, sizes
        assert kept_uids(registry, name) == KEPT_UIDS
    finally:
        registry.close()
