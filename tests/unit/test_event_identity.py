"""An event is its source and its id (CloudEvents: an id is unique within its source alone),
and so is what it leads to: two upstream events of one id from two sources (two buckets'
Pub/Sub notifications, whose message ids are unique per topic) are two events all along the
chain, through `modelhooks serve`. Their replies were named `<id>/<name>` under the
function's one source, so the second push's reply was the first's delivered again with other
content: the next function answered 409 Conflict, never retried."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.core.records import ModelState
from modelhooks.events import samples
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelRegistered
from tests.local_store import lay_model
from tests.unit.signing_material import make_key

# two buckets, each notifying its own topic: the same message id from both
BUCKETS = (("models", "sentiment"), ("mirror", "mirrored"))


def serve() -> FlaskClient:
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import create_app

    return create_app(build().broker()).test_client()


def notification(bucket: str, model: str) -> dict[str, Any]:
    doc: dict[str, Any] = samples.load("gcs-pubsub-finalize-marker")
    attrs = doc["message"]["attributes"]
    attrs["bucketId"], attrs["objectId"] = bucket, f"models/{model}/1/_SUCCESS"
    attrs["notificationConfig"] = f"projects/_/buckets/{bucket}/notificationConfigs/1"
    return doc


def version_props(home: Path, model: str) -> tuple[ModelState, dict[str, str]]:
    registry = SqliteModelRegistry(home / "registry.db")
    try:
        found = registry.get_model(model)
        assert found is not None, f"{model} not registered"
        version = registry.get_version(found.id, "1")
        assert version is not None, f"{model} 1 not registered"
        return version.state, dict(version.custom_properties)
    finally:
        registry.close()


def test_two_pushes_of_one_id_from_two_buckets_are_both_registered_and_signed(
    configure: Callable[[dict[str, str]], None], home: Path, tmp_path: Path
) -> None:
    configure({"MODELHOOKS_SIGNING_KEY": str(make_key(tmp_path).private)})
    client, replies = serve(), []
    for bucket, model in BUCKETS:
        lay_model(home, bucket, f"models/{model}/1", content=bucket.encode())
        resp = client.post("/", json=notification(bucket, model))
        assert resp.status_code == 200, resp.get_data(as_text=True)
        outcomes = resp.json["outcomes"]
        assert all(o["status"] < 300 for o in outcomes), json.dumps(outcomes)
        replies += [r for o in outcomes for r in o["replies"]]
    for bucket, model in BUCKETS:
        state, props = version_props(home, model)
        assert state == ModelState.LIVE
        assert props["signature.uri"] == f"gs://{bucket}/models/{model}/1/model.sig"
    assert len(replies) == len(set(replies)) == 4  # registered and signed, twice


def test_two_pushes_of_one_id_older_than_their_deletions_are_both_cleaned_up(
    home: Path,
) -> None:
    """Each push, older than its model's deletion, is recorded archived and the deletion
    said again for it (register's `deleted-before`), which cleanup acts on: the second
    bucket's was answered 409 and its files stayed (seen before the fix)."""
    client = serve()
    for _, model in BUCKETS:
        deleted = {
            "specversion": "1.0",
            "id": f"deleted-{model}",
            "source": "/apis/modelhooks.dev/v1alpha1",
            "type": "dev.modelhooks.model.deleted",
            "time": "2026-11-24T00:00:00Z",
            "data": {"name": model, "spec": {"deletionPolicy": "Delete"}},
        }
        resp = client.post("/", json=deleted, content_type="application/cloudevents+json")
        assert resp.status_code == 200, resp.get_data(as_text=True)
    for bucket, model in BUCKETS:  # pushed 2026-11-23: before the deletions
        where = lay_model(home, bucket, f"models/{model}/1", content=bucket.encode())
        resp = client.post("/", json=notification(bucket, model))
        assert resp.status_code == 200, resp.get_data(as_text=True)
        cleaned = [o for o in resp.json["outcomes"] if o["function"] == "cleanup"]
        assert [o["status"] for o in cleaned] == [200], json.dumps(resp.json["outcomes"])
        assert not where.exists() or not any(where.iterdir()), f"{bucket}: files left"
        assert version_props(home, model)[0] == ModelState.ARCHIVED


def push(source: str, id: str = "7") -> CanonicalEvent:
    data = ArtifactPushed(model="m", version="1", uri="gs://b/m/1/", digest="d", store="gcs")
    return CanonicalEvent(id=id, source=source, type=data.TYPE, data=data)


REGISTERED = ModelRegistered(
    model="m", version="1", uri="gs://b/m/1/", digest="d", registry="sqlite",
    registered_model_id="1", model_version_id="2", model_artifact_id="3", created=True,
)  # fmt: skip


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (push("//storage.googleapis.com/projects/_/buckets/a"), push("s3://a")),
        (push("/a"), push("/b")),
        (push("/a", id="x/registered"), push("/a", id="x")),  # an id that looks derived
        (push('["/a", "7"]', id=""), push("/a", id='7"]')),  # the parts' boundaries
    ],
)
def test_derived_ids_differ_for_other_events(one: CanonicalEvent, other: CanonicalEvent) -> None:
    assert one.derived_id("registered") != other.derived_id("registered")
    reply = one.reply(REGISTERED, source="modelhooks/register", name="registered")
    assert reply.id != other.reply(REGISTERED, source="modelhooks/register", name="registered").id


def test_a_derived_id_is_the_same_for_a_redelivery_and_names_its_event() -> None:
    event = push("s3://a")
    again = push("s3://a")
    assert event.derived_id("signed") == again.derived_id("signed")
    assert event.derived_id("signed") != event.derived_id("registered")
    assert event.derived_id("signed").startswith("7/signed/")


def test_a_push_of_one_id_from_another_source_did_not_register_what_was_there() -> None:
    """register tells a redelivery of the push that registered a version (its reply says
    created, as the first time) by the push's source and id: the same bytes announced under
    the same id by another source found them registered (created: false)."""
    from modelhooks.handlers.register import register_model
    from tests.fakes.memory_registry import InMemoryModelRegistry

    registry = InMemoryModelRegistry()
    first, other = push("//storage.googleapis.com/projects/_/buckets/a"), push("s3://a")
    created = []
    for event in (first, other, first):
        assert isinstance(event.data, ArtifactPushed)
        (reply,) = register_model(event, event.data, registry=registry)
        assert isinstance(reply.data, ModelRegistered)
        created.append(reply.data.created)
    assert created == [True, False, True]


def test_a_chain_handled_anew_changes_nothing(
    configure: Callable[[dict[str, str]], None], home: Path, tmp_path: Path
) -> None:
    """A delivery from before the replies' names changed, delivered again after, finds no
    record of its replies (their ids are new) and is handled anew, as with no delivery log
    at all: every function answers 2xx again and the state stays as it was."""
    configure(
        {
            "MODELHOOKS_SIGNING_KEY": str(make_key(tmp_path).private),
            "MODELHOOKS_INGRESS_DEDUPE_SIZE": "0",
        }
    )
    client = serve()
    lay_model(home, "models", "models/sentiment/1")
    first = []
    for _ in range(2):
        resp = client.post("/", json=notification("models", "sentiment"))
        assert resp.status_code == 200, resp.get_data(as_text=True)
        outcomes = resp.json["outcomes"]
        assert all(o["status"] < 300 for o in outcomes), json.dumps(outcomes)
        first = first or [(o["function"], o["replies"]) for o in outcomes]
        assert [(o["function"], o["replies"]) for o in outcomes] == first
        state, props = version_props(home, "sentiment")
        assert state == ModelState.LIVE and props["signature.uri"].endswith("/model.sig")


def test_two_notification_configurations_of_one_bucket_are_two_sources_of_ids(
    home: Path,
) -> None:
    """A Pub/Sub message id is unique within its topic alone, and each of a bucket's
    notification configurations publishes to a topic of its own: two models' notifications
    of one message id, through two configurations, were one event id of the bucket (the
    second answered 409 by register, never retried, its model never registered)."""
    client = serve()
    for config, version in (("1", "0"), ("2", "1")):
        lay_model(home, "models", f"models/sentiment/{version}")
        doc = notification("models", "sentiment")
        attrs = doc["message"]["attributes"]
        attrs["objectId"] = f"models/sentiment/{version}/_SUCCESS"
        attrs["notificationConfig"] = f"projects/_/buckets/models/notificationConfigs/{config}"
        resp = client.post("/", json=doc)
        assert resp.status_code == 200, resp.get_data(as_text=True)
    registry = SqliteModelRegistry(home / "registry.db")
    try:
        model = registry.get_model("sentiment")
        assert model is not None
        assert sorted(v.name for v in registry.list_versions(model.id)) == ["0", "1"]
    finally:
        registry.close()


def test_an_id_qualified_by_its_configuration_is_at_most_1024_bytes_too(home: Path) -> None:
    """The notificationConfig attribute, bounded by nothing, made the id `<message id>@<its
    last part>` of any length (what is recorded under an event's id: Kubeflow's PostgreSQL
    refuses a property past 2,704 bytes; the next function's ingress takes at most 1,024):
    it is fitted to 1,024 bytes as every id a translator builds, and taken."""
    from modelhooks.events.ingress import MAX_NAME_BYTES

    client = serve()
    lay_model(home, "models", "models/sentiment/1")
    doc = notification("models", "sentiment")
    doc["message"]["messageId"] = "7" * 1000
    attrs = doc["message"]["attributes"]
    ids = []
    for last in "12":
        attrs["notificationConfig"] = "projects/_/buckets/models/notificationConfigs/" + (
            "9" * 2000 + last
        )
        resp = client.post("/", json=doc)
        assert resp.status_code == 200, resp.get_data(as_text=True)
        registry = SqliteModelRegistry(home / "registry.db")
        try:
            model = registry.get_model("sentiment")
            assert model is not None
            (version,) = registry.list_versions(model.id)
            (artifact,) = registry.list_artifacts(version.id)
        finally:
            registry.close()
        ids.append(artifact.custom_properties["source_event"])
        assert len(ids[-1].encode()) <= MAX_NAME_BYTES


def test_a_reply_to_an_event_of_a_1024_byte_id_is_taken_by_the_next_function() -> None:
    """Ingress takes an id of at most 1,024 bytes, and a reply's id was `<id>/<name>/<24
    hex>`: a push of a 1,024-byte id (taken) was registered, and its model.registered, 36
    bytes longer, was refused 400 by sign's ingress on the way back from the Broker (and
    notify's, prune's): dead-lettered, never signed. A derived id keeps within the bound,
    the event's id cut short before its name, the digest over it whole telling it apart."""
    from modelhooks.delivery.encoding import structured
    from modelhooks.events.ingress import MAX_NAME_BYTES, decode

    event, other = push("/a", id="é" * 512), push("/a", id="é" * 511 + "e")
    reply = event.reply(REGISTERED, source="modelhooks/register", name="registered")
    body = json.dumps(structured(reply)).encode()
    (inbound,) = decode({"content-type": "application/cloudevents+json"}, body)
    assert inbound.id == reply.id and len(reply.id.encode()) <= MAX_NAME_BYTES
    signed = reply.reply(REGISTERED, source="modelhooks/sign", name="signed")  # and on
    assert len(signed.id.encode()) <= MAX_NAME_BYTES
    assert reply.id == push("/a", id="é" * 512).derived_id("registered")  # a redelivery's
    assert reply.id != other.derived_id("registered")
    assert reply.id != event.derived_id("signed")
    assert push("/a").derived_id("registered").startswith("7/registered/")  # short: as was
