"""The `transfer` function through the HTTP contract (`modelhooks serve`'s routes in-process),
on the real servers: a `transfer.requested` copies a model from MinIO to distribution v3
(an OCI artifact) or to fake-gcs-server, registered in the SQLite default and in the real
Kubeflow Model Registry. Its credentials are the process's MODEL_SYNC_* settings, never the
event's. A redelivery changes nothing; a source outside the tenant is 403; bad data is 400
naming the field; a credential the process lacks is 503."""

from __future__ import annotations

import copy
import json
import os
import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import model_signing
import pytest
from flask.testing import FlaskClient

from modelhooks import bootstrap
from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry
from modelhooks.adapters.object_store.gcs import GcsObjectStore
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.adapters.transfer.stores import GcsEnd
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.records import ArtifactState
from modelhooks.core.settings import load_settings
from modelhooks.delivery.http import create_app
from modelhooks.events import requests as examples
from tests.integration.transfer_helpers import image_files
from tests.servers.model_registry import ModelRegistry as ModelRegistryServer
from tests.servers.objectstores import FakeGcs, Minio
from tests.servers.registries import OciRegistry
from tests.unit.signing_material import make_key

pytestmark = pytest.mark.integration

FILES = {"config.json": b'{"layers": 2}', "weights/w.bin": os.urandom(200_000)}


@pytest.fixture
def bucket(minio: Minio) -> str:
    """A bucket of its own holding one model under models/sentiment/1/."""
    name = f"transfer-fn-{secrets.token_hex(4)}"
    with minio.s3_client() as s3:
        s3.create_bucket(Bucket=name)
        for key, data in FILES.items():
            s3.put_object(Bucket=name, Key=f"models/sentiment/1/{key}", Body=data)
    return name


@pytest.fixture
def app(
    tmp_path: Path, minio: Minio, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., tuple[FlaskClient, ModelRegistry]]]:
    """`modelhooks serve`'s routes with the settings given (tenant `ml` owns the bucket and
    the OCI repositories transfer-fn/*), the MinIO credentials in the process's env only."""
    for name, value in {
        "MODEL_SYNC_SOURCE_AWS_ACCESS_KEY_ID": minio.access_key,
        "MODEL_SYNC_SOURCE_AWS_SECRET_ACCESS_KEY": minio.secret_key,
        "MODEL_SYNC_SOURCE_AWS_ENDPOINT": minio.endpoint_url,
        "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state"),
    }.items():
        monkeypatch.setenv(name, value)

    def make(**settings: str) -> tuple[FlaskClient, ModelRegistry]:
        env = {
            "MODELHOOKS_HOME": str(tmp_path / "home"),
            "MODELHOOKS_STORE_ALLOW_LOCAL_TARGETS": "true",
            "MODELHOOKS_TENANCY_TENANTS": f"ml=s3://{bucket},oci://127.0.0.1:*/transfer-fn/*,"
            "gs://transfer-fn-*",
            **settings,
        }
        built = bootstrap.build(load_settings(env=env))
        return create_app(built.broker()).test_client(), built.deps.registry

    yield make
    bootstrap.reset()


def requested(bucket: str, region: str, destination: dict[str, Any], **data: Any) -> dict[str, Any]:
    """The recorded transfer.requested, from `bucket` to `destination`, a model of its own."""
    event = copy.deepcopy(examples.load("transfer-requested"))
    event["id"] = f"transfer-{secrets.token_hex(6)}"
    event["data"]["source"] = {
        "type": "s3",
        "bucket": bucket,
        "key": "models/sentiment/1/",
        "region": region,
    }
    event["data"]["destination"] = destination
    event["data"]["model"]["name"] = f"transfer-fn-{secrets.token_hex(4)}"
    event["data"].update(data)
    return event


def post(client: FlaskClient, event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    answer = client.post(
        "/", data=json.dumps(event), headers={"Content-Type": "application/cloudevents+json"}
    )
    doc = answer.get_json()
    outcomes = [o for o in doc.get("outcomes", []) if o["function"] == "transfer"] if doc else []
    return answer.status_code, outcomes[0] if outcomes else doc


@pytest.mark.parametrize("backend", ["sqlite", "kubeflow"])
def test_minio_to_oci_registered_live_and_a_redelivery_changes_nothing(
    app: Callable[..., tuple[FlaskClient, ModelRegistry]],
    bucket: str,
    minio: Minio,
    distribution3: OciRegistry,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    settings = {}
    if backend == "kubeflow":
        server: ModelRegistryServer = request.getfixturevalue("model_registry")
        settings = {
            "MODELHOOKS_REGISTRY_BACKEND": "kubeflow",
            "MODELHOOKS_REGISTRY_URL": server.url,
        }
    client, registry = app(**settings)
    repo = f"transfer-fn/{secrets.token_hex(4)}"
    destination = {"type": "oci", "uri": f"{distribution3.host}/{repo}:1", "format": "artifact"}
    event = requested(bucket, minio.region, destination)
    name = event["data"]["model"]["name"]

    status, outcome = post(client, event)
    assert status == 200 and outcome["status"] == 200, outcome
    assert [r.rsplit("/", 1)[0] for r in outcome["replies"]] == [f"{event['id']}/registered"]
    model = registry.get_model(name)
    assert model is not None and model.description == "sentiment classifier"
    version = registry.get_version(model.id, "1")
    assert version is not None
    (artifact,) = registry.list_artifacts(version.id)
    assert artifact.state == ArtifactState.LIVE and artifact.digest.startswith("sha256:")
    assert artifact.uri.startswith(f"oci://{distribution3.host}/{repo}@sha256:")
    assert image_files(artifact.uri) == FILES
    tagged = DistributionRegistry(distribution3.url).resolve(repo, "1")

    again = {**event, "id": f"{event['id']}-again"}  # the same request, delivered again
    status, outcome = post(client, again)
    assert status == 200 and outcome["status"] == 200, outcome
    (same,) = registry.list_artifacts(version.id)
    assert (same.id, same.uri, same.digest, same.state) == (
        artifact.id,
        artifact.uri,
        artifact.digest,
        ArtifactState.LIVE,
    )
    assert [v.name for v in registry.list_versions(model.id)] == ["1"]
    assert DistributionRegistry(distribution3.url).resolve(repo, "1") == tagged
    if isinstance(registry, KubeflowModelRegistry):  # as upstream's client reads it
        assert registry.get_artifact(artifact.id) is not None


def test_minio_to_gcs_signed_once_and_the_refusals(
    tmp_path: Path,
    app: Callable[..., tuple[FlaskClient, ModelRegistry]],
    bucket: str,
    minio: Minio,
    fake_gcs: FakeGcs,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    keys = make_key(tmp_path)
    monkeypatch.setenv("MODEL_SYNC_SIGNING_KEY", str(keys.private))
    gcs_bucket = f"transfer-fn-{secrets.token_hex(4)}"
    fake_gcs.storage_client().create_bucket(gcs_bucket)
    client, registry = app()
    destination = {"type": "gcs", "bucket": gcs_bucket, "key": "sentiment/1"}
    event = requested(bucket, minio.region, destination, sign=True)

    status, outcome = post(client, event)
    assert status == 200, outcome
    signature = fake_gcs.storage_client().bucket(gcs_bucket).get_blob("sentiment/1/model.sig")
    assert signature is not None
    status, outcome = post(client, {**event, "id": f"{event['id']}-again"})
    assert status == 200, outcome  # delivered again: the same signature stays, not re-signed
    again = fake_gcs.storage_client().bucket(gcs_bucket).get_blob("sentiment/1/model.sig")
    assert again is not None and again.generation == signature.generation
    model = registry.get_model(event["data"]["model"]["name"])
    version = registry.get_version(model.id, "1") if model else None
    assert version is not None
    (artifact,) = registry.list_artifacts(version.id)
    assert artifact.state == ArtifactState.LIVE
    gcs = GcsObjectStore(fake_gcs.storage_client())
    copied = {e.path: e.open(0).read() for e in GcsEnd(gcs, gcs_bucket, "sentiment/1").files()}
    assert set(copied) == {*FILES, "model.sig"}
    assert {k: v for k, v in copied.items() if k != "model.sig"} == FILES
    model = tmp_path / "pulled"
    for path, data in copied.items():
        (model / path).parent.mkdir(parents=True, exist_ok=True)
        (model / path).write_bytes(data)
    verifier = model_signing.verifying.Config().use_elliptic_key_verifier(public_key=keys.public)
    verifier.verify(model, model / "model.sig")

    # a source outside the tenant: 403 naming it, nothing registered
    with minio.s3_client() as s3:
        outside = f"other-{secrets.token_hex(4)}"
        s3.create_bucket(Bucket=outside)
        s3.put_object(Bucket=outside, Key="models/sentiment/1/w.bin", Body=b"w")
    foreign = requested(outside, minio.region, destination)
    status, outcome = post(client, foreign)
    assert status == 403, outcome
    assert outcome["error"]["details"]["location"] == f"s3://{outside}/models/sentiment/1/"
    assert registry.get_model(foreign["data"]["model"]["name"]) is None

    # bad data: 400 naming the field
    bad = requested(bucket, minio.region, {"type": "gcs", "key": "sentiment/2"})
    status, outcome = post(client, bad)
    assert status == 400, outcome
    assert outcome["details"]["field"] == "destination.bucket", outcome

    # a credential the process lacks (the destination's S3 keys): 503, redelivered once set
    s3_destination = {"type": "s3", "bucket": bucket, "key": "copy/1"}
    status, outcome = post(client, requested(bucket, minio.region, s3_destination))
    assert status == 503, outcome
    assert "MODEL_SYNC_DESTINATION_AWS_ACCESS_KEY_ID" in outcome["error"]["message"]


def test_two_concurrent_deliveries_make_one_version_and_one_copy(
    app: Callable[..., tuple[FlaskClient, ModelRegistry]],
    bucket: str,
    minio: Minio,
    distribution3: OciRegistry,
) -> None:
    client, registry = app()
    repo = f"transfer-fn/{secrets.token_hex(4)}"
    destination = {"type": "oci", "uri": f"{distribution3.host}/{repo}:1", "base_image": "scratch"}
    event = requested(bucket, minio.region, destination)
    deliveries = [event, {**event, "id": f"{event['id']}-twin"}]  # the platform, twice at once
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda e: post(client.application.test_client(), e), deliveries))
    # each either did it or found it done; a delivery that met the other mid-way may answer
    # 503 (redelivered), never a 4xx; redelivering then finds it done
    assert all(status in (200, 503) for status, _ in answers), answers
    for (status, _), delivered in zip(answers, deliveries, strict=True):
        if status != 200:
            assert post(client, delivered)[0] == 200
    model = registry.get_model(event["data"]["model"]["name"])
    assert model is not None
    (version,) = registry.list_versions(model.id)
    (artifact,) = registry.list_artifacts(version.id)
    assert artifact.state == ArtifactState.LIVE
    assert image_files(f"oci://{distribution3.host}/{repo}:1") == FILES
    assert DistributionRegistry(distribution3.url).resolve(repo, "1") == artifact.uri.split("@")[1]


def test_a_delivery_redelivered_after_a_restart_with_its_source_gone_answers_as_before(
    app: Callable[..., tuple[FlaskClient, ModelRegistry]],
    bucket: str,
    minio: Minio,
    distribution3: OciRegistry,
    model_registry: ModelRegistryServer,
) -> None:
    """On the real Kubeflow Model Registry (no delivery log: a restarted process remembers
    no delivery): a transfer that took effect, its answer lost, the staging bucket emptied,
    delivered again to a new process answers as the first time and the artifact stays LIVE
    (it was copied again: 404 for good, and the artifact ABANDONED)."""
    settings = {
        "MODELHOOKS_REGISTRY_BACKEND": "kubeflow",
        "MODELHOOKS_REGISTRY_URL": model_registry.url,
    }
    client, registry = app(**settings)
    repo = f"transfer-fn/{secrets.token_hex(4)}"
    destination = {"type": "oci", "uri": f"{distribution3.host}/{repo}:1", "format": "artifact"}
    event = requested(bucket, minio.region, destination)
    status, first = post(client, event)
    assert status == 200 and first["status"] == 200, first
    with minio.s3_client() as s3:
        for key in FILES:
            s3.delete_object(Bucket=bucket, Key=f"models/sentiment/1/{key}")
    bootstrap.reset()  # a restart: nothing of the first delivery remembered in process
    client, registry = app(**settings)
    status, again = post(client, event)
    assert status == 200 and again == first, again
    model = registry.get_model(event["data"]["model"]["name"])
    assert model is not None
    (version,) = registry.list_versions(model.id)
    (artifact,) = registry.list_artifacts(version.id)
    assert artifact.state == ArtifactState.LIVE, artifact.custom_properties
    assert image_files(artifact.uri) == FILES


@pytest.mark.parametrize("side", ["source", "destination"])
def test_a_bucket_naming_a_path_is_refused_and_no_other_bucket_is_touched(
    app: Callable[..., tuple[FlaskClient, ModelRegistry]],
    bucket: str,
    minio: Minio,
    fake_gcs: FakeGcs,
    monkeypatch: pytest.MonkeyPatch,
    side: str,
) -> None:
    """A bucket `transfer-fn-x/../victim` passed tenancy as `gs://transfer-fn-x` (the
    tenant's), while google-cloud-storage put it unquoted in the request path, which was
    resolved to `/b/victim/o`: another tenant's bucket was read from or written to."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    storage = fake_gcs.storage_client()
    victim = f"victim-{secrets.token_hex(4)}"
    storage.create_bucket(victim)
    storage.bucket(victim).blob("sentiment/1/secret.bin").upload_from_string(b"team-b's")
    own = f"transfer-fn-{secrets.token_hex(4)}"
    storage.create_bucket(own)
    client, registry = app()
    hostile = f"{own}/../{victim}"
    destination = {"type": "gcs", "bucket": hostile if side == "destination" else own, "key": "m/1"}
    event = requested(bucket, minio.region, destination)
    if side == "source":
        event["data"]["source"] = {"type": "gcs", "bucket": hostile, "key": "sentiment/1"}

    status, outcome = post(client, event)
    assert status == 400, outcome
    assert outcome["details"]["field"] == f"{side}.bucket", outcome
    assert sorted(b.name for b in storage.list_blobs(victim)) == ["sentiment/1/secret.bin"]
    assert list(storage.list_blobs(own)) == []
    assert registry.get_model(event["data"]["model"]["name"]) is None
