"""tests/unit/test_transfer_order.py's held interleavings on the real servers: MinIO as the
source and the destination (fake-gcs-server as the destination too), and each registry
backend (SQLite, the Kubernetes resources on the real kube-apiserver, Kubeflow's Model
Registry over PostgreSQL). An older request whose copy ends after a newer one took effect
is moot, and one whose copy fails then leaves the newer LIVE; each made the older's
content LIVE (or the artifact ABANDONED) before. Each source copies into its own
destination prefix: one destination takes one source (a second source's copy into it is
refused, tests/integration/test_transfer_claim.py)."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry
from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.adapters.object_store.gcs import GcsObjectStore
from modelhooks.adapters.object_store.s3 import S3ObjectStore
from modelhooks.adapters.transfer import register
from modelhooks.adapters.transfer.request import Transfers
from modelhooks.adapters.transfer.stores import GcsEnd, S3End
from modelhooks.bootstrap import model_registry
from modelhooks.core.function import Skip
from modelhooks.core.records import ArtifactState, stamp
from modelhooks.core.settings import load_settings
from modelhooks.events.model import CanonicalEvent, ModelRegistered
from tests.servers.kube import KubeApiServer
from tests.servers.objectstores import FakeGcs, Minio
from tests.unit.test_transfer_function import ENV, request
from tests.unit.test_transfer_order import CONTENT, Hooks, digest_of, handle, in_background

pytestmark = pytest.mark.integration

CRDS = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "crds"


@pytest.fixture(params=["sqlite", "kubernetes", "kubeflow"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        found: Any = SqliteModelRegistry(tmp_path / "registry.db")
    elif request.param == "kubeflow":
        found = KubeflowModelRegistry(request.getfixturevalue("model_registry").url, timeout=10)
    else:
        kube: KubeApiServer = request.getfixturevalue("kube_apiserver")
        kube.install_crd(CRDS / "registeredmodel.yaml", "registeredmodels")
        kube.install_crd(CRDS / "modelversion.yaml", "modelversions")
        env = {
            "MODELHOOKS_REGISTRY_BACKEND": "kubernetes",
            "MODELHOOKS_REGISTRY_KUBECONFIG": str(kube.write_kubeconfig(tmp_path / "kubeconfig")),
            "MODELHOOKS_REGISTRY_NAMESPACE": "default",
        }
        found = model_registry(load_settings(env=env))
    yield found
    found.close()


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> Hooks:
    hooks, finish = Hooks(), register.finish

    def held_finish(*args: Any, **kwargs: Any) -> Any:
        hooks.point(hooks.named.get(kwargs.get("at", ""), ""), "finish")
        return finish(*args, **kwargs)

    monkeypatch.setattr(register, "finish", held_finish)
    return hooks


class Ends:
    """MinIO's staging/<key>/ to the destination prefix model-<key>/ (MinIO's or
    fake-gcs-server's): the ends a process builds from the request, built in the test."""

    def __init__(self, minio: Minio, gcs: FakeGcs | None, tmp_path: Path, hooks: Hooks) -> None:
        self.s3 = S3ObjectStore(
            endpoint_url=minio.endpoint_url,
            region=minio.region,
            credentials={
                "aws_access_key_id": minio.access_key,
                "aws_secret_access_key": minio.secret_key,
            },
        )
        self.staging, self.out = (
            f"order-{secrets.token_hex(4)}",
            f"order-out-{secrets.token_hex(4)}",
        )
        with minio.s3_client() as client:
            for bucket in (self.staging, self.out):
                client.create_bucket(Bucket=bucket)
            for key, content in CONTENT.items():
                client.put_object(Bucket=self.staging, Key=f"{key}/w.bin", Body=content)
        self.gcs = None
        if gcs is not None:
            self.gcs = GcsObjectStore(gcs.storage_client())
            gcs.storage_client().create_bucket(self.out)
        self.tmp_path, self.hooks, self.failing = tmp_path, hooks, False

    def __call__(self, cfg: Any) -> tuple[Any, Any]:
        key = cfg.get("source_aws_key").strip("/")
        self.hooks.point(key, "ends")
        run = uuid.uuid4().hex[:8]
        source: Any = S3End(self.s3, self.staging, f"{key}/", None)
        if key in self.hooks.fail:
            source = _Vanishing(source, self, key)
        journal = self.tmp_path / "state" / f"{run}.json"
        if self.gcs is not None:
            return source, GcsEnd(self.gcs, self.out, f"model-{key}/", journal)
        return source, S3End(self.s3, self.out, f"model-{key}/", journal)

    def read(self, key: str) -> bytes:
        if self.gcs is not None:
            return self.gcs.read_range(self.out, f"model-{key}/w.bin", 0, 1 << 20)
        return self.s3.read_range(self.out, f"model-{key}/w.bin", 0, 1 << 20)


class _Vanishing:
    """A source whose files are listed, then deleted (once the test lets the run go) before
    they are read: a staging bucket emptied mid-copy."""

    def __init__(self, source: S3End, ends: Ends, key: str) -> None:
        self.source, self.ends, self.key, self.uri = source, ends, key, source.uri

    def files(self) -> Iterator[Any]:
        listed = list(self.source.files())
        self.ends.hooks.point(self.key, "copy")  # begun: the artifact PENDING, claimed
        for entry in listed:
            self.ends.s3.delete(self.ends.staging, f"{self.key}/{entry.path}")
        yield from listed


def _requests(hooks: Hooks) -> tuple[Any, Any]:
    name = f"order-{secrets.token_hex(4)}"

    def sent(key: str, minutes: int) -> CanonicalEvent:
        event = hooks.sent(key, minutes)
        data = request(
            source={"type": "s3", "bucket": "staging", "key": f"{key}/"},
            model={"name": name, "description": "order"},
        )
        return event.replace(data=data)

    return sent, name


def _live(registry: Any, name: str) -> Any:
    model = registry.get_model(name)
    version = registry.get_version(model.id, "1")
    (artifact,) = registry.list_artifacts(version.id)
    assert artifact.state == ArtifactState.LIVE, artifact.custom_properties
    return artifact


def _older_ending_last(registry: Any, ends: Ends, hooks: Hooks, tmp_path: Path) -> None:
    """older begins and copies; newer runs whole; older's finish then comes: moot."""
    runs = Transfers(env={**ENV, "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state")}, ends=ends)
    sent, name = _requests(hooks)
    reached, release = hooks.hold("a", "finish")
    older = in_background(lambda: handle(sent("a", 1), registry, runs))
    assert reached.wait(30)
    (newer,) = handle(sent("b", 5), registry, runs)
    release.set()
    with pytest.raises(Skip, match="moot"):
        older()
    artifact = _live(registry, name)
    assert isinstance(newer.data, ModelRegistered)
    assert artifact.digest == newer.data.digest == digest_of(CONTENT["b"])
    assert artifact.custom_properties[register.TRANSFER_AT] == stamp(sent("b", 5))
    assert artifact.uri.endswith("/model-b") and ends.read("b") == CONTENT["b"]


def test_an_older_copy_ending_after_the_newer_took_effect_is_moot(
    registry: Any, minio: Minio, hooks: Hooks, tmp_path: Path
) -> None:
    _older_ending_last(registry, Ends(minio, None, tmp_path, hooks), hooks, tmp_path)


def test_the_same_into_gcs(minio: Minio, fake_gcs: FakeGcs, hooks: Hooks, tmp_path: Path) -> None:
    registry = SqliteModelRegistry(tmp_path / "registry.db")
    try:
        _older_ending_last(registry, Ends(minio, fake_gcs, tmp_path, hooks), hooks, tmp_path)
    finally:
        registry.close()


def test_an_older_copy_failing_after_the_newer_took_effect_leaves_it_live(
    registry: Any, minio: Minio, hooks: Hooks, tmp_path: Path
) -> None:
    ends = Ends(minio, None, tmp_path, hooks)
    runs = Transfers(env={**ENV, "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state")}, ends=ends)
    sent, name = _requests(hooks)
    hooks.fail.add("a")
    reached, release = hooks.hold("a", "copy")
    older = in_background(lambda: handle(sent("a", 1), registry, runs))
    assert reached.wait(30)
    (newer,) = handle(sent("b", 5), registry, runs)
    release.set()
    with pytest.raises(Exception):  # noqa: B017 - the source's files went away: its error
        older()
    artifact = _live(registry, name)
    assert isinstance(newer.data, ModelRegistered) and artifact.digest == newer.data.digest
    assert register.FAILURE_REASON not in artifact.custom_properties
