"""OCI distribution notifications and zot events → canonical events."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from modelhooks.core.errors import BadRequest
from modelhooks.events import samples
from modelhooks.events.inbound import Inbound
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ArtifactDeleted, ArtifactPushed
from modelhooks.events.sources import oci_distribution, translate

HOST = "registry.local:5000"
DIGEST = "sha256:cc5c6806f5e0a2d82d53e852da3a9b6904e19bfd56db4ea12d2bd6f1c33ef771"


def _events(name: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = copy.deepcopy(samples.load(name)["events"])
    return events


def _distribution(*events: dict[str, Any]) -> list[Any]:
    return oci_distribution.from_distribution_notification(
        Inbound("webhook", "webhook-1", {"events": list(events)})
    )


def _zot(name: str, *, registry_host: str | None = HOST, **data: Any) -> list[Any]:
    inbound = samples.inbound(name)
    if data:
        inbound = msgspec.structs.replace(inbound, data={**inbound.data, **data})
    return oci_distribution.from_zot_event(inbound, registry_host=registry_host)


def test_a_tagged_manifest_push_is_an_artifact_push() -> None:
    [event] = translate(samples.inbound("oci-distribution-push"), layout=ObjectLayout())
    assert event.type == "dev.modelhooks.artifact.pushed"
    assert event.data == ArtifactPushed(
        model="sentiment",
        version="1",
        uri=f"oci://{HOST}/sentiment@{DIGEST}",
        digest=DIGEST,
        store="oci",
        tag="1",
        size=742,
    )
    assert event.id == "5b1c0a9e-3d2f-4e8b-a7c6-9f0e1d2c3b4a"
    assert event.source == f"oci://{HOST}/sentiment"
    assert event.subject == "1"
    assert event.time == datetime(2026, 11, 23, 17, 2, 12, 311827, tzinfo=UTC)


@pytest.mark.parametrize("size", [-1, 1 << 63, True, "742", 7.5])
def test_a_size_no_registry_would_tell_is_left_out(size: object) -> None:
    """target.size is told, not relied on: one that is no size of a blob is left unset."""
    [doc] = samples.inbound("oci-distribution-push").data["events"]
    [event] = _distribution({**doc, "target": {**doc["target"], "size": size}})
    assert event.data.size is None and event.data.digest == DIGEST


@pytest.mark.parametrize(
    "name",
    ["oci-distribution-blob-push", "oci-distribution-referrer-push", "oci-distribution-pull"],
)
def test_blobs_referrer_tags_and_pulls_are_ignored(name: str) -> None:
    assert translate(samples.inbound(name), layout=ObjectLayout()) == []


def test_a_manifest_pushed_by_digest_only_is_ignored() -> None:
    [event] = _events("oci-distribution-push")
    del event["target"]["tag"]
    assert _distribution(event) == []


def test_the_untag_placeholder_pushed_and_deleted_while_pruning_is_ignored() -> None:
    placeholder = oci_distribution.UNTAG_PLACEHOLDER_DIGEST
    assert placeholder == "sha256:" + hashlib.sha256(oci_distribution.UNTAG_PLACEHOLDER).hexdigest()
    [push] = _events("oci-distribution-push")
    push["target"]["digest"] = placeholder
    deletes = _events("oci-distribution-delete")
    for event in deletes:
        if "digest" in event["target"]:
            event["target"]["digest"] = placeholder
    assert _distribution(push, *deletes[:1]) == []
    assert _zot("zot-image-updated", digest=placeholder) == []
    assert _zot("zot-image-deleted", digest=placeholder) == []
    [real] = _events("oci-distribution-push")
    assert _distribution(real)  # only that one manifest


@pytest.mark.parametrize(
    "media_type",
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ],
)
def test_every_manifest_media_type_counts(media_type: str) -> None:
    [event] = _events("oci-distribution-push")
    event["target"]["mediaType"] = media_type
    [pushed] = _distribution(event)
    assert pushed.data.tag == "1"


def test_a_delete_by_digest_names_the_manifest_and_each_removed_tag() -> None:
    by_digest, by_tag = translate(samples.inbound("oci-distribution-delete"), layout=ObjectLayout())
    assert by_digest.data == ArtifactDeleted(
        uri=f"oci://{HOST}/sentiment@{DIGEST}", store="oci", digest=DIGEST, model="sentiment"
    )
    assert by_tag.data == ArtifactDeleted(
        uri=f"oci://{HOST}/sentiment:1", store="oci", model="sentiment", version="1", tag="1"
    )
    assert by_digest.id != by_tag.id


def test_a_blob_delete_with_a_media_type_is_ignored_and_a_repository_delete_is_not() -> None:
    blob, _ = _events("oci-distribution-delete")
    blob["target"]["mediaType"] = "application/octet-stream"
    assert _distribution(blob) == []
    repo = {**blob, "target": {"repository": "sentiment"}}
    [event] = _distribution(repo)
    assert event.data.uri == f"oci://{HOST}/sentiment"
    assert (event.data.digest, event.data.tag) == (None, None)


@pytest.mark.parametrize(
    ("drop", "field"),
    [(("request", "host"), "request.host"), (("target", "repository"), "target.repository")],
)
def test_missing_fields_are_bad_requests_naming_them(drop: tuple[str, str], field: str) -> None:
    [event] = _events("oci-distribution-push")
    del event[drop[0]][drop[1]]
    with pytest.raises(BadRequest, match=f"distribution event 0: {field} is missing"):
        _distribution(event)


def test_malformed_envelopes_and_digests_are_bad_requests() -> None:
    with pytest.raises(BadRequest, match="events must be a list"):
        oci_distribution.from_distribution_notification(Inbound("webhook", "w", {"events": "x"}))
    [event] = _events("oci-distribution-push")
    event["target"]["digest"] = "not-a-digest"
    with pytest.raises(BadRequest, match=re.escape("target.digest 'not-a-digest' is not a digest")):
        _distribution(event)
    [event] = _events("oci-distribution-push")
    del event["target"]["digest"]
    with pytest.raises(BadRequest, match=re.escape("target.digest is missing")):
        _distribution(event)


def test_distribution_ids_are_stable() -> None:
    name = "oci-distribution-delete"
    first = translate(samples.inbound(name), layout=ObjectLayout())
    assert len(first) == 2 and first == translate(samples.inbound(name), layout=ObjectLayout())


# --- zot ---------------------------------------------------------------------------


def test_zot_image_updated_is_an_artifact_push() -> None:
    [event] = _zot("zot-image-updated")
    assert event.data == ArtifactPushed(
        model="sentiment",
        version="1",
        uri=f"oci://{HOST}/sentiment@{DIGEST}",
        digest=DIGEST,
        store="oci",
        tag="1",
    )
    assert event.id == "c1b2a3d4-e5f6-4789-8abc-def012345678"
    assert event.source == f"oci://{HOST}/sentiment"


def test_zot_needs_the_registry_host_from_config_or_a_url_source() -> None:
    with pytest.raises(
        BadRequest, match=re.escape("source 'zotregistry.dev' does not name the registry")
    ):
        _zot("zot-image-updated", registry_host=None)
    inbound = samples.inbound("zot-image-updated")
    attrs = {**inbound.attributes, "source": "https://zot.example.com:8443"}
    [event] = oci_distribution.from_zot_event(msgspec.structs.replace(inbound, attributes=attrs))
    assert event.data.uri.startswith("oci://zot.example.com:8443/sentiment@")


def test_zot_pushes_by_digest_and_referrers_are_ignored() -> None:
    assert _zot("zot-image-updated", reference=DIGEST) == []
    assert _zot("zot-image-updated", reference="sha256-" + "a" * 64 + ".sig") == []
    signature = {"schemaVersion": 2, "subject": {"digest": DIGEST, "size": 742}}
    assert _zot("zot-image-updated", manifest=json.dumps(signature)) == []
    assert _zot("zot-image-updated", mediaType="application/vnd.oci.image.layer.v1.tar") == []


def test_zot_deletes_by_tag_and_by_digest() -> None:
    [by_tag] = _zot("zot-image-deleted")
    assert by_tag.type == "dev.modelhooks.artifact.deleted"
    assert by_tag.data == ArtifactDeleted(
        uri=f"oci://{HOST}/sentiment:1",
        store="oci",
        digest=DIGEST,
        model="sentiment",
        version="1",
        tag="1",
    )
    [by_digest] = _zot("zot-image-deleted", reference=DIGEST)
    assert by_digest.data.uri == f"oci://{HOST}/sentiment@{DIGEST}"
    assert by_digest.data.tag is None


def test_other_zot_events_are_ignored() -> None:
    assert _zot("zot-repository-created") == []
    inbound = samples.inbound("zot-image-updated")
    attrs = {**inbound.attributes, "type": "zotregistry.image.lint_failed"}
    assert oci_distribution.from_zot_event(msgspec.structs.replace(inbound, attributes=attrs)) == []


@pytest.mark.parametrize("field", ["name", "reference"])
def test_zot_data_missing_a_field_is_a_bad_request(field: str) -> None:
    inbound = samples.inbound("zot-image-updated")
    data = {k: v for k, v in inbound.data.items() if k != field}
    with pytest.raises(BadRequest, match=f"zot event: {field} is missing"):
        oci_distribution.from_zot_event(
            msgspec.structs.replace(inbound, data=data), registry_host=HOST
        )


def test_zot_through_the_facade_is_stable() -> None:
    inbound = samples.inbound("zot-image-updated")
    first = translate(inbound, layout=ObjectLayout(), registry_host=HOST)
    assert first and first == translate(inbound, layout=ObjectLayout(), registry_host=HOST)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("digest", "sha256:xyz"),  # a registered algorithm's encoding is its hex, of its size
        ("digest", "sha256:" + "A" * 64),
        ("digest", "sha512:" + "a" * 64),
        ("digest", DIGEST + "\n"),  # re's '$' took a final newline
        ("tag", "v1\n"),
        ("repository", "Sentiment"),  # repositories are lower-case path components
        ("repository", "a b"),
        ("host", "registry.local:5000@evil"),  # a URI whose host is another
        ("host", "evil.example/x"),  # a URI whose repository is another
        ("host", "a b"),
        ("host", "[1:2:3]:5000"),  # brackets holding no IPv6 address: no URL can be made
    ],
)
def test_a_notification_naming_what_no_registry_names_is_a_bad_request(
    where: str, value: str
) -> None:
    """Each of these was an ArtifactPushed, registered under a reference the registry
    adapters then refused (or read as another host, repository or digest)."""
    (event,) = _events("oci-distribution-push")
    if where == "host":
        event["request"]["host"] = value
    else:
        event["target"][where] = value
    with pytest.raises(BadRequest):
        _distribution(event)


def test_digests_of_other_algorithms_and_ports_stay_readable() -> None:
    (event,) = _events("oci-distribution-push")
    event["target"]["digest"] = "sha512:" + "b" * 128
    event["request"]["host"] = "[fd00::7]:5000"
    (pushed,) = _distribution(event)
    assert pushed.data.uri == "oci://[fd00::7]:5000/sentiment@sha512:" + "b" * 128
