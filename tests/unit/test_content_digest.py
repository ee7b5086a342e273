"""An object-store model is named by its content: re-marking unchanged content registers
nothing new, changed content under a registered version is a Conflict, whatever the
marker's own generation or ETag."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from modelhooks import bootstrap
from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.bootstrap import build
from modelhooks.core.content import MARKER_LABEL, PREFIX
from modelhooks.delivery.http import create_app
from modelhooks.delivery.runtime import ingest_each
from modelhooks.events import samples
from modelhooks.events.model import ArtifactPushed
from tests.local_store import lay_model


def notification(generation: int, event_id: str) -> dict[str, object]:
    """A GCS finalize of models/sentiment/1/_SUCCESS in bucket `models` (Eventarc)."""
    doc = copy.deepcopy(samples.load("gcs-eventarc-finalized-marker"))
    assert isinstance(doc, dict)
    doc["id"] = event_id
    doc["data"]["generation"] = str(generation)
    return doc


def digests(home: Path) -> list[tuple[str, str]]:
    registry = SqliteModelRegistry(home / "registry.db")
    model = registry.get_model("sentiment")
    assert model is not None
    return [(v.name, v.custom_properties["digest"]) for v in registry.list_versions(model.id)]


def post(client: FlaskClient, doc: dict[str, object]) -> int:
    return client.post(
        "/functions/register", data=json.dumps(doc), content_type="application/cloudevents+json"
    ).status_code


def test_remarking_is_a_no_op_and_changed_content_a_conflict(home: Path) -> None:
    doc = notification(1, "a")
    name = doc["data"]["name"]  # type: ignore[index]
    version = home / "store" / doc["data"]["bucket"] / str(name).rsplit("/", 1)[0]  # type: ignore[index]
    version.mkdir(parents=True)
    (version / "weights.bin").write_bytes(b"w" * 100)
    (version / "_SUCCESS").write_bytes(b"")
    client = create_app(build().broker()).test_client()

    assert post(client, doc) == 200
    ((_, digest),) = digests(home)
    assert digest.startswith(PREFIX)
    (version / "_SUCCESS").write_bytes(b"again")  # a new marker, same content
    assert post(client, notification(2, "b")) == 200
    assert digests(home) == [("1", digest)]

    (version / "weights.bin").write_bytes(b"x" * 101)  # other content under the same version
    assert post(client, notification(3, "c")) == 409
    assert digests(home) == [("1", digest)]


def test_the_marker_identity_is_kept_as_a_label(home: Path) -> None:
    lay_model(home, "models", "models/sentiment/1")
    body = json.dumps(notification(7, "m")).encode()
    headers = {"Content-Type": "application/cloudevents+json"}
    delivery = build().delivery
    (event,), refused = ingest_each(headers, body, delivery)
    assert refused == []
    event = delivery.enter(event)
    assert isinstance(event.data, ArtifactPushed)
    assert event.data.digest.startswith(PREFIX)
    assert event.data.labels[MARKER_LABEL] == "gcs-generation:7"


def test_a_push_of_an_empty_prefix_registers_nothing_and_says_why(home: Path) -> None:
    """Nothing there (the marker deleted before the delivery) or the marker alone: not a
    model. A 2xx (redelivering would not help) whose body names the reason, on a
    function's endpoint and through the broker alike."""
    client = create_app(build().broker()).test_client()
    resp = client.post(
        "/functions/register",
        data=json.dumps(notification(1, "gone")),
        content_type="application/cloudevents+json",
    )
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.json is not None and "not a model" in resp.json["skipped"][0]["skipped"]

    version = home / "store" / "models" / "models" / "sentiment" / "1"
    version.mkdir(parents=True)
    (version / "_SUCCESS").write_bytes(b"")  # the marker alone
    resp = client.post(
        "/",
        data=json.dumps(notification(2, "marker-only")),
        content_type="application/cloudevents+json",
    )
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.json is not None
    assert [o["function"] for o in resp.json["outcomes"]] == ["-"]
    assert "not a model" in resp.json["outcomes"][0]["skipped"]
    assert SqliteModelRegistry(home / "registry.db").get_model("sentiment") is None


def test_the_store_watcher_names_versions_by_content_and_a_restart_is_silent(
    home: Path,
) -> None:
    """The embedded store follows the rule of GCS and S3: a touched marker of unchanged
    content is a no-op, and restarting `serve` (a new watcher, the same dedupe log) answers
    every re-announced marker as a duplicate, not as a conflict."""
    from modelhooks import bootstrap
    from modelhooks.adapters.object_store.watch import LocalStoreWatcher

    version = lay_model(home, "models", "models/demo/1")
    (version / "_SUCCESS").write_bytes(b"")
    outcomes: list[int] = []

    def watcher() -> LocalStoreWatcher:
        app = build()
        broker = app.broker()

        def publish(event: object) -> None:
            outcomes.extend(o.status for o in broker.publish(event))  # type: ignore[arg-type]

        return LocalStoreWatcher(home / "store", app.delivery.layout, publish, 1.0)

    assert watcher().poll() == 1
    registry = SqliteModelRegistry(home / "registry.db")
    model = registry.get_model("demo")
    assert model is not None
    (registered,) = registry.list_versions(model.id)
    digest = registered.custom_properties["digest"]
    assert digest.startswith(PREFIX)

    (version / "_SUCCESS").write_bytes(b"touched")  # re-marked: a new event, same content
    first = watcher()
    assert first.poll() == 1
    bootstrap.reset()  # a restart: the same store and dedupe log, a fresh process state
    assert watcher().poll() == 1
    assert outcomes and all(status < 300 for status in outcomes), outcomes
    (again,) = registry.list_versions(model.id)
    assert again.custom_properties["digest"] == digest


def test_naming_a_push_that_fails_answers_the_errors_status_and_never_raises(
    home: Path,
) -> None:
    """The listing behind the name can fail: a store that did not answer is a 503 (the
    platform redelivers), a link planted in the local store a 400; the broker, the store
    watcher and the functions' endpoints get an outcome, never an exception."""
    from modelhooks.core.errors import Unavailable
    from modelhooks.events.model import CanonicalEvent

    pushed = ArtifactPushed(
        model="m", version="1", uri="gs://models/m/1/", digest="gcs-generation:1", store="gcs"
    )
    event = CanonicalEvent.new(pushed, source="test", id="e")

    def down(event: CanonicalEvent) -> CanonicalEvent:
        raise Unavailable("the store did not answer")

    (outcome,) = build(content=down).broker().publish(event)
    assert (outcome.status, outcome.error and outcome.error["error"]) == (503, "unavailable")

    bootstrap.reset()
    (home / "store" / "models" / "m").mkdir(parents=True)
    (home / "store" / "models" / "m" / "1").symlink_to("/etc")
    (outcome,) = build().broker().publish(event)
    assert outcome.status == 400 and "symbolic link" in str(outcome.error), outcome
    assert SqliteModelRegistry(home / "registry.db").get_model("m") is None


def test_a_push_delivered_again_after_signing_is_a_duplicate(home: Path, tmp_path: Path) -> None:
    """sign writes model.sig and its binding into the prefix: neither names the model, so
    the redelivery is named alike and answered as the duplicate it is, not a 409."""
    from modelhooks.core.settings import load_settings
    from modelhooks.events.model import CanonicalEvent
    from tests.unit.signing_material import make_key

    lay_model(home, "models", "models/signed/1")
    key = make_key(tmp_path).private
    settings = load_settings({"home": str(home), "signing.key": str(key)}, env={})
    broker = build(settings).broker()
    data = ArtifactPushed(
        model="signed", version="1", uri="gs://models/models/signed/1/",
        digest="gcs-generation:1", store="gcs",
    )  # fmt: skip
    event = CanonicalEvent.new(data, source="/test", id="push-signed")
    first = broker.publish(event)
    assert {o.function: o.status for o in first}["sign"] == 200
    assert (home / "store" / "models" / "models" / "signed" / "1" / "model.sig.binding").exists()
    again = broker.publish(event)
    assert [o.status for o in again] == [o.status for o in first], [o.as_json() for o in again]


def test_a_listing_past_the_objects_one_version_may_hold_is_refused_unread(tmp_path: Path) -> None:
    """A push (or a Model's source) naming a whole bucket or a data lake's prefix had every
    object listed and held to name it: 300,000 objects took 2 s and 100 MB, ten million
    minutes and gigabytes, all within one delivery. Past MAX_OBJECTS (what admission reads
    of a model at most) it is bad input, and the listing is not read further."""
    from collections.abc import Iterator

    from modelhooks.core.content import MAX_OBJECTS, ContentResolver
    from modelhooks.core.errors import BadRequest
    from modelhooks.core.records import ObjectInfo
    from modelhooks.core.stores import Stores
    from modelhooks.events.model import CanonicalEvent

    listed: list[int] = []

    class Lake:  # a bucket listing lazily, as GCS and S3 page theirs
        def list(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
            for i in range(3 * MAX_OBJECTS):
                listed.append(i)
                yield ObjectInfo(bucket, f"{prefix}part-{i:08d}.parquet", 1, str(i))

    stores = Stores({"gs": Lake}, local_root=tmp_path)  # type: ignore[dict-item]
    resolver = ContentResolver(stores, frozenset({"_SUCCESS"}))
    data = ArtifactPushed(model="m", version="1", uri="gs://lake/", digest="d", store="gcs")
    event = CanonicalEvent(id="e", source="s", type=data.TYPE, data=data)
    with pytest.raises(BadRequest, match="more than 100000 objects") as refused:
        resolver(event)
    assert refused.value.details["uri"] == "gs://lake/"
    assert len(listed) == MAX_OBJECTS + 1
    listed.clear()
    with pytest.raises(BadRequest):
        resolver.digest_of("gs://lake/")  # a Model's source, as register names it
    assert len(listed) == MAX_OBJECTS + 1
