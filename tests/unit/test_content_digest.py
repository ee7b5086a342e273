"""An object-store model is named by its content: re-marking unchanged content registers
nothing new, changed content under a registered version is a Conflict, whatever the
marker's own generation or ETag."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from flask.testing import FlaskClient

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.bootstrap import build
from modelhooks.core.content import MARKER_LABEL, PREFIX
from modelhooks.delivery.http import create_app
from modelhooks.delivery.runtime import ingest
from modelhooks.events import samples
from modelhooks.events.model import ArtifactPushed


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
    body = json.dumps(notification(7, "m")).encode()
    headers = {"Content-Type": "application/cloudevents+json"}
    (event,) = ingest(headers, body, build().delivery)
    assert isinstance(event.data, ArtifactPushed)
    assert event.data.digest.startswith(PREFIX)
    assert event.data.labels[MARKER_LABEL] == "gcs-generation:7"
