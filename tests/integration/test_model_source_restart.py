"""`modelhooks watch-models` while the kube-apiserver itself restarts (issue 12): the watch
breaks, the API is down, the new apiserver's watch cache no longer serves the saved
resourceVersion (410 Gone → relist) or still does (resume); either way every Model change
reaches the receiver once, or is folded into a later state of the same Model that does,
and the receiver ends with exactly what the cluster holds."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.kubernetes.model_source import GROUP, PLURAL, VERSION
from tests.integration.test_model_source import Cluster, wait_until
from tests.servers._proc import Process
from tests.servers.kube import KubeApiServer, restart_apiserver
from tests.servers.sink import NotificationSink

pytestmark = pytest.mark.integration

MODELHOOKS = str(Path(sys.executable).with_name("modelhooks"))
CRD = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "crds" / "model.yaml"

Key = tuple[str, str, int]  # (uid, action, resourceVersion)


def key(action: str, obj: dict[str, Any]) -> Key:
    return obj["metadata"]["uid"], action, int(obj["metadata"]["resourceVersion"])


class Changes:
    """What the test did to the cluster, as (uid, action, resourceVersion) the server said."""

    def __init__(self, cluster: Cluster, uids: dict[str, str]) -> None:
        self.cluster, self.uids = cluster, uids  # name → uid
        self.done: list[Key] = []

    def create(self, name: str) -> None:
        obj = self.cluster.create(name)
        self.uids[name] = obj["metadata"]["uid"]
        self.done.append(key("add", obj))

    def relabel(self, name: str, value: str) -> None:
        self.done.append(key("update", self.cluster.relabel(name, value)))

    def delete(self, name: str) -> None:
        self.cluster.delete(name)
        self.done.append((self.uids[name], "delete", 0))  # its resourceVersion: the watch's


def delivered(sink: NotificationSink) -> list[Key]:
    return [
        key(d.json()["type"].rpartition(".")[2], d.json()["data"]) for d in list(sink.deliveries)
    ]


def view(events: list[Key]) -> dict[str, int]:
    """What the receiver believes: uid → resourceVersion of every Model alive."""
    alive: dict[str, int] = {}
    for uid, action, rv in events:
        if action == "delete":
            alive.pop(uid, None)
        else:
            alive[uid] = rv
    return alive


def lost_and_duplicated(changes: list[Key], events: list[Key]) -> tuple[list[Key], list[Key]]:
    """Lost: a change neither delivered nor superseded by a delivered later state of its
    Model (a relist sends a Model as it is now, not each step). Duplicated: anything
    delivered twice, and every event that breaks a Model's add → updates → delete story."""
    deleted = {uid for uid, action, _ in events if action == "delete"}
    newest: dict[str, int] = {}
    for uid, _, rv in events:
        newest[uid] = max(rv, newest.get(uid, 0))

    def covered(uid: str, action: str, rv: int) -> bool:
        return uid in deleted or (action != "delete" and newest.get(uid, 0) >= rv)

    lost = [change for change in changes if not covered(*change)]
    duplicated = [k for k, n in Counter(events).items() if n > 1]
    for uid in {uid for uid, _, _ in events}:
        story = [(action, rv) for u, action, rv in events if u == uid]
        rvs = [rv for action, rv in story if action != "delete"]
        adds = [a for a, _ in story if a == "add"]
        deletes = [a for a, _ in story if a == "delete"]
        if story[0][0] != "add" or len(adds) != 1 or rvs != sorted(set(rvs)):
            duplicated.append((uid, "out of order", 0))
        if len(deletes) > 1 or (deletes and story[-1][0] != "delete"):
            duplicated.append((uid, "deleted twice or revived", 0))
    return lost, duplicated


def test_the_tally_sees_a_loss_and_a_duplicate() -> None:
    changes = [("a", "add", 1), ("a", "update", 2), ("a", "update", 3), ("b", "add", 4)]
    folded = [("a", "add", 1), ("a", "update", 3), ("b", "add", 4)]  # 2 folded into 3
    assert lost_and_duplicated(changes, folded) == ([], [])
    lost, duplicated = lost_and_duplicated(changes, [("a", "add", 1), ("a", "update", 2)] * 2)
    assert lost == [("a", "update", 3), ("b", "add", 4)]
    assert ("a", "add", 1) in duplicated and ("a", "out of order", 0) in duplicated


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_an_apiserver_restart_mid_stream_loses_and_duplicates_nothing(
    own_kube_apiserver: tuple[KubeApiServer, list[Process]], tmp_path: Path, stop: str
) -> None:
    from kubernetes import client

    kube, processes = own_kube_apiserver
    kube.install_crd(CRD, PLURAL)
    namespace = f"restart-{uuid.uuid4().hex[:8]}"
    with kube.api_client() as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    state, log = tmp_path / "state.json", tmp_path / "watch.log"
    command = [MODELHOOKS, "watch-models", "--kubeconfig", str(kubeconfig)]
    command += ["--namespace", namespace, "--state", str(state)]

    def arrived(*wanted: Key) -> None:
        """Each (uid, action, resourceVersion) delivered; a delete's resourceVersion: any."""

        def got() -> bool:
            events = delivered(sink)
            deletes = {uid for uid, action, _ in events if action == "delete"}
            return all(k in events or (k[1] == "delete" and k[0] in deletes) for k in wanted)

        wait_until(f"{wanted}", got, timeout=60)

    def models() -> dict[str, int]:
        with kube.api_client() as api:
            listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL
            )
        return {
            m["metadata"]["uid"]: int(m["metadata"]["resourceVersion"]) for m in listed["items"]
        }

    with NotificationSink() as sink, log.open("ab") as out:
        watcher = subprocess.Popen([*command, "--to", sink.url, "--raw"], stderr=out)
        try:
            wait_until("the first list", state.exists)
            with kube.api_client() as api:
                before = Changes(Cluster(client.CustomObjectsApi(api), namespace), {})
                before.create("a")
                before.create("b")
                before.create("c")
                before.relabel("a", "2")
                before.delete("b")
                arrived(*before.done)
                before.relabel("c", "2")  # just before the stop: maybe never watched
                before.create("d")
            down = restart_apiserver(kube, processes, crash=stop == "SIGKILL")
            with kube.api_client() as api:  # right after it is back, while the watcher retries
                after = Changes(Cluster(client.CustomObjectsApi(api), namespace), before.uids)
                after.relabel("a", "3")
                after.create("e")
                after.delete("c")
                after.relabel("d", "2")
                after.relabel("d", "3")
                now = models()
                wait_until("the receiver to know it", lambda: view(delivered(sink)) == now, 90)
                after.relabel("e", "2")  # the watch is live again: this one arrives as made
                arrived(after.done[-1])
            time.sleep(1.0)  # anything else it would send comes now
        finally:
            watcher.terminate()
            watcher.wait(timeout=15)

    changes, events = before.done + after.done, delivered(sink)
    lost, duplicated = lost_and_duplicated(changes, events)
    deletes = {uid for uid, action, _ in events if action == "delete"}
    exact = sum(1 for k in changes if k in events or (k[1] == "delete" and k[0] in deletes))
    text = log.read_text()
    how = "relisted (410 Gone)" if "410 Gone" in text else "resumed its resourceVersion"
    print(
        f"\napiserver {stop} + restart ({down:.1f}s down), watcher {how}: {len(changes)} "
        f"changes, {len(events)} events, {exact} delivered as made, "
        f"{len(changes) - exact - len(lost)} folded into a later state\n"
        f"events lost: {len(lost)}, duplicated: {len(duplicated)}"
    )
    assert (lost, duplicated) == ([], []), text
    assert view(events) == models(), text  # the receiver ends with what the cluster holds
    assert "watch interrupted" in text
