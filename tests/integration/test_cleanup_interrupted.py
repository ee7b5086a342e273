"""cleanup stopped halfway through a version's deletes (a crash, the store failing a
request) on MinIO and fake-gcs-server: the version must not be left ready (its marker
there) with part of its files gone, where a consumer, admission or a redelivered push
takes it for whole. The marker goes first, in a request of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.object_store.gcs import GcsObjectStore
from modelhooks.adapters.object_store.s3 import S3ObjectStore
from modelhooks.core import cleanup as core_cleanup
from modelhooks.core.errors import Throttled, Unavailable
from tests.integration.test_cleanup_stores import Bucket, bucket, store_world

pytestmark = pytest.mark.integration
__all__ = ["bucket"]  # the fixture, used by name

# listed in this order: digits and capitals sort before the marker `_SUCCESS`
FILES = ("0.bin", "1.bin", "Weights.bin", "_SUCCESS", "config.json", "model.sig")


def test_a_delete_stopped_halfway_leaves_no_ready_version(
    tmp_path: Path, bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    for file in FILES:
        bucket.put(f"models/bert/1/{file}", file.encode())
    world = store_world(tmp_path, bucket)
    uri = f"{bucket.scheme}://{bucket.name}/models/bert/1/"
    world.register("bert", "1", uri, "etag:1", bucket.kind)

    monkeypatch.setattr(core_cleanup, "CHUNK", 2)  # several requests for a small version
    store = S3ObjectStore if bucket.kind == "s3" else GcsObjectStore
    deleting, calls = store.delete_many, []

    def stopped(self: Any, name: str, objects: Any, **kw: Any) -> dict[str, str]:
        calls.append([o.key for o in objects])
        if len(calls) > 1:  # the store fails the second request: nothing more goes
            raise Unavailable("the store did not answer")
        return deleting(self, name, objects, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(store, "delete_many", stopped)
    with pytest.raises(Unavailable):
        world.delete("bert", deletionPolicy="Delete")
    left = bucket.keys("models/bert/1/")
    assert len(left) < len(FILES)  # something went
    assert "models/bert/1/_SUCCESS" not in left, f"ready with files gone: {left}"

    monkeypatch.setattr(store, "delete_many", deleting)  # the redelivery finishes it
    (reply,) = world.delete("bert", deletionPolicy="Delete")
    assert bucket.keys("models/bert/1/") == [] and not reply.failed


def test_a_huge_version_is_deleted_a_bounded_batch_a_delivery(
    tmp_path: Path, bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version of more objects than one delivery deletes (MAX_DELETES, lowered here):
    each delivery lists no further than its batch, deletes it, the marker in the first,
    and answers Throttled (429: the platform redelivers) until the last answers the purge;
    the neighbouring version stays. Without it, one delivery listed and deleted them all
    however many there were, past any deadline or memory."""
    files = [f"shard-{n:03}.bin" for n in range(25)] + ["_SUCCESS"]
    for file in files:
        bucket.put(f"models/bert/1/{file}", b"x")
    bucket.put("models/bert/10/_SUCCESS", b"x")  # a neighbour the prefix must not reach
    world = store_world(tmp_path, bucket)
    world.register(
        "bert", "1", f"{bucket.scheme}://{bucket.name}/models/bert/1/", "e:1", bucket.kind
    )
    monkeypatch.setattr(core_cleanup, "MAX_DELETES", 10)

    with pytest.raises(Throttled, match="more remain"):
        world.delete("bert", deletionPolicy="Delete")
    left = bucket.keys("models/bert/1/")
    assert len(left) == len(files) - 10 and "models/bert/1/_SUCCESS" not in left
    with pytest.raises(Throttled):
        world.delete("bert", deletionPolicy="Delete")
    (reply,) = world.delete("bert", deletionPolicy="Delete")
    assert len(reply.deleted) == 6 and not reply.failed
    assert bucket.keys("models/bert/") == ["models/bert/10/_SUCCESS"]
