"""`ModelWatcher` with a namespace selector, as ApiServerSource's namespaceSelector, on a REAL
kube-apiserver: only the Models of namespaces that match are sent; a namespace labelled
while it runs has its Models sent as added; one unlabelled has its Models forgotten, never
sent as deleted (a label removed is no deletion), and sent again if labelled again."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.kubernetes.model_source import PLURAL, ModelWatcher
from tests.integration.test_model_source import (
    CRD,
    MODELHOOKS,
    Cluster,
    Recorder,
    Running,
    api_client,
    wait_until,
)
from tests.servers.kube import KubeApiServer
from tests.servers.sink import NotificationSink

pytestmark = pytest.mark.integration

OPT_IN = (
    "modelhooks.dev/models"  # the label the installs select (infra/knative/apiserversource.yaml)
)


@pytest.fixture(scope="module")
def objects(kube_apiserver: KubeApiServer) -> Iterator[Any]:
    from kubernetes import client

    kube_apiserver.install_crd(CRD, PLURAL)
    with kube_apiserver.api_client() as api:
        yield client.CustomObjectsApi(api)


class Namespaces:
    """Namespaces of one test, all labelled with its own run label (so the selector
    `modelhooks.dev/models=enabled,<run label>` sees no other test's namespaces)."""

    def __init__(self, kube: KubeApiServer) -> None:
        self.kube, self.run = kube, uuid.uuid4().hex[:8]
        self.selector = f"{OPT_IN}=enabled,modelhooks.test/run={self.run}"

    def create(self, suffix: str, *, enabled: bool) -> str:
        name = f"ns-{self.run}-{suffix}"
        labels = {"modelhooks.test/run": self.run, **({OPT_IN: "enabled"} if enabled else {})}
        self._core(
            lambda core: core.create_namespace({"metadata": {"name": name, "labels": labels}})
        )
        return name

    def enable(self, name: str, enabled: bool) -> None:
        patch = {"metadata": {"labels": {OPT_IN: "enabled" if enabled else None}}}
        self._core(lambda core: core.patch_namespace(name, patch))

    def _core(self, call: Any) -> None:
        from kubernetes import client

        with self.kube.api_client() as api:
            call(client.CoreV1Api(api))


def test_only_the_models_of_selected_namespaces_and_as_their_labels_change(
    kube_apiserver: KubeApiServer, objects: Any
) -> None:
    namespaces = Namespaces(kube_apiserver)
    on, off = namespaces.create("on", enabled=True), namespaces.create("off", enabled=False)
    ons, offs = Cluster(objects, on), Cluster(objects, off)
    a, b = ons.create("a"), offs.create("b")  # before the watcher starts
    sent = Recorder()

    def seen() -> list[tuple[str, str, str]]:
        return [(e["type"].rpartition(".")[2], e["namespace"], e["name"]) for e in sent.events]

    def arrived(*wanted: tuple[str, str, str]) -> None:
        wait_until(f"{wanted}", lambda: all(w in seen() for w in wanted))

    with api_client(kube_apiserver) as api:
        watcher = ModelWatcher(api, sent, namespace_selector=namespaces.selector)
        with Running(watcher):
            arrived(("add", on, "a"))
            ons.create("c")  # a new Model of an enabled namespace
            arrived(("add", on, "c"))
            offs.relabel("b", "2")  # a change in one that is not
            offs.create("d")
            assert [s for s in seen() if s[1] == off] == []

            namespaces.enable(off, True)  # labelled while it runs: its Models go out
            arrived(("add", off, "b"), ("add", off, "d"))
            offs.create("e")
            arrived(("add", off, "e"))

            namespaces.enable(on, False)  # unlabelled: forgotten, not deleted
            uids = {a["metadata"]["uid"]}
            wait_until("a forgotten", lambda: not uids & set(watcher.state.sent))
            ons.relabel("a", "2")
            ons.delete("c")
            offs.create("f")  # still selected: after it, nothing of `on` may come
            arrived(("add", off, "f"))
            assert [s for s in seen() if s[1] == on] == [("add", on, "a"), ("add", on, "c")]

            namespaces.enable(on, True)  # labelled again: a is sent as it is now
            wait_until("a again", lambda: seen().count(("add", on, "a")) == 2)
            readded = [e for e in sent.events if e["name"] == "a"][-1]
            assert readded["data"]["metadata"]["labels"] == {"v": "2"}

    assert b["metadata"]["uid"] in {e["data"]["metadata"]["uid"] for e in sent.events}
    assert [s for s in seen() if s[0] == "delete"] == []  # nothing ever sent as deleted
    assert sorted(s for s in seen() if s[1] == off) == [
        ("add", off, n) for n in ("b", "d", "e", "f")
    ]  # each once
    assert seen().count(("add", on, "a")) == 2 and ("add", on, "c") in seen()


def test_the_cli_takes_the_selector_from_its_flag_or_environment(
    kube_apiserver: KubeApiServer, objects: Any, tmp_path: Path
) -> None:
    namespaces = Namespaces(kube_apiserver)
    on, off = namespaces.create("on", enabled=True), namespaces.create("off", enabled=False)
    Cluster(objects, off).create("unseen")
    Cluster(objects, on).create("seen")
    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    command = [MODELHOOKS, "watch-models", "--kubeconfig", str(kubeconfig)]
    environment = {"MODELHOOKS_WATCH_NAMESPACE_SELECTOR": namespaces.selector}
    with NotificationSink() as sink:
        watcher = subprocess.Popen(
            [*command, "--raw", "--to", sink.url],
            env={**os.environ, **environment},
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            sink.wait_for(lambda d: d.json()["name"] == "seen")
            Cluster(objects, on).create("seen-too")
            sink.wait_for(lambda d: d.json()["name"] == "seen-too")
        finally:
            watcher.terminate()
            _, err = watcher.communicate(timeout=30)
    assert {d.json()["namespace"] for d in sink.deliveries} == {on}, err
    assert f"in namespaces {namespaces.selector}" in err

    refused = subprocess.run(
        [*command, "--namespace-selector", "modelhooks.dev/models in enabled"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stderr
    assert "namespace selector 'modelhooks.dev/models in enabled' refused" in refused.stderr
    assert "Traceback" not in refused.stderr
