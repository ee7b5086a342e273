"""MinIO bucket notification → `modelhooks serve` → register, on real servers."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.e2e.conftest import Served
from tests.servers.objectstores import Minio

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def test_a_model_landing_in_minio_gets_registered_once(
    minio: Minio, serve: Callable[..., Served]
) -> None:
    env = {
        "AWS_ACCESS_KEY_ID": minio.access_key,
        "AWS_SECRET_ACCESS_KEY": minio.secret_key,
        "AWS_DEFAULT_REGION": minio.region,
    }
    served = serve(
        minio.notify_port,
        "--ingress-route-auth",
        f"/minio-events=bearer:token={minio.notify_token}",
        "--ingress-auth",
        "bearer:token=not-for-minio",
        "--ingress-route-kinds",
        "/minio-events=s3",
        "--store-backend",
        "cloud",  # the ingress lists the version in MinIO to name it by its content
        "--store-s3-endpoint-url",
        minio.endpoint_url,
        env=env,
    )
    with minio.s3_client() as s3:
        s3.create_bucket(Bucket="e2e-models")
        s3.put_bucket_notification_configuration(
            Bucket="e2e-models",
            NotificationConfiguration={
                "QueueConfigurations": [
                    {"QueueArn": minio.notify_arn, "Events": ["s3:ObjectCreated:*"]}
                ]
            },
        )
        prefix = "models/sentiment v2/1/"  # a space: keys arrive URL-encoded
        s3.put_object(Bucket="e2e-models", Key=prefix + "weights.bin", Body=b"w" * 4096)
        s3.put_object(Bucket="e2e-models", Key=prefix + "config.json", Body=b"{}")
        marker = s3.put_object(Bucket="e2e-models", Key=prefix + "_SUCCESS", Body=b"")

        rows = served.wait_for("the registration", served.registrations)
        assert len(rows) == 1, rows
        (row,) = rows
        assert (row["model"], row["version"]) == ("sentiment v2", "1")
        assert row["uri"] == "s3://e2e-models/models/sentiment v2/1/"
        assert row["digest"].startswith("content-sha256:")  # named by what it holds
        assert marker["ETag"]
        assert row["artifact_state"] == "LIVE"

        # The version marked ready again, content unchanged: nothing new.
        s3.put_object(Bucket="e2e-models", Key=prefix + "_SUCCESS", Body=b"again")
        served.wait_for(
            "the second delivery to be handled",
            lambda: served.logs().count("register ok dev.modelhooks.artifact.pushed") >= 2,
        )
        assert served.registrations() == rows

        # Other content under the same version: refused as a conflict, nothing overwritten.
        s3.put_object(Bucket="e2e-models", Key=prefix + "weights.bin", Body=b"x" * 4096)
        s3.put_object(Bucket="e2e-models", Key=prefix + "_SUCCESS", Body=b"")
        served.wait_for("the conflict", lambda: '"status": 409' in served.logs())
        assert served.registrations() == rows


def test_an_s3_name_the_store_refuses_is_answered_400_not_redelivered(
    minio: Minio, serve: Callable[..., Served]
) -> None:
    """A notification or a replayed event naming what MinIO refuses as a name (`..`, an
    upper-case bucket) was answered 503 (the store 'failing'), redelivered for ever."""
    env = {
        "AWS_ACCESS_KEY_ID": minio.access_key,
        "AWS_SECRET_ACCESS_KEY": minio.secret_key,
        "AWS_DEFAULT_REGION": minio.region,
    }
    served = serve(
        minio.notify_port,
        "--ingress-auth",
        "bearer:token=replay-token",
        "--ingress-route-auth",
        f"/minio-events=bearer:token={minio.notify_token}",
        "--ingress-route-kinds",
        "/minio-events=s3;/replay=canonical",
        "--store-backend",
        "cloud",
        "--store-s3-endpoint-url",
        minio.endpoint_url,
        env=env,
    )
    samples = Path(__file__).parents[2] / "events" / "samples"
    notification = json.loads((samples / "s3-minio-put-marker.json").read_text())
    notification["Records"][0]["s3"]["bucket"]["name"] = "Models-Upper"
    answer = requests.post(
        f"{served.url}/minio-events",
        json=notification,
        headers={"Authorization": f"Bearer {minio.notify_token}"},
        timeout=30,
    )
    assert answer.status_code == 400, answer.text
    assert "Models-Upper" in answer.text

    pushed = json.loads((samples / "canonical-artifact-pushed.json").read_text())
    for i, uri in enumerate(["s3://models/models/m/../1/", "s3://models/models//m/1/"]):
        event = copy.deepcopy(pushed)
        event["id"] = f"hostile-{i}"
        event["data"].update(uri=uri, store="s3", digest="s3-etag:0")
        answer = requests.post(
            f"{served.url}/replay",
            json=event,
            headers={
                "Authorization": "Bearer replay-token",
                "Content-Type": "application/cloudevents+json",
            },
            timeout=30,
        )
        assert answer.status_code == 400, answer.text
        assert uri in answer.text
