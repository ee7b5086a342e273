"""pytest fixtures for the real test servers (registered by tests/conftest.py).

Every fixture is session-scoped and starts its server on first use, on ephemeral loopback
ports, waits for its readiness probe, and stops it when the session ends. A server whose
binary is missing, or that does not become ready, FAILS the tests that use it (never a
skip): run ``make servers`` (``python -m tests.servers install``) first. When a test that
uses a server fails, the server's log tail is attached to the report.

=================  ===========================================================
fixture            yields
=================  ===========================================================
kube_apiserver     kube.KubeApiServer (url, ca_file, admin_token, ca, write_kubeconfig, api_client,
                   apply, token_for, install_crd)
own_kube_apiserver (KubeApiServer, its processes) private to one test (per test, not session)
minio              objectstores.Minio (endpoint_url, keys, notify_port/url/token/arn, s3_client)
fake_gcs           objectstores.FakeGcs (url, project, env, storage_client)
gcs_emulator       objectstores.FakeGcs (the same fields; gcp-storage-emulator: resumable status queries)
docker_registry    registries.OciRegistry (url, host, notify_port/url/token)
distribution3      registries.OciRegistry (same fields; distribution v3, tag DELETE)
token_server       token_auth.TokenServer (a token realm: users, requests, issuing())
distribution3_token_auth  registries.OciRegistry (distribution v3 with `auth: token` at token_server)
zot                registries.OciRegistry (same fields; CloudEvents to notify_url)
ociregistry        registries.OciRegistry (referrers API, tag DELETE; no notifications)
artifact_registry  artifact_registry.ArtifactRegistryStandIn (in-process stand-in for GAR's REST API; per test)
model_registry     model_registry.ModelRegistry (url, api_url, database_dsn)
sigstore           sigstore.Sigstore (fulcio/rekor/tsa/ct/tuf urls, tuf_root, trust_config,
                   cli_trust_config, issuer, kube, token(), identity()); uses kube_apiserver
node               node.Node (kube, registry, pod_env, probe_image, push_image, push_artifact)
podman             containers.Podman (podman + runc; base_image() made with mmdebstrap)
=================  ===========================================================

Notifications: each server that notifies posts to ``http://127.0.0.1:<notify_port>/...``,
a port the fixture reserved and exposes but does not listen on; the test (or the e2e
layer's function) listens there, e.g. ``with NotificationSink(minio.notify_port) as sink``.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.servers._proc import Process, ServerFailed, log_tail
from tests.servers.artifact_registry import ArtifactRegistryStandIn
from tests.servers.containers import Podman
from tests.servers.kube import KubeApiServer, start_kube
from tests.servers.model_registry import ModelRegistry, start_model_registry
from tests.servers.node import NEEDS as NODE_NEEDS
from tests.servers.node import Node, start_node
from tests.servers.objectstores import (
    FakeGcs,
    Minio,
    start_fake_gcs,
    start_gcs_emulator,
    start_minio,
)
from tests.servers.recipes import RECIPES, declared_unavailable
from tests.servers.registries import (
    OciRegistry,
    start_distribution3,
    start_docker_registry,
    start_ociregistry,
    start_zot,
)
from tests.servers.sigstore import NEEDS as SIGSTORE_NEEDS
from tests.servers.sigstore import Sigstore, start_sigstore
from tests.servers.token_auth import TokenServer

T = TypeVar("T")
_LOGS = pytest.StashKey[dict[str, tuple[Path, ...]]]()
_STARTS = pytest.StashKey[dict[str, float]]()


def _serve(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    needs: tuple[str, ...],
    start: Callable[[Path], tuple[T, list[Process]]],
) -> Iterator[T]:
    name = request.fixturename or "server"
    missing = [n for n in needs if not RECIPES[n].installed()]
    blocked = declared_unavailable()
    if missing and all(n in blocked for n in missing):
        pytest.skip(
            f"{', '.join(missing)} cannot be had on this machine (declared in "
            f"MODELHOOKS_TEST_UNAVAILABLE): {'; '.join(blocked[n] for n in missing)}"
        )
    if missing:
        pytest.fail(
            f"test server(s) {missing} not installed for fixture {name!r}: run `make servers` "
            f"(python -m tests.servers install {' '.join(missing)}) and read its error",
            pytrace=False,
        )
    workdir = tmp_path_factory.mktemp(name)
    started = time.monotonic()
    try:
        info, processes = start(workdir)
    except ServerFailed as exc:
        pytest.fail(f"fixture {name!r}: {exc}", pytrace=False)
    config = request.config
    config.stash.setdefault(_STARTS, {})[name] = time.monotonic() - started
    config.stash.setdefault(_LOGS, {})[name] = tuple(p.log_path for p in processes)
    try:
        yield info
    finally:
        _stop_all(processes)


def _stop_all(processes: list[Process]) -> None:
    """Stop every process, in reverse order, even when one fails to (a node's Pods, say):
    the others are stopped all the same, then the first failure is raised."""
    failed: list[BaseException] = []
    for process in reversed(processes):
        try:
            process.stop()
        except Exception as exc:
            failed.append(exc)
    if failed:
        raise failed[0]


@pytest.fixture(scope="session")
def kube_apiserver(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeApiServer]:
    """etcd + kube-apiserver (RBAC, admin token in system:masters, harness CA)."""
    yield from _serve(request, tmp_path_factory, ("etcd", "kube-apiserver"), start_kube)


@pytest.fixture
def own_kube_apiserver(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[KubeApiServer, list[Process]]]:
    """A private etcd + kube-apiserver for ONE test, with its processes, for a test that
    stops or restarts them (`kube.restart_apiserver`); slower than `kube_apiserver`."""

    def start(workdir: Path) -> tuple[tuple[KubeApiServer, list[Process]], list[Process]]:
        info, processes = start_kube(workdir)
        return (info, processes), processes

    yield from _serve(request, tmp_path_factory, ("etcd", "kube-apiserver"), start)


@pytest.fixture(scope="session")
def minio(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Minio]:
    """MinIO with webhook target ``notify_arn`` posting to ``notify_url``."""
    yield from _serve(request, tmp_path_factory, ("minio",), start_minio)


@pytest.fixture(scope="session")
def fake_gcs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FakeGcs]:
    """fake-gcs-server, memory backend; set ``fake_gcs.env`` for STORAGE_EMULATOR_HOST."""
    yield from _serve(request, tmp_path_factory, ("fake-gcs-server",), start_fake_gcs)


@pytest.fixture(scope="session")
def gcs_emulator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FakeGcs]:
    """gcp-storage-emulator, in memory: a second GCS server, for what fake-gcs-server lacks."""
    yield from _serve(request, tmp_path_factory, ("gcp-storage-emulator",), start_gcs_emulator)


@pytest.fixture(scope="session")
def docker_registry(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OciRegistry]:
    """distribution 2.8: deletes enabled, notifications to ``notify_url``."""
    yield from _serve(request, tmp_path_factory, ("docker-registry",), start_docker_registry)


@pytest.fixture(scope="session")
def distribution3(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OciRegistry]:
    """distribution v3: deletes enabled, notifications to ``notify_url``."""
    yield from _serve(request, tmp_path_factory, ("distribution3",), start_distribution3)


@pytest.fixture(scope="session")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenServer]:
    """A token realm (in this process) with users ``writer`` (pull, push, delete) and
    ``reader`` (pull), each with a random password (``token_server.users``)."""
    users = {
        "writer": (secrets.token_hex(8), {"pull", "push", "delete"}),
        "reader": (secrets.token_hex(8), {"pull"}),
    }
    with TokenServer(tmp_path_factory.mktemp("token_server"), users=users) as server:
        yield server


@pytest.fixture(scope="session")
def distribution3_token_auth(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    token_server: TokenServer,
) -> Iterator[OciRegistry]:
    """distribution v3 that wants a Bearer token from ``token_server`` for everything."""
    start = functools.partial(start_distribution3, auth=token_server.registry_auth())
    yield from _serve(request, tmp_path_factory, ("distribution3",), start)


@pytest.fixture(scope="session")
def zot(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OciRegistry]:
    """zot with the events extension: CloudEvents to ``notify_url``."""
    yield from _serve(request, tmp_path_factory, ("zot",), start_zot)


@pytest.fixture(scope="session")
def ociregistry(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OciRegistry]:
    """cue-labs' in-memory registry: the OCI referrers API (which no other harness
    registry has), tag DELETE; no notifications."""
    yield from _serve(request, tmp_path_factory, ("ociregistry",), start_ociregistry)


@pytest.fixture
def artifact_registry() -> Iterator[ArtifactRegistryStandIn]:
    """A stand-in for Artifact Registry's REST API (Google ships no emulator), served from
    this process: fresh and empty for each test, so its request counters start at zero."""
    with ArtifactRegistryStandIn() as server:
        yield server


@pytest.fixture(scope="session")
def model_registry(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ModelRegistry]:
    """Kubeflow Model Registry REST server over a throw-away PostgreSQL 15."""
    needs = ("postgresql", "model-registry")
    yield from _serve(request, tmp_path_factory, needs, start_model_registry)


@pytest.fixture(scope="session")
def sigstore(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    kube_apiserver: KubeApiServer,
) -> Iterator[Sigstore]:
    """A private Sigstore (CT log, Rekor v2, TSA, Fulcio) whose OIDC issuer is
    ``kube_apiserver``, with its TUF repository served on loopback (tests/servers/sigstore.py)."""
    start = functools.partial(start_sigstore, kube=kube_apiserver)
    yield from _serve(request, tmp_path_factory, SIGSTORE_NEEDS, start)


@pytest.fixture(scope="session")
def node(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Node]:
    """A single-node Kubernetes (its own etcd + apiserver, controller-manager, scheduler,
    containerd, kubelet, bridge CNI, loopback registry): Pods run (tests/servers/node.py)."""
    yield from _serve(request, tmp_path_factory, NODE_NEEDS, start_node)


@pytest.fixture(scope="session")
def podman() -> Podman:
    """podman with runc and this machine's containers.conf; the base image is made on first
    use of `base_image()` (mmdebstrap, cached)."""
    missing = [n for n in ("podman", "runc", "mmdebstrap") if not RECIPES[n].installed()]
    if missing:
        pytest.fail(
            f"{missing} not installed: run `make servers` (python -m tests.servers install "
            f"{' '.join(missing)}) and read its error",
            pytrace=False,
        )
    return Podman.configured()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed:
        return
    logs = item.config.stash.get(_LOGS, {})
    for fixture in getattr(item, "fixturenames", ()):
        for path in logs.get(fixture, ()):
            report.sections.append((f"server log {path.name} (tail)", log_tail(path, 60)))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    starts = config.stash.get(_STARTS, {})
    if starts:
        summary = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in starts.items())
        terminalreporter.write_line(f"test servers started (time to ready): {summary}")


@pytest.fixture(params=["local", "s3", "gcs"])
def each_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    """(ObjectStore, bucket): a fresh bucket on the local store, MinIO and fake-gcs-server
    in turn (the servers started on first use)."""
    from modelhooks.adapters.object_store.gcs import GcsObjectStore
    from modelhooks.adapters.object_store.local import LocalObjectStore
    from modelhooks.adapters.object_store.s3 import S3ObjectStore

    bucket = f"models-{secrets.token_hex(6)}"
    if request.param == "local":
        (tmp_path / bucket).mkdir()
        yield LocalObjectStore(tmp_path), bucket
    elif request.param == "s3":
        minio: Minio = request.getfixturevalue("minio")
        with minio.s3_client() as client:
            client.create_bucket(Bucket=bucket)
            yield S3ObjectStore(client), bucket
    else:
        fake_gcs: FakeGcs = request.getfixturevalue("fake_gcs")
        client = fake_gcs.storage_client()
        client.create_bucket(bucket)
        yield GcsObjectStore(client), bucket
