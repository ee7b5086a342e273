"""prune on a real registry over random tag histories (hypothesis): the effect equals the
plan (tags and the manifests they leave untagged), a second run deletes nothing, and two
concurrent runs leave the same state as one."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core.errors import NotFound
from modelhooks.core.retention import Policies, Policy, plan
from modelhooks.core.tenancy import Tenancy
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, TagsPruned
from modelhooks.handlers import load
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.integration.test_prune_cli import push

pytestmark = pytest.mark.integration

POLICY = Policy(
    streams=("v*",),
    keep=2,
    protect=(r"^latest$",),
    grace=timedelta(hours=1),
    untagged=timedelta(hours=1),  # the manifests the plan untags go too
)
histories = st.lists(
    st.tuples(
        st.sampled_from(["v1.0.0", "v1.1.0", "v1.2.0", "v2.0.0", "v2.1.0", "latest", "misc"]),
        st.sampled_from(["a", "b", "c", "d"]),  # content: tags may share a digest
        st.integers(0, 72),  # hours ago
    ),
    min_size=1,
    max_size=7,
    unique_by=lambda t: t[0],
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(tags=histories, concurrent=st.booleans())
def test_the_effect_is_the_plan_and_idempotent(
    ociregistry: Any, tags: list[tuple[str, str, int]], concurrent: bool
) -> None:
    client, repo = DistributionRegistry(ociregistry.url), f"prop/{uuid.uuid4().hex[:8]}"
    for tag, content, hours in tags:
        created = datetime(2026, 1, 1, tzinfo=UTC) if hours else datetime.now(UTC)
        push(client, repo, tag, created=created, content=content)
    expected = plan(client.history(repo)[0], POLICY, now=datetime.now(UTC))
    pushed = ArtifactPushed(
        model=repo, version="x", uri=f"oci://{ociregistry.host}/{repo}:x", digest="d", store="oci"
    )
    retention = Policies(((f"{ociregistry.host}/prop/*", POLICY),))
    prune = load("prune").bind(
        {
            "oci": OciClients(allow_local=True),
            "registry": InMemoryModelRegistry(),
            "retention": retention,
            "tenancy": Tenancy(),
        }
    )
    run = lambda n: prune.handle(CanonicalEvent.new(pushed, source="t", id=f"e{n}"))  # noqa: E731
    if concurrent:
        with ThreadPoolExecutor(2) as pool:
            replies = [r for rs in pool.map(run, range(2)) for r in rs]
    else:
        replies = run(0)
    told = [t for r in replies if isinstance(r.data, TagsPruned) for t in r.data.deleted]
    assert sorted(told) == sorted(d.tag for d in expected.delete)  # each deletion told once
    left = sorted(client.tags(repo))
    assert left == sorted({t for t, _, _ in tags} - {d.tag for d in expected.delete})
    for d in expected.manifests:
        with pytest.raises(NotFound):
            client.manifest(repo, d.digest)
    for d in expected.keep:
        assert client.manifest(repo, d.tag)[1] == d.digest
    (again,) = run(9)
    assert isinstance(again.data, TagsPruned) and again.data.deleted == []


@pytest.mark.parametrize("stored", [True, False], ids=["manifest-stored", "manifest-gone"])
def test_a_pushed_tag_the_listing_lacks_yet_counts_while_its_manifest_is_stored(
    ociregistry: Any, stored: bool
) -> None:
    """distribution notifies a push once the manifest is stored, before it writes the tag: a
    prune run at once must count the pushed tag among the newest (else it keeps one older
    tag too many). A manifest deleted since adds nothing."""
    client, repo = DistributionRegistry(ociregistry.url), f"lag/{uuid.uuid4().hex[:8]}"
    old = datetime(2026, 1, 1, tzinfo=UTC)
    for tag in ("v1.0.0", "v1.1.0", "v1.2.0", "v1.3.0"):
        push(client, repo, tag, created=old)
    digest = push(client, repo, "v1.4.0", created=old)
    client.delete_tag(repo, "v1.4.0")  # the tag not written yet: the manifest alone
    if not stored:
        client.delete_manifests(repo, [digest])
    pushed = ArtifactPushed(
        model=repo,
        version="v1.4.0",
        uri=f"oci://{ociregistry.host}/{repo}@{digest}",
        digest=digest,
        store="oci",
        tag="v1.4.0",
    )
    prune = load("prune").bind(
        {
            "oci": OciClients(allow_local=True),
            "registry": InMemoryModelRegistry(),
            "retention": Policies(((f"{ociregistry.host}/lag/*", POLICY),)),
            "tenancy": Tenancy(),
        }
    )
    (reply,) = prune.handle(CanonicalEvent.new(pushed, source="t", id="e"))
    assert isinstance(reply.data, TagsPruned)
    if stored:
        assert sorted(reply.data.kept) == ["v1.3.0", "v1.4.0"]
        assert sorted(client.tags(repo)) == ["v1.3.0"]  # v1.4.0 is the registry's to write
    else:
        assert sorted(reply.data.kept) == ["v1.2.0", "v1.3.0"]
        assert sorted(client.tags(repo)) == ["v1.2.0", "v1.3.0"]


@pytest.mark.parametrize("server", ["ociregistry", "distribution3", "docker_registry"])
def test_two_runs_deleting_the_same_tag_at_once_tell_it_once(
    server: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two deliveries (two pushes of the repository, a duplicate) that both find a tag to
    delete still naming its digest, at once: one deletes it, the other finds it gone, so
    their `tags.pruned` replies tell the deletion once between them (each told it: notify
    recorded it on the Model twice). distribution 2.8 untags through a placeholder
    manifest, one untag at a time in a process."""
    import threading

    ociregistry = request.getfixturevalue(server)

    client, repo = DistributionRegistry(ociregistry.url), f"twice/{uuid.uuid4().hex[:8]}"
    old = datetime(2026, 1, 1, tzinfo=UTC)
    for tag in ("v1.0.0", "v1.1.0", "v1.2.0"):
        push(client, repo, tag, created=old, content=tag)
    both = threading.Barrier(2, timeout=10)
    resolve = DistributionRegistry.resolve

    first = threading.local()  # the placeholder untag (distribution 2.8) resolves again

    def together(self: DistributionRegistry, repo: str, ref: str) -> str | None:
        found = resolve(self, repo, ref)
        if ref == "v1.0.0" and not getattr(first, "seen", False):
            first.seen = True
            both.wait()  # both runs saw the tag still naming the planned digest
        return found

    monkeypatch.setattr(DistributionRegistry, "resolve", together)
    pushed = ArtifactPushed(
        model=repo, version="x", uri=f"oci://{ociregistry.host}/{repo}:x", digest="d", store="oci"
    )
    prune = load("prune").bind(
        {
            "oci": OciClients(allow_local=True),
            "registry": InMemoryModelRegistry(),
            "retention": Policies(((f"{ociregistry.host}/twice/*", POLICY),)),
            "tenancy": Tenancy(),
        }
    )
    run = lambda n: prune.handle(CanonicalEvent.new(pushed, source="t", id=f"e{n}"))  # noqa: E731
    with ThreadPoolExecutor(2) as pool:
        replies = [r for rs in pool.map(run, range(2)) for r in rs]
    told = [t for r in replies if isinstance(r.data, TagsPruned) for t in r.data.deleted]
    assert told == ["v1.0.0"]
    assert sorted(client.tags(repo)) == ["v1.1.0", "v1.2.0"]
