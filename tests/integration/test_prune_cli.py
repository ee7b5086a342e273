"""`modelhooks prune plan|apply` on real registries: the plan keeps the newest per stream,
what is protected and what is recent; apply deletes exactly the planned tags (the
manifests stay); planning again deletes nothing."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.oci.distribution import EMPTY, OCI_MANIFEST, DistributionRegistry
from modelhooks.cli import main
from modelhooks.core.errors import NotFound
from modelhooks.core.tenancy import Tenancy

pytestmark = pytest.mark.integration


@pytest.fixture(params=["docker_registry", "distribution3", "ociregistry"])
def registry(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def push(
    client: DistributionRegistry, repo: str, tag: str, *, created: datetime, content: str = ""
) -> str:
    """Push a one-layer manifest of `content` (default: the tag) created at `created`; the
    same content and time give the same digest."""
    layer = (content or tag).encode()
    return client.push_manifest(
        repo,
        tag,
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {**EMPTY, "digest": client.push_blob(repo, b"{}")},
            "layers": [
                {
                    "mediaType": "application/octet-stream",
                    "digest": client.push_blob(repo, layer),
                    "size": len(layer),
                }
            ],
            "annotations": {"org.opencontainers.image.created": created.isoformat()},
        },
    )


def prune(*args: str) -> int:
    return main(["prune", *args, "--store-allow-local-targets", "true"])


def test_plan_then_apply_exactly_that_plan(
    registry: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client, repo = DistributionRegistry(registry.url), f"prune/{uuid.uuid4().hex[:8]}"
    old, digests = datetime.now(UTC) - timedelta(days=30), {}
    for tag in ("v1.0.0", "v1.1.0", "v1.2.0", "v1.10.0"):
        digests[tag] = push(client, repo, tag, created=old)
    push(
        client, repo, "v0.9.0", created=datetime.now(UTC) - timedelta(minutes=5)
    )  # recent: within the grace period
    push(client, repo, "latest", created=old)
    uri = f"oci://{registry.host}/{repo}"

    assert prune("plan", uri, "--stream", "v*", "--keep", "2", "--json") == 0
    planned = json.loads(capsys.readouterr().out)
    assert sorted(d["tag"] for d in planned["delete"]) == ["v1.0.0", "v1.1.0"]
    reasons = {d["tag"]: d["reason"] for d in planned["keep"]}
    assert reasons["latest"] == "protected" and reasons["v0.9.0"] == "within the grace period"
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(planned))

    assert prune("apply", uri, "--plan", str(plan_file)) == 0
    assert sorted(client.tags(repo)) == ["latest", "v0.9.0", "v1.10.0", "v1.2.0"]
    manifest, digest, _ = client.manifest(repo, digests["v1.0.0"])  # untagged, not deleted
    assert digest == digests["v1.0.0"] and manifest["layers"]
    capsys.readouterr()
    assert prune("plan", uri, "--stream", "v*", "--keep", "2", "--json") == 0
    assert json.loads(capsys.readouterr().out)["delete"] == []
    assert prune("apply", uri, "--plan", str(plan_file)) == 0  # again: nothing left to do


def test_apply_refuses_a_plan_of_another_repository(registry: Any, tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"repository": "oci://elsewhere/x", "keep": [], "delete": []}))
    assert prune("apply", f"oci://{registry.host}/x", "--plan", str(plan_file)) == 2


def test_the_prune_function_keeps_what_live_versions_use(registry: Any) -> None:
    from modelhooks.adapters.oci.clients import OciClients
    from modelhooks.core.retention import Policies, Policy
    from modelhooks.events.model import ArtifactPushed, CanonicalEvent, TagsPruned
    from modelhooks.handlers import load
    from modelhooks.handlers.register import register_model
    from tests.fakes.memory_registry import InMemoryModelRegistry

    client, repo = DistributionRegistry(registry.url), f"fn/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    digests = {tag: push(client, repo, tag, created=old) for tag in ("v1", "v2", "v3", "v4")}
    models = InMemoryModelRegistry()
    in_use = ArtifactPushed(
        model=repo, version="v1", uri=f"oci://{registry.host}/{repo}@{digests['v1']}",
        digest=digests["v1"], store="oci",
    )  # fmt: skip
    register_model(CanonicalEvent.new(in_use, source="t"), in_use, registry=models)
    pushed = ArtifactPushed(
        model=repo, version="v4", uri=f"oci://{registry.host}/{repo}@{digests['v4']}",
        digest=digests["v4"], store="oci",
    )  # fmt: skip
    retention = Policies(((f"{registry.host}/fn/*", Policy(streams=("v*",), keep=1)),))
    prune = load("prune").bind(
        {
            "oci": OciClients(allow_local=True),
            "registry": models,
            "retention": retention,
            "tenancy": Tenancy(),
        }
    )
    (reply,) = prune.handle(CanonicalEvent.new(pushed, source="t", id="p1"))
    assert isinstance(reply.data, TagsPruned)
    assert sorted(reply.data.deleted) == ["v2", "v3"]  # v1 is in use, v4 the newest
    assert sorted(client.tags(repo)) == ["v1", "v4"]
    (again,) = prune.handle(CanonicalEvent.new(pushed, source="t", id="p2"))
    assert isinstance(again.data, TagsPruned) and again.data.deleted == []


def test_apply_deletes_untagged_manifests_after_their_referrers(
    registry: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.integration.test_oci_registry import sign

    client, repo = DistributionRegistry(registry.url), f"prune/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    gone = push(client, repo, "v1.0.0", created=old)
    stays = push(client, repo, "v2.0.0", created=old)
    signature, kept_signature = sign(client, repo, gone), sign(client, repo, stays)
    uri = f"oci://{registry.host}/{repo}"
    args = ("--stream", "v*", "--keep", "1", "--untagged-hours", "1", "--json")
    assert prune("plan", uri, *args) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["manifests"][0]["digest"] == gone  # then its fallback referrers index, if any
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(planned))

    assert prune("apply", uri, "--plan", str(plan_file), "--quiet") == 0
    for digest in (gone, signature):  # the manifest and its referrer
        with pytest.raises(NotFound):
            client.manifest(repo, digest)
    assert client.referrers(repo, gone) == []
    assert gone.replace(":", "-") not in set(client.tags(repo))  # no fallback index left
    assert client.manifest(repo, stays)[1] == stays
    assert [r["digest"] for r in client.referrers(repo, stays)] == [kept_signature]
    capsys.readouterr()
    assert prune("plan", uri, *args) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["delete"] == [] and again["manifests"] == []
    assert prune("apply", uri, "--plan", str(plan_file), "--quiet") == 0  # all gone: fine


def test_a_schedule_or_a_model_asks_the_prune_function(registry: Any) -> None:
    from modelhooks.adapters.oci.clients import OciClients
    from modelhooks.core.errors import Forbidden
    from modelhooks.core.retention import Policies, Policy
    from modelhooks.events.model import CanonicalEvent, ModelCreated, PruneRequested
    from modelhooks.handlers import load
    from tests.fakes.memory_registry import InMemoryModelRegistry

    client, repo = DistributionRegistry(registry.url), f"sched/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    for n in range(1, 6):
        push(client, repo, f"v{n}", created=old + timedelta(hours=n))
    uri = f"oci://{registry.host}/{repo}"

    def prune_with(tenancy: Tenancy) -> Any:
        retention = Policies(((f"{registry.host}/sched/*", Policy(streams=("v*",), keep=4)),))
        deps = {"registry": InMemoryModelRegistry(), "retention": retention}
        return load("prune").bind({**deps, "oci": OciClients(), "tenancy": tenancy})

    prune = prune_with(Tenancy())
    (scheduled,) = prune.handle(CanonicalEvent.new(PruneRequested(uri=uri), source="t"))
    assert scheduled.data.deleted == ["v1"]  # the policy file: the newest 4
    spec = {
        "source": {"oci": {"reference": f"{registry.host}/{repo}:v2"}},
        "version": "2",
        "retention": {"keepVersions": 1, "protectedTags": ["v3"]},
    }
    model = ModelCreated(name="m", namespace="team-a", spec=spec)
    denied = prune_with(Tenancy.parse("team-a=oci://elsewhere/*"))
    with pytest.raises(Forbidden, match="may not prune"):
        denied.handle(CanonicalEvent.new(model, source="t"))
    assert sorted(client.tags(repo)) == ["v2", "v3", "v4", "v5"]  # nothing more went
    (asked,) = prune.handle(CanonicalEvent.new(model, source="t"))
    assert sorted(asked.data.deleted) == ["v4"]  # v5 newest, v3 protected, v2 the Model's
    assert sorted(client.tags(repo)) == ["v2", "v3", "v5"]
