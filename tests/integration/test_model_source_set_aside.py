"""`ModelWatcher` on a REAL kube-apiserver with a receiver that keeps refusing one Model's
update (issue H6): the Model is set aside, the others go on, and its deletion, queued behind
the refused update, is neither sent before it nor lost: the state file counts the Model as
last delivered (its add) and keeps no resourceVersion, so the next start lists again and
sends the deletion; what was delivered is not sent again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.kubernetes.model_source import ModelWatcher
from modelhooks.core.errors import Unavailable
from tests.integration.test_model_source import (  # noqa: F401 (fixtures)
    Cluster,
    Recorder,
    Running,
    api_client,
    models,
    namespace,
    wait_until,
)
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration


def test_a_deletion_behind_a_refused_update_waits_and_survives_a_restart(
    kube_apiserver: KubeApiServer,
    models: Any,  # noqa: F811
    namespace: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    cluster, state = Cluster(models, namespace), tmp_path / "watch-state.json"
    sent, refused = Recorder(), Recorder()

    def send(event: dict[str, Any]) -> None:
        if event["name"] == "x" and event["type"].endswith(".update"):
            refused(event)
            raise Unavailable("HTTP 503: refused")
        sent(event)

    with api_client(kube_apiserver) as api:
        watcher = ModelWatcher(
            api, send, namespace=namespace, state_file=state, set_aside=(0.2, 0.4)
        )
        with Running(watcher):
            wait_until("the first list", state.exists)
            uid = cluster.create("x")["metadata"]["uid"]
            sent.wait_for("add", "x")
            cluster.relabel("x", "2")
            cluster.delete("x")  # behind the refused update
            cluster.create("y")
            sent.wait_for("add", "y")  # the other Model goes on
            wait_until("x refused again", lambda: len(refused.events) >= 3)
            assert ("delete", "x") not in sent.seen()  # never before its update

    doc = json.loads(state.read_text())
    assert doc["resourceVersion"] == ""  # the next start lists again
    assert doc["sent"][uid]["metadata"].get("labels") is None  # x as delivered: its add

    again = Recorder()
    with (
        api_client(kube_apiserver) as api,
        Running(ModelWatcher(api, again, namespace=namespace, state_file=state)),
    ):
        again.wait_for("delete", "x")
    assert again.seen() == [("delete", "x")]  # y, delivered, is not sent again
