"""What a deletion must leave, on the harness's real registries: a manifest an index that
stays lists (a multi-platform model's index, tagged), a manifest a tag names when the
deletes run (pushed there since the plan), and the newest N versions when each has a
referrers tag."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.oci.distribution import (
    MAX_NESTING,
    OCI_INDEX,
    OCI_MANIFEST,
    DistributionRegistry,
    digest_of,
)
from modelhooks.core.errors import BadRequest, NotFound
from modelhooks.core.retention import Policy, apply, model_policy, plan, referrers
from modelhooks.events.model import ArtifactPurged, CanonicalEvent, ModelDeleted
from tests.integration.test_cleanup_stores import T0, World
from tests.integration.test_oci_registry import sign
from tests.integration.test_prune_cli import prune, push

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


def test_cleanup_keeps_a_manifest_an_index_lists_through_another_index(
    tmp_path: Path, oci: Any
) -> None:
    """`multi` lists an index (untagged, pushed by digest) that lists bert's manifest: a
    grandchild of a tag that stays, kept as a child is (deleted, `multi` named an image no
    one could pull)."""
    client, repo = DistributionRegistry(oci.url), f"cleanup/{uuid.uuid4().hex[:8]}"
    digest = push(client, repo, "v1", created=T0, content="weights v1")
    body = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": digest, "size": client.manifest(repo, digest)[2]}
        ],
    }
    inner = client.push_manifest(
        repo, digest_of(json.dumps(body, separators=(",", ":")).encode()), body
    )
    outer = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {"mediaType": OCI_INDEX, "digest": inner, "size": client.manifest(repo, inner)[2]}
        ],
    }
    client.push_manifest(repo, "multi", outer)
    world = World(tmp_path)

    source = {"oci": {"reference": f"{oci.host}/{repo}:v1"}}
    (reply,) = world.delete("bert", deletionPolicy="Delete", source=source)
    assert not reply.failed and reply.deleted == ["v1"], reply
    assert digest in reply.kept
    assert client.manifest(repo, digest)[1] == digest  # what `multi` reaches is all there
    assert client.manifest(repo, inner)[1] == inner


def push_nested(client: DistributionRegistry, repo: str, tag: str, leaf: str, levels: int) -> None:
    """An index tagged `tag` over `levels` untagged indexes, each listing the next, the last
    listing the manifest `leaf`."""
    digest, media = leaf, OCI_MANIFEST
    for n in range(levels + 1):
        size = client.manifest(repo, digest)[2]
        body = {"schemaVersion": 2, "mediaType": OCI_INDEX,
                "manifests": [{"mediaType": media, "digest": digest, "size": size}]}  # fmt: skip
        ref = tag if n == levels else digest_of(json.dumps(body, separators=(",", ":")).encode())
        digest, media = client.push_manifest(repo, ref, body), OCI_INDEX


def test_indexes_nested_past_the_bound_are_refused_naming_the_tag(oci: Any) -> None:
    """A tag's index is followed MAX_NESTING indexes deep (what the last lists is one of its
    children); one level more is a BadRequest naming the repository and the tag (which tag
    to fix), not a shorter list: prune and cleanup decide nothing on this repository."""
    client, repo = DistributionRegistry(oci.url), f"nested/{uuid.uuid4().hex[:8]}"
    leaf = push(client, repo, "v1", created=T0, content="weights v1")
    push_nested(client, repo, "deep", leaf, MAX_NESTING)
    (deep,) = [t for t in client.history(repo)[0] if t.name == "deep"]
    assert leaf in deep.children and len(deep.children) == MAX_NESTING + 1
    push_nested(client, repo, "deeper", leaf, MAX_NESTING + 1)
    with pytest.raises(BadRequest, match=rf"^{repo}:deeper: .* past {MAX_NESTING} levels"):
        client.history(repo)


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


def test_prune_apply_keeps_a_manifest_a_tag_names_since_the_plan(
    oci: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan applied later (`prune apply --plan`, or a prune racing a push): the manifest of
    v1.0.0 is to go, untagged; meanwhile `prod` was pushed naming it (a rollback). The
    manifest, its signature and its referrers index stay, and `prod` with them; a manifest
    DELETE took `prod` too (distribution) or left it naming nothing (cue-labs)."""
    client, repo = DistributionRegistry(oci.url), f"prune/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    rolled_back = push(client, repo, "v1.0.0", created=old)
    push(client, repo, "v2.0.0", created=old)
    signature = sign(client, repo, rolled_back)
    uri = f"oci://{oci.host}/{repo}"
    args = ("--stream", "v*", "--keep", "1", "--untagged-hours", "1", "--json")
    assert prune("plan", uri, *args) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["manifests"][0]["digest"] == rolled_back
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(planned))
    tags_before = set(client.tags(repo))

    assert push(client, repo, "prod", created=old, content="v1.0.0") == rolled_back
    assert prune("apply", uri, "--plan", str(plan_file), "--quiet") == 0
    out, err = capsys.readouterr()
    assert client.resolve(repo, "prod") == rolled_back
    assert client.manifest(repo, rolled_back)[1] == rolled_back
    assert [r["digest"] for r in client.referrers(repo, rolled_back)] == [signature]
    assert client.manifest(repo, signature)[1] == signature
    assert client.resolve(repo, "v1.0.0") is None  # the planned tag went
    assert set(client.tags(repo)) == tags_before - {"v1.0.0"} | {"prod"}
    assert f"deleted {rolled_back}" not in out and f"skip    {rolled_back}" in err


def test_a_recorded_plan_applied_again_keeps_a_manifest_a_tag_names_since(oci: Any) -> None:
    """The prune function's redelivery applies the plan it recorded, with the referrers
    found then (`found`): the same rule holds, the signature of what `prod` names stays."""
    client, repo = DistributionRegistry(oci.url), f"prune/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    rolled_back = push(client, repo, "v1.0.0", created=old)
    push(client, repo, "v2.0.0", created=old)
    signature = sign(client, repo, rolled_back)
    policy = Policy(streams=("v*",), keep=1, untagged=timedelta(hours=1))
    planned = plan(client.history(repo)[0], policy, now=datetime.now(UTC))
    found = referrers(client, repo, planned)
    assert signature in found and rolled_back in {d.digest for d in planned.manifests}

    push(client, repo, "prod", created=old, content="v1.0.0")
    done = apply(client, repo, planned, found=found, again=True)
    assert rolled_back in done.held and rolled_back not in done.manifests
    assert signature not in done.referrers
    assert client.resolve(repo, "prod") == rolled_back
    assert [r["digest"] for r in client.referrers(repo, rolled_back)] == [signature]
    assert client.manifest(repo, signature)[1] == signature


def test_keep_n_counts_versions_not_their_referrers_indexes(oci: Any) -> None:
    """A Model's retention (keepVersions: 2, every tag one stream) on a registry without
    the referrers API, each version signed: the `sha256-<hex>` tags of the signatures'
    indexes (no push time: ranked newest) took the two places, and every version tag went;
    the two newest versions stay now, each with its signature, the older ones' tags go."""
    client, repo = DistributionRegistry(oci.url), f"prune/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    digests = {}
    for n, tag in enumerate(("v1", "v2", "v3", "v4")):
        digests[tag] = push(client, repo, tag, created=old + timedelta(hours=n))
        sign(client, repo, digests[tag])
    policy = model_policy({"retention": {"keepVersions": 2}})
    assert policy is not None
    planned = plan(client.history(repo)[0], policy, now=datetime.now(UTC))
    assert sorted(d.tag for d in planned.delete) == ["v1", "v2"]

    apply(client, repo, planned)
    left = set(client.tags(repo))
    assert {"v3", "v4"} <= left and not {"v1", "v2"} & left
    for tag in ("v3", "v4"):
        assert len(client.referrers(repo, digests[tag])) == 1  # its signature stays


def test_keep_n_counts_versions_not_the_tags_naming_one(oci: Any) -> None:
    """keepVersions: 2 where each version is pushed as `vN` and as its commit (`sha-N`):
    the two tags of the newest version took both places, and the second newest version
    went; two versions stay now, every tag naming them with them."""
    client, repo = DistributionRegistry(oci.url), f"prune/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    for n in (1, 2, 3):
        at = old + timedelta(hours=n)
        for tag in (f"v{n}", f"sha-{n}"):
            push(client, repo, tag, created=at, content=f"weights {n}")
    policy = model_policy({"retention": {"keepVersions": 2}})
    assert policy is not None
    planned = plan(client.history(repo)[0], policy, now=datetime.now(UTC))
    assert sorted(d.tag for d in planned.delete) == ["sha-1", "v1"]

    apply(client, repo, planned)
    assert sorted(client.tags(repo)) == ["sha-2", "sha-3", "v2", "v3"]


def test_cleanup_applies_its_plan_to_tags_and_manifests_as_they_are_now(
    tmp_path: Path, oci: Any
) -> None:
    """Between cleanup's plan and its deletes (a long listing, `modelhooks cleanup`), `v1`
    was pushed again (other content: the version re-created) and `prod` was pushed naming
    the planned manifest: the new `v1` and `prod` stay, so does the manifest `prod` names
    and its signature; `latest`, still naming it as planned, goes."""
    from modelhooks.bootstrap import build
    from modelhooks.core.cleanup import Policy as Deletion
    from modelhooks.core.settings import load_settings
    from modelhooks.handlers.cleanup import Target
    from modelhooks.handlers.cleanup import plan as plan_cleanup

    client, repo = DistributionRegistry(oci.url), f"cleanup/{uuid.uuid4().hex[:8]}"
    digest = push(client, repo, "v1", created=T0, content="weights v1")
    push(client, repo, "latest", created=T0, content="weights v1")
    signature = sign(client, repo, digest)
    env = {"MODELHOOKS_HOME": str(tmp_path), "MODELHOOKS_STORE_ALLOW_LOCAL_TARGETS": "true"}
    deps = build(load_settings(env=env)).deps
    target = Target(f"oci://{oci.host}/{repo}:v1", digest)
    purge, apply_it = plan_cleanup(
        target, Deletion.parse("Delete"), stores=deps.stores, oci=deps.oci, marker="_SUCCESS",
        in_use=frozenset(),
    )  # fmt: skip
    assert {(d.kind, d.name) for d in purge.deletions} >= {("tag", "v1"), ("manifest", digest)}

    again = push(client, repo, "v1", created=T0, content="weights v1, again")
    push(client, repo, "prod", created=T0, content="weights v1")
    done = apply_it(purge, lambda _: None)
    assert client.resolve(repo, "v1") == again
    assert client.resolve(repo, "prod") == digest
    assert client.resolve(repo, "latest") is None
    assert client.manifest(repo, digest)[1] == digest
    assert [r["digest"] for r in client.referrers(repo, digest)] == [signature]
    assert {d.name for d in done.deletions} == {"latest"}
    assert {"v1", digest} <= {name for name, _ in done.kept}


def test_a_late_push_of_a_tag_deleted_since_does_not_count_among_the_newest(oci: Any) -> None:
    """prune counts a pushed tag the registry does not list yet (distribution notifies
    before it writes the tag), for a push just made. The same push delivered a day late
    (a duplicate, a replay), its tag deleted since by hand, counted too: it took one of
    the two places and v1.2.0 went. The registry's listing alone decides then."""
    from modelhooks.adapters.oci.clients import OciClients
    from modelhooks.core.retention import Policies
    from modelhooks.core.tenancy import Tenancy
    from modelhooks.events.model import ArtifactPushed, CanonicalEvent, TagsPruned
    from modelhooks.handlers import load
    from tests.fakes.memory_registry import InMemoryModelRegistry

    client, repo = DistributionRegistry(oci.url), f"late/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    for tag in ("v1.1.0", "v1.2.0", "v1.3.0"):
        push(client, repo, tag, created=old)
    digest = push(client, repo, "v1.4.0", created=old)
    client.delete_tag(repo, "v1.4.0")  # a bad build, untagged by hand; its manifest stays
    pushed = ArtifactPushed(
        model=repo, version="v1.4.0", uri=f"oci://{oci.host}/{repo}@{digest}", digest=digest,
        store="oci", tag="v1.4.0",
    )  # fmt: skip
    policy = Policy(streams=("v*",), keep=2, grace=timedelta(0))
    prune = load("prune").bind(
        {
            "oci": OciClients(allow_local=True),
            "registry": InMemoryModelRegistry(),
            "retention": Policies(((f"{oci.host}/late/*", policy),)),
            "tenancy": Tenancy(),
        }
    )
    late = CanonicalEvent(
        id="late", source="t", type=pushed.TYPE, data=pushed,
        time=datetime.now(UTC) - timedelta(days=1),
    )  # fmt: skip
    (reply,) = prune.handle(late)
    assert isinstance(reply.data, TagsPruned)
    assert sorted(client.tags(repo)) == ["v1.2.0", "v1.3.0"]
    assert reply.data.deleted == ["v1.1.0"]


def test_cleanup_deletes_the_digest_the_spec_pins_not_another_the_status_names(
    tmp_path: Path, oci: Any
) -> None:
    """A Model pinned by digest (`repo@sha256:…`, immutable) whose deletion carries another
    digest in status.resolvedDigest (a stale or forged status): the status won, and v2's
    manifest, which the Model never named, went. The spec's digest goes now."""
    client, repo = DistributionRegistry(oci.url), f"cleanup/{uuid.uuid4().hex[:8]}"
    pinned = push(client, repo, "v1", created=T0, content="weights v1")
    other = push(client, repo, "v2", created=T0, content="weights v2")
    world = World(tmp_path)
    data = ModelDeleted(
        name="bert", namespace="ml",
        spec={"deletionPolicy": "Delete", "source": {"oci": {"reference": f"{oci.host}/{repo}@{pinned}"}}},
        status={"resolvedDigest": other},
    )  # fmt: skip
    event = CanonicalEvent(
        id="d-pinned", source="t", type=data.TYPE, data=data, time=T0 + timedelta(days=1)
    )
    (reply,) = [r.data for r in world.cleanup.handle(event)]
    assert client.resolve(repo, "v2") == other and client.manifest(repo, other)[1] == other
    with pytest.raises(NotFound):
        client.manifest(repo, pinned)
    assert isinstance(reply, ArtifactPurged) and pinned in reply.deleted


@pytest.mark.parametrize("held", ["live", "tagged"])
def test_cleanup_keeps_a_manifest_a_referrer_that_stays_refers_to(
    tmp_path: Path, oci: Any, held: str
) -> None:
    """A fine-tuned adapter pushed as an artifact whose subject is its base model (as
    `oras attach` does): a referrer of the base, registered as a live version of another
    model (or tagged). Delete of the base deleted its referrers — the live adapter among
    them — and the base itself. Both stay now; the base's own tag goes."""
    client, repo = DistributionRegistry(oci.url), f"cleanup/{uuid.uuid4().hex[:8]}"
    base = push(client, repo, "v1", created=T0, content="base weights")
    adapter = sign(client, repo, base)  # a referrer of the base (subject: base)
    world = World(tmp_path)
    if held == "live":
        world.register("adapter", "1", f"oci://{oci.host}/{repo}@{adapter}", adapter, "oci")
    else:
        client.push_manifest(repo, "lora-v1", client.manifest(repo, adapter)[0])
        assert client.resolve(repo, "lora-v1") == adapter

    source = {"oci": {"reference": f"{oci.host}/{repo}:v1"}}
    (reply,) = world.delete("bert", deletionPolicy="Delete", source=source)
    assert reply.deleted == ["v1"] and base in reply.kept, reply
    assert client.manifest(repo, adapter)[1] == adapter
    assert client.manifest(repo, base)[1] == base
    assert [r["digest"] for r in client.referrers(repo, base)] == [adapter]


def test_prune_plan_keeps_what_live_registered_versions_use(
    oci: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`modelhooks prune plan` planned without the model registry: a live version's digest
    (v1, registered) was planned for deletion by the CLI where the prune function keeps
    it. The plan reads the registry in `--home` as the function does."""
    from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
    from modelhooks.bootstrap import reset

    client, repo = DistributionRegistry(oci.url), f"prune/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    digests = {tag: push(client, repo, tag, created=old) for tag in ("v1", "v2", "v3")}
    registry = SqliteModelRegistry(tmp_path / "registry.db")  # the CLI's, in --home
    try:
        World(tmp_path, registry).register(
            "bert", "1", f"oci://{oci.host}/{repo}@{digests['v1']}", digests["v1"], "oci"
        )
        reset()
        uri = f"oci://{oci.host}/{repo}"
        args = ("--stream", "v*", "--keep", "1", "--json", "--home", str(tmp_path))
        capsys.readouterr()
        assert prune("plan", uri, *args) == 0
        planned = json.loads(capsys.readouterr().out)
        assert [d["tag"] for d in planned["delete"]] == ["v2"]
        assert {d["tag"]: d["reason"] for d in planned["keep"]}["v1"] == "in use"
    finally:
        reset()
        registry.close()


def test_prune_keeps_a_manifest_a_live_referrer_refers_to(oci: Any) -> None:
    """prune with untagged manifests deleted: the base model v1 (beyond keep 1) has an
    adapter pushed with it as subject, registered live. Its referrers went first — the
    live adapter among them — then the base. v1's tag goes; the base and adapter stay."""
    from modelhooks.adapters.oci.clients import OciClients
    from modelhooks.core.retention import Policies
    from modelhooks.core.tenancy import Tenancy
    from modelhooks.events.model import ArtifactPushed, TagsPruned
    from modelhooks.handlers import load
    from modelhooks.handlers.register import register_model
    from tests.fakes.memory_registry import InMemoryModelRegistry

    client, repo = DistributionRegistry(oci.url), f"fn/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    base = push(client, repo, "v1", created=old)
    newest = push(client, repo, "v2", created=old)
    adapter = sign(client, repo, base)  # a referrer of the base
    models = InMemoryModelRegistry()
    live = ArtifactPushed(
        model="adapter", version="1", uri=f"oci://{oci.host}/{repo}@{adapter}", digest=adapter,
        store="oci",
    )  # fmt: skip
    register_model(CanonicalEvent.new(live, source="t"), live, registry=models)
    policy = Policy(streams=("v*",), keep=1, grace=timedelta(0), untagged=timedelta(hours=1))
    prune = load("prune").bind(
        {
            "oci": OciClients(allow_local=True),
            "registry": models,
            "retention": Policies(((f"{oci.host}/fn/*", policy),)),
            "tenancy": Tenancy(),
        }
    )
    pushed = ArtifactPushed(
        model=repo, version="v2", uri=f"oci://{oci.host}/{repo}@{newest}", digest=newest,
        store="oci",
    )  # fmt: skip
    (reply,) = prune.handle(CanonicalEvent.new(pushed, source="t", id="p"))
    assert isinstance(reply.data, TagsPruned) and reply.data.deleted == ["v1"]
    assert base not in reply.data.manifests and adapter not in reply.data.manifests
    assert client.manifest(repo, adapter)[1] == adapter
    assert client.manifest(repo, base)[1] == base
    assert [r["digest"] for r in client.referrers(repo, base)] == [adapter]


def test_prune_plan_without_a_registry_creates_none(
    oci: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`modelhooks prune plan` (and apply) created `<home>/registry.db` to read a registry
    that was not there: a plan changes nothing. Without one, no version is in use, and the
    plan says so."""
    from modelhooks.bootstrap import reset

    client, repo = DistributionRegistry(oci.url), f"prune/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    for tag in ("v1", "v2"):
        push(client, repo, tag, created=old)
    home = tmp_path / "home"
    home.mkdir()
    reset()
    try:
        uri = f"oci://{oci.host}/{repo}"
        args = ("--stream", "v*", "--keep", "1", "--json", "--home", str(home))
        capsys.readouterr()
        assert prune("plan", uri, *args) == 0
        out, err = capsys.readouterr()
        assert list(home.iterdir()) == []  # no registry.db
        assert [d["tag"] for d in json.loads(out)["delete"]] == ["v1"]
        assert "no model registry at" in err and "in use" in err
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(out)
        assert prune("apply", uri, "--plan", str(plan_file), "--home", str(home)) == 0
        assert sorted(client.tags(repo)) == ["v2"]
        assert list(home.iterdir()) == []
    finally:
        reset()


def test_prune_reads_each_planned_manifests_referrers_once(
    oci: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prune read the referrers of each manifest planned for deletion twice a run: once to
    spare what a staying referrer refers to (spare_referred), once to record what goes with
    it (referrers). One read each now, every page of each a request on a real registry."""
    from modelhooks.adapters.oci.clients import OciClients
    from modelhooks.core.retention import Policies
    from modelhooks.core.tenancy import Tenancy
    from modelhooks.events.model import ArtifactPushed, TagsPruned
    from modelhooks.handlers import load
    from tests.fakes.memory_registry import InMemoryModelRegistry

    client, repo = DistributionRegistry(oci.url), f"fn/{uuid.uuid4().hex[:8]}"
    old = datetime.now(UTC) - timedelta(days=30)
    digests = {tag: push(client, repo, tag, created=old) for tag in ("v1", "v2", "v3")}
    signatures = {sign(client, repo, digests[tag]) for tag in ("v1", "v2")}
    read: list[str] = []
    reading = DistributionRegistry.referrers

    def counted(self: DistributionRegistry, repo: str, digest: str) -> list[dict[str, Any]]:
        read.append(digest)
        return reading(self, repo, digest)

    monkeypatch.setattr(DistributionRegistry, "referrers", counted)
    policy = Policy(streams=("v*",), keep=1, grace=timedelta(0), untagged=timedelta(hours=1))
    prune = load("prune").bind(
        {
            "oci": OciClients(allow_local=True),
            "registry": InMemoryModelRegistry(),
            "retention": Policies(((f"{oci.host}/fn/*", policy),)),
            "tenancy": Tenancy(),
        }
    )
    pushed = ArtifactPushed(
        model=repo, version="v3", uri=f"oci://{oci.host}/{repo}@{digests['v3']}",
        digest=digests["v3"], store="oci",
    )  # fmt: skip
    (reply,) = prune.handle(CanonicalEvent.new(pushed, source="t", id="p"))
    assert isinstance(reply.data, TagsPruned)
    assert [t for t in reply.data.deleted if t.startswith("v")] == ["v1", "v2"]
    assert {digests["v1"], digests["v2"], *signatures} <= set(reply.data.manifests)
    assert {digests["v1"], digests["v2"]} <= set(read)
    assert sorted(read) == sorted(set(read))  # each once (twice before)
