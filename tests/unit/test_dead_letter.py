"""The dead-letter sink (`modelhooks dead-letter`): authenticated, size-limited, and what it
keeps replays as the same canonical event."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from modelhooks.cli.replay import read_documents, to_events
from modelhooks.core.errors import BadRequest
from modelhooks.delivery.dead_letter import DeadLetterStore, create_app, records
from modelhooks.delivery.routes import RouteAuth
from modelhooks.events import samples
from modelhooks.events.layout import ObjectLayout

TOKEN = "s3cret-token"


@pytest.fixture
def client(tmp_path: Path) -> FlaskClient:
    auth = RouteAuth.from_settings(f"bearer:token={TOKEN}", "")
    app = create_app(auth, DeadLetterStore(tmp_path / "dead-letter"), max_body_bytes=4096)
    return app.test_client()


def knative_delivery() -> tuple[dict[str, str], bytes, dict[str, object]]:
    """A canonical event as the Broker dead-letters it: binary mode, error extensions."""
    sample = samples.load("canonical-artifact-pushed")
    assert isinstance(sample, dict)
    data = sample.pop("data")
    headers = {f"Ce-{k}": str(v) for k, v in sample.items() if k != "datacontenttype"}
    headers |= {
        "Content-Type": "application/json",
        "Ce-Knativeerrordest": "http://modelhooks-register.modelhooks.svc.cluster.local",
        "Ce-Knativeerrorcode": "503",
        "Ce-Knativeerrordata": "registry%20unavailable",
        "Authorization": f"Bearer {TOKEN}",
    }
    return headers, json.dumps(data).encode(), sample


def test_kept_events_replay_as_the_same_canonical_event(
    client: FlaskClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    headers, body, sample = knative_delivery()
    resp = client.post("/", headers=headers, data=body)
    assert resp.status_code == 202 and resp.json == {"stored": 1}
    (path,) = (tmp_path / "dead-letter").glob("*.jsonl")
    (stored,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert stored["knativeerrorcode"] == "503"
    assert stored["knativeerrordata"] == "registry unavailable"
    assert capsys.readouterr().out.strip() == path.read_text().strip()  # the log copy
    (replayed,) = to_events(read_documents(str(tmp_path / "dead-letter")), ObjectLayout())
    assert not isinstance(replayed, Exception), replayed
    assert (replayed.type, replayed.id) == (sample["type"], sample["id"])


def test_without_credentials_nothing_is_kept(client: FlaskClient, tmp_path: Path) -> None:
    headers, body, _ = knative_delivery()
    del headers["Authorization"]
    resp = client.post("/", headers=headers, data=body)
    assert resp.status_code == 401 and resp.json["error"] == "unauthenticated"
    assert not (tmp_path / "dead-letter").exists()


def test_an_oversized_body_is_refused_before_it_is_read(client: FlaskClient) -> None:
    headers, _, _ = knative_delivery()
    resp = client.post("/", headers=headers, data=b"x" * 5000)
    assert resp.status_code == 413 and resp.is_json


@pytest.mark.parametrize(
    "content_type, body",
    [
        ("application/json", b"{not json"),
        ("application/cloudevents+json", b"[1]"),
        ("application/cloudevents-batch+json", b"{}"),
        ("application/cloudevents+json", b"[" * 3000 + b"]" * 3000),
    ],
)
def test_unreadable_bodies_get_a_json_400(
    client: FlaskClient, content_type: str, body: bytes
) -> None:
    headers = {"Content-Type": content_type, "Ce-Specversion": "1.0"}
    resp = client.post("/", headers={**headers, "Authorization": f"Bearer {TOKEN}"}, data=body)
    assert resp.status_code in (400, 413) and resp.is_json, resp.data


def test_structured_batch_and_binary_deliveries_are_kept_whole() -> None:
    event = {"specversion": "1.0", "id": "1", "source": "s", "type": "t", "data": {"a": 1}}
    ce = "application/cloudevents+json"
    assert records({"content-type": ce}, json.dumps(event).encode()) == [event]
    batch = json.dumps([event, {**event, "id": "2"}]).encode()
    assert len(records({"Content-Type": "application/cloudevents-batch+json"}, batch)) == 2
    binary = records({"ce-specversion": "1.0", "ce-id": "3", "content-type": "image/png"}, b"\x89")
    assert binary[0]["data_base64"] == "iQ=="
    with pytest.raises(BadRequest, match="not a CloudEvent"):
        records({"content-type": "application/json"}, b"{}")


def test_readiness(client: FlaskClient) -> None:
    assert client.get("/").status_code == 200
