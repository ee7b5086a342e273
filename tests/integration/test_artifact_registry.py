"""The `OciRegistry` port over Google Artifact Registry's API (`ArtifactRegistry`), through the
real client library and its REST transport, against an in-process stand-in of the REST
surface (Google ships no Artifact Registry emulator: tests/servers/artifact_registry.py),
and, for manifests and referrers, against a real registry as the Docker path."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials

from modelhooks.adapters.oci.artifact_registry import ArtifactRegistry
from modelhooks.adapters.oci.distribution import (
    EMPTY,
    OCI_INDEX,
    OCI_MANIFEST,
    DistributionRegistry,
    digest_of,
)
from modelhooks.core.errors import (
    BadRequest,
    ConfigError,
    Forbidden,
    ModelhooksError,
    Throttled,
    Unavailable,
)
from modelhooks.core.ports import OciRegistry
from modelhooks.core.records import Manifest, Tag
from tests.servers.artifact_registry import ArtifactRegistryStandIn

pytestmark = pytest.mark.integration

HOST = "us-central1-docker.pkg.dev"
IMAGE = "my-project/models/bert/base"  # a nested image: its package id is `bert%2Fbase`
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


def connect(url: str, **options: Any) -> ArtifactRegistry:
    """The adapter on `HOST`, its API calls sent to `url` without credentials."""
    anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return ArtifactRegistry(HOST, endpoint=url, credentials=anonymous, **options)


@pytest.fixture
def registry(artifact_registry: ArtifactRegistryStandIn) -> ArtifactRegistry:
    return connect(artifact_registry.url)


def test_it_is_the_port(registry: ArtifactRegistry) -> None:
    assert isinstance(registry, OciRegistry)


def test_names_are_checked() -> None:
    with pytest.raises(ConfigError):
        ArtifactRegistry("gcr.io")
    with pytest.raises(BadRequest):
        ArtifactRegistry(HOST).resolve("project-only/repository", "v1")


def test_tags_are_listed_across_pages(
    artifact_registry: ArtifactRegistryStandIn, registry: ArtifactRegistry
) -> None:
    names = [f"v{i}" for i in range(7)]
    for i, name in enumerate(names):
        artifact_registry.add_version(IMAGE, digest(i), created=T0)
        artifact_registry.tag(IMAGE, name, digest(i))
    assert sorted(registry.tags(IMAGE, page=3)) == names
    assert artifact_registry.calls["ListTags"] == 3
    assert list(registry.tags("my-project/models/absent")) == []


def test_a_tag_resolves_to_its_digest(
    artifact_registry: ArtifactRegistryStandIn, registry: ArtifactRegistry
) -> None:
    artifact_registry.add_version(IMAGE, digest(1), created=T0)
    artifact_registry.tag(IMAGE, "v1", digest(1))
    assert registry.resolve(IMAGE, "v1") == digest(1)
    assert registry.resolve(IMAGE, "nope") is None
    assert registry.resolve("my-project/models/absent", "v1") is None


def test_history_lists_tags_with_push_times_and_untagged_manifests(
    artifact_registry: ArtifactRegistryStandIn, registry: ArtifactRegistry
) -> None:
    for i in range(3):
        artifact_registry.add_version(IMAGE, digest(i), created=T0 + timedelta(days=i))
    artifact_registry.tag(IMAGE, "v0", digest(0))
    artifact_registry.tag(IMAGE, "stable", digest(0))
    artifact_registry.tag(IMAGE, "v2", digest(2))
    tags, untagged = registry.history(IMAGE)
    assert sorted(tags, key=lambda t: t.name) == [
        Tag("stable", digest(0), T0),
        Tag("v0", digest(0), T0),
        Tag("v2", digest(2), T0 + timedelta(days=2)),
    ]
    assert untagged == [Manifest(digest(1), T0 + timedelta(days=1))]
    assert artifact_registry.calls["ListVersions"] == 1  # one page; no manifest reads
    assert registry.history("my-project/models/absent") == ([], [])


def test_history_lists_every_tag_of_a_version_past_the_related_tags_cap(
    artifact_registry: ArtifactRegistryStandIn, registry: ArtifactRegistry
) -> None:
    artifact_registry.add_version(IMAGE, digest(1), created=T0)
    names = {f"t{i:03}" for i in range(130)}  # a version lists at most 100 relatedTags
    for name in names:
        artifact_registry.tag(IMAGE, name, digest(1))
    tags, untagged = registry.history(IMAGE)
    assert {t.name for t in tags} == names and untagged == []
    assert artifact_registry.calls["ListTags"] == 1  # the version's tags, by filter


def test_deleting_a_tag_keeps_the_version_and_is_idempotent(
    artifact_registry: ArtifactRegistryStandIn, registry: ArtifactRegistry
) -> None:
    artifact_registry.add_version(IMAGE, digest(1), created=T0)
    artifact_registry.tag(IMAGE, "v1", digest(1))
    artifact_registry.tag(IMAGE, "keep", digest(1))
    assert registry.delete_tag(IMAGE, "v1") is True
    assert registry.resolve(IMAGE, "v1") is None
    assert artifact_registry.versions(IMAGE) == {digest(1): {"keep"}}
    assert registry.delete_tag(IMAGE, "v1") is False  # gone already: fine, not removed by it
    assert registry.delete_tag("my-project/models/absent", "v1") is False
    assert artifact_registry.calls["DeleteTag"] == 3


def test_manifests_are_deleted_in_batches_tags_first(
    artifact_registry: ArtifactRegistryStandIn,
) -> None:
    registry = connect(artifact_registry.url, batch=2)
    for i in range(6):
        artifact_registry.add_version(IMAGE, digest(i), created=T0)
    artifact_registry.tag(IMAGE, "v1", digest(1))  # the stand-in refuses to delete it tagged
    registry.delete_manifests(IMAGE, [digest(i) for i in range(5)])
    assert artifact_registry.versions(IMAGE) == {digest(5): set()}
    assert artifact_registry.calls["BatchDeleteVersions"] == 3  # 5 versions, 2 per batch
    assert artifact_registry.calls["DeleteTag"] == 1


def test_deleting_manifests_that_are_gone_succeeds(
    artifact_registry: ArtifactRegistryStandIn, registry: ArtifactRegistry
) -> None:
    for i in range(3):
        artifact_registry.add_version(IMAGE, digest(i), created=T0)
    registry.delete_manifests(IMAGE, [digest(0)])
    # digest(0) is gone: the batch is refused whole, the rest is deleted on a second try
    registry.delete_manifests(IMAGE, [digest(0), digest(1), digest(9)])
    assert artifact_registry.versions(IMAGE) == {digest(2): set()}
    assert artifact_registry.calls["BatchDeleteVersions"] == 3
    registry.delete_manifests(IMAGE, [digest(1)])  # all gone: nothing to retry
    registry.delete_manifests("my-project/models/absent", [digest(1)])
    registry.delete_manifests(IMAGE, [])
    assert artifact_registry.calls["BatchDeleteVersions"] == 4


def test_a_batch_delete_is_waited_for() -> None:
    with ArtifactRegistryStandIn(pending_polls=1) as server:
        server.add_version(IMAGE, digest(1), created=T0)
        registry = connect(server.url)
        registry.delete_manifests(IMAGE, [digest(1)])
        assert server.calls["GetOperation"] == 1  # polled until done
        assert server.versions(IMAGE) == {}


@pytest.mark.parametrize(
    ("rpc", "status", "error"),
    [
        ("ListTags", 403, Forbidden),
        ("GetTag", 503, Unavailable),
        ("ListVersions", 429, Throttled),
        ("BatchDeleteVersions", 503, Unavailable),
    ],
)
def test_server_errors_are_mapped(
    artifact_registry: ArtifactRegistryStandIn,
    registry: ArtifactRegistry,
    rpc: str,
    status: int,
    error: type[ModelhooksError],
) -> None:
    artifact_registry.add_version(IMAGE, digest(1), created=T0)
    artifact_registry.fail(rpc, status)
    calls: dict[str, Callable[[], object]] = {
        "ListTags": lambda: list(registry.tags(IMAGE)),
        "GetTag": lambda: registry.resolve(IMAGE, "v1"),
        "ListVersions": lambda: registry.history(IMAGE),
        "BatchDeleteVersions": lambda: registry.delete_manifests(IMAGE, [digest(1)]),
    }
    with pytest.raises(error) as caught:
        calls[rpc]()
    assert caught.value.details["status"] == status


def test_a_401_without_credentials_is_forbidden(
    artifact_registry: ArtifactRegistryStandIn, registry: ArtifactRegistry
) -> None:
    # google-auth answers a 401 by refreshing the credentials and sending again; anonymous
    # ones cannot be refreshed, so the request is not repeated
    artifact_registry.fail("DeleteTag", 401)
    with pytest.raises(Forbidden):
        registry.delete_tag(IMAGE, "v1")
    assert artifact_registry.calls["DeleteTag"] == 1


def test_an_unreachable_api_is_unavailable() -> None:
    with ArtifactRegistryStandIn() as server:
        url = server.url  # closed when the block ends: nothing listens there any more
    with pytest.raises(Unavailable):
        connect(url).resolve(IMAGE, "v1")


def test_importing_the_adapter_does_not_import_google() -> None:
    # `google` and `google.cloud` themselves are in sys.modules from the start: the
    # namespace packages functions-framework's *-nspkg.pth creates at interpreter start-up
    code = (
        "import sys; before = set(sys.modules); "
        "import modelhooks.adapters.oci.artifact_registry as m; "
        "m.ArtifactRegistry('us-docker.pkg.dev'); "
        "print(sorted(n for n in set(sys.modules) - before "
        "if n.split('.')[0] in ('google', 'grpc', 'proto', 'requests')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def push(client: DistributionRegistry, repo: str, manifest: dict[str, Any]) -> str:
    data = json.dumps(manifest, separators=(",", ":")).encode()
    return client.push_manifest(repo, digest_of(data), manifest)


def test_manifests_referrers_and_index_children_come_from_the_docker_path(
    artifact_registry: ArtifactRegistryStandIn, ociregistry: Any
) -> None:
    docker, image = DistributionRegistry(ociregistry.url), f"p/r/img-{uuid.uuid4().hex[:8]}"
    config = {**EMPTY, "digest": docker.push_blob(image, b"{}")}
    image_manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": []}
    child = push(docker, image, image_manifest)
    _, _, size = docker.manifest(image, child)
    descriptor = {"mediaType": OCI_MANIFEST, "digest": child, "size": size}
    index = push(
        docker, image, {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [descriptor]}
    )
    registry = connect(artifact_registry.url, docker=docker)
    signed = {
        **image_manifest,
        "artifactType": "application/vnd.example.sig",
        "subject": descriptor,
    }
    data = json.dumps(signed, separators=(",", ":")).encode()
    signature = registry.push_manifest(image, digest_of(data), signed)  # the Docker path
    assert docker.manifest(image, signature)[1] == signature
    artifact_registry.add_version(image, child, created=T0)
    artifact_registry.add_version(image, index, created=T0, media_type=OCI_INDEX)
    artifact_registry.tag(image, "v1", index)
    body, found, _ = registry.manifest(image, index)
    assert found == index and body["manifests"] == [descriptor]
    assert [r["digest"] for r in registry.referrers(image, child)] == [signature]
    tags, untagged = registry.history(image)
    assert tags == [Tag("v1", index, T0, (child,))]
    assert untagged == [Manifest(child, T0)]
