"""prune on Artifact Registry, through its API (the `ArtifactRegistry` adapter) against the
in-process stand-in of its REST surface (Google ships no emulator: tests/servers/
artifact_registry.py): history in one listing with untagged versions, the plan applied with
batched version deletes, and the prune function reaching it through `OciClients`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials

from modelhooks.adapters.oci.artifact_registry import ArtifactRegistry
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core.retention import Policies, Policy, apply, plan
from modelhooks.core.tenancy import Tenancy
from modelhooks.events.model import CanonicalEvent, PruneRequested, TagsPruned
from modelhooks.handlers import load
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.servers.artifact_registry import ArtifactRegistryStandIn

pytestmark = pytest.mark.integration

HOST = "us-central1-docker.pkg.dev"
IMAGE = "ml-prod/models/bert"
OLD = datetime.now(UTC) - timedelta(days=30)


def seed(standin: ArtifactRegistryStandIn, tags: int, untagged: int) -> dict[str, str]:
    """`tags` versions tagged v1…vN (older first) and `untagged` untagged versions."""
    digests = {}
    for n in range(1, tags + untagged + 1):
        digest = f"sha256:{n:064x}"
        standin.add_version(IMAGE, digest, created=OLD + timedelta(hours=n))
        if n <= tags:
            standin.tag(IMAGE, f"v{n}", digest)
            digests[f"v{n}"] = digest
        else:
            digests[f"untagged-{n}"] = digest
    return digests


def test_retention_on_artifact_registry_deletes_untagged_versions_in_batches(
    artifact_registry: ArtifactRegistryStandIn, ociregistry: Any
) -> None:
    digests = seed(artifact_registry, tags=6, untagged=3)
    anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
    registry = ArtifactRegistry(
        HOST,
        endpoint=artifact_registry.url,
        credentials=anonymous,
        batch=2,
        docker=DistributionRegistry(ociregistry.url),  # the Docker path: no referrers here
    )
    tags, untagged = registry.history(IMAGE)
    assert len(tags) == 6 and len(untagged) == 3  # one listing, untagged included
    policy = Policy(streams=("v*",), keep=2, untagged=timedelta(hours=1))
    planned = plan(tags, policy, untagged=untagged, now=datetime.now(UTC))
    assert sorted(d.tag for d in planned.delete) == ["v1", "v2", "v3", "v4"]
    doomed = {digests[t] for t in ("v1", "v2", "v3", "v4")} | {m.digest for m in untagged}
    assert {d.digest for d in planned.manifests} == doomed

    done = apply(registry, IMAGE, planned)
    assert sorted(done.deleted) == ["v1", "v2", "v3", "v4"] and not done.skipped
    assert artifact_registry.versions(IMAGE) == {digests["v5"]: {"v5"}, digests["v6"]: {"v6"}}
    assert artifact_registry.calls["BatchDeleteVersions"] == 4  # 7 versions, 2 a batch
    tags, untagged = registry.history(IMAGE)
    again = plan(tags, policy, untagged=untagged, now=datetime.now(UTC))
    assert again.delete == () and again.manifests == ()


def test_the_prune_function_reaches_artifact_registry_through_its_api(
    artifact_registry: ArtifactRegistryStandIn,
) -> None:
    digests = seed(artifact_registry, tags=4, untagged=0)
    clients = OciClients(
        artifact_registry_endpoint=artifact_registry.url,
        artifact_registry_credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
    )
    uri = f"oci://{HOST}/{IMAGE}"
    assert isinstance(clients.registry_for(uri)[0], ArtifactRegistry)
    assert isinstance(OciClients().registry_for("oci://127.0.0.1:5000/m")[0], DistributionRegistry)
    assert isinstance(
        OciClients(artifact_registry_endpoint="").registry_for(uri)[0], DistributionRegistry
    )  # no API endpoint: the Docker path, like any registry
    retention = Policies(((f"{HOST}/ml-prod/*", Policy(streams=("v*",), keep=1)),))
    prune = load("prune").bind(
        {
            "oci": clients,
            "registry": InMemoryModelRegistry(),
            "retention": retention,
            "tenancy": Tenancy(),
        }
    )
    (reply,) = prune.handle(CanonicalEvent.new(PruneRequested(uri=uri), source="t"))
    assert isinstance(reply.data, TagsPruned)
    assert sorted(reply.data.deleted) == ["v1", "v2", "v3"] and reply.data.manifests == []
    left = artifact_registry.versions(IMAGE)
    assert left[digests["v4"]] == {"v4"} and left[digests["v1"]] == set()  # untagged, kept
