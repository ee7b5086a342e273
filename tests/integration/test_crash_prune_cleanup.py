"""prune and cleanup killed (SIGKILL) between their listing and their deletes, then the
events delivered again, duplicated and shuffled: nothing outside the policy is deleted, and
the end state is the one the same events leave without the crash (a run on a twin of the
repository or store, alongside)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from modelhooks import bootstrap
from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.bootstrap import build
from modelhooks.core.errors import NotFound
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.retention import Policies, Policy
from modelhooks.core.settings import load_settings
from modelhooks.core.tenancy import Tenancy
from modelhooks.delivery.encoding import structured
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
from modelhooks.handlers import load
from modelhooks.handlers.register import archive_model, register_model
from tests.contract.register_order import snapshot
from tests.integration.test_prune_cli import push

pytestmark = pytest.mark.integration

OLD = datetime(2026, 1, 1, tzinfo=UTC)
TAGS = ("v1.0.0", "v1.1.0", "v1.2.0", "v1.3.0", "v1.4.0", "v1.5.0", "latest")
POLICY = Policy(
    streams=("v*",), keep=2, grace=timedelta(0), untagged=timedelta(0)
)  # the manifests the plan untags go too

# The prune function as the tests bind it, in a child process that SIGKILLs itself when
# prune, its tags deleted, comes to delete their manifests.
PRUNE_KILLED = textwrap.dedent(
    """
    import json, os, signal, sys
    from datetime import timedelta
    from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
    from modelhooks.adapters.oci.clients import OciClients
    from modelhooks.adapters.oci.distribution import DistributionRegistry
    from modelhooks.core.retention import Policies, Policy
    from modelhooks.core.tenancy import Tenancy
    from modelhooks.handlers import load
    from modelhooks.delivery.dedupe import _replies

    pattern, event = sys.argv[1], _replies(sys.argv[2].encode())[0]
    deleting = DistributionRegistry.delete_manifests

    def killed(self, repo, digests):
        if digests and any(d for d in digests):  # the manifests (no referrers here)
            os.kill(os.getpid(), signal.SIGKILL)
        return deleting(self, repo, digests)

    DistributionRegistry.delete_manifests = killed
    policy = Policy(streams=("v*",), keep=2, grace=timedelta(0), untagged=timedelta(0))
    prune = load("prune").bind({
        "oci": OciClients(allow_local=True), "registry": SqliteModelRegistry(sys.argv[3]),
        "retention": Policies(((pattern, policy),)), "tenancy": Tenancy(),
    })
    prune.handle(event)
    """
)


def _prune(pattern: str, registry: ModelRegistry) -> Any:
    return load("prune").bind(
        {
            "oci": OciClients(allow_local=True),
            "registry": registry,
            "retention": Policies(((pattern, POLICY),)),
            "tenancy": Tenancy(),
        }
    )


def _state(client: DistributionRegistry, repo: str, digests: set[str]) -> tuple[Any, ...]:
    tags = {t: client.resolve(repo, t) for t in sorted(client.tags(repo))}
    stored = set()
    for digest in digests:
        try:
            client.manifest(repo, digest)
            stored.add(digest)
        except NotFound:
            pass
    return tags, stored


def test_prune_killed_between_its_untags_and_its_manifest_deletes(
    ociregistry: Any, tmp_path: Path
) -> None:
    """A repository whose versions were registered and their model deleted since (archived:
    no longer in use), then two pushes: the first one's prune untags the old tags and is
    killed before their manifests go (the distribution API lists no untagged manifest: they
    were left for good). Its redelivery and the next push, shuffled and duplicated, end
    where the same pushes end on a twin repository without the crash."""
    client = DistributionRegistry(ociregistry.url)
    registry = SqliteModelRegistry(tmp_path / "registry.db")
    run = uuid.uuid4().hex[:8]
    crashed, twin = f"crash-{run}/a", f"crash-{run}/b"
    digests: dict[str, str] = {}

    def pushed(repo: str, tag: str, hours: int) -> CanonicalEvent:
        digests[tag] = push(client, repo, tag, created=OLD + timedelta(hours=hours))
        uri = f"oci://{ociregistry.host}/{repo}@{digests[tag]}"
        data = ArtifactPushed(model=repo, version=tag, uri=uri, digest=digests[tag],
                              store="oci", tag=tag)  # fmt: skip
        return CanonicalEvent(id=f"{repo}-{tag}", source="t", type=data.TYPE, data=data,
                              time=OLD + timedelta(hours=hours))  # fmt: skip

    for repo in (crashed, twin):
        for n, tag in enumerate(TAGS):
            event = pushed(repo, tag, n)
            register_model(event, event.data, registry=registry)  # type: ignore[arg-type]
        gone = ModelDeleted(name=repo)
        archive_model(CanonicalEvent(id=f"{repo}-d", source="t", type=gone.TYPE, data=gone,
                                     time=OLD + timedelta(hours=9)), gone, registry=registry)  # fmt: skip
    pattern = f"{ociregistry.host}/crash-{run}/*"

    first = pushed(crashed, "v1.6.0", 10)
    child = subprocess.run(
        [sys.executable, "-c", PRUNE_KILLED, pattern, json.dumps([structured(first)]),
         str(tmp_path / "registry.db")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert set(TAGS[:4]) - set(client.tags(crashed)), "the kill came after some untags"
    try:
        prune = _prune(pattern, registry)
        later = pushed(crashed, "v1.7.0", 11)
        deliveries = [first, first, later, later]  # redelivered, the next push, duplicates
        random.Random(3).shuffle(deliveries)
        for event in deliveries:
            prune.handle(event)
        for event in [pushed(twin, "v1.6.0", 10), pushed(twin, "v1.7.0", 11)]:
            prune.handle(event)
    finally:
        registry.close()

    everything = set(digests.values())
    assert _state(client, crashed, everything) == _state(client, twin, everything)
    tags, stored = _state(client, crashed, everything)
    assert sorted(tags) == ["latest", "v1.6.0", "v1.7.0"]  # the policy's: nothing else went
    assert stored == {digests[t] for t in tags}


# `modelhooks serve`'s functions on a home, in a child process that SIGKILLs itself when
# cleanup, its listing made, has deleted half of what it planned.
CLEANUP_KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from modelhooks.adapters.object_store.local import LocalObjectStore
    from modelhooks.bootstrap import build
    from modelhooks.core.settings import load_settings
    from modelhooks.delivery.dedupe import _replies

    home, events = sys.argv[1], _replies(sys.argv[2].encode())
    deleting = LocalObjectStore.delete_many

    def killed(self, bucket, objects, *, versions=False):
        deleting(self, bucket, objects[: len(objects) // 2], versions=versions)
        os.kill(os.getpid(), signal.SIGKILL)

    LocalObjectStore.delete_many = killed
    broker = build(load_settings(env={"MODELHOOKS_HOME": home})).broker()
    for event in events:
        broker.publish(event)
    """
)


def _cleanup_events(home: Path) -> list[CanonicalEvent]:
    """Versions of `bert` pushed before and after its deletion (policy Delete), and `gpt`,
    live, laid in `home`'s store; the deletion last."""
    events = []
    for model, hours in (("bert", (0, 3, 6, 12)), ("gpt", (1, 2))):
        for n, h in enumerate(hours):
            for name in ("weights.bin", "config.json", "_SUCCESS"):
                lay = home / "store" / "models" / "models" / model / str(n)
                lay.mkdir(parents=True, exist_ok=True)
                (lay / name).write_bytes(f"{model} {n} {name}".encode())
            data = ArtifactPushed(
                model=model, version=str(n), uri=f"gs://models/models/{model}/{n}/",
                digest=f"gcs-generation:{n}", store="gcs",
            )  # fmt: skip
            events.append(CanonicalEvent(id=f"{model}-{n}", source="t", type=data.TYPE,
                                         data=data, time=OLD + timedelta(hours=h)))  # fmt: skip
    gone = ModelDeleted(name="bert", spec={"deletionPolicy": "Delete"})
    return [*events, CanonicalEvent(id="bert-d", source="t", type=gone.TYPE, data=gone,
                                    time=OLD + timedelta(hours=10))]  # fmt: skip


def _end_state(home: Path) -> tuple[Any, ...]:
    store = home / "store"
    files = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    registry = SqliteModelRegistry(home / "registry.db")
    try:
        states = {  # not the digests: a local file's generation is its own (mtime)
            name: (state, {v: s for v, (s, _) in versions.items()})
            for name, (state, versions) in snapshot(registry, {"bert", "gpt"}).items()
        }
        return files, states
    finally:
        registry.close()


def test_cleanup_killed_between_its_listing_and_its_deletes(tmp_path: Path) -> None:
    """The pushes, then the deletion, whose cleanup is killed halfway through its deletes;
    then every event again, duplicated and shuffled, on a restarted process: the end state
    of the same deliveries without the kill, and nothing of a live version deleted."""
    crashed, twin = tmp_path / "crashed", tmp_path / "twin"
    first = _cleanup_events(crashed)
    _cleanup_events(twin)
    body = json.dumps([structured(e) for e in first])
    child = subprocess.run(
        [sys.executable, "-c", CLEANUP_KILLED, str(crashed), body],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    left = {p.name for p in (crashed / "store" / "models" / "models" / "bert").rglob("*")}
    assert "weights.bin" in left or "config.json" in left, "killed before all went"
    rng = random.Random(8)
    again = first + rng.sample(first, 4)
    rng.shuffle(again)
    for home, deliveries in ((crashed, again), (twin, first + again)):
        broker = build(load_settings(env={"MODELHOOKS_HOME": str(home)})).broker()
        for event in deliveries:
            assert all(o.status < 300 for o in broker.publish(event)), event.id
        bootstrap.reset()
    files, registered = _end_state(crashed)
    assert (files, registered) == _end_state(twin)
    kept = {f.rsplit("/", 1)[0] for f in files}
    assert kept == {"models/models/bert/3", "models/models/gpt/0", "models/models/gpt/1"}
