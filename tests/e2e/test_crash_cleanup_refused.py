"""A Model's deletions refused for good (a Secret that is not there; a source outside its
namespace's tenancy) and one carried out (Retain), delivered shuffled and duplicated to a
real `modelhooks serve` whose notify and cleanup talk to the real kube-apiserver through a
proxy that SIGKILLs serve at a chosen request: before notify's status write, between that
write and its Warning Event, between the finalizer's removal and CleanupFailed's. serve is
restarted on the same home and the delivery in flight sent again, then the rest: the Model
ends as a Model given the same deliveries without a crash (finalizer, CleanupFailed, its
Warning Events, the artifact kept)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from modelhooks.adapters.model_registry.kubernetes import GROUP, VERSION
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core.conditions import FINALIZER
from modelhooks.events.model import CanonicalEvent, ModelDeleted
from tests.e2e.conftest import Served
from tests.e2e.crash import post
from tests.e2e.packaging import free_port
from tests.e2e.pods import push_model
from tests.e2e.test_cleanup_refused import HOLD, Cluster
from tests.e2e.test_model_resources import models_api  # noqa: F401 (a fixture)
from tests.servers.kube import KubeApiServer
from tests.servers.registries import OciRegistry

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

T0 = datetime(2026, 11, 1, tzinfo=UTC)
Rule = Callable[[str, str, bytes], str | None]  # (method, path, body) → "before", "after"


class Killing:
    """A plain-HTTP proxy to the apiserver that SIGKILLs `victim` once, at the first request
    `rule` names: "before" it is forwarded, or "after" its answer came (not passed on)."""

    def __init__(self, kube: KubeApiServer) -> None:
        upstream = urlsplit(kube.url)
        context = ssl.create_default_context(cafile=str(kube.ca_file))
        self.rule: Rule | None = None
        self.victim: Served | None = None
        self.killed = threading.Event()
        lock = threading.Lock()
        outer = self

        def strike(method: str, path: str, body: bytes, when: str) -> bool:
            with lock:
                if outer.rule is None or outer.killed.is_set():
                    return False
                if outer.rule(method, path, body) != when:
                    return False
                assert outer.victim is not None
                os.kill(outer.victim.process.pid, signal.SIGKILL)
                outer.killed.set()
                return True

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if strike(self.command, self.path, body, "before"):
                    self.close_connection = True
                    return
                conn = http.client.HTTPSConnection(
                    upstream.hostname or "", upstream.port, context=context, timeout=60
                )
                try:
                    names = ("Authorization", "Content-Type", "Accept")
                    headers = {k: self.headers[k] for k in names if self.headers[k]}
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    answer = resp.read()
                finally:
                    conn.close()
                if strike(self.command, self.path, body, "after"):
                    self.close_connection = True
                    return
                self.send_response(resp.status)
                self.send_header("Content-Type", resp.getheader("Content-Type") or "")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kubeconfig(self, kube: KubeApiServer, path: Path) -> str:
        config = json.loads(kube.write_kubeconfig(path).read_text())
        config["clusters"][0]["cluster"] = {"server": self.url}
        path.write_text(json.dumps(config))
        return str(path)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Setup:
    def __init__(
        self, cluster: Cluster, proxy: Killing, start: Callable[[], Served], registry: OciRegistry
    ) -> None:
        self.cluster, self.proxy, self.start, self.registry = cluster, proxy, start, registry
        self.served = start()
        proxy.victim = self.served


@pytest.fixture
def setup(
    kube_apiserver: KubeApiServer,
    models_api: Any,  # noqa: F811
    distribution3: OciRegistry,
    serve: Callable[..., Served],
    tmp_path: Path,
) -> Iterator[Setup]:
    """serve (notify and cleanup through the killing proxy, tenancy: the namespace may act
    on `cleanup-crash/allowed/` of the registry only), a namespace of its own."""
    from kubernetes import client

    namespace = f"crash-refused-{uuid.uuid4().hex[:8]}"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
    proxy = Killing(kube_apiserver)
    kubeconfig = proxy.kubeconfig(kube_apiserver, tmp_path / "kubeconfig")
    tenants = f"{namespace}=oci://{distribution3.host}/cleanup-crash/allowed/"
    port = free_port()
    flags = ("--notify-kubeconfig", kubeconfig, "--cleanup-kubeconfig", kubeconfig,
             "--tenancy-tenants", tenants, "--signing-enabled", "false",
             "--store-allow-local-targets", "true")  # fmt: skip
    try:
        yield Setup(
            Cluster(kube_apiserver, models_api, namespace, None),  # type: ignore[arg-type]
            proxy,
            lambda: serve(port, *flags),
            distribution3,
        )
    finally:
        proxy.close()


def _deletion(setup: Setup, name: str, kind: str, digest: str, at: int) -> CanonicalEvent:
    """The deletion of Model `name` as the ApiServerSource sends it, its spec then: `kind`
    secret (a Secret not there), tenancy (another team's source) or retain."""
    host = setup.registry.host
    ours = {"oci": {"reference": f"{host}/cleanup-crash/allowed/{name}@{digest}"}}
    spec = {
        "secret": {"source": {**ours, "secretRef": {"name": f"{name}-creds"}},
                   "deletionPolicy": "Delete"},
        "tenancy": {"source": {"oci": {"reference": f"{host}/cleanup-crash/other/{name}@{digest}"}},
                    "deletionPolicy": "Delete"},
        "retain": {"source": ours, "deletionPolicy": "Retain"},
    }[kind]  # fmt: skip
    ns = setup.cluster.namespace
    data = ModelDeleted(name=name, namespace=ns, version="1", spec=spec)
    subject = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/models/{name}"
    return CanonicalEvent(
        id=f"{name}-{kind}",
        source="k8s",
        type=data.TYPE,
        data=data,
        time=T0 + timedelta(minutes=at),
        subject=subject,
    )


def _end(setup: Setup, name: str, digest: str) -> dict[str, Any]:
    """What the deliveries left of Model `name`, its name taken out of the words."""
    cluster = setup.cluster
    model = cluster.get(name)
    assert model is not None  # HOLD keeps it
    words = lambda text: (text or "").replace(name, "NAME").replace(digest, "DIGEST")  # noqa: E731
    condition = cluster.cleanup_failed(name)
    warnings = sorted(
        (e.reason, e.action, words(e.note)) for e in cluster.warnings(name)
    )  # fmt: skip
    kept = DistributionRegistry(setup.registry.url).manifest(
        f"cleanup-crash/allowed/{name}", digest
    )
    return {
        "finalizers": sorted(model["metadata"].get("finalizers") or []),
        "CleanupFailed": {k: words(condition.get(k)) for k in ("status", "reason", "message")},
        "warnings": warnings,
        "artifact kept": bool(kept),
    }


def _deliver(setup: Setup, events: list[CanonicalEvent]) -> None:
    """Each in turn, as the platform does: one unanswered (serve killed) is sent again to
    serve restarted on the same port and home; a 5xx or 429 again, up to 10 times."""
    for event in events:
        for _ in range(10):
            status = post(setup.served.url + "/", event)
            if status == 0:
                assert setup.proxy.killed.is_set(), setup.served.logs()
                setup.served.process.wait(timeout=10)
                setup.served = setup.start()
                setup.proxy.victim = setup.served
                continue
            if status != 429 and status < 500:
                break
        assert status != 0 and status != 429 and status < 500, (event.id, status)


def _status(name: str) -> Rule:
    """Before notify's status write (cleanup answered, notify read the Model)."""
    return lambda m, p, b: "before" if m == "PATCH" and p.split("?")[0].endswith(
        f"/models/{name}/status"
    ) else None  # fmt: skip


def _warning(name: str) -> Rule:
    """Between notify's status write and its Warning Event."""
    return lambda m, p, b: "before" if (
        m == "POST" and "/events" in p and b'"Warning"' in b and name.encode() in b
    ) else None  # fmt: skip


def _finalizer(name: str, when: str) -> Rule:
    return lambda m, p, b: when if (
        m == "PATCH" and p.split("?")[0].endswith(f"/models/{name}") and b'"remove"' in b
    ) else None  # fmt: skip


def _finalizer_gone(name: str) -> Rule:
    """Between notify's finalizer removal (answered) and its removal of CleanupFailed."""
    return _finalizer(name, "after")


def _finalizer_kept(name: str) -> Rule:
    """Between cleanup's success (answered, its record maybe written) and notify's removal
    of the finalizer (its Event recorded)."""
    return _finalizer(name, "before")


REFUSALS = ["secret", "tenancy", "secret", "tenancy", "secret"]
THEN_RETAIN = ["tenancy", "secret", "retain", "tenancy", "retain", "secret"]


@pytest.mark.parametrize(
    ("order", "rule"),
    [
        pytest.param(REFUSALS, _status, id="refusals-killed-before-the-status-write"),
        pytest.param(REFUSALS, _warning, id="refusals-killed-between-the-status-and-its-event"),
        pytest.param(THEN_RETAIN, _status, id="retain-killed-before-the-status-write"),
        pytest.param(THEN_RETAIN, _finalizer_kept, id="retain-killed-before-the-finalizer-went"),
        pytest.param(THEN_RETAIN, _finalizer_gone, id="retain-killed-after-the-finalizer-went"),
    ],
)
def test_a_kill_in_notify_ends_as_no_kill(
    setup: Setup, tmp_path: Path, order: list[str], rule: Callable[[str], Rule]
) -> None:
    ends = []
    for crash in (False, True):
        name = f"m-{uuid.uuid4().hex[:8]}"
        work = tmp_path / name
        work.mkdir()
        digest = push_model(setup.registry, f"cleanup-crash/allowed/{name}", name, work)
        meta = {"name": name, "namespace": setup.cluster.namespace}
        reference = f"{setup.registry.host}/cleanup-crash/allowed/{name}@{digest}"
        setup.cluster.models.create_namespaced_custom_object(
            GROUP, VERSION, setup.cluster.namespace, "models",
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model",
             "metadata": {**meta, "finalizers": [FINALIZER, HOLD]},
             "spec": {"source": {"oci": {"reference": reference}}, "version": "1",
                      "deletionPolicy": "Delete"}},
        )  # fmt: skip
        setup.cluster.delete(name)
        kinds = sorted(set(order), key=order.index)
        events = [_deletion(setup, name, k, digest, kinds.index(k)) for k in order]
        setup.proxy.rule = rule(name) if crash else None
        _deliver(setup, events)
        assert setup.proxy.killed.is_set() == crash
        ends.append(_end(setup, name, digest))
        setup.cluster.patch(name, {"metadata": {"finalizers": None}})
    no_crash, crashed = ends
    assert crashed == no_crash, json.dumps([no_crash, crashed], indent=1)
    if "retain" in order:
        assert no_crash["finalizers"] == [HOLD] and not no_crash["CleanupFailed"]["status"]
    else:
        assert no_crash["finalizers"] == sorted([FINALIZER, HOLD])
        assert no_crash["CleanupFailed"]["status"] == "True"
        assert no_crash["warnings"], no_crash
    assert no_crash["artifact kept"]
