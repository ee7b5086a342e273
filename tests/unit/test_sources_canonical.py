"""CloudEvents already in the modelhooks vocabulary → CanonicalEvent."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import msgspec
import pytest

from modelhooks.core.errors import BadRequest
from modelhooks.events import samples
from modelhooks.events.inbound import Inbound
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ArtifactPushed
from modelhooks.events.sources import canonical, translate

PUSHED = ArtifactPushed(
    model="sentiment",
    version="1",
    uri="gs://models/models/sentiment/1/",
    digest="gcs-generation:1795453331523407",
    store="gcs",
    namespace="ml",
    labels={"framework": "pytorch"},
)


def test_a_canonical_cloudevent_is_validated_and_kept_as_it_came() -> None:
    [event] = translate(samples.inbound("canonical-artifact-pushed"), layout=ObjectLayout())
    assert event.data == PUSHED
    assert event.type == "dev.modelhooks.artifact.pushed"
    assert (event.id, event.source) == ("replay-0001", "/modelhooks/replay")
    assert event.subject == "objects/models/sentiment/1/_SUCCESS"
    assert event.time == datetime(2026, 11, 23, 17, 2, 11, 535000, tzinfo=UTC)
    assert event.extensions == {"replayedby": "ops"}


def test_a_cloudevent_carried_over_pubsub_uses_its_ce_attributes() -> None:
    [event] = translate(samples.inbound("canonical-pubsub-artifact-pushed"), layout=ObjectLayout())
    assert event.data == PUSHED
    assert event.id == "replay-0002"  # the CloudEvent's id, not the Pub/Sub messageId
    assert event.source == "/modelhooks/replay"
    assert event.extensions == {}


def test_a_translated_event_survives_a_round_trip_through_its_own_attributes() -> None:
    [original] = translate(samples.inbound("s3-aws-put-marker"), layout=ObjectLayout())
    inbound = Inbound(
        kind="cloudevent",
        id=original.id,
        data=original.data.to_dict(),
        attributes=original.attributes(),
    )
    [again] = canonical.from_canonical_cloudevent(inbound)
    assert again == original


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"model": "sentiment"}, "version: Object missing required field `version`"),
        ({**PUSHED.to_dict(), "store": "ftp"}, "store: Invalid enum value 'ftp'"),
        ({**PUSHED.to_dict(), "colour": "blue"}, "colour: Object contains unknown field `colour`"),
        (["sentiment"], "canonical event: data must be a JSON object"),
        (b"\x00\x01", "canonical event: data is not valid JSON"),
        # re's '$' (msgspec's patterns) also matched before a final newline
        ({**PUSHED.to_dict(), "model": "sentiment\n"}, "model: Expected `str` matching"),
        ({**PUSHED.to_dict(), "version": "1\n"}, "version: Expected `str` matching"),
        ({**PUSHED.to_dict(), "namespace": "ml\n"}, "namespace: Expected `str` matching"),
        ({**PUSHED.to_dict(), "size": -1}, "size: Expected `int` >= 0"),
    ],
)
def test_invalid_data_is_a_bad_request_naming_the_field(data: object, message: str) -> None:
    inbound = msgspec.structs.replace(samples.inbound("canonical-artifact-pushed"), data=data)
    with pytest.raises(BadRequest, match=message):
        canonical.from_canonical_cloudevent(inbound)


def test_an_unknown_modelhooks_type_is_a_bad_request() -> None:
    inbound = samples.inbound("canonical-artifact-pushed")
    attrs = {**inbound.attributes, "type": "dev.modelhooks.model.exploded"}
    with pytest.raises(BadRequest, match=re.escape("unknown type 'dev.modelhooks.model.exploded'")):
        translate(msgspec.structs.replace(inbound, attributes=attrs), layout=ObjectLayout())


def test_ids_are_stable() -> None:
    name = "canonical-pubsub-artifact-pushed"
    first = translate(samples.inbound(name), layout=ObjectLayout())
    assert first and first == translate(samples.inbound(name), layout=ObjectLayout())
