"""Tenancy and cleanup on MinIO: team-b's live model `gpt` sits in a bucket both teams may
use. team-a's Model of the same name naming team-b's location, deleted with Delete (or
any deletion team-a sends naming `gpt`), took team-b's files: cleanup counted every
version of the model named `gpt` pushed before the deletion as dead, whoever's it was,
while register refused team-a the archiving of team-b's model (it stayed live). A
model another namespace owns keeps its live versions in use now."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from modelhooks.events.model import ArtifactPurged, ArtifactPushed, CanonicalEvent, ModelDeleted
from modelhooks.handlers.register import register_model
from tests.integration.test_cleanup_stores import T0, Bucket, bucket, store_world

pytestmark = pytest.mark.integration
__all__ = ["bucket"]  # the fixture, used by name


def test_a_tenant_cannot_clean_up_anothers_live_model(tmp_path: Path, bucket: Bucket) -> None:
    shared = f"{bucket.scheme}://{bucket.name}"
    world = store_world(
        tmp_path, bucket, MODELHOOKS_TENANCY_TENANTS=f"team-a={shared};team-b={shared}"
    )
    files = ("weights.bin", "_SUCCESS")
    for file in files:
        bucket.put(f"models/gpt/1/{file}", file.encode())
        bucket.put(f"models/mine/1/{file}", file.encode())
    uri = f"{shared}/models/gpt/1/"
    pushed = ArtifactPushed(
        model="gpt", version="1", uri=uri, digest="e:1", store=bucket.kind, namespace="team-b"
    )
    event = CanonicalEvent(id="p-gpt", source="t", type=pushed.TYPE, data=pushed, time=T0)
    register_model(event, pushed, registry=world.registry)

    def delete(name: str, source: str, namespace: str) -> Any:
        spec = {"deletionPolicy": "Delete", "source": {bucket.kind: {"uri": source}}}
        data = ModelDeleted(name=name, namespace=namespace, spec=spec)
        at = T0 + timedelta(days=1)
        event = CanonicalEvent(id=f"d-{name}", source="t", type=data.TYPE, data=data, time=at)
        (reply,) = [r.data for r in world.cleanup.handle(event)]
        assert isinstance(reply, ArtifactPurged)
        return reply

    reply = delete("gpt", uri, "team-a")
    assert reply.deleted == [] and reply.kept, reply
    assert bucket.keys("models/gpt/1/") == [f"models/gpt/1/{f}" for f in sorted(files)]

    reply = delete("mine", f"{shared}/models/mine/1/", "team-a")  # its own: goes
    assert sorted(reply.deleted) == [f"models/mine/1/{f}" for f in sorted(files)]
