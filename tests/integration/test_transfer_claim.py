"""One S3 or GCS destination takes one source (adapters.transfer.stores.claim), on MinIO and
fake-gcs-server: two transfers of different sources into one destination at once left the
union of both sources' files there, each run's artifact LIVE; now one copies, the other is
refused (Conflict naming the destination) with nothing registered or copied. A run of the
same source, after a crash, takes the claim again and finishes; another source is told
how to clear it. And tenancy registry-side (adapters.transfer.register.check), on SQLite
and Kubeflow's Model Registry: a request may not update another tenant's artifact, add a
version to another tenant's model or create one named as another tenant's (403 naming the
field), and nothing is claimed, copied or changed when refused."""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry
from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.adapters.object_store.gcs import GcsObjectStore
from modelhooks.adapters.object_store.s3 import S3ObjectStore
from modelhooks.adapters.transfer.request import Transfers
from modelhooks.adapters.transfer.stores import CLAIM, GcsEnd, S3End
from modelhooks.bootstrap import model_registry
from modelhooks.core.errors import BadRequest, Conflict, Forbidden, NotFound, Unavailable
from modelhooks.core.records import ArtifactState, owner_of
from modelhooks.core.settings import load_settings
from modelhooks.core.stores import Stores
from modelhooks.core.tenancy import Tenancy
from modelhooks.events.model import CanonicalEvent, ModelRegistered
from modelhooks.handlers import transfer
from tests.servers.kube import KubeApiServer
from tests.servers.objectstores import FakeGcs, Minio
from tests.unit.test_transfer_function import ENV, request

pytestmark = pytest.mark.integration

CRDS = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "crds"

FILES = {
    "a": {"w.bin": b"\x01" * 5000, "tokenizer.json": b'{"a": 1}', "a-only.bin": b"a" * 100},
    "b": {"w.bin": b"\x02" * 5000, "tokenizer.json": b'{"b": 2}', "b-only.bin": b"b" * 100},
    "c": {"w.bin": b"\x03" * 5000, "c-only.bin": b"c" * 100},
}


class Stores_:
    """MinIO's staging bucket (sources a/ and b/) and an output bucket on MinIO or
    fake-gcs-server; the ends each request's configuration names, built on them."""

    def __init__(self, minio: Minio, gcs: FakeGcs | None, tmp_path: Path) -> None:
        self.s3 = S3ObjectStore(
            endpoint_url=minio.endpoint_url,
            region=minio.region,
            credentials={
                "aws_access_key_id": minio.access_key,
                "aws_secret_access_key": minio.secret_key,
            },
        )
        self.gcs = GcsObjectStore(gcs.storage_client()) if gcs is not None else None
        self.staging = f"claim-src-{secrets.token_hex(4)}"
        self.out = f"claim-out-{secrets.token_hex(4)}"
        with minio.s3_client() as client:
            client.create_bucket(Bucket=self.staging)
            if gcs is None:
                client.create_bucket(Bucket=self.out)
            for source, files in FILES.items():
                for name, content in files.items():
                    client.put_object(Bucket=self.staging, Key=f"{source}/{name}", Body=content)
        if gcs is not None:
            gcs.storage_client().create_bucket(self.out)
        self.tmp_path, self.crash = tmp_path, False

    @property
    def out_store(self) -> Any:
        return self.gcs if self.gcs is not None else self.s3

    def ends(self, cfg: Any) -> tuple[Any, Any]:
        source: Any = S3End(self.s3, cfg.get("source_aws_bucket"), cfg.get("source_aws_key"))
        if self.crash:
            source = _Crashing(source)
        state = self.tmp_path / "state" / f"{secrets.token_hex(4)}.json"
        if cfg.destination.kind == "gcs":
            bucket, key = cfg.get("destination_gcs_bucket"), cfg.get("destination_gcs_key")
            return source, GcsEnd(self.gcs, bucket, key, state)
        bucket, key = cfg.get("destination_aws_bucket"), cfg.get("destination_aws_key")
        return source, S3End(self.s3, bucket, key, state)

    def destination(self, key: str) -> dict[str, str]:
        kind = "gcs" if self.gcs is not None else "s3"
        return {"type": kind, "bucket": self.out, "key": key}

    def files(self, prefix: str) -> dict[str, bytes]:
        """What is under `prefix`/ in the output bucket."""
        store = self.out_store
        return {
            info.key.removeprefix(f"{prefix}/"): store.read_range(self.out, info.key, 0, 1 << 20)
            for info in store.list(self.out, f"{prefix}/")
        }


class _Crashing:
    """A source whose run dies after the first file is written (a Pod killed, OOM): no
    failure is recorded, the artifact stays PENDING and the destination's claim stays."""

    def __init__(self, source: S3End) -> None:
        self.source, self.uri = source, source.uri

    def files(self) -> Iterator[Any]:
        listed = self.source.files()
        yield next(listed)
        raise RuntimeError("the Pod was killed")


def _handle(event: CanonicalEvent, registry: Any, runs: Transfers, tenancy: Tenancy) -> Any:
    stores = Stores({}, local_root=Path("/nonexistent"))
    (reply,) = transfer.handle(
        event, registry=registry, stores=stores, tenancy=tenancy, transfers=runs
    )
    assert isinstance(reply.data, ModelRegistered)
    return reply.data


def _from(source: str, where: Stores_, key: str = "model", **changes: Any) -> CanonicalEvent:
    """A create_model request copying staging/<source>/ into `key`/ (its own model)."""
    fields = {
        "source": {"type": "s3", "bucket": where.staging, "key": f"{source}/"},
        "destination": where.destination(f"{key}/"),
        "model": {"name": f"claim-{source}-{where.out}"},
        "namespace": None,
    }
    data = request(**{**fields, **changes})
    return CanonicalEvent.new(data, source="/test", id=f"t-{source}")


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[SqliteModelRegistry]:
    found = SqliteModelRegistry(tmp_path / "registry.db")
    yield found
    found.close()


def _runs(where: Stores_) -> Transfers:
    env = {
        **ENV,
        "MODEL_SYNC_DESTINATION_AWS_ACCESS_KEY_ID": "destination-key",
        "MODEL_SYNC_DESTINATION_AWS_SECRET_ACCESS_KEY": "destination-secret",
        "MODEL_SYNC_STORAGE_PATH": str(where.tmp_path / "state"),
    }
    return Transfers(env=env, ends=where.ends)


def _live(registry: Any, name: str) -> Any:
    model = registry.get_model(name)
    if model is None:
        return None
    version = registry.get_version(model.id, "1")
    found = registry.list_artifacts(version.id) if version else []
    return next((a for a in found if a.state == ArtifactState.LIVE), None)


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_two_sources_copied_into_one_destination_at_once_never_mix(
    kind: str, minio: Minio, registry: SqliteModelRegistry, tmp_path: Path, request: Any
) -> None:
    """Run a and b (two models, one destination) at once, three times over: one copies
    and is LIVE, the other is refused naming the destination; the destination holds
    exactly the winner's files. Before: the union of both (a-only.bin and b-only.bin
    side by side), and both artifacts LIVE at that one URI."""
    gcs = request.getfixturevalue("fake_gcs") if kind == "gcs" else None
    for _ in range(3):
        where = Stores_(minio, gcs, tmp_path)
        runs = _runs(where)

        def run(source: str, where: Stores_ = where, runs: Transfers = runs) -> Any:
            try:
                return _handle(_from(source, where), registry, runs, Tenancy())
            except Conflict as exc:
                return exc

        with ThreadPoolExecutor(2) as pool:
            outcomes = dict(zip("ab", pool.map(run, "ab"), strict=True))
        refused = [s for s, o in outcomes.items() if isinstance(o, Conflict)]
        assert len(refused) == 1, (outcomes, where.files("model"))
        (loser,) = refused
        (winner,) = set("ab") - {loser}
        message = outcomes[loser].message
        assert f"{kind if kind == 's3' else 'gs'}://{where.out}/model" in message
        assert f"model{CLAIM}" in message and f"/{winner}" in message
        assert where.files("model") == FILES[winner]
        assert outcomes[winner].digest
        assert _live(registry, f"claim-{winner}-{where.out}") is not None
        assert registry.get_model(f"claim-{loser}-{where.out}") is None  # nothing registered


@pytest.mark.parametrize("seed", range(4))
def test_sources_delivered_shuffled_and_duplicated_at_once_leave_one_source_s_copy(
    seed: int, minio: Minio, registry: SqliteModelRegistry, tmp_path: Path
) -> None:
    """Two or three sources' requests (a model each, one destination), each delivered one
    to three times, shuffled, four at a time: every delivery of one source succeeds (a
    duplicate finds its claim), every delivery of the others is refused; the destination
    holds that source's files alone, its artifact LIVE with their digest."""
    rng = random.Random(seed)
    where = Stores_(minio, None, tmp_path)
    runs = _runs(where)
    sources = rng.sample(sorted(FILES), rng.randint(2, 3))
    deliveries = [s for s in sources for _ in range(rng.randint(1, 3))]
    rng.shuffle(deliveries)
    events = {source: _from(source, where) for source in sources}  # a duplicate is the same

    def run(source: str) -> Any:
        try:
            return _handle(events[source], registry, runs, Tenancy())
        except Conflict as exc:
            return exc

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(run, deliveries))
    winners = {s for s, o in zip(deliveries, outcomes, strict=True) if not isinstance(o, Conflict)}
    assert len(winners) == 1, list(zip(deliveries, outcomes, strict=True))
    (winner,) = winners
    done = [o for s, o in zip(deliveries, outcomes, strict=True) if s == winner]
    assert all(isinstance(o, ModelRegistered) for o in done), done
    assert where.files("model") == FILES[winner]
    live = _live(registry, f"claim-{winner}-{where.out}")
    assert live is not None and {o.digest for o in done} == {live.digest}
    for loser in set(sources) - winners:
        assert registry.get_model(f"claim-{loser}-{where.out}") is None


def test_a_crashed_run_s_source_finishes_it_and_another_source_is_told_how_to_clear(
    minio: Minio, registry: SqliteModelRegistry, tmp_path: Path
) -> None:
    where = Stores_(minio, None, tmp_path)
    runs = _runs(where)
    where.crash = True
    with pytest.raises(RuntimeError, match="killed"):
        _handle(_from("a", where), registry, runs, Tenancy())
    where.crash = False
    assert len(where.files("model")) == 1  # one file written, then the crash
    # another source: refused, told which claim to delete; nothing of it copied
    with pytest.raises(Conflict) as caught:
        _handle(_from("b", where), registry, runs, Tenancy())
    claim = f"s3://{where.out}/model{CLAIM}"
    assert f"delete {claim}" in caught.value.message
    assert caught.value.details["claim"] == claim
    assert len(where.files("model")) == 1
    # the same source again (the redelivery, the Job's retry): it finishes, LIVE
    done = _handle(_from("a", where), registry, runs, Tenancy())
    assert where.files("model") == FILES["a"]
    live = _live(registry, f"claim-a-{where.out}")
    assert live is not None and live.digest == done.digest
    assert live.uri == f"s3://{where.out}/model"
    # cleared as the refusal says: the other source takes the destination
    for info in list(where.s3.list(where.out, "model")):
        where.s3.delete(where.out, info.key)
    done = _handle(_from("b", where), registry, runs, Tenancy())
    assert where.files("model") == FILES["b"]


class _Failing:
    """A source whose listing fails with `error`, after `first` files when given."""

    def __init__(self, source: S3End, error: Exception, first: int = 0) -> None:
        self.source, self.uri, self.error, self.first = source, source.uri, error, first

    def files(self) -> Iterator[Any]:
        listed = self.source.files()
        for _ in range(self.first):
            yield next(listed)
        raise self.error


def test_a_source_that_shows_no_file_leaves_the_destination_to_the_source_meant(
    minio: Minio, registry: SqliteModelRegistry, tmp_path: Path
) -> None:
    """A Job or a request naming a source misspelled (a prefix holding nothing, or only a
    signature, a bucket that is not there) fails, and the source meant then copies into the same destination: the
    failed run released the claim it made, nothing of its source having been copied.
    Before: the claim stayed, naming the misspelled source, and the source meant was
    refused (Conflict, exit 4) until a person deleted it. A transient failure, or a
    permanent one after the first file, keeps the claim (the same source resumes)."""
    where = Stores_(minio, None, tmp_path)
    runs = _runs(where)
    claim = (where.out, f"model{CLAIM}")
    misspelled = {"type": "s3", "bucket": where.staging, "key": "a-typo/"}

    def mistyped(source: dict[str, str]) -> CanonicalEvent:
        fields = {"destination": where.destination("model/"), "namespace": None}
        data = request(source=source, model={"name": f"claim-a-{where.out}"}, **fields)
        return CanonicalEvent.new(data, source="/test", id=f"t-{secrets.token_hex(3)}")

    with pytest.raises(NotFound, match="a-typo: no such object or prefix"):
        _handle(mistyped(misspelled), registry, runs, Tenancy())
    assert where.s3.stat(*claim) is None
    where.s3.put(where.staging, "sig-only/model.sig", b"{}")  # nothing of it is copied
    with pytest.raises(BadRequest, match="no files to transfer"):
        _handle(
            mistyped({"type": "s3", "bucket": where.staging, "key": "sig-only/"}),
            registry,
            runs,
            Tenancy(),
        )
    assert where.s3.stat(*claim) is None
    no_bucket = {"type": "s3", "bucket": f"{where.staging}-typo", "key": "a/"}
    with pytest.raises(NotFound):
        _handle(mistyped(no_bucket), registry, runs, Tenancy())
    assert where.s3.stat(*claim) is None
    meant = CanonicalEvent.new(_from("a", where).data, source="/test", id="t-a-fixed")
    done = _handle(meant, registry, runs, Tenancy())
    assert where.files("model") == FILES["a"] and done.digest
    live = _live(registry, f"claim-a-{where.out}")
    assert live is not None and live.digest == done.digest

    # what keeps the claim: a transient failure before the first file, a permanent one after
    for error, first in (
        (Unavailable("the source's store did not answer"), 0),
        (BadRequest("cut"), 1),
    ):
        fresh = Stores_(minio, None, tmp_path)
        fresh_runs = _runs(fresh)

        def failing(
            cfg: Any, fresh: Stores_ = fresh, error: Exception = error, first: int = first
        ) -> Any:
            source, destination = fresh.ends(cfg)
            return _Failing(source, error, first), destination

        failing_runs = Transfers(env=fresh_runs.env, ends=failing)
        with pytest.raises(type(error)):
            _handle(_from("a", fresh), registry, failing_runs, Tenancy())
        assert fresh.s3.stat(fresh.out, f"model{CLAIM}") is not None, error
        with pytest.raises(Conflict):
            _handle(_from("b", fresh), registry, fresh_runs, Tenancy())
        assert len(fresh.files("model")) == first


TEAM = secrets.token_hex(3)  # the tenants' namespaces (the Kubernetes backend's, too)
TEAM_A, TEAM_B = f"team-a-{TEAM}", f"team-b-{TEAM}"


@pytest.fixture(params=["sqlite", "kubeflow", "kubernetes"])
def any_registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "kubeflow":
        found: Any = KubeflowModelRegistry(
            request.getfixturevalue("model_registry").url, timeout=10
        )
    elif request.param == "kubernetes":  # a tenant's records in its namespace
        from kubernetes import client

        kube: KubeApiServer = request.getfixturevalue("kube_apiserver")
        kube.install_crd(CRDS / "registeredmodel.yaml", "registeredmodels")
        kube.install_crd(CRDS / "modelversion.yaml", "modelversions")
        with kube.api_client() as api:
            for namespace in (TEAM_A, TEAM_B):
                try:
                    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
                except client.ApiException as exc:
                    if exc.status != 409:
                        raise
        env = {
            "MODELHOOKS_REGISTRY_BACKEND": "kubernetes",
            "MODELHOOKS_REGISTRY_KUBECONFIG": str(kube.write_kubeconfig(tmp_path / "kubeconfig")),
            "MODELHOOKS_REGISTRY_NAMESPACE": "default",
        }
        found = model_registry(load_settings(env=env))
    else:
        found = SqliteModelRegistry(tmp_path / "registry.db")
    yield found
    found.close()


def test_a_tenant_may_not_transfer_into_another_tenant_s_model(
    minio: Minio, any_registry: Any, tmp_path: Path
) -> None:
    """team-a registers a model by transfer; team-b, in its own buckets, names team-a's
    artifact (with its version and model, or alone), team-a's model by id, or its name:
    each 403 naming the field, nothing claimed or copied into team-b's destination, team-a's
    artifact as it was. Before: the update copied team-b's source and made team-a's
    artifact LIVE at team-b's destination; the version went into team-a's model."""
    where = Stores_(minio, None, tmp_path)
    runs = _runs(where)
    tenants = Tenancy.parse(f"{TEAM_A}={where.staging},{where.out};{TEAM_B}=s3://{where.out}-b")
    with minio.s3_client() as client:
        client.create_bucket(Bucket=f"{where.out}-b")
        client.put_object(Bucket=f"{where.out}-b", Key="src/w.bin", Body=b"\x03" * 5000)
    name = f"tenant-{secrets.token_hex(4)}"
    mine = _handle(
        _from("a", where, model={"name": name}, namespace=TEAM_A), any_registry, runs, tenants
    )
    before = any_registry.get_artifact(mine.model_artifact_id)
    assert owner_of(any_registry.get_model(name)) == TEAM_A  # recorded, as register does

    def theirs(**changes: Any) -> CanonicalEvent:
        data = request(
            source={"type": "s3", "bucket": f"{where.out}-b", "key": "src/"},
            destination={"type": "s3", "bucket": f"{where.out}-b", "key": "out/"},
            namespace=TEAM_B,
            **changes,
        )
        return CanonicalEvent.new(data, source="/test", id=f"t-b-{secrets.token_hex(2)}")

    attempts = {
        "artifact.id": [
            theirs(
                intent="update_artifact",
                model={"id": mine.registered_model_id},
                version={"id": mine.model_version_id},
                artifact={"id": mine.model_artifact_id},
            ),
            theirs(intent="update_artifact", artifact={"id": mine.model_artifact_id}),
        ],
        "model.id": [
            theirs(
                intent="create_version",
                model={"id": mine.registered_model_id},
                version={"name": "2"},
            ),
        ],
        "model.name": [theirs(intent="create_model", model={"name": name}, version={"name": "3"})],
    }
    for field, events in attempts.items():
        for event in events:
            with pytest.raises(Forbidden) as caught:
                _handle(event, any_registry, runs, tenants)
            assert caught.value.details["field"] == field, caught.value.message
            assert TEAM_B in caught.value.message
    assert list(where.s3.list(f"{where.out}-b", "out")) == []  # not claimed, not copied
    after = any_registry.get_artifact(mine.model_artifact_id)
    assert (after.uri, after.digest, after.state) == (before.uri, before.digest, before.state)
    model = any_registry.get_model(name)
    assert [v.name for v in any_registry.list_versions(model.id)] == ["1"]
    # team-a's own version of its own model goes in
    own = request(
        source={"type": "s3", "bucket": where.staging, "key": "b/"},
        destination=where.destination("model-2/"),
        intent="create_version",
        model={"id": mine.registered_model_id},
        version={"name": "2"},
        namespace=TEAM_A,
    )
    done = _handle(CanonicalEvent.new(own, source="/test", id="t-a-2"), any_registry, runs, tenants)
    assert done.registered_model_id == mine.registered_model_id
