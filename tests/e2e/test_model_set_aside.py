"""One Model whose deliveries keep failing holds up no other (issue H6): a real kube-apiserver →
`modelhooks watch-models --raw --state` → a proxy that answers 503 to one Model's events and
forwards the rest → `modelhooks serve` (Kubernetes registry, notify on the same apiserver).
The refused Model is set aside while another becomes Ready; a restart sends it again (its
state file does not count it as sent); once the proxy lets it through it becomes Ready. A
target that answers nothing at all still stops the watcher (exit 3)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.model_registry.kubernetes import GROUP, VERSION
from tests.e2e.conftest import MODELHOOKS, Served
from tests.e2e.pods import push_model
from tests.e2e.test_model_chain import (  # noqa: F401 (a fixture)
    _conditions,
    registry_namespace,
    serve_on_cluster,
)
from tests.e2e.test_model_resources import models_api  # noqa: F401 (a fixture)
from tests.servers._proc import free_port
from tests.servers.kube import KubeApiServer
from tests.servers.registries import OciRegistry

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


class Refusing:
    """Forwards each CloudEvent POSTed to it to `target`, except those of the Models named in
    `refused`: 503. Keeps (name, action, forwarded) of every one."""

    def __init__(self, target: str, *refused: str) -> None:
        self.refused = set(refused)
        self.seen: list[tuple[str, str, bool]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                doc = json.loads(body)
                name, action = doc.get("name", ""), doc["type"].rpartition(".")[2]
                refuse = name in proxy.refused
                proxy.seen.append((name, action, not refuse))
                status, answer = 503, b'{"error": "refused by the test proxy"}'
                if not refuse:
                    request = urllib.request.Request(
                        target, data=body, method="POST", headers=dict(self.headers)
                    )
                    try:
                        with urllib.request.urlopen(request, timeout=30) as resp:
                            status, answer = resp.status, resp.read()
                    except urllib.error.HTTPError as exc:
                        status, answer = exc.code, exc.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def of(self, name: str) -> list[tuple[str, bool]]:
        return [(action, forwarded) for n, action, forwarded in list(self.seen) if n == name]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def namespace(kube_apiserver: KubeApiServer) -> str:
    from kubernetes import client

    name = f"aside-{uuid.uuid4().hex[:8]}"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def _create(objects: Any, namespace: str, name: str, reference: str) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Model",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"oci": {"reference": reference}}, "version": "1"},
    }
    created: dict[str, Any] = objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "models", body
    )
    return created


def _ready(objects: Any, namespace: str, name: str) -> bool:
    model = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, "models", name)
    return _conditions(model).get("Ready", {}).get("status") == "True"


def test_a_model_refused_every_time_holds_up_no_other(
    kube_apiserver: KubeApiServer,
    models_api: Any,  # noqa: F811
    registry_namespace: str,  # noqa: F811
    distribution3: OciRegistry,
    namespace: str,
    serve: Callable[..., Served],
    tmp_path: Path,
) -> None:
    served, kubeconfig = serve_on_cluster(kube_apiserver, registry_namespace, serve, tmp_path)
    suffix = uuid.uuid4().hex[:8]
    first, second, good = f"poison-a-{suffix}", f"poison-b-{suffix}", f"good-{suffix}"
    repo = f"model-aside/{suffix}"
    push_model(distribution3, repo, suffix, tmp_path, tag="v1")
    reference = f"{distribution3.host}/{repo}:v1"
    proxy = Refusing(served.url + "/", first, second)
    state, log = tmp_path / "state.json", tmp_path / "watch.log"
    command = [MODELHOOKS, "watch-models", "--kubeconfig", kubeconfig, "--namespace", namespace,
               "--raw", "--to", proxy.url, "--state", str(state), "--concurrency", "1",
               "--backoff-delay", "0.05"]  # fmt: skip
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            started.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
        return started[-1]

    def logged(severity: str, name: str) -> list[dict[str, Any]]:
        lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
        return [
            doc
            for doc in map(json.loads, lines)
            if doc.get("severity") == severity and doc.get("model") == f"{namespace}/{name}"
        ]

    def ready(name: str) -> Callable[[], bool]:
        return lambda: _ready(models_api, namespace, name)

    def saved() -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(state.read_text())
        return doc

    try:
        watcher = start()
        served.wait_for("the watcher's first list", state.exists)
        uids = [
            _create(models_api, namespace, n, reference)["metadata"]["uid"] for n in (first, second)
        ]
        served.wait_for(f"{first} set aside (log: {log})", lambda: logged("ERROR", first), 30)
        line = logged("ERROR", first)[0]
        assert "HTTP 503" in line["reason"] and "refused by the test proxy" in line["reason"]
        assert line["retry_in"] == pytest.approx(3.2) and line["set_aside_total"] >= 1

        # one worker (--concurrency 1), two refused Models first: another still goes on
        _create(models_api, namespace, good, reference)
        served.wait_for(f"{good} Ready (log: {log})", ready(good), timeout=30)
        assert not _ready(models_api, namespace, first) and watcher.poll() is None
        models_api.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "models", first, {"metadata": {"labels": {"v": "2"}}}
        )  # its update waits behind its add
        served.wait_for(f"{second} set aside", lambda: logged("ERROR", second), 30)
        served.wait_for("the state saved", lambda: saved()["resourceVersion"] == "")
        watcher.kill()  # a crash: only what the state file says survives
        watcher.wait(timeout=10)
        doc = saved()
        assert not set(uids) & set(doc["sent"])  # never delivered: not counted as sent
        assert any(obj["metadata"]["name"] == good for obj in doc["sent"].values())
        assert all(not through for _, through in proxy.of(first) + proxy.of(second))

        # restarted: the first let through is sent again and becomes Ready; the second,
        # still refused, is set aside again, then delivered by its next try once let through
        proxy.refused = {second}
        before = len(logged("ERROR", second))
        start()
        served.wait_for(f"{first} Ready after the restart (log: {log})", ready(first), 30)
        forwarded = [action for action, through in proxy.of(first) if through]
        assert forwarded[0] == "add", forwarded  # nothing of it overtook its add
        served.wait_for(
            f"{second} set aside again", lambda: len(logged("ERROR", second)) > before, 30
        )
        proxy.refused = set()
        served.wait_for(f"{second} Ready once let through (log: {log})", ready(second), 30)
        assert logged("WARNING", second), log.read_text()  # delivered after being set aside
        assert started[-1].poll() is None, log.read_text()
    finally:
        for process in started:
            process.kill()
            process.wait(timeout=10)
        proxy.close()


def test_a_target_that_answers_nothing_stops_the_watcher(
    kube_apiserver: KubeApiServer,
    models_api: Any,  # noqa: F811
    namespace: str,
    tmp_path: Path,
) -> None:
    kubeconfig = str(kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    _create(models_api, namespace, "nobody-listens", "example.com/m:v1")
    started = time.monotonic()
    done = subprocess.run(
        [MODELHOOKS, "watch-models", "--kubeconfig", kubeconfig, "--namespace", namespace,
         "--to", f"http://127.0.0.1:{free_port()}/", "--raw", "--backoff-delay", "0.05"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "not delivered after 6 retries" in done.stderr and "did not answer" in done.stderr
    assert time.monotonic() - started < 30
