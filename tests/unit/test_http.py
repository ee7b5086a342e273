"""HTTP through the functions-framework app (`--target register`) and `modelhooks serve`:
every CloudEvents mode, Pub/Sub wrapped and unwrapped, auth, duplicates, bad input."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from flask.testing import FlaskClient

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.events import samples
from tests.local_store import lay_model

pytestmark = pytest.mark.usefixtures("sample_models")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(home: Path) -> FlaskClient:
    from functions_framework import create_app

    app = create_app(target="register", source=str(ROOT / "functions" / "main.py"))
    return app.test_client()


@pytest.fixture
def serve(home: Path) -> FlaskClient:
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import create_app

    return create_app(build().broker()).test_client()


def registry(home: Path) -> SqliteModelRegistry:
    return SqliteModelRegistry(home / "registry.db")


def versions(home: Path, model: str) -> list[str]:
    reg = registry(home)
    m = reg.get_model(model)
    return [v.name for v in reg.list_versions(m.id)] if m else []


def structured(name: str) -> dict[str, Any]:
    doc = samples.load(name)
    assert isinstance(doc, dict)
    return doc


def as_binary(doc: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    headers = {f"ce-{k}": str(v) for k, v in doc.items() if k not in ("data", "datacontenttype")}
    headers["Content-Type"] = doc.get("datacontenttype", "application/json")
    return headers, json.dumps(doc["data"]).encode()


def test_binary_mode_registers_and_replies_in_binary_mode(client: FlaskClient, home: Path) -> None:
    headers, body = as_binary(structured("canonical-artifact-pushed"))
    resp = client.post("/", headers=headers, data=body)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.headers["ce-type"] == "dev.modelhooks.model.registered"
    assert resp.headers["ce-specversion"] == "1.0"
    assert (
        resp.json is not None and resp.json["model"] == "sentiment" and resp.json["created"] is True
    )
    assert versions(home, "sentiment") == ["1"]


def test_structured_mode(client: FlaskClient, home: Path) -> None:
    doc = structured("canonical-artifact-pushed")
    resp = client.post("/", data=json.dumps(doc), content_type="application/cloudevents+json")
    assert resp.status_code == 200
    assert resp.headers["ce-type"] == "dev.modelhooks.model.registered"
    assert versions(home, "sentiment") == ["1"]


def test_batch_mode_answers_a_batch_of_replies(client: FlaskClient, home: Path) -> None:
    one = structured("canonical-artifact-pushed")
    two = json.loads(json.dumps(one))
    two["id"], two["data"]["version"], two["data"]["uri"] = (
        "replay-0002",
        "2",
        "gs://models/models/sentiment/2/",
    )
    lay_model(home, "models", "models/sentiment/2")
    resp = client.post(
        "/", data=json.dumps([one, two]), content_type="application/cloudevents-batch+json"
    )
    assert resp.status_code == 200
    assert resp.content_type == "application/cloudevents-batch+json"
    assert [r["data"]["version"] for r in resp.json] == ["1", "2"]
    assert sorted(versions(home, "sentiment")) == ["1", "2"]


def test_pubsub_wrapped_gcs_notification(client: FlaskClient, home: Path) -> None:
    resp = client.post("/", json=samples.load("gcs-pubsub-finalize-marker"))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.headers["ce-type"] == "dev.modelhooks.model.registered"
    assert versions(home, "sentiment") == ["1"]


def test_pubsub_unwrapped_gcs_notification(client: FlaskClient, home: Path) -> None:
    wrapped = samples.load("gcs-pubsub-finalize-marker")
    msg = wrapped["message"]
    headers = {"x-goog-pubsub-message-id": msg["messageId"], "x-goog-pubsub-subscription-name": "s"}
    headers.update(msg["attributes"])
    resp = client.post(
        "/", headers=headers, data=base64.b64decode(msg["data"]), content_type="application/json"
    )
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert versions(home, "sentiment") == ["1"]


@pytest.mark.parametrize("message_id", ["", "  ", "\x7f"])
def test_a_pubsub_push_without_a_message_id_is_a_bad_request(
    client: FlaskClient, home: Path, message_id: str
) -> None:
    """An unwrapped push with an empty x-goog-pubsub-message-id was event id '': every such
    push was one event (the second a Conflict, or a duplicate answered with the first's reply)."""
    wrapped = samples.load("gcs-pubsub-finalize-marker")
    msg = wrapped["message"]
    headers = {"x-goog-pubsub-message-id": message_id, **msg["attributes"]}
    resp = client.post(
        "/", headers=headers, data=base64.b64decode(msg["data"]), content_type="application/json"
    )
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert "message-id" in resp.json["message"]
    wrapped["message"] = {**msg, "messageId": message_id, "message_id": message_id}
    resp = client.post("/", json=wrapped)
    assert resp.status_code == 400 and "messageId" in resp.json["message"]
    assert versions(home, "sentiment") == []


@pytest.mark.parametrize("attribute", ["id", "source"])
def test_an_id_or_source_past_1024_bytes_is_a_bad_request(
    serve: FlaskClient, home: Path, attribute: str
) -> None:
    """An event's id and source name what it leads to (a reply's id, register's
    source_event, prune's plan); unbounded, a 3 KB id became a property Kubeflow's
    PostgreSQL refuses (500, redelivered for ever). Past 1,024 bytes of UTF-8 (a Pub/Sub
    attribute's most) it is refused, in each mode; at 1,024 it is taken."""
    doc = structured("canonical-artifact-pushed")
    long, taken = "é" * 513, "é" * 512  # 1,026 and 1,024 bytes
    for body in ({**doc, attribute: long}, [{**doc, attribute: long}]):
        kind = "batch" if isinstance(body, list) else ""
        ctype = f"application/cloudevents{'-batch' if kind else ''}+json"
        resp = serve.post("/", data=json.dumps(body), content_type=ctype)
        assert resp.status_code == 400, resp.get_data(as_text=True)
        assert f"'{attribute}' is over 1024 bytes" in resp.json["message"]
    headers, data = as_binary(doc)
    headers[f"ce-{attribute}"] = quote(long)  # percent-encoded UTF-8, as the binding says
    resp = serve.post("/", headers=headers, data=data)
    assert resp.status_code == 400 and "over 1024 bytes" in resp.json["message"]
    assert versions(home, doc["data"]["model"]) == []
    resp = serve.post("/", json={**doc, attribute: taken})
    assert resp.status_code == 200, resp.get_data(as_text=True)


def test_a_pubsub_message_id_past_1024_bytes_is_a_bad_request(client: FlaskClient) -> None:
    wrapped = samples.load("gcs-pubsub-finalize-marker")
    msg = {**wrapped["message"], "messageId": "7" * 1025}
    resp = client.post("/", json={**wrapped, "message": msg})
    assert resp.status_code == 400 and "messageId is over 1024 bytes" in resp.json["message"]
    headers = {"x-goog-pubsub-message-id": "7" * 1025, **msg["attributes"]}
    resp = client.post(
        "/", headers=headers, data=base64.b64decode(msg["data"]), content_type="application/json"
    )
    assert resp.status_code == 400 and "message-id is over 1024 bytes" in resp.json["message"]


def test_a_file_that_is_not_the_marker_is_acknowledged_without_effect(
    client: FlaskClient, home: Path
) -> None:
    resp = client.post(
        "/",
        json=structured("gcs-eventarc-finalized-weights"),
        content_type="application/cloudevents+json",
    )
    assert resp.status_code == 204
    assert versions(home, "sentiment") == []


def test_duplicate_delivery_returns_the_same_reply_and_changes_nothing(
    client: FlaskClient, home: Path
) -> None:
    headers, body = as_binary(structured("canonical-artifact-pushed"))
    first = client.post("/", headers=headers, data=body)
    second = client.post("/", headers=headers, data=body)
    assert first.status_code == second.status_code == 200
    assert first.headers["ce-id"] == second.headers["ce-id"]
    assert versions(home, "sentiment") == ["1"]
    assert (
        len(
            registry(home).list_artifacts(
                registry(home).get_version(registry(home).get_model("sentiment").id, "1").id
            )
        )
        == 1
    )  # type: ignore[union-attr]


def test_redelivery_after_restart_answers_the_first_reply(
    home: Path, configure: Callable[[dict[str, str]], None]
) -> None:
    """With the SQLite registry, dedupe is durable: a redelivery to a fresh process answers
    the first delivery's reply, and an id reused with other content is still a 409. With
    dedupe off, idempotent effects make a fresh process safe all the same: nothing is
    registered twice, and the answer is the first one (a function of the event and the
    state it left)."""
    from functions_framework import create_app

    from modelhooks import bootstrap

    headers, body = as_binary(structured("canonical-artifact-pushed"))
    replies = []
    for _ in range(2):
        bootstrap.reset()
        app = create_app(target="register", source=str(ROOT / "functions" / "main.py"))
        resp = app.test_client().post("/", headers=headers, data=body)
        assert resp.status_code == 200
        replies.append((resp.headers["ce-id"], resp.json))
    assert replies[0] == replies[1] and replies[0][1]["created"] is True
    bootstrap.reset()
    app = create_app(target="register", source=str(ROOT / "functions" / "main.py"))
    other = json.dumps({**json.loads(body), "version": "2"}).encode()
    assert app.test_client().post("/", headers=headers, data=other).status_code == 409

    configure({"MODELHOOKS_INGRESS_DEDUPE_SIZE": "0"})
    app = create_app(target="register", source=str(ROOT / "functions" / "main.py"))
    resp = app.test_client().post("/", headers=headers, data=body)
    assert resp.status_code == 200 and (resp.headers["ce-id"], resp.json) == replies[0]
    assert versions(home, "sentiment") == ["1"]


def test_same_version_other_digest_is_409(client: FlaskClient, home: Path) -> None:
    """The version's content changed under it (the event names it by its marker; the
    ingress names it by its content)."""
    doc = structured("canonical-artifact-pushed")
    assert (
        client.post("/", json=doc, content_type="application/cloudevents+json").status_code == 200
    )
    version = home / "store" / "models" / "models" / "sentiment" / "1"
    version.mkdir(parents=True, exist_ok=True)
    (version / "weights.bin").write_bytes(b"other content")
    doc["id"], doc["data"]["digest"] = "other", "gcs-generation:2"
    resp = client.post("/", json=doc, content_type="application/cloudevents+json")
    assert resp.status_code == 409
    (outcome,) = resp.json["outcomes"]
    assert outcome["error"]["error"] == "conflict"


@pytest.mark.parametrize(
    ("headers", "body", "status", "says"),
    [
        ({"Content-Type": "application/json"}, b"{not json", 400, "not valid JSON"),
        (
            {"Content-Type": "application/cloudevents+json"},
            b'{"specversion": "1.0", "id": "x", "source": "s"}',
            400,
            "'type'",
        ),
        (
            {"Content-Type": "application/cloudevents+json"},
            b'{"specversion": "0.3", "id": "x", "source": "s", "type": "t"}',
            400,
            "specversion",
        ),
        (
            {"Content-Type": "application/cloudevents+json"},
            b'{"specversion": "1.0", "id": "x", "source": "s", "type": "com.example.unknown"}',
            400,
            "com.example.unknown",
        ),
        ({"Content-Type": "application/cloudevents-batch+json"}, b'{"a": 1}', 400, "JSON array"),
        ({"Content-Type": "application/json"}, b"[1, 2]", 400, "JSON object"),
        ({"Content-Type": "application/json"}, b'{"hello": "world"}', 400, ""),
        (  # replaced, '%C3' and '%C4' were one id (U+FFFD): a Conflict for the second
            {
                "Content-Type": "application/json",
                "ce-specversion": "1.0",
                "ce-id": "%C3",
                "ce-source": "/s",
                "ce-type": "dev.modelhooks.artifact.pushed",
            },
            json.dumps(samples.load("canonical-artifact-pushed")["data"]).encode(),
            400,
            "ce-id: percent-encodes no UTF-8 text",
        ),
    ],
)
def test_bad_input_is_a_4xx_naming_the_problem(
    client: FlaskClient, headers: dict[str, str], body: bytes, status: int, says: str
) -> None:
    resp = client.post("/", headers=headers, data=body)
    assert resp.status_code == status
    assert resp.json is not None and resp.json["error"] == "bad_request"
    assert says in resp.json["message"]


def test_wrong_typed_field_names_the_field(client: FlaskClient) -> None:
    doc = structured("canonical-artifact-pushed")
    doc["data"]["version"] = {"not": "a string"}
    resp = client.post("/", json=doc, content_type="application/cloudevents+json")
    assert resp.status_code == 400
    assert "version" in json.dumps(resp.json)


def test_body_over_the_limit_is_413(
    client: FlaskClient, home: Path, configure: Callable[[dict[str, str]], None]
) -> None:
    configure({"MODELHOOKS_INGRESS_MAX_BODY_BYTES": "100"})
    resp = client.post(
        "/",
        json=structured("canonical-artifact-pushed"),
        content_type="application/cloudevents+json",
    )
    assert resp.status_code == 413
    assert resp.json is not None and "100" in resp.json["message"]


def test_bearer_auth(
    client: FlaskClient, home: Path, configure: Callable[[dict[str, str]], None]
) -> None:
    configure(
        {"MODELHOOKS_INGRESS_AUTH": "bearer:token=s3cret", "MODELHOOKS_INGRESS_ROUTE_KINDS": "/=*"}
    )
    doc = json.dumps(structured("canonical-artifact-pushed"))
    ctype = "application/cloudevents+json"
    assert client.post("/", data=doc, content_type=ctype).status_code == 401
    bad = client.post("/", data=doc, content_type=ctype, headers={"Authorization": "Bearer nope"})
    assert (
        bad.status_code == 401 and bad.json is not None and bad.json["error"] == "unauthenticated"
    )
    assert versions(home, "sentiment") == []
    ok = client.post("/", data=doc, content_type=ctype, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200


def test_tenant_outside_its_buckets_is_403(
    client: FlaskClient, home: Path, configure: Callable[[dict[str, str]], None]
) -> None:
    configure({"MODELHOOKS_TENANCY_TENANTS": "ml=gs://ml-models;other=gs://models"})
    resp = client.post(
        "/",
        json=structured("canonical-artifact-pushed"),
        content_type="application/cloudevents+json",
    )
    assert resp.status_code == 403
    assert "gs://models" in json.dumps(resp.json)
    assert versions(home, "sentiment") == []


@pytest.mark.parametrize("cut", ["#", "?"])
def test_a_tenant_pattern_is_matched_against_the_bucket_the_store_acts_on(
    client: FlaskClient, home: Path, configure: Callable[[dict[str, str]], None], cut: str
) -> None:
    """Tenancy and the store read one bucket: `gs://models#-ml/...` matched ml's `gs://*-ml`
    (up to the first '/') while the store, parsing a URL, acted on bucket `models`, another
    tenant's. `models#-ml` is no bucket name: refused, nothing registered."""
    configure({"MODELHOOKS_TENANCY_TENANTS": "ml=gs://*-ml;other=gs://models"})
    doc = structured("canonical-artifact-pushed")
    doc["data"] = {**doc["data"], "uri": f"gs://models{cut}-ml/models/sentiment/1/"}
    resp = client.post("/", json=doc, content_type="application/cloudevents+json")
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert f"'models{cut}-ml' is not a bucket name" in json.dumps(resp.json)
    assert versions(home, "sentiment") == []


def test_bucket_notification_takes_the_owning_tenant(
    client: FlaskClient, home: Path, configure: Callable[[dict[str, str]], None]
) -> None:
    configure({"MODELHOOKS_TENANCY_TENANTS": "ml=gs://models"})
    resp = client.post("/", json=samples.load("gcs-pubsub-finalize-marker"))
    assert resp.status_code == 200
    assert resp.json is not None and resp.json["namespace"] == "ml"


def test_out_of_order_delete_before_create(client: FlaskClient, home: Path) -> None:
    """The Model's deletion (17:45) arrives before the older push (17:02): it stays archived."""
    delete = client.post(
        "/", json=structured("k8s-resource-delete"), content_type="application/cloudevents+json"
    )
    assert delete.status_code == 204, delete.get_data(as_text=True)
    push = client.post(
        "/",
        json=structured("canonical-artifact-pushed"),
        content_type="application/cloudevents+json",
    )
    assert push.status_code == 200  # the deletion, said again for this version (cleanup)
    reply = push.get_json()
    assert push.headers["ce-type"] == "dev.modelhooks.model.deleted", push.headers
    assert reply["version"] == "1" and reply["spec"] == {"deletionPolicy": "Retain"}
    model = registry(home).get_model("sentiment")
    assert model is not None and model.state.value == "ARCHIVED"
    states = {v.name: v.state.value for v in registry(home).list_versions(model.id)}
    assert states == {"1": "ARCHIVED"}  # recorded, and archived: it is older than the deletion


@pytest.fixture
def sink(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, str]]]:
    """A local HTTP sink set as K_SINK; yields the headers of what it received."""
    import http.server
    import threading

    from modelhooks import bootstrap

    got: list[dict[str, str]] = []

    class Sink(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            got.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(202)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Sink)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    monkeypatch.setenv("K_SINK", f"http://127.0.0.1:{server.server_port}/")
    bootstrap.reset()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_k_sink_receives_the_reply(sink: list[dict[str, str]]) -> None:
    from functions_framework import create_app

    app = create_app(target="register", source=str(ROOT / "functions" / "main.py"))
    resp = app.test_client().post(
        "/",
        json=structured("canonical-artifact-pushed"),
        content_type="application/cloudevents+json",
    )
    assert resp.status_code == 204
    assert [h["ce-type"] for h in sink] == ["dev.modelhooks.model.registered"]


def test_serve_with_a_sink_is_the_ingress(sink: list[dict[str, str]], home: Path) -> None:
    """The cluster's ingress Service: native webhooks in, canonical events to the Broker."""
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import create_app

    client = create_app(build().broker()).test_client()
    resp = client.post("/minio-events", json=samples.load("s3-minio-put-marker"))
    assert resp.status_code == 202, resp.get_data(as_text=True)
    assert [h["ce-type"] for h in sink] == ["dev.modelhooks.artifact.pushed"]
    assert resp.json is not None and resp.json["forwarded"] == [sink[0]["ce-id"]]
    assert registry(home).list_models() == []  # forwarded, not run here


def test_the_ingress_refuses_an_attribute_name_no_header_can_carry(
    sink: list[dict[str, str]], home: Path
) -> None:
    """A canonical event keeps its extensions, and the ingress forwards it to the Broker as
    ce-* headers: a name that is not lower-case letters and digits (CloudEvents) is refused,
    400 naming it (`x:y` and `é` failed in http.client: a 500, redelivered for good)."""
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import create_app

    client = create_app(build().broker()).test_client()
    for name in ("x:y", "\u00e9", "x y", "X_Y"):
        doc = {**structured("canonical-artifact-pushed"), name: "v"}
        resp = client.post("/", json=doc, content_type="application/cloudevents+json")
        assert resp.status_code == 400, (name, resp.get_data(as_text=True))
        assert resp.json is not None and f"attribute name {name!r}" in resp.json["message"]
    assert sink == []
    doc = {**structured("canonical-artifact-pushed"), "team2": "ml"}
    resp = client.post("/", json=doc, content_type="application/cloudevents+json")
    assert resp.status_code == 202, resp.get_data(as_text=True)
    assert [h["ce-team2"] for h in sink] == ["ml"]


def test_serve_routes_by_the_knative_triggers(serve: FlaskClient, home: Path) -> None:
    resp = serve.post("/", json=samples.load("s3-minio-put-marker"))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    outcomes = resp.json["outcomes"]
    # triggers.yaml order: register, sign (signing off: skipped, 204), prune (not OCI: 204);
    # register's reply reaches notify (no cluster here: skipped, 204)
    assert [(o["function"], o["status"]) for o in outcomes] == [
        ("register", 200),
        ("notify", 204),
        ("sign", 204),
        ("prune", 204),
    ]
    assert registry(home).list_models()


def test_serve_function_endpoint_and_health(serve: FlaskClient) -> None:
    assert serve.get("/healthz").json["status"] == "ok"
    doc = structured("canonical-artifact-pushed")
    resp = serve.post("/functions/register", json=doc, content_type="application/cloudevents+json")
    assert resp.status_code == 200 and resp.headers["ce-type"] == "dev.modelhooks.model.registered"
    missing = serve.post("/functions/nope", json=doc)
    assert missing.status_code == 404 and "register" in json.dumps(missing.json)


def test_each_event_logs_one_json_line_cloud_logging_understands(
    client: FlaskClient, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = structured("canonical-artifact-pushed")
    assert (
        client.post("/", json=doc, content_type="application/cloudevents+json").status_code == 200
    )
    lines = [
        json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")
    ]
    (entry,) = [e for e in lines if e.get("function") == "register"]
    assert entry["severity"] == "INFO"
    assert entry["event_id"] == doc["id"]
    assert entry["type"] == "dev.modelhooks.artifact.pushed"
    assert entry["outcome"] == "ok" and entry["status"] == 200
    assert isinstance(entry["duration_ms"], float)


def test_the_same_id_from_another_source_is_another_event(client: FlaskClient, home: Path) -> None:
    """CloudEvents identity is source + id: only a true redelivery is a duplicate."""
    one = structured("canonical-artifact-pushed")
    two = json.loads(json.dumps(one))
    two["source"], two["data"]["model"] = "/elsewhere", "other-model"
    two["data"]["uri"] = "gs://models/models/other-model/1/"
    lay_model(home, "models", "models/other-model/1")
    for doc in (one, two):
        resp = client.post("/", json=doc, content_type="application/cloudevents+json")
        assert resp.status_code == 200
    assert versions(home, "other-model") == ["1"]


def test_a_bad_setting_stops_the_functions_framework_target_at_start(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions_framework import create_app

    from modelhooks.core.errors import ConfigError

    monkeypatch.setenv("MODELHOOKS_INGRESS_AUTH", "hmac:secret=env:MODELHOOKS_TEST_NOT_SET")
    with pytest.raises(ConfigError, match=r"MODELHOOKS_INGRESS_AUTH.*MODELHOOKS_TEST_NOT_SET"):
        create_app(target="register", source=str(ROOT / "functions" / "main.py"))


def test_an_oversized_body_is_refused_before_authentication(
    client: FlaskClient, home: Path, configure: Callable[[dict[str, str]], None]
) -> None:
    configure(
        {
            "MODELHOOKS_INGRESS_AUTH": "bearer:token=s3cret",
            "MODELHOOKS_INGRESS_MAX_BODY_BYTES": "64",
        }
    )
    resp = client.post("/", data=b"x" * 65, content_type="application/json")
    assert resp.status_code == 413


def test_an_explicit_default_namespace_is_not_a_pass_to_another_tenant(
    client: FlaskClient, home: Path, configure: Callable[[dict[str, str]], None]
) -> None:
    configure({"MODELHOOKS_TENANCY_TENANTS": "ml=gs://models"})
    doc = structured("canonical-artifact-pushed")
    doc["data"]["namespace"] = "default"
    resp = client.post("/", json=doc, content_type="application/cloudevents+json")
    assert resp.status_code == 403
    assert versions(home, "sentiment") == []


def test_another_namespace_cannot_archive_a_tenants_model(
    client: FlaskClient, home: Path, configure: Callable[[dict[str, str]], None]
) -> None:
    configure({"MODELHOOKS_TENANCY_TENANTS": "ml=gs://models;other=gs://other"})
    push = structured("canonical-artifact-pushed")  # namespace ml
    assert (
        client.post("/", json=push, content_type="application/cloudevents+json").status_code == 200
    )
    delete = structured("k8s-resource-delete")
    delete["namespace"] = delete["data"]["metadata"]["namespace"] = "other"
    resp = client.post("/", json=delete, content_type="application/cloudevents+json")
    assert resp.status_code == 403
    model = registry(home).get_model("sentiment")
    assert model is not None and model.state.value == "LIVE"


@pytest.mark.parametrize("action", ["add", "update"])
def test_a_model_naming_another_tenants_bucket_is_refused(
    client: FlaskClient, home: Path, configure: Callable[[dict[str, str]], None], action: str
) -> None:
    """A Model in namespace ml whose spec.source is gs://models, the bucket of namespace
    other: refused naming both, the bucket neither listed nor registered (it was registered
    under ml, the tenancy check being for events with a `uri` only). The refusal is told to
    the Model: 200 with a model.refused saying why (notify's condition), not a bare 403."""
    configure({"MODELHOOKS_TENANCY_TENANTS": "ml=gs://ml-models;other=gs://models"})
    doc = structured(f"k8s-resource-{action}")
    assert doc["data"]["spec"]["source"] == {"gcs": {"uri": "gs://models/models/sentiment/1/"}}
    doc["data"]["status"] = {}  # nothing registered yet: the update registers too
    resp = client.post("/", json=doc, content_type="application/cloudevents+json")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.headers["ce-type"] == "dev.modelhooks.model.refused"
    told = resp.get_json()
    assert told["refused"] == "forbidden: namespace 'ml' may not act on gs://models", told
    assert (told["model"], told["version"], told["namespace"]) == ("sentiment", "1", "ml")
    assert versions(home, "sentiment") == []
    configure({"MODELHOOKS_TENANCY_TENANTS": "ml=gs://models"})  # its own: registered
    resp = client.post("/", json=doc, content_type="application/cloudevents+json")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert versions(home, "sentiment") == ["1"]


@pytest.mark.parametrize("pattern", ["gs://models/", "gs://models/*", "gs://mod*/"])
def test_a_bucket_pattern_ending_in_a_slash_names_the_bucket(
    client: FlaskClient,
    home: Path,
    configure: Callable[[dict[str, str]], None],
    pattern: str,
) -> None:
    """`gs://models/` (or `/*`) is bucket models: it matched no location (a location is
    `gs://models`), so namespace ml's Model in its own bucket was a 403."""
    configure({"MODELHOOKS_TENANCY_TENANTS": f"ml={pattern}"})
    resp = client.post(
        "/", json=structured("k8s-resource-add"), content_type="application/cloudevents+json"
    )
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert versions(home, "sentiment") == ["1"]


@pytest.mark.parametrize("pattern", ["oci://reg:5000/ml/", "reg:5000/ml/*"])
def test_a_repository_pattern_ending_in_a_slash_names_the_repositories_below(
    pattern: str,
) -> None:
    """`oci://reg/ml/` matched no repository (a location is `oci://reg/ml/bert`): the
    namespace it was meant for was refused every one of them."""
    from modelhooks.core.tenancy import Tenancy

    tenancy = Tenancy.parse(f"ml={pattern}")
    assert tenancy.owner("oci://reg:5000/ml/bert@sha256:" + "0" * 64) == "ml"
    assert tenancy.owner("oci://reg:5000/other/bert:1") is None


def test_a_bucket_pattern_with_a_path_fails_at_start() -> None:
    """Tenancy is per bucket: `gs://models/team-a/*` matched nothing, silently."""
    from modelhooks.core.errors import ConfigError
    from modelhooks.core.tenancy import Tenancy

    with pytest.raises(ConfigError, match="MODELHOOKS_TENANCY_TENANTS: 'gs://models/team-a/"):
        Tenancy.parse("ml=gs://models/team-a/*")


def test_a_large_body_under_the_limit_arrives_whole(client: FlaskClient, home: Path) -> None:
    doc = structured("canonical-artifact-pushed")
    doc["data"]["labels"] = {f"k{i}": "v" * 100 for i in range(2000)}  # ~230 KB, many reads
    resp = client.post("/", json=doc, content_type="application/cloudevents+json")
    assert resp.status_code == 200, resp.get_data(as_text=True)


def test_a_functions_framework_target_answers_healthz_like_serve(client: FlaskClient) -> None:
    resp = client.get("/healthz")
    assert resp.status_code == 200 and resp.json == {"status": "ok", "function": "register"}


def test_cli_version_and_exit_codes(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from modelhooks.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("modelhooks ")
    assert main(["registry", "list"]) == 2  # no registry here: a configuration error
    assert "no registry at" in capsys.readouterr().err


def _refused(resp: Any) -> list[tuple[str, str]]:
    """(id, message) of each outcome an answer refused."""
    assert resp.json is not None, resp.get_data(as_text=True)
    return [(o["id"], o["error"]["message"]) for o in resp.json["outcomes"] if o["status"] >= 400]


def test_a_bad_batch_member_does_not_take_the_good_ones_with_it(
    client: FlaskClient, home: Path
) -> None:
    """A batch was refused whole, 400, for one bad member: the good ones never took effect
    and, 4xx being final, never would. Now each bad member is refused alone."""
    good = structured("canonical-artifact-pushed")
    bad = {**good, "id": "bad-version", "data": {**good["data"], "version": "../1"}}
    future = {**good, "id": "dated-later", "time": "2999-01-01T00:00:00Z"}
    no_event = {**good, "specversion": "0.3"}  # not a CloudEvent 1.0: refused as it is read
    batch = json.dumps([bad, no_event, future, good])
    resp = client.post("/", data=batch, content_type="application/cloudevents-batch+json")
    assert resp.status_code == 400
    refused = _refused(resp)
    assert [r[0] for r in refused] == ["-", "bad-version", "dated-later"]
    assert refused[0][1] == "batch[1]: specversion must be '1.0', got '0.3'"
    assert "version" in refused[1][1] and "future" in refused[2][1]
    assert versions(home, "sentiment") == ["1"]
    # every member bad: the delivery is refused whole, as before
    resp = client.post(
        "/", data=json.dumps([bad]), content_type="application/cloudevents-batch+json"
    )
    assert resp.status_code == 400 and resp.json is not None and "version" in resp.json["message"]


def test_a_bad_record_does_not_take_the_good_ones_with_it(client: FlaskClient, home: Path) -> None:
    """Several S3 records, or registry events, in one body: one bad refused the body."""
    s3 = structured("s3-minio-put-marker")
    record = s3["Records"][0]
    broken = json.loads(json.dumps(record))
    del broken["s3"]["object"]["key"]
    resp = client.post("/", json={**s3, "Records": [broken, record]})
    assert resp.status_code == 400
    assert _refused(resp) == [
        (resp.json["outcomes"][0]["id"], "s3 record 0: s3.object.key is missing")
    ]
    assert versions(home, "sentiment") == ["1"]
    registry_events = structured("oci-distribution-push")
    pushed = registry_events["events"][0]
    pushed["target"] |= {"repository": "bert", "tag": "2"}
    no_digest = json.loads(json.dumps(pushed))
    no_digest["target"]["digest"] = "sha256:not-hex"
    resp = client.post("/", json={"events": [no_digest, pushed]})
    assert resp.status_code == 400
    assert [m for _, m in _refused(resp)] == [
        "distribution event 0: target.digest 'sha256:not-hex' is not a digest"
    ]
    assert versions(home, "bert") == ["2"]


def test_distribution_is_answered_200_for_a_refusal_it_would_retry_for_ever(
    client: FlaskClient, home: Path
) -> None:
    """distribution retries every answer but 2xx/3xx for ever, its later notifications
    waiting behind it: a refusal for good is answered 200 to its envelope type, with the
    same reasons; the same body under another type is answered as before."""
    registry_events = structured("oci-distribution-push")
    bad = registry_events["events"][0]
    bad["target"] |= {"repository": "bert", "digest": "sha256:not-hex"}
    body = json.dumps({"events": [bad]})
    for ctype, status in (
        ("application/vnd.docker.distribution.events.v1+json", 200),
        ("application/vnd.docker.distribution.events.v2+json; charset=utf-8", 200),
        ("application/json", 400),
    ):
        resp = client.post("/", data=body, content_type=ctype)
        assert resp.status_code == status, ctype
        assert resp.json is not None and "not a digest" in resp.json["message"]
    assert versions(home, "bert") == []


def test_distribution_without_its_credentials_is_still_told_401(
    client: FlaskClient, configure: Callable[[dict[str, str]], None]
) -> None:
    """Credentials are the sender's to fix: retried, the notification goes through once
    they are (and 200 to anyone naming the envelope type would accept the unauthenticated)."""
    configure({"MODELHOOKS_INGRESS_AUTH": "bearer:token=s3cret"})
    body = json.dumps(structured("oci-distribution-push"))
    ctype = "application/vnd.docker.distribution.events.v1+json"
    assert client.post("/", data=body, content_type=ctype).status_code == 401


def test_a_batch_member_the_route_does_not_accept_is_refused_alone(
    client: FlaskClient, home: Path, configure: Callable[[dict[str, str]], None]
) -> None:
    configure({"MODELHOOKS_INGRESS_ROUTE_KINDS": "/=gcs"})
    canonical = structured("canonical-artifact-pushed")
    canonical["data"] = {
        **canonical["data"],
        "version": "0",
        "uri": "gs://models/models/sentiment/0/",
    }
    gcs = structured("gcs-eventarc-finalized-marker")
    batch = json.dumps([canonical, gcs])
    resp = client.post("/", data=batch, content_type="application/cloudevents-batch+json")
    assert resp.status_code == 403
    assert [i for i, _ in _refused(resp)] == [canonical["id"]]
    assert versions(home, "sentiment") == ["1"]  # the gcs push; never the canonical one's 0


def test_an_event_id_claimed_on_another_tenants_route_does_not_block_this_tenants_event(
    client: FlaskClient, home: Path, configure: Callable[[dict[str, str]], None]
) -> None:
    """Trust is bound to the route: team-a's route, trusted for team-a's canonical events,
    sent one claiming the source and id of team-b's coming bucket notification (for a model
    of its own); team-b's push then was 'delivered before with other content', 409, and
    was never registered. Deduplication keys are the tenant's own."""
    configure(
        {
            "MODELHOOKS_INGRESS_ROUTE_KINDS": "/team-a=canonical;/team-b=gcs",
            "MODELHOOKS_INGRESS_ROUTE_NAMESPACES": "/team-a=team-a;/team-b=team-b",
            "MODELHOOKS_TENANCY_TENANTS": "team-a=gs://a-models;team-b=gs://models",
        }
    )
    lay_model(home, "a-models", "models/other/1")
    real = structured("gcs-eventarc-finalized-marker")
    claimed = {
        "specversion": "1.0",
        "id": real["id"],
        "source": real["source"],
        "type": "dev.modelhooks.artifact.pushed",
        "data": {
            "model": "other",
            "version": "1",
            "uri": "gs://a-models/models/other/1/",
            "digest": "gcs-generation:5",
            "store": "gcs",
        },
    }
    ctype = "application/cloudevents+json"
    assert client.post("/team-a", json=claimed, content_type=ctype).status_code == 200
    resp = client.post("/team-b", json=real, content_type=ctype)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert versions(home, "sentiment") == ["1"] and versions(home, "other") == ["1"]
    again = client.post("/team-b", json=real, content_type=ctype)  # a redelivery: the same reply
    assert again.status_code == 200 and again.get_data() == resp.get_data()


def test_replies_of_what_took_effect_reach_the_sink_beside_a_refusal(
    sink: list[dict[str, str]], home: Path
) -> None:
    """A batch with a bad member answers 400 (never redelivered): the good member's reply,
    model.registered, was dropped with the answer, and nothing downstream (notify) saw it."""
    from functions_framework import create_app

    app = create_app(target="register", source=str(ROOT / "functions" / "main.py"))
    good = structured("canonical-artifact-pushed")
    bad = {**good, "id": "bad-version", "data": {**good["data"], "version": "../1"}}
    resp = app.test_client().post(
        "/", data=json.dumps([bad, good]), content_type="application/cloudevents-batch+json"
    )
    assert resp.status_code == 400
    assert [h["ce-type"] for h in sink] == ["dev.modelhooks.model.registered"]
