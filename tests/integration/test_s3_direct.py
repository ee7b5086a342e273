"""S3 reads sent directly (modelhooks.adapters.object_store.s3_direct) against real MinIO:
once botocore has reached a bucket, GetObject and ListObjectsV2 go out without it and read
the same bytes and listings (keys that need quoting included); whatever does not succeed
that way goes through botocore again, with its errors."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from modelhooks.adapters.object_store.s3 import S3ObjectStore
from modelhooks.core.errors import NotFound, Unavailable
from tests.servers.objectstores import Minio

pytestmark = pytest.mark.integration

KEYS = {
    "m/plain.bin": bytes(range(256)) * 40,
    "m/a b+c%d/ü~e=f&g?h#i.bin": b"quoted" * 1000,
    "m/sp ace/+plus=%2F": b"encoded-looking",
    "m/empty": b"",
}


@pytest.fixture
def bucket(minio: Minio) -> Iterator[tuple[Any, str]]:
    with minio.s3_client() as client:
        name = f"direct-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=name)
        for key, data in KEYS.items():
            client.put_object(Bucket=name, Key=key, Body=data)
        yield client, name


def _no_botocore(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(**kwargs: Any) -> Any:
        raise AssertionError(f"sent through botocore: {kwargs}")

    monkeypatch.setattr(client, "get_object", refused)
    monkeypatch.setattr(client, "list_objects_v2", refused)


def test_reads_go_direct_once_botocore_reached_the_bucket(
    bucket: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, name = bucket
    store = S3ObjectStore(client)
    listed = list(S3ObjectStore(client, direct_reads=False).list(name, "m/"))
    assert store.read_range(name, "m/plain.bin", 0, 1) == b"\x00"  # botocore, then learnt
    _no_botocore(client, monkeypatch)

    assert list(store.list(name, "m/")) == listed  # same keys, sizes, ETags, generations
    assert sorted(i.key for i in listed) == sorted(KEYS)
    for key, data in KEYS.items():
        assert store.read_range(name, key, 0, len(data) + 10) == data
        assert b"".join(store.read_chunks(name, key, 0, len(data), 4096)) == data
    data = KEYS["m/plain.bin"]
    assert store.read_range(name, "m/plain.bin", 1000, 24) == data[1000:1024]
    pieces = list(store.read_chunks(name, "m/plain.bin", 7, 9000, 4096))
    assert [len(p) for p in pieces] == [4096, 4096, 808]
    assert b"".join(pieces) == data[7:9007]


def test_a_listing_teaches_the_bucket_too(
    bucket: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, name = bucket
    store = S3ObjectStore(client)
    assert len(list(store.list(name, "m/"))) == len(KEYS)  # botocore's listing, then learnt
    _no_botocore(client, monkeypatch)
    assert store.read_range(name, "m/sp ace/+plus=%2F", 0, 100) == KEYS["m/sp ace/+plus=%2F"]


def _error(request: Any, status: int, code: str) -> Any:
    """An S3 error answer to `request`, as a `before-send` hook returns one instead of
    sending it (the fault the server cannot be asked for)."""
    import urllib3
    from botocore.awsrequest import AWSResponse

    body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
    raw = urllib3.HTTPResponse(body=body, status=status, preload_content=False)
    return AWSResponse(request.url, status, {"content-length": str(len(body))}, raw)


def test_what_fails_directly_is_sent_through_botocore(bucket: tuple[Any, str]) -> None:
    """A direct GET answered 503 is sent again by botocore (whose retries and errors
    apply); a missing key is NotFound and a read past the end empty, as before."""
    client, name = bucket
    store = S3ObjectStore(client)
    assert store.read_range(name, "m/plain.bin", 0, 4) == KEYS["m/plain.bin"][:4]
    sent: list[str] = []

    def slow_down_once(request: Any, **_: Any) -> Any:
        sent.append(str(request.headers.get("Authorization", "")))
        return _error(request, 503, "SlowDown") if len(sent) == 1 else None

    client.meta.events.register("before-send.s3.GetObject", slow_down_once)
    try:
        assert store.read_range(name, "m/plain.bin", 4, 4) == KEYS["m/plain.bin"][4:8]
    finally:
        client.meta.events.unregister("before-send.s3.GetObject", slow_down_once)
    assert len(sent) == 2  # the direct GET (answered 503), then botocore's
    assert sent[0].startswith("AWS4-HMAC-SHA256 Credential=")

    with pytest.raises(NotFound):
        store.read_range(name, "m/absent", 0, 10)
    with pytest.raises(NotFound):
        list(store.read_chunks(name, "m/absent", 0, 10, 4096))
    assert store.read_range(name, "m/plain.bin", 1 << 20, 10) == b""  # past the end
    assert list(store.read_chunks(name, "m/plain.bin", 1 << 20, 10, 4096)) == []


def test_a_direct_body_cut_short_is_transient(bucket: tuple[Any, str]) -> None:
    """A body that ends before its Content-Length is Unavailable (the read resumes or the
    delivery is retried), never short data that would read as a changed object."""
    client, name = bucket
    store = S3ObjectStore(client)
    assert store.read_range(name, "m/plain.bin", 0, 4) == KEYS["m/plain.bin"][:4]

    def cut(request: Any, **_: Any) -> Any:
        import urllib3
        from botocore.awsrequest import AWSResponse

        raw = urllib3.HTTPResponse(body=b"0123456789", status=206, preload_content=False)
        return AWSResponse(request.url, 206, {"content-length": "100"}, raw)

    client.meta.events.register("before-send.s3.GetObject", cut)
    try:
        with pytest.raises(Unavailable):
            store.read_range(name, "m/plain.bin", 0, 100)
        with pytest.raises(Unavailable):
            list(store.read_chunks(name, "m/plain.bin", 0, 100, 64))
    finally:
        client.meta.events.unregister("before-send.s3.GetObject", cut)


def test_a_bucket_that_refuses_direct_requests_is_left_to_botocore(
    bucket: tuple[Any, str],
) -> None:
    """A direct GET refused (403) where botocore's then succeeds: the bucket's reads go
    through botocore alone from then on (one request more, once)."""
    client, name = bucket
    store = S3ObjectStore(client)
    assert store.read_range(name, "m/plain.bin", 0, 4) == KEYS["m/plain.bin"][:4]
    direct: list[bool] = []

    def refuse_direct(request: Any, **_: Any) -> Any:
        direct.append("amz-sdk-invocation-id" not in request.headers)  # botocore's header
        return _error(request, 403, "AccessDenied") if direct[-1] else None

    client.meta.events.register("before-send.s3.GetObject", refuse_direct)
    try:
        for start in range(3):
            data = store.read_range(name, "m/plain.bin", start, 4)
            assert data == KEYS["m/plain.bin"][start : start + 4]
    finally:
        client.meta.events.unregister("before-send.s3.GetObject", refuse_direct)
    assert direct == [True, False, False, False]
    assert len(list(store.list(name, "m/"))) == len(KEYS)  # (through botocore too)
