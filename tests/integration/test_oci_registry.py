"""The `OciRegistry` port (`DistributionRegistry`) on every harness registry: paginated tags,
tag → digest, tag and manifest deletes with capability detection (distribution 2.8 cannot
delete by tag: the untag workaround keeps the manifest), idempotent deletes, referrers by
the API or the fallback tag."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from modelhooks.adapters.oci.distribution import (
    EMPTY,
    OCI_MANIFEST,
    DistributionRegistry,
    digest_of,
)
from modelhooks.core.errors import NotFound
from modelhooks.core.ports import OciRegistry

pytestmark = pytest.mark.integration


@pytest.fixture(params=["docker_registry", "distribution3", "zot", "ociregistry"])
def registry(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def image(client: DistributionRegistry, repo: str, tag: str, content: bytes) -> str:
    """Push a one-layer image under `tag`; its manifest digest."""
    layer = client.push_blob(repo, content)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {**EMPTY, "digest": client.push_blob(repo, b"{}")},
        "layers": [
            {"mediaType": "application/octet-stream", "digest": layer, "size": len(content)}
        ],
    }
    return client.push_manifest(repo, tag, manifest)


def test_it_is_the_port(registry: Any) -> None:
    assert isinstance(DistributionRegistry(registry.url), OciRegistry)


def test_tags_are_listed_across_pages(registry: Any) -> None:
    client, repo = DistributionRegistry(registry.url), f"tags/{uuid.uuid4().hex[:8]}"
    names = [f"v{i}" for i in range(7)]
    for name in names:
        image(client, repo, name, name.encode())
    assert sorted(client.tags(repo, page=3)) == sorted(names)
    assert list(client.tags(f"absent/{uuid.uuid4().hex[:8]}")) == []


def test_a_tag_resolves_to_its_digest(registry: Any) -> None:
    client, repo = DistributionRegistry(registry.url), f"resolve/{uuid.uuid4().hex[:8]}"
    digest = image(client, repo, "v1", b"weights")
    assert client.resolve(repo, "v1") == digest
    assert client.resolve(repo, "nope") is None


def test_untagging_keeps_the_manifest_on_every_registry(registry: Any) -> None:
    client, repo = DistributionRegistry(registry.url), f"untag/{uuid.uuid4().hex[:8]}"
    digest = image(client, repo, "v1", b"weights")
    image(client, repo, "keep", b"weights")  # the same content under another tag
    assert client.delete_tag(repo, "v1") is True
    assert client.resolve(repo, "v1") is None
    assert client.resolve(repo, "keep") == digest
    body, found, _ = client.manifest(repo, digest)
    assert found == digest and body["layers"]
    assert client.delete_tag(repo, "v1") is False  # gone already: fine, not removed by it


def test_tags_then_manifest_delete_everything_idempotently(registry: Any) -> None:
    client, repo = DistributionRegistry(registry.url), f"delete/{uuid.uuid4().hex[:8]}"
    digest = image(client, repo, "v1", b"weights")
    client.delete_tag(repo, "v1")  # the order: tags, then the manifest
    client.delete_manifest(repo, digest)
    client.delete_manifest(repo, digest)
    assert client.resolve(repo, "v1") is None
    with pytest.raises(NotFound):
        client.manifest(repo, digest)


def sign(client: DistributionRegistry, repo: str, subject: str) -> str:
    """Push a signature-like referrer of `subject` (with the fallback index tag where the
    registry has no referrers API); its digest."""
    _, _, size = client.manifest(repo, subject)
    signature = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": "application/vnd.example.signature",
        "config": {**EMPTY, "digest": client.push_blob(repo, b"{}")},
        "layers": [],
        "subject": {"mediaType": OCI_MANIFEST, "digest": subject, "size": size},
    }
    data = json.dumps(signature, separators=(",", ":")).encode()
    referrer = client.push_manifest(repo, digest_of(data), signature)
    if not client.has_referrers_api(repo, subject):  # distribution: the fallback tag scheme
        index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json"}
        index["manifests"] = [
            {"mediaType": OCI_MANIFEST, "digest": referrer, "size": len(data),
             "artifactType": signature["artifactType"]}
        ]  # fmt: skip
        client.push_manifest(repo, subject.replace(":", "-"), index)
    return referrer


def test_referrers_by_the_api_or_the_fallback_tag(registry: Any) -> None:
    client, repo = DistributionRegistry(registry.url), f"refs/{uuid.uuid4().hex[:8]}"
    subject = image(client, repo, "v1", b"weights")
    assert client.referrers(repo, subject) == []
    referrer = sign(client, repo, subject)
    assert [r["digest"] for r in client.referrers(repo, subject)] == [referrer]
