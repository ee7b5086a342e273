"""Trust bound to the route, dedupe that compares payloads, times from the future, and
hostile JSON: every refusal is a JSON 4xx that names what was wrong, and nothing changes."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.bootstrap import build
from modelhooks.core.logs import configure as configure_logs
from modelhooks.core.logs import log
from modelhooks.delivery.http import create_app
from modelhooks.events import samples
from modelhooks.events.model import ArtifactPushed, CanonicalEvent

MINIO = {"Authorization": "Bearer minio-token"}
ROUTES = {
    "MODELHOOKS_INGRESS_AUTH": "bearer:token=broker-token",
    "MODELHOOKS_INGRESS_ROUTE_AUTH": "/minio=bearer:token=minio-token",
    "MODELHOOKS_INGRESS_ROUTE_KINDS": "/minio=s3;/replay=canonical",
}


pytestmark = pytest.mark.usefixtures("sample_models")


@pytest.fixture
def serve(home: Path) -> Callable[[dict[str, str]], FlaskClient]:
    def make(env: dict[str, str]) -> FlaskClient:
        import os

        os.environ.update(env)
        return create_app(build().broker()).test_client()

    return make


def models(home: Path) -> list[str]:
    if not (home / "registry.db").exists():
        return []
    return [m.name for m in SqliteModelRegistry(home / "registry.db").list_models()]


def canonical(**changes: Any) -> dict[str, Any]:
    doc = samples.load("canonical-artifact-pushed")
    assert isinstance(doc, dict)
    return {**doc, **changes}


def test_a_webhook_credential_cannot_send_canonical_events(
    serve: Callable[[dict[str, str]], FlaskClient], home: Path, configure: Any
) -> None:
    client = serve(ROUTES)
    resp = client.post("/minio", json=canonical(), headers=MINIO)
    assert resp.status_code == 403 and resp.json is not None
    assert "route_kinds" in resp.json["message"] and resp.json["details"]["kind"] == "canonical"
    assert models(home) == []
    minio = samples.load("s3-minio-put-marker")
    assert client.post("/minio", json=minio, headers=MINIO).status_code == 200


def test_canonical_events_come_through_the_routes_configured_for_them(
    serve: Callable[[dict[str, str]], FlaskClient], home: Path
) -> None:
    client = serve(ROUTES)
    broker = {"Authorization": "Bearer broker-token"}
    assert client.post("/", json=canonical(), headers=broker).status_code == 403  # not declared
    assert client.post("/replay", json=canonical(), headers=broker).status_code == 200
    assert models(home) == ["sentiment"]
    # an S3 notification is not accepted on the canonical-only route either
    minio = samples.load("s3-minio-put-marker")
    assert client.post("/replay", json=minio, headers=broker).status_code == 403


def test_an_event_from_the_far_future_is_refused(
    serve: Callable[[dict[str, str]], FlaskClient], home: Path
) -> None:
    client = serve({})
    future = (datetime.now(UTC) + timedelta(days=3650)).isoformat()
    resp = client.post("/", json=canonical(time=future))
    assert resp.status_code == 400 and resp.json is not None
    assert resp.json["details"]["field"] == "time" and "max_future_skew" in resp.json["message"]
    assert models(home) == []
    near = (datetime.now(UTC) + timedelta(seconds=30)).isoformat()
    assert client.post("/", json=canonical(time=near)).status_code == 200


def test_a_reused_event_id_with_other_content_is_a_conflict(
    serve: Callable[[dict[str, str]], FlaskClient], home: Path
) -> None:
    client = serve({})
    first = canonical()
    assert client.post("/functions/register", json=first).status_code == 200
    assert client.post("/functions/register", json=first).status_code == 200  # a redelivery
    other = {**first, "data": {**first["data"], "version": "99"}}
    resp = client.post("/functions/register", json=other)
    assert resp.status_code == 409 and resp.json is not None
    assert "delivered before with other content" in json.dumps(resp.json)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"specversion": "1.0", "id": "x", "source": "s", "type": "t", "n": ' + b"9" * 5000 + b"}",
        b'{"Records": [{"\\u0000key": 1}]}',
        b'{"Records": [{"k": "\\ud800"}]}',
        b'{"Records": [{"' + b"k" * 400 + b'": 1}]}',
        b'{"events": NaN}',
    ],
    ids=["deep", "huge-int", "nul-key", "lone-surrogate", "long-key", "nan"],
)
def test_hostile_json_is_a_json_400(
    serve: Callable[[dict[str, str]], FlaskClient], home: Path, body: bytes
) -> None:
    resp = serve({}).post("/", data=body, content_type="application/json")
    assert resp.status_code in (400, 413), resp.data[:300]
    assert resp.is_json and resp.json is not None and resp.json["message"]


def test_the_error_path_logs_a_traceback_as_one_json_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logs("INFO")
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        log(logging.ERROR, "it failed", exc_info=exc, message="clash", args="clash")
    (line,) = capsys.readouterr().err.strip().splitlines()
    doc = json.loads(line)
    assert doc["message"] == "it failed" and "RuntimeError: boom" in doc["stack_trace"]
    assert doc["message_"] == "clash" and doc["args_"] == "clash"


def test_an_unexpected_exception_is_a_json_500_without_internals(home: Path) -> None:
    def explode(name: str) -> Any:
        raise RuntimeError("secret internals")

    client = create_app(build(function=explode).broker()).test_client()
    resp = client.post("/functions/register", json=canonical())
    assert resp.status_code == 500 and resp.is_json
    assert "secret internals" not in resp.get_data(as_text=True)


def test_a_delivery_carries_a_bounded_number_of_events(
    serve: Callable[[dict[str, str]], FlaskClient], home: Path
) -> None:
    client = serve({"MODELHOOKS_INGRESS_MAX_EVENTS": "3"})
    batch = [canonical(id=f"b{i}") for i in range(4)]
    resp = client.post("/", json=batch, content_type="application/cloudevents-batch+json")
    assert (
        resp.status_code == 413 and resp.json is not None and "max_events" in resp.json["message"]
    )
    assert models(home) == []
    ok = client.post("/", json=batch[:3], content_type="application/cloudevents-batch+json")
    assert ok.status_code == 200


def test_events_past_the_delivery_deadline_answer_503_and_are_redelivered(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import modelhooks.delivery.runtime as runtime

    clock = iter([0.0, 0.0, 100.0, 100.0, 100.0, 100.0])
    monkeypatch.setattr(runtime.time, "monotonic", lambda: next(clock, 100.0))
    outcomes = runtime.run_all(
        [CanonicalEvent.new(ArtifactPushed(**canonical()["data"]), source="s", id=i) for i in "ab"],
        lambda e: [runtime.Outcome("f", e.id, e.type, 200)],
        deadline=60,
    )
    assert [(o.event_id, o.status) for o in outcomes] == [("a", 200), ("b", 503)]


def test_a_route_bound_to_a_tenant_decides_the_namespace(
    serve: Callable[[dict[str, str]], FlaskClient], home: Path
) -> None:
    client = serve(
        {
            "MODELHOOKS_INGRESS_ROUTE_NAMESPACES": "/team-a=team-a",
            "MODELHOOKS_INGRESS_ROUTE_KINDS": "/team-a=canonical",
        }
    )
    other = canonical()
    other["data"] = {**other["data"], "namespace": "team-b"}
    resp = client.post("/team-a", json=other)
    assert resp.status_code == 403 and resp.json is not None
    assert resp.json["details"]["route_namespace"] == "team-a"
    assert models(home) == []
    unnamed = canonical()
    unnamed["data"] = {k: v for k, v in unnamed["data"].items() if k != "namespace"}
    assert client.post("/team-a", json=unnamed).status_code == 200  # names none: team-a's
    registry = SqliteModelRegistry(home / "registry.db")
    model = registry.get_model("sentiment")
    assert model is not None and model.custom_properties["namespace"] == "team-a"


@pytest.mark.parametrize("namespace", ["team-a", None])
def test_a_route_bound_to_a_tenant_decides_the_model_its_subject_names(
    serve: Callable[[dict[str, str]], FlaskClient], home: Path, namespace: str | None
) -> None:
    """notify acts on the Model a subject names before its data's: team-a's route sent an
    event of its own (its namespace, its bucket) naming team-b's Model in its subject, and
    notify wrote that Model's status (digest, Registered/Signed/Ready) or, for a purge,
    removed its cleanup finalizer. Refused now, nothing registered."""
    client = serve(
        {
            "MODELHOOKS_INGRESS_ROUTE_NAMESPACES": "/team-a=team-a",
            "MODELHOOKS_INGRESS_ROUTE_KINDS": "/team-a=canonical",
        }
    )
    data = {k: v for k, v in canonical()["data"].items() if k != "namespace"}
    if namespace:
        data["namespace"] = namespace
    other = canonical(data=data, subject="/apis/modelhooks.dev/v1alpha1/namespaces/team-b/models/m")
    resp = client.post("/team-a", json=other)
    assert resp.status_code == 403 and resp.json is not None, resp.get_data(as_text=True)
    assert resp.json["details"] == {"namespace": "team-b", "route_namespace": "team-a"}
    assert models(home) == []
    own = canonical(data=data, subject="/apis/modelhooks.dev/v1alpha1/namespaces/team-a/models/m")
    assert client.post("/team-a", json=own).status_code == 200  # its own Model: taken


@pytest.mark.parametrize("version", ["1", "404"])  # laid in the store / nothing there
def test_a_tenant_route_never_reads_another_tenants_bucket_to_name_a_push(
    serve: Callable[[dict[str, str]], FlaskClient],
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: str,
) -> None:
    """The ingress names a push by its content before any function runs: it listed the
    prefix a tenant's route named in another tenant's bucket, and answered what it found
    there ('skipped: nothing under gs://models/…' for an empty prefix, a 403 for a full
    one: an oracle over the other tenant's bucket). Refused now before anything is read."""
    from modelhooks.adapters.object_store.local import LocalObjectStore

    read: list[str] = []
    listing = LocalObjectStore.list

    def spied(self: LocalObjectStore, bucket: str, prefix: str = "") -> Any:
        read.append(f"{bucket}/{prefix}")
        return listing(self, bucket, prefix)

    monkeypatch.setattr(LocalObjectStore, "list", spied)
    client = serve(
        {
            "MODELHOOKS_INGRESS_ROUTE_NAMESPACES": "/team-a=team-a",
            "MODELHOOKS_INGRESS_ROUTE_KINDS": "/team-a=canonical",
            "MODELHOOKS_TENANCY_TENANTS": "team-a=models-a;team-b=models",
        }
    )
    data = {k: v for k, v in canonical()["data"].items() if k != "namespace"}
    data.update(version=version, uri=f"gs://models/models/sentiment/{version}/")
    resp = client.post("/team-a", json=canonical(data=data))
    assert resp.status_code == 403, resp.get_data(as_text=True)
    assert "gs://models" in resp.get_data(as_text=True)
    assert read == []
    assert models(home) == []
