"""A Model deleted and created again under its name keeps what its new incarnation
registered, on SQLite and the in-memory fake: a deletion sent again late, with a time past
the new incarnation's (the sender's clock), archives only what its own uid registered
(tests/contract/register_recreated.py). A deletion naming no uid (a hand replay, an event
from before uids were kept) archives what is older than it, as it always did."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.core.records import DELETED_AT, DELETED_UIDS, REGISTERED_BY, UIDLESS_DELETED_AT
from modelhooks.events.model import CanonicalEvent, ModelCreated, ModelDeleted
from modelhooks.handlers.register import KEPT_UIDS
from tests.contract.register_order import T0
from tests.contract.register_recreated import (
    SHA,
    Recreated,
    deliver,
    kept_uids,
    model_event,
    recreations,
    recreations_killed_and_redelivered,
    state,
)
from tests.fakes.memory_registry import InMemoryModelRegistry


def sqlite() -> SqliteModelRegistry:
    return SqliteModelRegistry(Path(tempfile.mkdtemp(prefix="recreated-")) / "registry.db")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=recreations(), data=st.data())
def test_a_recreated_models_version_stays_whatever_the_order_and_times_of_deliveries(
    scenario: Recreated, data: st.DataObject
) -> None:
    order = data.draw(st.permutations(scenario.events), label="order")
    for registry in (InMemoryModelRegistry(), sqlite()):
        for event in order:
            deliver(registry, event)
        assert state(registry, scenario) == scenario.expected(), type(registry)
        assert kept_uids(registry, scenario.name) <= KEPT_UIDS, type(registry)


def _at(id: str, data: ModelCreated | ModelDeleted, minute: int) -> CanonicalEvent:
    return CanonicalEvent(
        id=id, source="watch", type=data.TYPE, data=data, time=T0 + timedelta(minutes=minute)
    )


def test_the_old_deletion_sent_again_late_leaves_the_new_models_version_live() -> None:
    registry = InMemoryModelRegistry()
    old_delete = model_event(ModelDeleted, "bert", "uid-old", "1")
    for event in (
        _at("a", model_event(ModelCreated, "bert", "uid-old", "1"), 0),
        _at("d", old_delete, 1),
        _at("b", model_event(ModelCreated, "bert", "uid-new", "1"), 2),
        _at("d", old_delete, 9),  # the old deletion again, stamped when it was sent again
    ):
        deliver(registry, event)
    live = {"bert": ("LIVE", {"1": ("LIVE", f"sha256:{SHA['1']}")})}
    assert state(registry, Recreated((), "bert", frozenset("1"), frozenset("1"))) == live
    deliver(registry, _at("e", model_event(ModelDeleted, "bert", "uid-new", "1"), 3))
    archived = {"bert": ("ARCHIVED", {"1": ("ARCHIVED", f"sha256:{SHA['1']}")})}
    assert state(registry, Recreated((), "bert", frozenset("1"), frozenset())) == archived


def test_old_deletions_sent_again_late_past_the_kept_uids_forget_the_oldest_registered() -> None:
    """More Models deleted than a model keeps the uids of, their deletions arriving only as
    sent again past the last Model's creation: the uid forgotten is the one whose Model
    registered earliest, as a deletion naming no uid at that registration's time (not at its
    deletion's, which would archive the last Model's version)."""
    uids = [f"uid-{i}" for i in range(KEPT_UIDS + 2)]
    for registry in (InMemoryModelRegistry(), sqlite()):
        for minute, uid in enumerate(uids):
            deliver(
                registry, _at(f"{uid}/add", model_event(ModelCreated, "bert", uid, "1"), minute)
            )
        for minute, uid in enumerate(uids[:-1], start=100):
            deliver(
                registry, _at(f"{uid}/del", model_event(ModelDeleted, "bert", uid, "1"), minute)
            )
        live = {"bert": ("LIVE", {"1": ("LIVE", f"sha256:{SHA['1']}")})}
        assert state(registry, Recreated((), "bert", frozenset("1"), frozenset("1"))) == live
        assert kept_uids(registry, "bert") == KEPT_UIDS
        deliver(registry, _at("late", model_event(ModelCreated, "bert", uids[0], "1"), 0))
        assert state(registry, Recreated((), "bert", frozenset("1"), frozenset("1"))) == live
        last = uids[-1]
        deliver(registry, _at("del", model_event(ModelDeleted, "bert", last, "1"), 200))
        archived = {"bert": ("ARCHIVED", {"1": ("ARCHIVED", f"sha256:{SHA['1']}")})}
        assert state(registry, Recreated((), "bert", frozenset("1"), frozenset())) == archived


def test_a_deletion_naming_no_uid_archives_what_is_older_as_before() -> None:
    registry = sqlite()
    deliver(registry, _at("a", model_event(ModelCreated, "bert", "uid-new", "1"), 2))
    replayed = ModelDeleted(name="bert", namespace="default")  # by hand: no uid
    deliver(registry, _at("r", replayed, 5))
    archived = {"bert": ("ARCHIVED", {"1": ("ARCHIVED", f"sha256:{SHA['1']}")})}
    assert state(registry, Recreated((), "bert", frozenset("1"), frozenset())) == archived
    deliver(registry, _at("c", model_event(ModelCreated, "bert", "uid-newer", "1"), 6))
    live = {"bert": ("LIVE", {"1": ("LIVE", f"sha256:{SHA['1']}")})}
    assert state(registry, Recreated((), "bert", frozenset("1"), frozenset("1"))) == live


@pytest.mark.parametrize(
    "facts",
    ["not json", '{"uid-old": 7}', "[1, 2]", "[" * 100_000, '"text"', "{" * 100_000],
)
def test_facts_a_record_edited_by_hand_garbled_are_none(facts: str) -> None:
    """A registry's facts written by another client or `registry import` (not JSON, other
    types, nested past the parser's depth) are read as none, never a 500."""
    registry = InMemoryModelRegistry()
    model = registry.create_model(
        "bert", properties={DELETED_AT: "", DELETED_UIDS: facts, UIDLESS_DELETED_AT: ""}
    )
    registry.create_version(
        model.id, "1", properties={"digest": f"sha256:{SHA['1']}", REGISTERED_BY: facts}
    )
    deliver(registry, _at("b", model_event(ModelCreated, "bert", "uid-new", "1"), 2))
    deliver(registry, _at("d", model_event(ModelDeleted, "bert", "uid-old", "1"), 9))
    live = {"bert": ("LIVE", {"1": ("LIVE", f"sha256:{SHA['1']}")})}
    assert state(registry, Recreated((), "bert", frozenset("1"), frozenset("1"))) == live


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=recreations(), data=st.data())
def test_a_recreated_models_delivery_killed_between_its_writes_ends_as_applied_once(
    scenario: Recreated, data: st.DataObject
) -> None:
    """Each delivery killed after any prefix of its writes (the fake keeps them, as Kubeflow
    and the Kubernetes resources do; SQLite rolls them back) and delivered again later: the
    states and the uid facts of each delivery applied once (tests/contract/register_crash.py)."""
    for registry in (InMemoryModelRegistry(), sqlite()):
        recreations_killed_and_redelivered(registry, scenario, data.draw)
