"""boto3 against MinIO and google-cloud-storage against fake-gcs-server (real servers)."""

from __future__ import annotations

import uuid
from urllib.parse import unquote_plus

import pytest

from tests.servers import NotificationSink
from tests.servers.objectstores import FakeGcs, Minio

pytestmark = pytest.mark.integration

MiB = 2**20


def _bucket(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_minio_multipart_upload(minio: Minio) -> None:
    bucket = _bucket("multipart")
    parts = [b"a" * (5 * MiB), b"b" * (5 * MiB), b"tail"]
    with minio.s3_client() as s3:
        s3.create_bucket(Bucket=bucket)
        upload = s3.create_multipart_upload(Bucket=bucket, Key="models/m/1/weights.bin")
        done = [
            {
                "PartNumber": number,
                "ETag": s3.upload_part(
                    Bucket=bucket,
                    Key="models/m/1/weights.bin",
                    UploadId=upload["UploadId"],
                    PartNumber=number,
                    Body=body,
                )["ETag"],
            }
            for number, body in enumerate(parts, start=1)
        ]
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key="models/m/1/weights.bin",
            UploadId=upload["UploadId"],
            MultipartUpload={"Parts": done},
        )
        head = s3.head_object(Bucket=bucket, Key="models/m/1/weights.bin")
        assert head["ContentLength"] == sum(len(p) for p in parts)
        assert head["ETag"].strip('"').endswith("-3")
        body = s3.get_object(Bucket=bucket, Key="models/m/1/weights.bin", Range="bytes=-4")
        assert body["Body"].read() == b"tail"


def test_minio_delete_objects_1000_keys(minio: Minio) -> None:
    bucket = _bucket("bulk")
    keys = [f"models/m/1/shard-{i:04d}" for i in range(1000)]
    with minio.s3_client() as s3:
        s3.create_bucket(Bucket=bucket)
        for key in keys:
            s3.put_object(Bucket=bucket, Key=key, Body=b"x")
        listed = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="models/")
        assert sum(page.get("KeyCount", 0) for page in listed) == 1000
        result = s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
        )
        assert result.get("Errors", []) == []
        assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_minio_bucket_notification_reaches_listener(minio: Minio) -> None:
    bucket = _bucket("notify")
    with NotificationSink(minio.notify_port) as sink, minio.s3_client() as s3:
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_notification_configuration(
            Bucket=bucket,
            NotificationConfiguration={
                "QueueConfigurations": [
                    {
                        "QueueArn": minio.notify_arn,
                        "Events": ["s3:ObjectCreated:*"],
                        "Filter": {
                            "Key": {"FilterRules": [{"Name": "suffix", "Value": "_SUCCESS"}]}
                        },
                    }
                ]
            },
        )
        config = s3.get_bucket_notification_configuration(Bucket=bucket)
        assert config["QueueConfigurations"][0]["QueueArn"] == minio.notify_arn
        s3.put_object(Bucket=bucket, Key="models/m/1/weights.bin", Body=b"w")
        s3.put_object(Bucket=bucket, Key="models/m/1/_SUCCESS", Body=b"")
        delivery = sink.wait_for(lambda d: bucket.encode() in d.body, timeout=30)
    assert delivery.method == "POST"
    assert delivery.headers["authorization"] == f"Bearer {minio.notify_token}"
    record = delivery.json()["Records"][0]
    assert record["eventName"] == "s3:ObjectCreated:Put"
    assert record["s3"]["bucket"]["name"] == bucket
    # keys arrive URL-encoded, as from AWS S3
    assert record["s3"]["object"]["key"] == "models%2Fm%2F1%2F_SUCCESS"
    assert unquote_plus(record["s3"]["object"]["key"]) == "models/m/1/_SUCCESS"
    # the filter kept the weights file out
    assert not [d for d in sink.deliveries if b"weights.bin" in d.body]


def test_fake_gcs_upload_list_and_generation_preconditions(
    fake_gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.api_core.exceptions import PreconditionFailed

    for key, value in fake_gcs.env.items():
        monkeypatch.setenv(key, value)
    client = fake_gcs.storage_client()
    try:
        bucket = client.create_bucket(_bucket("gcs"))
        for name in ("models/m/1/weights.bin", "models/m/1/_SUCCESS", "models/n/1/x", "other"):
            bucket.blob(name).upload_from_string(name.encode())
        names = {b.name for b in client.list_blobs(bucket.name, prefix="models/m/")}
        assert names == {"models/m/1/weights.bin", "models/m/1/_SUCCESS"}

        blob = bucket.blob("models/m/1/weights.bin")
        blob.reload()
        generation = blob.generation
        assert generation
        with pytest.raises(PreconditionFailed):  # create-only write of an existing object
            bucket.blob("models/m/1/weights.bin").upload_from_string(b"v2", if_generation_match=0)
        bucket.blob("models/m/1/weights.bin").upload_from_string(
            b"v2", if_generation_match=generation
        )
        with pytest.raises(PreconditionFailed):  # the old generation is stale now
            bucket.blob("models/m/1/weights.bin").upload_from_string(
                b"v3", if_generation_match=generation
            )
        current = bucket.get_blob("models/m/1/weights.bin")
        assert current is not None
        assert current.download_as_bytes() == b"v2"
        assert current.generation != generation
    finally:
        client.close()
