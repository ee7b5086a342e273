"""prune killed after its deletions, before its answer was kept, then delivered again, on
real registries (distribution v3; 2.8, which untags through a placeholder manifest) and a
SQLite model registry reopened as a restarted process opens it: the redelivery answers as
the first run would have (the same tags deleted, kept and manifests), finishing what the
kill left. It listed again, found the tags gone and answered nothing deleted."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core.errors import Conflict, NotFound
from modelhooks.core.records import ModelState
from modelhooks.core.retention import Policies, Policy
from modelhooks.core.tenancy import Tenancy
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, PruneRequested, TagsPruned
from modelhooks.handlers import load, prune
from tests.integration.test_prune_cli import push

pytestmark = pytest.mark.integration

POLICY = Policy(streams=("v*",), keep=2, grace=timedelta(hours=1), untagged=timedelta(hours=1))
OLD = datetime(2026, 1, 1, tzinfo=UTC)


class Killed(BaseException):
    """The process dying where it is raised (SIGKILL: nothing after it runs)."""


@pytest.fixture(params=["distribution3", "docker_registry"])
def server(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


@pytest.fixture
def registry_file(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "registry.db"


def _prune(server: Any, path: Path) -> tuple[Any, SqliteModelRegistry]:
    registry = SqliteModelRegistry(path)
    bound = load("prune").bind(
        {
            "oci": OciClients(allow_local=True),
            "registry": registry,
            "retention": Policies(((f"{server.host}/redeliver/*", POLICY),)),
            "tenancy": Tenancy(),
        }
    )
    return bound, registry


def _answer(bound: Any, event: CanonicalEvent) -> TagsPruned:
    (reply,) = bound.handle(event)
    assert isinstance(reply.data, TagsPruned)
    return reply.data


def _repository(server: Any) -> tuple[DistributionRegistry, str, dict[str, str]]:
    client, repo = DistributionRegistry(server.url), f"redeliver/{uuid.uuid4().hex[:8]}"
    digests = {t: push(client, repo, t, created=OLD) for t in ("v1.0.0", "v1.1.0", "v1.2.0")}
    digests["v1.3.0"] = push(client, repo, "v1.3.0", created=OLD)
    return client, repo, digests


@pytest.mark.parametrize("where", ["after-every-delete", "between-tags-and-manifests"])
def test_a_redelivery_after_a_kill_answers_the_plan_the_killed_run_applied(
    server: Any,
    registry_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    client, repo, digests = _repository(server)
    event = CanonicalEvent.new(
        PruneRequested(uri=f"oci://{server.host}/{repo}"), source="schedule", id="tick-1"
    )
    bound, registry = _prune(server, registry_file)
    if where == "after-every-delete":
        applied = prune.apply

        def apply_then_die(*args: Any, **kwargs: Any) -> Any:
            applied(*args, **kwargs)
            raise Killed

        monkeypatch.setattr(prune, "apply", apply_then_die)
    else:
        deleting = DistributionRegistry.delete_manifests

        def die_at_the_manifests(self: DistributionRegistry, repo: str, found: Any) -> None:
            if digests["v1.0.0"] in found:
                raise Killed
            deleting(self, repo, found)

        monkeypatch.setattr(DistributionRegistry, "delete_manifests", die_at_the_manifests)
    with pytest.raises(Killed):
        bound.handle(event)
    registry.close()
    monkeypatch.undo()
    assert sorted(client.tags(repo)) == ["v1.2.0", "v1.3.0"]  # the tags went before the kill

    bound, registry = _prune(server, registry_file)  # the restarted process
    try:
        first = _answer(bound, event)
        assert first.deleted == ["v1.0.0", "v1.1.0"]
        assert first.kept == ["v1.2.0", "v1.3.0"]
        assert sorted(first.manifests) == sorted([digests["v1.0.0"], digests["v1.1.0"]])
        for tag in ("v1.0.0", "v1.1.0"):  # what the kill left is done
            with pytest.raises(NotFound):
                client.manifest(repo, digests[tag])
        assert _answer(bound, event) == first  # and again, as often as it is delivered
        other = CanonicalEvent.new(
            PruneRequested(uri=f"oci://{server.host}/{repo}"), source="schedule", id="tick-2"
        )
        assert _answer(bound, other).deleted == []  # another event deleted nothing
        plans = registry.get_model(prune.PLANS)
        assert plans is not None and plans.state == ModelState.ARCHIVED
        assert prune.in_use(registry) == frozenset()
    finally:
        registry.close()


def test_an_id_delivered_again_for_another_repository_is_a_conflict(
    distribution3: Any, registry_file: Path
) -> None:
    client, repo, _ = _repository(distribution3)
    push(client, f"{repo}-b", "v1.0.0", created=OLD)
    bound, registry = _prune(distribution3, registry_file)
    try:
        pushed = ArtifactPushed(
            model=repo,
            version="x",
            uri=f"oci://{distribution3.host}/{repo}:x",
            digest="d",
            store="oci",
        )
        assert _answer(bound, CanonicalEvent.new(pushed, source="s", id="e")).deleted
        elsewhere = msgspec.structs.replace(pushed, uri=f"oci://{distribution3.host}/{repo}-b:x")
        with pytest.raises(Conflict, match="delivered before"):
            bound.handle(CanonicalEvent.new(elsewhere, source="s", id="e"))
    finally:
        registry.close()
