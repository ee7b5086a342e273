"""`ModelWatcher` on a REAL kube-apiserver: Model changes become exactly Knative's
ApiServerSource events in both modes, and nothing is lost or sent twice when the watch
connection breaks, when the watcher restarts from its state file, or when its
resourceVersion has expired (410 Gone → relist, deletes during the gap included)."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.kubernetes.model_source import GROUP, PLURAL, VERSION, ModelWatcher
from tests.servers.kube import KubeApiServer
from tests.servers.sink import NotificationSink

pytestmark = pytest.mark.integration

MODELHOOKS = str(Path(sys.executable).with_name("modelhooks"))
CRD = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "crds" / "model.yaml"


@pytest.fixture(scope="module")
def models(kube_apiserver: KubeApiServer) -> Iterator[Any]:
    """The Model CRD served; yields a CustomObjectsApi."""
    from kubernetes import client

    kube_apiserver.install_crd(CRD, PLURAL)
    with kube_apiserver.api_client() as api:
        yield client.CustomObjectsApi(api)


@pytest.fixture
def namespace(kube_apiserver: KubeApiServer) -> str:
    """A fresh namespace per test: the watcher sees only this test's Models."""
    from kubernetes import client

    name = f"watch-{uuid.uuid4().hex[:8]}"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Cluster:
    """Create, relabel and delete Models in one namespace; remembers what the server said."""

    def __init__(self, objects: Any, namespace: str) -> None:
        self.objects, self.namespace = objects, namespace

    def create(self, name: str) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Model",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"source": {"gcs": {"uri": f"gs://models/models/{name}/1/"}}, "version": "1"},
        }
        created: dict[str, Any] = self.objects.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, body
        )
        return created

    def relabel(self, name: str, value: str) -> dict[str, Any]:
        patched: dict[str, Any] = self.objects.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, {"metadata": {"labels": {"v": value}}}
        )
        return patched

    def delete(self, name: str) -> None:
        self.objects.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)


class Recorder:
    """The events a watcher sent, in order (thread-safe)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(json.loads(json.dumps(event)))

    def seen(self) -> list[tuple[str, str]]:
        """(type suffix, name) per event, e.g. ("add", "m1")."""
        with self._lock:
            return [(e["type"].rpartition(".")[2], e["name"]) for e in self.events]

    def wait_for(self, action: str, name: str) -> None:
        wait_until(f"{action} {name}", lambda: (action, name) in self.seen())


class Running:
    """A ModelWatcher running in a thread until the block ends."""

    def __init__(self, watcher: ModelWatcher) -> None:
        self.watcher = watcher
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.watcher.run()
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def __enter__(self) -> ModelWatcher:
        self.thread.start()
        return self.watcher

    def __exit__(self, *exc: object) -> None:
        self.watcher.close()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the watcher did not stop"
        assert self.error is None, f"the watcher failed: {self.error!r}"


class Cuttable:
    """A TCP forwarder to the apiserver whose connections the test can cut: `down()` breaks
    every open connection and refuses new ones, `up()` lets them through again."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open: list[socket.socket] = []
        self.refusing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _cut(s)

    def down(self) -> None:
        self.refusing = True
        for s in self.open:
            _cut(s)
        self.open.clear()

    def up(self) -> None:
        self.refusing = False

    def close(self) -> None:
        self.down()
        self.listener.close()


def _cut(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()


def api_client(kube: KubeApiServer, url: str | None = None) -> Any:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = url or kube.url
    configuration.ssl_ca_cert = str(kube.ca_file)
    configuration.api_key = {"authorization": kube.admin_token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(configuration)


def lost_and_duplicated(
    events: list[dict[str, Any]], expected: list[tuple[str, str]]
) -> tuple[list[tuple[str, str]], list[str]]:
    seen = [(e["type"].rpartition(".")[2], e["name"]) for e in events]
    ids = [e["id"] for e in events]
    return [x for x in expected if x not in seen], sorted({i for i in ids if ids.count(i) > 1})


@pytest.mark.parametrize("mode", ["Resource", "Reference"])
def test_changes_become_exactly_knatives_events(
    kube_apiserver: KubeApiServer, models: Any, namespace: str, mode: str
) -> None:
    cluster, sent = Cluster(models, namespace), Recorder()
    reference = mode == "Reference"
    with api_client(kube_apiserver) as api:
        watcher = ModelWatcher(api, sent, namespace=namespace, reference=reference)
        with Running(watcher):
            wait_until("the first list", lambda: watcher.state.resource_version != "")
            created = cluster.create("m1")
            updated = cluster.relabel("m1", "2")
            cluster.delete("m1")
            sent.wait_for("delete", "m1")

    prefix = "dev.knative.apiserver." + ("ref." if reference else "resource.")
    assert [e["type"] for e in sent.events] == [prefix + a for a in ("add", "update", "delete")]
    for event in sent.events:
        assert event["source"] == kube_apiserver.url
        assert event["subject"] == f"/apis/modelhooks.dev/v1alpha1/namespaces/{namespace}/models/m1"
        assert (event["kind"], event["apiversion"], event["name"], event["namespace"]) == (
            "Model",
            "modelhooks.dev/v1alpha1",
            "m1",
            namespace,
        )
        assert event["datacontenttype"] == "application/json" and event["specversion"] == "1.0"
    add, update, delete = (e["data"] for e in sent.events)
    if reference:
        ref = {
            "kind": "Model",
            "namespace": namespace,
            "name": "m1",
            "apiVersion": f"{GROUP}/{VERSION}",
        }
        assert add == update == delete == ref
    else:
        assert add == created and update == updated
        assert delete["metadata"]["uid"] == created["metadata"]["uid"]
    assert len({e["id"] for e in sent.events}) == 3


def test_a_broken_connection_resumes_from_the_last_resource_version(
    kube_apiserver: KubeApiServer, models: Any, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    cluster, sent = Cluster(models, namespace), Recorder()
    proxy = Cuttable(int(kube_apiserver.url.rpartition(":")[2]))
    caplog.set_level(logging.WARNING)
    try:
        with api_client(kube_apiserver, f"https://127.0.0.1:{proxy.port}") as api:
            watcher = ModelWatcher(api, sent, namespace=namespace)
            with Running(watcher):
                cluster.create("m1")
                sent.wait_for("add", "m1")
                proxy.down()  # mid-stream: the watch's TCP connection is cut
                cluster.create("m2")
                cluster.relabel("m1", "2")
                cluster.delete("m1")
                time.sleep(1.0)  # the watcher fails to reconnect meanwhile
                proxy.up()
                cluster.create("m3")
                sent.wait_for("add", "m3")
    finally:
        proxy.close()

    expected = [("add", "m1"), ("add", "m2"), ("update", "m1"), ("delete", "m1"), ("add", "m3")]
    assert sent.seen() == expected  # every event, each once, in order: resumed, not relisted
    assert lost_and_duplicated(sent.events, expected) == ([], [])
    assert "watch interrupted" in caplog.text and "410 Gone" not in caplog.text


def test_a_restart_resumes_from_the_state_file_and_an_expired_one_relists(
    kube_apiserver: KubeApiServer,
    models: Any,
    namespace: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, state = Cluster(models, namespace), tmp_path / "watch-state.json"
    caplog.set_level(logging.WARNING)
    runs: list[Recorder] = []

    def run_until(action: str, name: str) -> Recorder:
        sent = Recorder()
        with (
            api_client(kube_apiserver) as api,
            Running(ModelWatcher(api, sent, namespace=namespace, state_file=state)),
        ):
            sent.wait_for(action, name)
            time.sleep(0.5)  # anything else it would send comes now
        runs.append(sent)
        return sent

    cluster.create("a")
    cluster.create("b")
    assert run_until("add", "b").seen() == [("add", "a"), ("add", "b")]

    # stopped: changes while no watcher runs; the saved resourceVersion is still served
    cluster.relabel("a", "2")
    cluster.delete("b")
    cluster.create("c")
    assert run_until("add", "c").seen() == [("update", "a"), ("delete", "b"), ("add", "c")]

    # stopped again, and the saved resourceVersion is now too old: 410 Gone → relist
    cluster.relabel("c", "2")
    cluster.relabel("c", "3")
    cluster.delete("a")
    cluster.create("d")
    saved = json.loads(state.read_text())
    state.write_text(json.dumps({**saved, "resourceVersion": "1"}))
    relisted = run_until("add", "d")
    assert relisted.seen() == [("delete", "a"), ("update", "c"), ("add", "d")]
    assert "410 Gone" in caplog.text
    assert relisted.events[0]["data"]["metadata"]["labels"] == {"v": "2"}  # a as last sent
    assert relisted.events[1]["data"]["metadata"]["labels"] == {"v": "3"}  # c as it is now

    every = [e for sent in runs for e in sent.events]
    expected = [
        ("add", "a"), ("add", "b"),
        ("update", "a"), ("delete", "b"), ("add", "c"),
        ("delete", "a"), ("update", "c"), ("add", "d"),
    ]  # fmt: skip
    lost, duplicated = lost_and_duplicated(every, expected)
    print(f"\nwatch restarts: {len(every)} events, lost {len(lost)}, duplicated {len(duplicated)}")
    assert (lost, duplicated) == ([], []) and len(every) == len(expected)


def test_the_cli_sends_reference_events_raw_and_a_killed_watcher_resumes(
    kube_apiserver: KubeApiServer, models: Any, namespace: str, tmp_path: Path
) -> None:
    cluster = Cluster(models, namespace)
    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    state, log = tmp_path / "state.json", tmp_path / "watch.log"
    command = [MODELHOOKS, "watch-models", "--kubeconfig", str(kubeconfig)]
    command += ["--namespace", namespace, "--mode", "Reference", "--state", str(state)]

    def types(sink: NotificationSink) -> list[str]:
        return [d.json()["type"] for d in sink.deliveries]

    with NotificationSink() as sink:
        for step in ("create", "delete"):
            with log.open("ab") as out:
                watcher = subprocess.Popen([*command, "--to", sink.url, "--raw"], stderr=out)
            try:
                if step == "create":
                    cluster.create("m1")
                    sink.wait_for(lambda d: d.json()["type"].endswith(".add"))
                else:
                    sink.wait_for(lambda d: d.json()["type"].endswith(".delete"))
                time.sleep(0.5)
            finally:
                watcher.kill()  # no goodbye: the state file is all that is left
                watcher.wait(timeout=10)
            if step == "create":
                cluster.delete("m1")  # while no watcher runs
    assert types(sink) == ["dev.knative.apiserver.ref.add", "dev.knative.apiserver.ref.delete"], (
        log.read_text()
    )
    assert {d.headers["content-type"] for d in sink.deliveries} == {"application/cloudevents+json"}
    assert sink.deliveries[1].json()["data"] == {
        "kind": "Model",
        "namespace": namespace,
        "name": "m1",
        "apiVersion": "modelhooks.dev/v1alpha1",
    }


@pytest.mark.parametrize("left", [b"", b"\0" * 600], ids=["empty", "zeros"])
def test_the_cli_on_a_state_file_a_power_loss_left_empty_lists_the_models_again(
    kube_apiserver: KubeApiServer, models: Any, namespace: str, tmp_path: Path, left: bytes
) -> None:
    """What an unsynced save could leave after a power loss (the rename on the disk, the
    data not): the watch starts, says which file it could not read (WARNING), sends every
    Model as added and saves a state file that loads. It exited 2 at every start."""
    from modelhooks.adapters.kubernetes.model_source import WatchState

    cluster = Cluster(models, namespace)
    uid = cluster.create("m1")["metadata"]["uid"]
    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    state, log = tmp_path / "state.json", tmp_path / "watch.log"
    state.write_bytes(left)
    command = [MODELHOOKS, "watch-models", "--kubeconfig", str(kubeconfig)]
    command += ["--namespace", namespace, "--state", str(state)]
    with NotificationSink() as sink, log.open("ab") as out:
        watcher = subprocess.Popen([*command, "--to", sink.url, "--raw"], stderr=out)
        try:
            added = sink.wait_for(lambda d: d.json()["type"].endswith(".add"))
            wait_until("the state saved", lambda: state.read_bytes()[:1] == b"{")
        finally:
            watcher.kill()
            watcher.wait(timeout=10)
    assert added.json()["data"]["metadata"]["name"] == "m1", log.read_text()
    assert uid in WatchState.load(state, namespace).sent
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    (warning,) = [line for line in lines if line["severity"] == "WARNING"]
    assert warning["state_file"] == str(state) and str(state) in warning["message"]


def test_a_model_created_again_is_sent_after_the_old_ones_deletion_in_time(
    kube_apiserver: KubeApiServer, models: Any, namespace: str, tmp_path: Path
) -> None:
    """Models deleted and created again under their names (new uids) while the watcher was
    stopped, then a relist (410 Gone): each old Model's delete goes out before the new one's
    add, and its time must say so. register orders a Model's deletion and its versions'
    registrations by the events' times (a version is live iff its push is NEWER than the
    deletion), and the relist sent both within one millisecond, one time for both: the new
    Model's version was archived as deleted, its deletion said again for cleanup."""
    cluster, state = Cluster(models, namespace), tmp_path / "watch-state.json"
    names = [f"m{i}" for i in range(20)]

    def run_until(wanted: Callable[[Recorder], bool]) -> Recorder:
        sent = Recorder()
        with (
            api_client(kube_apiserver) as api,
            Running(ModelWatcher(api, sent, namespace=namespace, state_file=state)),
        ):
            wait_until("the events", lambda: wanted(sent))
        return sent

    for name in names:
        cluster.create(name)
    run_until(lambda sent: len(sent.seen()) == len(names))
    for name in names:  # stopped: each deleted and created again
        cluster.delete(name)
        cluster.create(name)
    saved = json.loads(state.read_text())
    state.write_text(json.dumps({**saved, "resourceVersion": "1"}))  # expired: a relist
    relisted = run_until(lambda sent: len(sent.seen()) == 2 * len(names))
    # one lane: delivered in the order sent, the deletions first
    assert [a for a, _ in relisted.seen()] == ["delete"] * len(names) + ["add"] * len(names)
    times = [e["time"] for e in relisted.events]
    tied = [(a, b) for a, b in itertools.pairwise(times) if not a < b]
    assert tied == [], f"{len(tied)} of {len(times) - 1} events not later than the one before"


def test_a_burst_of_changes_saves_the_state_a_bounded_number_of_times(
    kube_apiserver: KubeApiServer,
    models: Any,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each save writes every Model sent (and syncs it): saving at each event of a burst
    made the watch's work O(Models) an event, O(Models²) a burst (5,000 Models: 6 MB and
    90 ms a save, at each of their 5,000 updates). Saved at most once in SAVE_SPACING times
    a save's duration (put off, never skipped): the state after the burst is whole."""
    from modelhooks.adapters.kubernetes import model_source

    cluster, state = Cluster(models, namespace), tmp_path / "watch-state.json"
    saves: list[float] = []
    save = model_source.WatchState.save

    def counted(self: Any, path: Path, behind: Any = None) -> None:
        saves.append(time.monotonic())
        save(self, path, behind)

    monkeypatch.setattr(model_source.WatchState, "save", counted)
    names = [f"m{i}" for i in range(150)]
    note = {"metadata": {"annotations": {"note": "n" * 8000}}}
    sent = Recorder()
    with (
        api_client(kube_apiserver) as api,
        Running(ModelWatcher(api, sent, namespace=namespace, state_file=state)),
    ):
        wait_until("the first list", state.exists)
        for name in names:
            cluster.create(name)
            models.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, note)
        for name in names:
            cluster.relabel(name, "2")
        wait_until("the burst", lambda: len(sent.seen()) == 3 * len(names), timeout=60)
        time.sleep(1.0)  # a save put off is made now
        during = len(saves)
        kept = json.loads(state.read_text())["sent"]
    events = 3 * len(names)
    print(f"\n{events} events, {during} saves")
    assert during <= events // 10, f"{during} saves for {events} events"
    assert sorted(obj["metadata"]["labels"]["v"] for obj in kept.values()) == ["2"] * len(names)
