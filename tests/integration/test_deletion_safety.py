"""What a deletion must leave, on the harness's real registries: a manifest an index that
stays lists (a multi-platform model's index, tagged)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.oci.distribution import OCI_INDEX, OCI_MANIFEST, DistributionRegistry
from modelhooks.core.errors import NotFound
from tests.integration.test_cleanup_stores import T0, World
from tests.integration.test_oci_registry import sign
from tests.integration.test_prune_cli import push

pytestmark = pytest.mark.integration


@pytest.fixture(params=["distribution3", "docker_registry", "ociregistry"])
def oci(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def push_index(client: DistributionRegistry, repo: str, tag: str, *children: str) -> str:
    """An image index tagged `tag` listing `children` (manifests of this repository)."""
    listed = [
        {"mediaType": OCI_MANIFEST, "digest": d, "size": client.manifest(repo, d)[2]}
        for d in children
    ]
    return client.push_manifest(
        repo, tag, {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": listed}
    )


def test_cleanup_keeps_a_manifest_an_index_that_stays_lists(tmp_path: Path, oci: Any) -> None:
    """bert's version is one platform's manifest of the index `multi` (another model's, or
    the same weights published as a multi-platform image): Delete untags bert's tag and
    keeps the manifest, which `multi` still lists."""
    client, repo = DistributionRegistry(oci.url), f"cleanup/{uuid.uuid4().hex[:8]}"
    digest = push(client, repo, "v1", created=T0, content="weights v1")
    arm = push(client, repo, "arm", created=T0, content="weights v1 arm")
    signature = sign(client, repo, digest)
    index = push_index(client, repo, "multi", digest, arm)
    world = World(tmp_path)

    source = {"oci": {"reference": f"{oci.host}/{repo}:v1"}}
    (reply,) = world.delete("bert", deletionPolicy="Delete", source=source)
    assert not reply.failed and reply.deleted == ["v1"], reply
    assert digest in reply.kept
    assert client.resolve(repo, "v1") is None
    assert client.resolve(repo, "multi") == index
    assert client.manifest(repo, digest)[1] == digest  # what `multi` lists is all there
    assert client.manifest(repo, arm)[1] == arm
    assert [r["digest"] for r in client.referrers(repo, digest)] == [signature]

    (again,) = world.delete("bert", deletionPolicy="Delete", source=source)
    assert again.deleted == [] and client.manifest(repo, digest)[1] == digest


def test_cleanup_deletes_a_manifest_once_no_index_lists_it(tmp_path: Path, oci: Any) -> None:
    """The same, the index gone: the manifest goes (the rule keeps nothing else)."""
    client, repo = DistributionRegistry(oci.url), f"cleanup/{uuid.uuid4().hex[:8]}"
    digest = push(client, repo, "v1", created=T0, content="weights v1")
    index = push_index(client, repo, "multi", digest)
    client.delete_tag(repo, "multi")
    client.delete_manifest(repo, index)
    world = World(tmp_path)

    source = {"oci": {"reference": f"{oci.host}/{repo}:v1"}}
    (reply,) = world.delete("bert", deletionPolicy="Delete", source=source)
    assert sorted(reply.deleted) == sorted(["v1", digest]) and not reply.failed
    with pytest.raises(NotFound):
        client.manifest(repo, digest)
