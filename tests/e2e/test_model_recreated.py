"""A Model deleted and created again under its name, on a real kube-apiserver through
`modelhooks watch-models --raw` → `modelhooks serve` (Kubernetes registry): the old Model's
deletion sent again late, stamped then (as the watcher stamps what it sends again), leaves
the new Model's registered version LIVE: it names the old uid, which registered nothing the
new Model holds."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.kubernetes.model_source import to_cloudevent
from modelhooks.adapters.model_registry.kubernetes import GROUP, MODEL_LABEL, VERSION, object_name
from tests.e2e.conftest import Served
from tests.e2e.test_model_chain import (  # noqa: F401 (fixtures)
    _conditions,
    _create,
    _get,
    chain,
    registry_namespace,
)
from tests.e2e.test_model_resources import models_api  # noqa: F401 (a fixture)
from tests.servers.kube import KubeApiServer

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def test_the_old_models_deletion_sent_again_late_leaves_the_new_ones_version_live(
    chain: tuple[Served, Path],  # noqa: F811
    models_api: Any,  # noqa: F811
    kube_apiserver: KubeApiServer,
    registry_namespace: str,  # noqa: F811
) -> None:
    served, log = chain
    name = f"again-{uuid.uuid4().hex[:8]}"
    spec = {
        "source": {"http": {"url": f"https://models.example/{name}.tgz", "sha256": "c" * 64}},
        "version": "1",
        "deletionPolicy": "Retain",
    }

    def ready() -> dict[str, Any] | None:  # Retain: no finalizer, the deletion is at once
        model = _get(models_api, name)
        return model if _conditions(model).get("Ready", {}).get("status") == "True" else None

    def version_state() -> str:
        versions = models_api.list_namespaced_custom_object(
            GROUP, VERSION, registry_namespace, "modelversions",
            label_selector=f"{MODEL_LABEL}={object_name(name)}",
        )["items"]  # fmt: skip
        assert [v["spec"]["name"] for v in versions] == ["1"]
        return str(versions[0]["spec"]["state"])

    _create(models_api, name, spec)
    old = served.wait_for(f"{name} Ready (watch log: {log})", ready, timeout=60)
    models_api.delete_namespaced_custom_object(GROUP, VERSION, "default", "models", name)
    served.wait_for(f"{name} gone", lambda: _get(models_api, name) is None, timeout=60)
    served.wait_for("the old version archived", lambda: version_state() == "ARCHIVED")

    _create(models_api, name, spec)  # created again: another uid, the same version
    new = served.wait_for(f"{name} Ready again (watch log: {log})", ready, timeout=60)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    served.wait_for("the version live again", lambda: version_state() == "LIVE")

    # the old deletion, sent again now (a relist, a set-aside lane), stamped now
    event = to_cloudevent("delete", old, kube_apiserver.url)
    event["id"] = str(uuid.uuid4())  # past the delivery log, as a forgotten one
    request = urllib.request.Request(
        served.url + "/",
        data=json.dumps(event).encode(),
        headers={"Content-Type": "application/cloudevents+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status < 300, resp.read()
    time.sleep(1)  # what its replies (cleanup, notify) would do has had its time
    assert version_state() == "LIVE"
    model = _get(models_api, name)
    assert model is not None and model["metadata"]["uid"] == new["metadata"]["uid"]
    assert _conditions(model)["Ready"]["status"] == "True"
    models_api.delete_namespaced_custom_object(GROUP, VERSION, "default", "models", name)
