"""Artifact Registry `gcr` topic messages → canonical events."""

from __future__ import annotations

from typing import Any

import pytest

from modelhooks.core.errors import BadRequest
from modelhooks.events import samples
from modelhooks.events.inbound import Inbound
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ArtifactDeleted, ArtifactPushed
from modelhooks.events.sources import artifact_registry, translate

IMAGE = "europe-west4-docker.pkg.dev/ml-prod/models/sentiment"
DIGEST = "sha256:29e1aef7b8a2adc32db99b040f5c7a0f5393e2cf9448c144793f4ccd69cca298"


def _gar(data: Any) -> list[Any]:
    return artifact_registry.from_gar_message(Inbound("pubsub", "4711", data))


def test_insert_with_a_tag_is_an_artifact_push() -> None:
    [event] = translate(samples.inbound("gar-insert"), layout=ObjectLayout())
    assert event.type == "dev.modelhooks.artifact.pushed"
    assert event.data == ArtifactPushed(
        model="ml-prod/models/sentiment",
        version="1",
        uri=f"oci://{IMAGE}@{DIGEST}",
        digest=DIGEST,
        store="oci",
        tag="1",
    )
    assert event.id == "12033409884567123"  # the Pub/Sub messageId
    assert event.source == f"oci://{IMAGE}"
    assert event.subject == "1"


def test_the_same_message_through_eventarc_is_the_same_event() -> None:
    direct = translate(samples.inbound("gar-insert"), layout=ObjectLayout())
    via_eventarc = translate(samples.inbound("gar-eventarc-insert"), layout=ObjectLayout())
    assert via_eventarc == direct


def test_untagged_inserts_and_referrer_tags_are_ignored() -> None:
    assert translate(samples.inbound("gar-insert-untagged"), layout=ObjectLayout()) == []
    fallback = f"{IMAGE}:sha256-{'b' * 64}.sig"
    assert _gar({"action": "INSERT", "digest": f"{IMAGE}@{DIGEST}", "tag": fallback}) == []


def test_delete_by_digest_and_by_tag() -> None:
    [by_digest] = translate(samples.inbound("gar-delete"), layout=ObjectLayout())
    assert by_digest.data == ArtifactDeleted(
        uri=f"oci://{IMAGE}@{DIGEST}", store="oci", digest=DIGEST, model="ml-prod/models/sentiment"
    )
    [by_tag] = translate(samples.inbound("gar-delete-tag"), layout=ObjectLayout())
    assert by_tag.data == ArtifactDeleted(
        uri=f"oci://{IMAGE}:1",
        store="oci",
        model="ml-prod/models/sentiment",
        version="1",
        tag="1",
    )


def test_a_host_with_a_port_is_not_mistaken_for_a_tag() -> None:
    [event] = _gar(
        {
            "action": "INSERT",
            "digest": f"localhost:5000/p/r/img@{DIGEST}",
            "tag": "localhost:5000/p/r/img:v2",
        }
    )
    assert isinstance(event.data, ArtifactPushed)
    assert (event.data.model, event.data.version) == ("p/r/img", "v2")
    assert event.data.uri == f"oci://localhost:5000/p/r/img@{DIGEST}"
    with pytest.raises(BadRequest, match="tag 'localhost:5000/p/r/img' is not HOST/PATH:"):
        _gar({"action": "DELETE", "tag": "localhost:5000/p/r/img"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"digest": f"{IMAGE}@{DIGEST}"}, "gar message: action is missing"),
        ({"action": "UPDATE", "digest": f"{IMAGE}@{DIGEST}"}, "action 'UPDATE' is not INSERT"),
        ({"action": "INSERT", "tag": f"{IMAGE}:1"}, "gar message: digest is missing"),
        ({"action": "DELETE"}, "gar message: digest is missing"),
        ({"action": "INSERT", "digest": f"{IMAGE}:{DIGEST}"}, "digest .* is not HOST/PATH@"),
        ({"action": "INSERT", "digest": f"{IMAGE}@latest"}, "digest 'latest' is not a digest"),
        (
            {"action": "INSERT", "digest": f"{IMAGE}@{DIGEST}", "tag": "eu.gcr.io/other/img:1"},
            "digest and tag name different images",
        ),
        ({"action": "DELETE", "digest": f"sentiment@{DIGEST}"}, "names no repository"),
        (["INSERT"], "gar message: data must be a JSON object"),
    ],
)
def test_malformed_messages_are_bad_requests(data: Any, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        _gar(data)


def test_ids_are_stable() -> None:
    first = translate(samples.inbound("gar-delete"), layout=ObjectLayout())
    assert first and first == translate(samples.inbound("gar-delete"), layout=ObjectLayout())


def test_the_event_time_is_the_pubsub_publish_time() -> None:
    from modelhooks.events.ingress import decode

    body = samples.body("gar-insert")
    (inbound,) = decode({"Content-Type": "application/json"}, body)
    (event,) = translate(inbound, layout=ObjectLayout())
    publish_time = samples.load("gar-insert")["message"]["publishTime"]
    assert event.time is not None
    assert event.time.isoformat().startswith(publish_time[:19])
