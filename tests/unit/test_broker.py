"""The in-process broker: routes by Trigger, follows replies, stops at router.max_depth."""

from __future__ import annotations

from pathlib import Path

from modelhooks.bootstrap import build
from modelhooks.core.function import Function
from modelhooks.core.settings import load_settings
from modelhooks.delivery.broker import Broker
from modelhooks.delivery.router import Trigger
from modelhooks.delivery.runtime import Delivery
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelRegistered
from tests.fakes.memory_registry import InMemoryModelRegistry

# Named by its content already (as the broker's own hops are): the delivery lists nothing.
PUSHED = ArtifactPushed(
    model="m", version="1", uri="gs://b/m/1/", digest=f"content-sha256:{'0' * 64}", store="gcs"
)


def echo_registered(event: CanonicalEvent) -> list[CanonicalEvent]:
    """Answers every event with a model.registered: a reply loop if routed to itself."""
    reply = ModelRegistered(
        model="m", version="1", uri="u", digest="d", registry="x",
        registered_model_id="1", model_version_id="1", model_artifact_id="1", created=True,
    )  # fmt: skip
    return [CanonicalEvent.new(reply, source="test", id=f"{event.id}+")]


LOOP = Function("loop", frozenset({PUSHED.TYPE, ModelRegistered.TYPE}), echo_registered)


def broker(tmp_path: Path, triggers: list[Trigger], max_depth: int) -> Broker:
    """A broker whose every function is LOOP (the dependency swapped in one place)."""
    settings = load_settings({"home": str(tmp_path)}, env={})
    app = build(settings, registry=InMemoryModelRegistry(), function=lambda name: LOOP)
    delivery: Delivery = app.delivery
    return Broker(triggers, delivery, max_depth)


def test_replies_are_routed_on_until_max_depth(tmp_path: Path) -> None:
    triggers = [
        Trigger("on-pushed", "loop", {"type": PUSHED.TYPE}),
        Trigger("on-registered", "loop", {"type": ModelRegistered.TYPE}),
    ]
    broker_ = broker(tmp_path, triggers, max_depth=4)
    outcomes = broker_.publish(CanonicalEvent.new(PUSHED, source="test", id="e"))
    assert [o.event_id for o in outcomes] == ["e", "e+", "e++", "e+++"]


def test_an_event_no_trigger_matches_runs_nothing(tmp_path: Path) -> None:
    triggers = [Trigger("on-registered", "loop", {"type": ModelRegistered.TYPE})]
    broker_ = broker(tmp_path, triggers, max_depth=8)
    assert broker_.publish(CanonicalEvent.new(PUSHED, source="test")) == []


def test_two_triggers_for_one_function_run_it_once(tmp_path: Path) -> None:
    triggers = [
        Trigger("a", "loop", {"type": PUSHED.TYPE}),
        Trigger("b", "loop", {"source": "test"}),
    ]
    broker_ = broker(tmp_path, triggers, max_depth=1)
    outcomes = broker_.publish(CanonicalEvent.new(PUSHED, source="test", id="e"))
    assert [o.event_id for o in outcomes] == ["e"]


def test_routing_follows_every_attribute_a_trigger_reads(tmp_path: Path) -> None:
    """Decisions are remembered by the values of the attributes the Triggers read: events
    of one type that differ in another attribute a filter reads (source, subject, an
    extension) are routed each by its own values, again and again."""
    triggers = [
        Trigger("by-source", "a", {}, ({"prefix": {"source": "//gcs/"}},)),
        Trigger("by-subject", "b", {}, ({"not": {"suffix": {"subject": ".tmp"}}},)),
        Trigger("by-extension", "c", {"tenant": "t1"}),
    ]
    broker_ = broker(tmp_path, triggers, max_depth=1)
    cases = [
        (CanonicalEvent.new(PUSHED, source="//gcs/b", subject="m/1"), ("a", "b")),
        (CanonicalEvent.new(PUSHED, source="//s3/b", subject="m/1"), ("b",)),
        (CanonicalEvent.new(PUSHED, source="//gcs/b", subject="m/1.tmp"), ("a",)),
        (CanonicalEvent.new(PUSHED, source="//s3/b", subject="m/1.tmp"), ()),
        (
            CanonicalEvent.new(
                PUSHED, source="//s3/b", subject="x.tmp", extensions={"tenant": "t1"}
            ),
            ("c",),
        ),
        (
            CanonicalEvent.new(
                PUSHED, source="//s3/b", subject="x.tmp", extensions={"tenant": "t2"}
            ),
            (),
        ),
    ]
    for _ in range(2):  # the second round is answered from what the first decided
        for event, expected in cases:
            assert broker_.routes(event) == expected
            assert broker_.routes(event) == tuple(
                dict.fromkeys(t.function for t in triggers if t.accepts(event))
            )
