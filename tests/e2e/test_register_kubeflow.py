"""`register` (the functions-framework target) into a real Kubeflow Model Registry:
a pushed artifact becomes one RegisteredModel / ModelVersion / ModelArtifact, and a
redelivery (to a fresh instance, as after a scale-out) changes nothing; two `modelhooks
serve` processes on one registry (two pods, each model's deliveries to one of them, as ordering
keys route them) take shuffled, duplicated, concurrent event sets and end in the state of
applying them in time order."""

from __future__ import annotations

import json
import os
import random
import urllib.error
import urllib.request
import uuid
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks import bootstrap
from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry
from modelhooks.delivery.encoding import structured
from modelhooks.events import samples
from modelhooks.events.model import ArtifactPushed, CanonicalEvent
from tests.contract.register_order import Scenario, expected, scenarios, snapshot
from tests.e2e.conftest import Served
from tests.e2e.packaging import free_port
from tests.local_store import lay_model
from tests.servers.model_registry import ModelRegistry as ModelRegistryServer

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def _close_registry() -> None:
    """Close the cached instance's HTTP session before forgetting it (no socket leaks)."""
    close = getattr(bootstrap.build().deps.registry, "close", None)
    if close is not None:
        close()
    bootstrap.reset()


@pytest.fixture
def instance(
    model_registry: ModelRegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[], FlaskClient]]:
    """Start a fresh function instance (cold start): returns its Flask test client."""
    for var in list(os.environ):
        if var.startswith("MODELHOOKS_") or var in ("K_SINK", "PORT"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("MODELHOOKS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MODELHOOKS_REGISTRY_BACKEND", "kubeflow")
    monkeypatch.setenv("MODELHOOKS_REGISTRY_URL", model_registry.url)
    bootstrap.reset()
    started = False

    def start() -> FlaskClient:
        nonlocal started
        from functions_framework import create_app

        if started:
            _close_registry()
        started = True
        source = str(ROOT / "functions" / "main.py")
        app = create_app(target="register", source=source)  # type: ignore[no-untyped-call]
        client: FlaskClient = app.test_client()
        return client

    yield start
    if started:
        _close_registry()
    bootstrap.reset()


def test_a_push_registers_once_in_kubeflow(
    instance: Callable[[], FlaskClient], model_registry: ModelRegistryServer, tmp_path: Path
) -> None:
    event = samples.load("canonical-artifact-pushed")
    name = event["data"]["model"] = f"sentiment-{uuid.uuid4().hex[:8]}"  # a shared server
    event["data"]["uri"] = f"gs://models/models/{name}/1/"
    lay_model(tmp_path / "home", "models", f"models/{name}/1")  # the embedded store's bucket
    body = json.dumps(event)
    replies: list[dict[str, Any]] = []
    for _ in range(2):
        resp = instance().post("/", data=body, content_type="application/cloudevents+json")
        assert resp.status_code == 200, resp.get_data(as_text=True)
        assert resp.headers["ce-type"] == "dev.modelhooks.model.registered"
        assert isinstance(resp.json, dict)
        replies.append(resp.json)
    first, second = replies
    assert first["created"] and second == first  # the same answer (created by this event)
    digest = first["digest"]  # the ingress named the version by its content
    assert digest.startswith("content-sha256:")
    assert first["registry"] == "kubeflow"
    ids = ("registered_model_id", "model_version_id", "model_artifact_id")
    assert [first[k] for k in ids] == [second[k] for k in ids]

    api = model_registry.api_url
    with requests.Session() as http:
        model = http.get(f"{api}/registered_model", params={"name": name}, timeout=10).json()
        assert model["id"] == first["registered_model_id"] and model["state"] == "LIVE"
        versions = http.get(f"{api}/model_versions", timeout=10).json()["items"]
        mine = [v for v in versions if v["registeredModelId"] == model["id"]]
        assert [v["name"] for v in mine] == ["1"]
        assert mine[0]["customProperties"]["digest"]["string_value"] == digest
        artifact = http.get(f"{api}/model_artifacts/{first['model_artifact_id']}", timeout=10)
        stored = artifact.json()
        assert stored["artifactType"] == "model-artifact"
        assert stored["state"] == "LIVE"
        assert stored["uri"] == event["data"]["uri"]
        assert stored["customProperties"]["digest"]["string_value"] == digest
        everything = http.get(f"{api}/model_artifacts", timeout=10).json()["items"]
        assert [a["uri"] for a in everything].count(event["data"]["uri"]) == 1


@pytest.fixture
def two_pods(
    serve: Callable[..., Served], model_registry: ModelRegistryServer
) -> tuple[Served, Served]:
    """Two `modelhooks serve` processes on one Kubeflow Model Registry."""
    env = {"MODELHOOKS_REGISTRY_BACKEND": "kubeflow", "MODELHOOKS_REGISTRY_URL": model_registry.url}
    return serve(free_port(), env=env), serve(free_port(), env=env)


def _by_content(event: CanonicalEvent, prefix: str) -> CanonicalEvent:
    """The event with an id of this example's (serve remembers ids), a push named by its
    content already, as the broker hands it on (no store read)."""
    data = event.data
    if isinstance(data, ArtifactPushed):
        data = data.replace(digest=f"content-sha256:{data.digest}")
    return event.replace(id=f"{prefix}-{event.id}", data=data)


def _model(event: CanonicalEvent) -> str:
    data = event.data
    return str(getattr(data, "model", None) or getattr(data, "name", ""))


def _deliver(url: str, event: CanonicalEvent) -> int:
    """POST the event as the platform does; its status (0: no answer)."""
    req = urllib.request.Request(
        f"{url}/functions/register",
        data=json.dumps(structured(event)).encode(),
        headers={"Content-Type": "application/cloudevents+json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=scenarios(max_events=40), seed=st.integers(0, 2**16))
def test_two_serve_processes_end_in_the_time_ordered_state(
    two_pods: tuple[Served, Served],
    model_registry: ModelRegistryServer,
    scenario: Scenario,
    seed: int,
) -> None:
    unique_ids = (_by_content(e, scenario.prefix) for e in scenario.events)
    scenario = Scenario(tuple(unique_ids), scenario.prefix)
    rng = random.Random(seed)
    deliveries = list(scenario.events)
    rng.shuffle(deliveries)
    # each model's deliveries to one pod, as the documented deployment does (Pub/Sub ordering
    # keys, a Kafka Broker's partition key: the model name); different models run on both
    # pods at once against one registry. A model's deliveries spread over both pods leave a
    # race between a write and its re-read (README "The registry on Kubeflow"; issue 20).
    routes = [two_pods[zlib.crc32(_model(d).encode()) % 2].url for d in deliveries]

    def send(index: int) -> int:
        url = routes[index]
        for _ in range(30):  # redelivered on 5xx, 409, 429 and no answer
            status = _deliver(url, deliveries[index])
            if status < 300 and status != 0:
                return status
            if status not in (0, 409, 429) and status < 500:
                return status
        return status

    with ThreadPoolExecutor(12) as pool:
        statuses = list(pool.map(send, range(len(deliveries))))
    logs = "\n".join(pod.logs() for pod in two_pods)
    assert all(200 <= s < 300 for s in statuses), f"{statuses}\n{logs}"
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        assert snapshot(registry, scenario.names()) == expected(scenario)
    finally:
        registry.close()
