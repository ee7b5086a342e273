"""`ModelWatcher` with a namespace selector, as ApiServerSource's namespaceSelector, on a REAL
kube-apiserver: only the Models of namespaces that match are sent; a namespace labelled
while it runs has its Models sent as added; one unlabelled has its Models forgotten, never
sent as deleted (a label removed is no deletion), and sent again if labelled again."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

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

ROOT = Path(__file__).resolve().parents[2]
RBAC, PLAIN = ROOT / "infra" / "k8s" / "rbac", ROOT / "infra" / "kubernetes" / "functions.yaml"
OPT_IN = "modelhooks.dev/models"  # the installs' opt-in label (infra/knative/apiserversource.yaml)


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


def test_the_plain_installs_watcher_as_its_identity_and_the_selector_from_the_environment(
    kube_apiserver: KubeApiServer, objects: Any, tmp_path: Path
) -> None:
    """watch-models with the arguments and the identity the install without Knative gives
    it (infra/kubernetes/functions.yaml, infra/k8s/rbac/apiserversource.yaml): Models of
    opted-in namespaces only; the selector from the environment, and one the API server
    refuses, or an identity that may not list namespaces, a configuration error."""
    from kubernetes import client

    kube_apiserver.apply(RBAC / "00-namespace.yaml", RBAC / "apiserversource.yaml")
    deployment = next(
        d
        for d in yaml.safe_load_all(PLAIN.read_text())
        if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "modelhooks-watch-models"
    )
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    token = kube_apiserver.token_for(pod["serviceAccountName"], deployment["metadata"]["namespace"])
    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig", token=token)
    namespaces = Namespaces(kube_apiserver)  # opted in as the install's selector wants
    on, off = namespaces.create("on", enabled=True), namespaces.create("off", enabled=False)
    Cluster(objects, off).create("unseen")
    Cluster(objects, on).create("seen")
    args = [*container["command"][1:], *container["args"], "--kubeconfig", str(kubeconfig)]
    with NotificationSink() as sink:
        args[args.index("--to") + 1] = sink.url
        watcher = subprocess.Popen([MODELHOOKS, *args], stderr=subprocess.PIPE, text=True)
        try:
            sink.wait_for(lambda d: d.json()["name"] == "seen")
            Cluster(objects, off).create("unseen-too")
            Cluster(objects, on).create("seen-too")
            sink.wait_for(lambda d: d.json()["name"] == "seen-too")
        finally:
            watcher.terminate()
            _, err = watcher.communicate(timeout=30)
    mine = {(d.json()["namespace"], d.json()["name"]) for d in sink.deliveries} & {
        (ns, name) for ns in (on, off) for name in ("seen", "seen-too", "unseen", "unseen-too")
    }  # other tests' namespaces may be opted in too
    assert mine == {(on, "seen"), (on, "seen-too")}, err
    assert "in namespaces modelhooks.dev/models=enabled" in err

    def refused(selector: str, kubeconfig: Path) -> str:
        done = subprocess.run(
            [MODELHOOKS, "watch-models", "--kubeconfig", str(kubeconfig)],
            env={**os.environ, "MODELHOOKS_WATCH_NAMESPACE_SELECTOR": selector},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        return done.stderr

    assert "namespace selector 'a in b' refused by the API server" in refused("a in b", kubeconfig)
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespaced_service_account(
            on, {"metadata": {"name": "nobody"}}
        )
    nobody = kube_apiserver.write_kubeconfig(
        tmp_path / "nobody", token=kube_apiserver.token_for("nobody", on)
    )
    assert "may list and watch namespaces" in refused(namespaces.selector, nobody)


def test_a_restart_under_another_selector_lists_again_from_the_state_file(
    kube_apiserver: KubeApiServer, objects: Any, tmp_path: Path
) -> None:
    """The state file keeps the selector it was saved under: restarted without it, the
    Models the selector left out are sent as added (a resumed watch would send them only
    once they change); restarted under the same (none, an old file's too) it resumes; under
    a selector again, the Models it leaves out are forgotten, never sent as deleted."""
    namespaces, state = Namespaces(kube_apiserver), tmp_path / "watch-state.json"
    on, off = namespaces.create("on", enabled=True), namespaces.create("off", enabled=False)
    ons, offs = Cluster(objects, on), Cluster(objects, off)
    ons.create("a")
    offs.create("b")

    def run_until(name: str, selector: str | None) -> list[tuple[str, str, str]]:
        """A watcher from `state` until the Model `name`, created once it runs, was sent:
        what it sent of this test's namespaces (others' are watched without a selector)."""
        sent = Recorder()
        with (
            api_client(kube_apiserver) as api,
            Running(ModelWatcher(api, sent, state_file=state, namespace_selector=selector)) as w,
        ):
            wait_until("the first list", lambda: w.state.resource_version != "")
            ons.create(name)
            wait_until(name, lambda: any(e["name"] == name for e in sent.events))
            time.sleep(0.5)  # anything else it would send comes now
        return [
            (e["type"].rpartition(".")[2], e["namespace"], e["name"])
            for e in sent.events
            if e["namespace"] in (on, off)
        ]

    assert run_until("c", namespaces.selector) == [("add", on, "a"), ("add", on, "c")]
    assert json.loads(state.read_text())["namespaceSelector"] == namespaces.selector

    # without the selector: b, never sent, goes out as added; a and c, sent, do not
    assert sorted(run_until("d", None)) == [("add", off, "b"), ("add", on, "d")]

    # the same (none) from a file without `namespaceSelector` (before it was kept): resumed
    # from its resourceVersion, so both updates of b are sent (a list would send one)
    doc = json.loads(state.read_text())
    assert doc.pop("namespaceSelector") is None
    state.write_text(json.dumps(doc))
    offs.relabel("b", "2")
    offs.relabel("b", "3")
    assert run_until("e", None) == [("update", off, "b"), ("update", off, "b"), ("add", on, "e")]

    # under the selector again: b is forgotten, not deleted; what changed of `on`, sent
    offs.relabel("b", "4")
    ons.relabel("a", "2")
    assert run_until("f", namespaces.selector) == [("update", on, "a"), ("add", on, "f")]
    saved = json.loads(state.read_text())
    assert {o["metadata"]["namespace"] for o in saved["sent"].values()} & {on, off} == {on}
