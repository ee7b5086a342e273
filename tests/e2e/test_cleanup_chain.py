"""MinIO bucket notification → `modelhooks serve` → register; then the ApiServerSource's
Model delete → cleanup → the version's objects gone from MinIO, on real servers. A
redelivery deletes nothing; a location outside the namespace's is refused (403), with
nothing deleted, and cleanup answers with the refusal for the Model."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import requests

from modelhooks.events import samples
from tests.e2e.conftest import Served
from tests.servers.objectstores import Minio

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

TOKEN = "for-the-apiserver-source"


def model_deleted(name: str, uri: str) -> dict[str, Any]:
    """The recorded ApiServerSource delete of a Model, naming `uri` with policy Delete."""
    event = copy.deepcopy(samples.load("k8s-resource-delete"))
    event["id"], event["time"] = str(uuid.uuid4()), datetime.now(UTC).isoformat()
    event["name"] = event["data"]["metadata"]["name"] = name
    event["subject"] = f"/apis/modelhooks.dev/v1alpha1/namespaces/ml/models/{name}"
    event["data"]["spec"]["source"] = {"s3": {"uri": uri}}
    event["data"]["spec"]["deletionPolicy"] = "Delete"
    return event


def test_a_deleted_model_takes_its_objects_from_minio(
    minio: Minio, serve: Callable[..., Served]
) -> None:
    bucket, outside = f"ml-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    served = serve(
        minio.notify_port,
        "--ingress-route-auth", f"/minio-events=bearer:token={minio.notify_token}",
        "--ingress-auth", f"bearer:token={TOKEN}",
        "--ingress-route-kinds", "/minio-events=s3;/apiserver=kubernetes",
        "--store-backend", "cloud",
        "--store-s3-endpoint-url", minio.endpoint_url,
        "--tenancy-tenants", f"ml=s3://{bucket}",
        env={
            "AWS_ACCESS_KEY_ID": minio.access_key,
            "AWS_SECRET_ACCESS_KEY": minio.secret_key,
            "AWS_DEFAULT_REGION": minio.region,
        },
    )  # fmt: skip

    def post(event: dict[str, Any]) -> requests.Response:
        return requests.post(
            f"{served.url}/apiserver",
            data=json.dumps(event),
            headers={
                "Content-Type": "application/cloudevents+json",
                "Authorization": f"Bearer {TOKEN}",
            },
            timeout=30,
        )

    def cleanup(answer: requests.Response) -> dict[str, Any]:
        (outcome,) = [o for o in answer.json()["outcomes"] if o["function"] == "cleanup"]
        return outcome

    with minio.s3_client() as s3:

        def keys(name: str, prefix: str = "") -> list[str]:
            listed = s3.list_objects_v2(Bucket=name, Prefix=prefix)
            return sorted(o["Key"] for o in listed.get("Contents", []))

        for name in (bucket, outside):
            s3.create_bucket(Bucket=name)
        s3.put_bucket_notification_configuration(
            Bucket=bucket,
            NotificationConfiguration={
                "QueueConfigurations": [
                    {"QueueArn": minio.notify_arn, "Events": ["s3:ObjectCreated:*"]}
                ]
            },
        )
        version = "models/sentiment/1/"
        for key in ("weights.bin", "config.json", "model.sig"):
            s3.put_object(Bucket=bucket, Key=version + key, Body=key.encode())
        unrelated = ["models/sentiment/10/weights.bin", "models/other/1/weights.bin"]
        for key in unrelated:  # a neighbour prefix, another model: never ready, never ours
            s3.put_object(Bucket=bucket, Key=key, Body=b"unrelated")
        s3.put_object(Bucket=bucket, Key=version + "_SUCCESS", Body=b"")
        (row,) = served.wait_for("the registration", served.registrations)
        assert (row["model"], row["version"]) == ("sentiment", "1")
        uri = f"s3://{bucket}/{version}"
        assert row["uri"] == uri
        assert len(keys(bucket, version)) == 4

        deleted = model_deleted("sentiment", uri)
        answer = post(deleted)
        assert 200 <= answer.status_code < 300, answer.text
        assert cleanup(answer)["status"] == 200  # cleanup ran, with one purged reply
        assert keys(bucket, version) == []
        assert keys(bucket) == sorted(unrelated)

        again = post(deleted)  # the platform redelivers the same event
        assert 200 <= again.status_code < 300, again.text
        assert cleanup(again)["status"] < 300
        assert keys(bucket) == sorted(unrelated)

        # A Model of namespace ml naming a bucket ml may not act on: 403 (register's),
        # nothing deleted; cleanup tells the Model (an artifact.purged saying it refused)
        s3.put_object(Bucket=outside, Key="models/intruder/1/weights.bin", Body=b"w")
        foreign = f"s3://{outside}/models/intruder/1/"
        refused = post(model_deleted("intruder", foreign))
        assert refused.status_code == 403, refused.text
        # refused as the deletion is admitted (tenancy reads the Model's spec.source), naming
        # the bucket the namespace may not act on
        assert cleanup(refused)["status"] == 200
        assert [r.split("/")[-3] for r in cleanup(refused)["replies"]] == ["refused"]
        assert cleanup(refused)["error"]["details"]["location"] == f"s3://{outside}"
        assert f"s3://{outside}" in cleanup(refused)["error"]["message"]
        assert keys(outside) == ["models/intruder/1/weights.bin"]
        assert keys(bucket) == sorted(unrelated)
