"""The `cleanup` function on the real servers: MinIO and fake-gcs-server (objects, old
revisions of a versioned bucket), the harness registries (manifests, referrers, tags) and
`modelhooks cleanup` on MinIO. Each policy deletes exactly what it says and nothing a live
version uses or a neighbouring prefix holds; a second delivery deletes nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.bootstrap import build
from modelhooks.core.errors import NotFound
from modelhooks.core.settings import load_settings
from modelhooks.events.model import (
    ArtifactPurged,
    ArtifactPushed,
    CanonicalEvent,
    ModelDeleted,
)
from modelhooks.handlers.register import register_model
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.integration.test_oci_registry import sign
from tests.integration.test_prune_cli import push

pytestmark = pytest.mark.integration

T0 = datetime.now(UTC) - timedelta(days=2)  # the pushes; deletions come a day later
FILES = ("weights.bin", "config.json", "_SUCCESS", "model.sig")


class Bucket:
    """A fresh bucket on MinIO or fake-gcs-server, written and listed with the server's own
    client (not the adapter under test)."""

    def __init__(self, kind: str, server: Any) -> None:
        self.kind, self.name = kind, f"cleanup-{uuid.uuid4().hex[:12]}"
        self.scheme = "s3" if kind == "s3" else "gs"
        if kind == "s3":
            self._s3 = server.s3_client()
            self.client = self._s3.__enter__()
            self.client.create_bucket(Bucket=self.name)
        else:
            self.client = server.storage_client()
            self.client.create_bucket(self.name)

    def put(self, key: str, data: bytes) -> None:
        if self.kind == "s3":
            self.client.put_object(Bucket=self.name, Key=key, Body=data)
        else:
            self.client.bucket(self.name).blob(key).upload_from_string(data)

    def keys(self, prefix: str = "") -> list[str]:
        if self.kind == "s3":
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.name, Prefix=prefix
            )
            return sorted(o["Key"] for page in pages for o in page.get("Contents", []))
        return sorted(b.name for b in self.client.list_blobs(self.name, prefix=prefix or None))

    def close(self) -> None:
        if self.kind == "s3":
            self._s3.__exit__(None, None, None)


class World:
    """`cleanup` built by the composition root with the store (or registries) of the
    harness, and the in-memory model registry."""

    def __init__(self, home: Path, registry: Any = None, **env: str) -> None:
        self.registry = registry or InMemoryModelRegistry()
        settings = load_settings(
            env={
                "MODELHOOKS_HOME": str(home),
                "MODELHOOKS_STORE_BACKEND": "cloud",
                "MODELHOOKS_STORE_ALLOW_LOCAL_TARGETS": "true",  # the harness's loopback hosts
                **env,
            }
        )
        self.cleanup = build(settings, registry=self.registry).function("cleanup")

    def register(self, name: str, version: str, uri: str, digest: str, store: Any) -> None:
        data = ArtifactPushed(model=name, version=version, uri=uri, digest=digest, store=store)
        event = CanonicalEvent(
            id=f"p-{name}-{version}", source="t", type=data.TYPE, data=data, time=T0
        )
        register_model(event, data, registry=self.registry)

    def delete(self, name: str, **spec: Any) -> list[ArtifactPurged]:
        data = ModelDeleted(name=name, namespace="ml", spec=spec)
        at = T0 + timedelta(days=1)
        event = CanonicalEvent(id=f"d-{name}", source="t", type=data.TYPE, data=data, time=at)
        replies = [r.data for r in self.cleanup.handle(event)]
        assert all(isinstance(r, ArtifactPurged) for r in replies), replies
        return replies  # type: ignore[return-value]


# --- object stores ----------------------------------------------------------------------


def s3_env(monkeypatch: pytest.MonkeyPatch, minio: Any) -> None:
    """MinIO's credentials where boto3 looks (the adapter builds its own client)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", minio.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", minio.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", minio.region)


@pytest.fixture(params=["s3", "gcs"])
def bucket(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bucket]:
    if request.param == "s3":
        minio: Any = request.getfixturevalue("minio")
        s3_env(monkeypatch, minio)
        found = Bucket("s3", minio)
    else:
        fake_gcs: Any = request.getfixturevalue("fake_gcs")
        for name, value in fake_gcs.env.items():
            monkeypatch.setenv(name, value)
        found = Bucket("gcs", fake_gcs)
    yield found
    found.close()


def store_world(tmp_path: Path, bucket: Bucket, registry: Any = None, **env: str) -> World:
    endpoint = bucket.client.meta.endpoint_url if bucket.kind == "s3" else ""
    return World(tmp_path, registry, MODELHOOKS_STORE_S3_ENDPOINT_URL=endpoint, **env)


def version(world: World, bucket: Bucket, name: str, number: str, key: str) -> str:
    """A version's files under `key`/, registered as pushed at T0; its URI."""
    for file in FILES:
        bucket.put(f"{key}/{file}", f"{key}/{file}".encode())
    uri = f"{bucket.scheme}://{bucket.name}/{key}/"
    digest = f"{'s3-etag' if bucket.kind == 's3' else 'gcs-generation'}:{uuid.uuid4().hex}"
    world.register(name, number, uri, digest, bucket.kind)
    return uri


def under(key: str) -> list[str]:
    return sorted(f"{key}/{f}" for f in FILES)


def test_delete_takes_exactly_the_versions_objects(tmp_path: Path, bucket: Bucket) -> None:
    world = store_world(tmp_path, bucket)
    one = version(world, bucket, "bert", "1", "m/1")
    two = version(world, bucket, "bert", "2", "m/2")
    three = version(world, bucket, "bert", "3", "m/3")
    version(world, bucket, "nested", "1", "m/2/sub")  # a live location inside m/2/
    version(world, bucket, "twin", "1", "m/3")  # another live model at m/3/ itself
    for file in FILES:  # a neighbour prefix nobody registered: m/1 is a string prefix of it
        bucket.put(f"m/10/{file}", b"neighbour")
    before = bucket.keys()

    replies = world.delete("bert", deletionPolicy="Delete")
    by_uri = {r.uri: r for r in replies}
    assert sorted(by_uri) == sorted([one, two, three])
    assert all(r.policy == "Delete" and not r.failed for r in replies)
    assert sorted(by_uri[one].deleted) == under("m/1")
    assert sorted(by_uri[two].deleted) == under("m/2")
    assert sorted(by_uri[two].kept) == under("m/2/sub")  # inside the live nested location
    assert by_uri[three].deleted == [] and by_uri[three].kept == ["m/3/"]
    gone = set(under("m/1")) | set(under("m/2"))
    assert bucket.keys() == sorted(set(before) - gone)
    assert bucket.keys("m/10/") == under("m/10") and bucket.keys("m/3/") == under("m/3")

    again = world.delete("bert", deletionPolicy="Delete")  # a redelivery
    assert sorted(r.uri for r in again) == sorted([one, two, three])
    assert [r.deleted for r in again] == [[], [], []]
    assert bucket.keys() == sorted(set(before) - gone)


def test_untag_takes_only_the_ready_marker(tmp_path: Path, bucket: Bucket) -> None:
    world = store_world(tmp_path, bucket)
    uri = version(world, bucket, "bert", "1", "m/1")
    for file in FILES:
        bucket.put(f"m/10/{file}", b"neighbour")
    (reply,) = world.delete("bert", deletionPolicy="Untag")
    assert (reply.uri, reply.policy, reply.deleted) == (uri, "Untag", ["m/1/_SUCCESS"])
    assert bucket.keys("m/1/") == sorted(set(under("m/1")) - {"m/1/_SUCCESS"})
    assert bucket.keys("m/10/") == under("m/10")
    (again,) = world.delete("bert", deletionPolicy="Untag")
    assert again.deleted == [] and len(bucket.keys("m/1/")) == len(FILES) - 1


def test_old_versions_go_too_in_a_versioned_minio_bucket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, minio: Any
) -> None:
    s3_env(monkeypatch, minio)
    bucket = Bucket("s3", minio)
    try:
        s3 = bucket.client
        s3.put_bucket_versioning(Bucket=bucket.name, VersioningConfiguration={"Status": "Enabled"})
        policies = tmp_path / "cleanup.yaml"
        policies.write_text(
            "policies:\n  - {models: 'bert*', deletionPolicy: Delete, old_versions: true}\n"
        )
        world = store_world(tmp_path, bucket, MODELHOOKS_CLEANUP_POLICY_FILE=str(policies))
        bucket.put("m/1/weights.bin", b"first weights")  # an old revision, then the current
        version(world, bucket, "bert", "1", "m/1")
        bucket.put("m/10/weights.bin", b"neighbour, old")
        bucket.put("m/10/weights.bin", b"neighbour")

        def revisions(prefix: str) -> list[tuple[str, bool]]:
            listed = s3.list_object_versions(Bucket=bucket.name, Prefix=prefix)
            return sorted((v["Key"], v["IsLatest"]) for v in listed.get("Versions", []))

        assert ("m/1/weights.bin", False) in revisions("m/1/")
        (reply,) = world.delete("bert")  # no deletionPolicy: the policy file's, old_versions
        assert reply.policy == "Delete" and not reply.failed
        assert sorted(reply.deleted) == sorted([*under("m/1"), "m/1/weights.bin"])
        assert revisions("m/1/") == []  # no revision left: neither old nor just deleted
        assert bucket.keys("m/1/") == []
        assert revisions("m/10/") == [("m/10/weights.bin", False), ("m/10/weights.bin", True)]
        (again,) = world.delete("bert")
        assert again.deleted == []
    finally:
        bucket.close()


def test_the_cli_plans_then_deletes_exactly_the_plan_on_minio(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    minio: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
    from modelhooks.bootstrap import reset
    from modelhooks.cli import main

    s3_env(monkeypatch, minio)
    bucket = Bucket("s3", minio)
    registry = SqliteModelRegistry(tmp_path / "registry.db")  # the CLI's, in --home
    try:
        world = store_world(tmp_path, bucket, registry)
        version(world, bucket, "bert", "1", "m/1")
        version(world, bucket, "bert", "2", "m/2")
        for file in FILES:
            bucket.put(f"m/10/{file}", b"neighbour")
        before = bucket.keys()
        reset()
        flags = ["--home", str(tmp_path), "--store-backend", "cloud"]
        flags += ["--store-s3-endpoint-url", minio.endpoint_url]
        capsys.readouterr()
        assert main(["cleanup", "bert/1", "--policy", "Delete", "--dry-run", "--json", *flags]) == 0
        planned = json.loads(capsys.readouterr().out)
        assert planned["dry_run"] and planned["policy"] == "Delete"
        assert sorted(r["name"] for r in planned["plan"] if r["action"] == "delete") == under("m/1")
        assert bucket.keys() == before  # a dry run deletes nothing
        assert main(["cleanup", "bert/1", "--policy", "Delete", "--json", *flags]) == 0
        done = json.loads(capsys.readouterr().out)
        assert done["plan"] == planned["plan"] and done["failed"] == {}
        assert bucket.keys() == sorted(set(before) - set(under("m/1")))
    finally:
        reset()
        registry.close()
        bucket.close()


# --- OCI registries ---------------------------------------------------------------------

GIT_SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(params=["distribution3", "docker_registry", "ociregistry"])
def oci(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def oci_world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_delete_takes_the_manifest_its_referrers_and_tags(tmp_path: Path, oci: Any) -> None:
    client, repo = DistributionRegistry(oci.url), f"cleanup/{uuid.uuid4().hex[:8]}"
    digest = push(client, repo, "v1", created=T0, content="weights v1")
    push(client, repo, "latest", created=T0, content="weights v1")  # the same manifest
    other = push(client, repo, "v2", created=T0, content="weights v2")
    signature = sign(client, repo, digest)
    fallback = digest.replace(":", "-")
    uses_fallback = not client.has_referrers_api(repo, digest)
    assert (fallback in set(client.tags(repo))) == uses_fallback
    world = oci_world(tmp_path)

    source = {"oci": {"reference": f"{oci.host}/{repo}:v1"}}
    (reply,) = world.delete("bert", deletionPolicy="Delete", source=source)
    assert reply.uri == f"oci://{oci.host}/{repo}:v1" and not reply.failed
    assert {signature, "v1", "latest", digest} <= set(reply.deleted)
    assert (fallback in reply.deleted) == uses_fallback
    for gone in (digest, signature):
        with pytest.raises(NotFound):
            client.manifest(repo, gone)
    assert sorted(client.tags(repo)) == ["v2"]  # the fallback referrers index went too
    assert client.manifest(repo, "v2")[1] == other

    (again,) = world.delete("bert", deletionPolicy="Delete", source=source)
    assert again.deleted == [] and sorted(client.tags(repo)) == ["v2"]


def test_a_digest_a_live_version_uses_stays(tmp_path: Path, oci: Any) -> None:
    client, repo = DistributionRegistry(oci.url), f"cleanup/{uuid.uuid4().hex[:8]}"
    digest = push(client, repo, "v1", created=T0)
    signature = sign(client, repo, digest)
    tags = sorted(client.tags(repo))
    world = oci_world(tmp_path)
    world.register("other", "1", f"oci://{oci.host}/{repo}@{digest}", digest, "oci")

    source = {"oci": {"reference": f"{oci.host}/{repo}:v1"}}
    (reply,) = world.delete("bert", deletionPolicy="Delete", source=source)
    assert reply.deleted == [] and reply.kept == [digest]
    assert client.manifest(repo, digest)[1] == digest
    assert [r["digest"] for r in client.referrers(repo, digest)] == [signature]
    assert sorted(client.tags(repo)) == tags


def test_untag_keeps_the_manifest_and_the_git_sha_tag(tmp_path: Path, oci: Any) -> None:
    client, repo = DistributionRegistry(oci.url), f"cleanup/{uuid.uuid4().hex[:8]}"
    digest = push(client, repo, "v1", created=T0, content="weights")
    for tag in ("latest", GIT_SHA):
        push(client, repo, tag, created=T0, content="weights")
    other = push(client, repo, "v2", created=T0, content="other weights")
    signature = sign(client, repo, digest)
    world = oci_world(tmp_path)

    source = {"oci": {"reference": f"{oci.host}/{repo}:v1"}}
    (reply,) = world.delete("bert", deletionPolicy="Untag", source=source)
    assert reply.policy == "Untag" and sorted(reply.deleted) == ["latest", "v1"]
    assert reply.kept == [GIT_SHA]
    assert client.resolve(repo, "v1") is None and client.resolve(repo, "latest") is None
    assert client.resolve(repo, GIT_SHA) == digest and client.resolve(repo, "v2") == other
    assert client.manifest(repo, digest)[1] == digest
    assert [r["digest"] for r in client.referrers(repo, digest)] == [signature]

    (again,) = world.delete("bert", deletionPolicy="Untag", source=source)
    assert again.deleted == [] and client.resolve(repo, GIT_SHA) == digest
