"""A model lands in MinIO → `modelhooks serve` registers it, then signs it where it lies
(streamed from MinIO) → the upstream-format signature verifies with `modelhooks verify`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.e2e.conftest import MODELHOOKS, Served
from tests.servers.objectstores import Minio

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def keypair(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = directory / "key.pem", directory / "key.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def test_a_landed_model_is_registered_then_signed_and_verifies(
    minio: Minio, serve: Callable[..., Served], tmp_path: Path
) -> None:
    private, public = keypair(tmp_path)
    aws = {
        "AWS_ACCESS_KEY_ID": minio.access_key,
        "AWS_SECRET_ACCESS_KEY": minio.secret_key,
        "AWS_DEFAULT_REGION": minio.region,
        "AWS_ENDPOINT_URL": minio.endpoint_url,
    }
    served = serve(
        minio.notify_port,
        "--ingress-route-auth",
        f"/minio-events=bearer:token={minio.notify_token}",
        "--ingress-auth",
        "bearer:token=only-for-the-routes-above",
        "--store-backend",
        "cloud",
        "--store-s3-endpoint-url",
        minio.endpoint_url,
        "--signing-key",
        str(private),
        env=aws,
    )
    with minio.s3_client() as s3:
        s3.create_bucket(Bucket="signed-models")
        s3.put_bucket_notification_configuration(
            Bucket="signed-models",
            NotificationConfiguration={
                "QueueConfigurations": [
                    {"QueueArn": minio.notify_arn, "Events": ["s3:ObjectCreated:*"]}
                ]
            },
        )
        prefix = "models/bert/7/"
        s3.put_object(Bucket="signed-models", Key=prefix + "weights.bin", Body=os.urandom(3 << 20))
        s3.put_object(Bucket="signed-models", Key=prefix + "config.json", Body=b'{"layers": 12}')
        s3.put_object(Bucket="signed-models", Key=prefix + "_SUCCESS", Body=b"")

        def signed() -> dict[str, str] | None:
            model = served.registry.get_model("bert")
            version = served.registry.get_version(model.id, "7") if model else None
            props = version.custom_properties if version else {}
            return dict(props) if "signature.uri" in props else None

        props = served.wait_for("the signature to be recorded", signed, timeout=60)
        assert props["signature.uri"] == "s3://signed-models/models/bert/7/model.sig"
        assert props["signature.root_digest"].startswith("sha256:")
        body = s3.get_object(Bucket="signed-models", Key=prefix + "model.sig")["Body"].read()
        assert b"https://model_signing/signature/v1.0" in body or b"dsseEnvelope" in body

    verify = subprocess.run(
        [
            MODELHOOKS,
            "verify",
            "s3://signed-models/models/bert/7/",
            "--public-key",
            str(public),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **aws},
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert props["signature.root_digest"] in verify.stdout
