"""Names an event carries that the S3 store refuses (MinIO, a real server): bad input, a
400 naming them, never a store failure (503, redelivered for ever)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.object_store.s3 import S3ObjectStore
from modelhooks.core.errors import BadRequest
from modelhooks.core.stores import Stores
from tests.servers.objectstores import Minio

pytestmark = pytest.mark.integration

HOSTILE_KEYS = [
    "models/m/../1/_SUCCESS",  # a `..` segment
    "models/m/./1/_SUCCESS",  # a `.` segment
    "models//m/1/_SUCCESS",  # an empty segment
    "models/a\0b/1/_SUCCESS",  # NUL
    "models/" + "x" * 1100 + "/_SUCCESS",  # over S3's 1024 bytes
]


@pytest.fixture(scope="module")
def s3(minio: Minio) -> Iterator[tuple[S3ObjectStore, str]]:
    bucket = f"names-{uuid.uuid4().hex[:12]}"
    with minio.s3_client() as client:
        client.create_bucket(Bucket=bucket)
        yield S3ObjectStore(client), bucket


def _call(store: S3ObjectStore, op: str, bucket: str, key: str) -> Any:
    if op == "stat":
        return store.stat(bucket, key)
    if op == "list":
        return list(store.list(bucket, key))
    if op == "read":
        return store.read_range(bucket, key, 0, 16)
    return store.put(bucket, key, b"{}", if_absent=True)


@pytest.mark.parametrize("op", ["stat", "list", "read", "put"])
@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=lambda k: repr(k[:24]))
def test_a_key_the_store_refuses_is_bad_input_naming_it(
    s3: tuple[S3ObjectStore, str], op: str, key: str
) -> None:
    store, bucket = s3
    if op == "list" and len(key) > 1024:
        assert _call(store, op, bucket, key) == []  # a listing of a long prefix: nothing
        return
    with pytest.raises(BadRequest) as refused:
        _call(store, op, bucket, key)
    assert refused.value.details["key"] == key
    assert f"s3://{bucket}/" in refused.value.message


@pytest.mark.parametrize("bucket", ["Models-Upper", "..", "b" * 70])
@pytest.mark.parametrize("op", ["stat", "list", "read", "put"])
def test_a_bucket_name_the_store_refuses_is_bad_input(
    s3: tuple[S3ObjectStore, str], op: str, bucket: str
) -> None:
    store, _ = s3
    with pytest.raises(BadRequest) as refused:
        _call(store, op, bucket, "models/m/1/_SUCCESS")
    assert refused.value.details["bucket"] == bucket


def test_a_missing_object_or_bucket_is_still_none_or_not_found(
    s3: tuple[S3ObjectStore, str],
) -> None:
    store, bucket = s3
    assert store.stat(bucket, "models/m/1/_SUCCESS") is None
    assert store.stat(f"gone-{uuid.uuid4().hex[:8]}", "models/m/1/_SUCCESS") is None


@pytest.mark.parametrize("bucket", ["b" * 256, "b" * 300])
def test_a_bucket_past_any_store_s_length_is_bad_input_before_a_request(
    s3: tuple[S3ObjectStore, str], tmp_path: Path, bucket: str
) -> None:
    """botocore refuses a bucket of more than 255 characters itself (ParamValidationError),
    which was taken as the store failing (503, redelivered for ever)."""
    store, _ = s3
    stores = Stores({"s3": lambda: store}, local_root=tmp_path)
    with pytest.raises(BadRequest, match="not a bucket name"):
        found, name, key = stores.resolve(f"s3://{bucket}/models/m/1/")
        list(found.list(name, key))
