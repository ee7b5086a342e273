"""At-least-once with a crash in the middle: `modelhooks serve` takes a shuffled, duplicated
event set from 6 concurrent clients, is killed with SIGKILL mid-stream, restarted, and
everything unanswered is redelivered (plus some answered ones again) (tests/e2e/crash.py).
The registry — SQLite, Kubernetes resources on a real apiserver, a real Kubeflow Model
Registry — ends in the state of applying the set in time order, and stays readable."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from modelhooks import bootstrap
from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry
from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.settings import load_settings
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
from tests.contract.register_order import T0, apply_all, in_time_order, snapshot
from tests.e2e.conftest import Served
from tests.e2e.crash import crash_and_redeliver
from tests.e2e.test_model_chain import registry_on
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.servers.kube import KubeApiServer
from tests.servers.model_registry import ModelRegistry as ModelRegistryServer

pytestmark = pytest.mark.e2e


def event_set(seed: int, models: int = 40, prefix: str = "crash") -> list[CanonicalEvent]:
    """Pushes of 1 to 4 versions and up to 2 deletions per model at random times, 30 % of the
    events again (same id), shuffled. `prefix` names the models (and ids) of one run."""
    rng = random.Random(seed)
    events: list[CanonicalEvent] = []
    for m in range(models):
        name = f"{prefix}-m{m}"
        for v in range(rng.randint(1, 4)):
            at = T0 + timedelta(minutes=rng.randint(0, 60))
            uri = f"gs://models/models/{name}/{v}/"
            data: Any = ArtifactPushed(
                model=name,
                version=str(v),
                uri=uri,
                digest=f"content-sha256:{name}-{v}",
                store="gcs",
            )
            events.append(
                CanonicalEvent(
                    id=f"{name}-p{v}", source="crash", type=data.TYPE, data=data, time=at
                )
            )
        for d in range(rng.randint(0, 2)):
            at = T0 + timedelta(minutes=rng.randint(0, 60))
            data = ModelDeleted(name=name)
            events.append(
                CanonicalEvent(
                    id=f"{name}-d{d}", source="crash", type=data.TYPE, data=data, time=at
                )
            )
    deliveries = events + rng.sample(events, len(events) * 3 // 10)  # 30 % exact duplicates
    rng.shuffle(deliveries)
    return deliveries


def names_of(deliveries: list[CanonicalEvent]) -> set[str]:
    return {
        e.data.model if isinstance(e.data, ArtifactPushed) else e.data.name  # type: ignore[attr-defined]
        for e in deliveries
    }


def assert_time_ordered(registry: ModelRegistry, deliveries: list[CanonicalEvent]) -> None:
    reference = InMemoryModelRegistry()
    apply_all(reference, in_time_order(deliveries))
    names = names_of(deliveries)
    assert snapshot(registry, names) == snapshot(reference, names)


def test_a_kill_mid_stream_and_a_redelivery_end_in_the_time_ordered_state(
    serve: Callable[..., Served],
) -> None:
    deliveries = event_set(seed=7)
    crash = crash_and_redeliver(serve, deliveries, path="/functions/register")
    assert all(200 <= s < 300 for s in crash.statuses), f"{crash.statuses}\n{crash.again.logs()}"
    registry = SqliteModelRegistry(crash.again.home / "registry.db")
    try:
        assert_time_ordered(registry, deliveries)
    finally:
        registry.close()


@pytest.mark.integration
def test_the_same_on_the_kubernetes_registry(
    serve: Callable[..., Served], kube_apiserver: KubeApiServer, tmp_path: Path
) -> None:
    namespace = registry_on(kube_apiserver, "crash")
    env = {
        "MODELHOOKS_REGISTRY_BACKEND": "kubernetes",
        "MODELHOOKS_REGISTRY_KUBECONFIG": str(kube_apiserver.write_kubeconfig(tmp_path / "kc")),
        "MODELHOOKS_REGISTRY_NAMESPACE": namespace,
    }
    deliveries = event_set(seed=5, models=20, prefix=namespace)
    # the platform redelivers what a lost race answered 5xx (a stale write; conditional writes)
    crash = crash_and_redeliver(serve, deliveries, path="/functions/register", env=env, attempts=10)
    assert all(200 <= s < 300 for s in crash.statuses), f"{crash.statuses}\n{crash.again.logs()}"
    registry = bootstrap.model_registry(load_settings(env=env))
    try:
        assert_time_ordered(registry, deliveries)
    finally:
        registry.close()  # type: ignore[attr-defined]


@pytest.mark.integration
def test_the_same_on_kubeflow(
    serve: Callable[..., Served], model_registry: ModelRegistryServer
) -> None:
    env = {"MODELHOOKS_REGISTRY_BACKEND": "kubeflow", "MODELHOOKS_REGISTRY_URL": model_registry.url}
    prefix = f"crash-{uuid.uuid4().hex[:8]}"  # a shared server: names of this run's own
    deliveries = event_set(seed=3, models=20, prefix=prefix)
    crash = crash_and_redeliver(serve, deliveries, path="/functions/register", env=env, attempts=10)
    assert all(200 <= s < 300 for s in crash.statuses), f"{crash.statuses}\n{crash.again.logs()}"
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    try:
        assert_time_ordered(registry, deliveries)
    finally:
        registry.close()
