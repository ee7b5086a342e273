"""MinIO (S3, webhook bucket notifications), fake-gcs-server and gcp-storage-emulator (GCS JSON
API) on loopback."""

from __future__ import annotations

import contextlib
import secrets
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.servers._proc import Process, free_port
from tests.servers.recipes import RECIPES

MINIO_NOTIFY_ID = "MODELHOOKS"


def _status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as response:
        status: int = response.status
        return status


@dataclass(frozen=True)
class Minio:
    """S3 endpoint plus one webhook notification target.

    The target (``notify_arn`` = ``arn:minio:sqs::MODELHOOKS:webhook``) posts to
    ``notify_url`` = ``http://127.0.0.1:<notify_port>/minio-events`` with
    ``Authorization: Bearer <notify_token>``. MinIO does not own that port: a test (or the
    e2e layer's function) listens on ``notify_port`` itself, e.g. with
    ``NotificationSink(minio.notify_port)``, and subscribes a bucket with boto3's
    ``put_bucket_notification_configuration`` using ``notify_arn`` as QueueArn. Events
    emitted while nobody listens are dropped (no queue dir).
    """

    endpoint_url: str
    access_key: str
    secret_key: str
    region: str
    notify_port: int
    notify_url: str
    notify_token: str
    notify_arn: str
    log_files: tuple[Path, ...]

    @contextlib.contextmanager
    def s3_client(self) -> Iterator[Any]:
        """A boto3 S3 client for this server (closed on exit)."""
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )
        try:
            yield client
        finally:
            client.close()


def start_minio(workdir: Path) -> tuple[Minio, list[Process]]:
    port, console, notify_port = free_port(), free_port(), free_port()
    access, secret = "modelhooks", secrets.token_hex(16)
    notify_token = secrets.token_hex(16)
    notify_url = f"http://127.0.0.1:{notify_port}/minio-events"
    env = {
        "MINIO_ROOT_USER": access,
        "MINIO_ROOT_PASSWORD": secret,
        "MINIO_BROWSER": "off",
        "MINIO_UPDATE": "off",
        f"MINIO_NOTIFY_WEBHOOK_ENABLE_{MINIO_NOTIFY_ID}": "on",
        f"MINIO_NOTIFY_WEBHOOK_ENDPOINT_{MINIO_NOTIFY_ID}": notify_url,
        f"MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_{MINIO_NOTIFY_ID}": notify_token,
    }
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    process = Process(
        "minio",
        [
            RECIPES["minio"].binary(),
            "server",
            workdir / "data",
            "--address",
            f"127.0.0.1:{port}",
            "--console-address",
            f"127.0.0.1:{console}",
        ],
        env=env,
        log_path=workdir / "minio.log",
    )
    url = f"http://127.0.0.1:{port}"
    process.wait_ready(lambda: _status(f"{url}/minio/health/ready") == 200, timeout=60)
    info = Minio(
        endpoint_url=url,
        access_key=access,
        secret_key=secret,
        region="us-east-1",
        notify_port=notify_port,
        notify_url=notify_url,
        notify_token=notify_token,
        notify_arn=f"arn:minio:sqs::{MINIO_NOTIFY_ID}:webhook",
        log_files=(process.log_path,),
    )
    return info, [process]


@dataclass(frozen=True)
class FakeGcs:
    """fake-gcs-server (memory backend). Clients find it through ``STORAGE_EMULATOR_HOST``
    (``env``); ``storage_client()`` builds an anonymous google-cloud-storage client.
    Its JSON batch endpoint is not implemented: do not use ``client.batch()``.
    """

    url: str
    project: str
    log_files: tuple[Path, ...]

    @property
    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.url}

    def storage_client(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=self.project,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.url},
        )


def start_fake_gcs(workdir: Path) -> tuple[FakeGcs, list[Process]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = Process(
        "fake-gcs-server",
        [
            RECIPES["fake-gcs-server"].binary(),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-backend",
            "memory",
            "-public-host",
            f"127.0.0.1:{port}",
            "-external-url",
            url,
            "-log-level",
            "info",
        ],
        log_path=workdir / "fake-gcs-server.log",
        cwd=workdir,
    )
    process.wait_ready(lambda: _status(f"{url}/storage/v1/b") == 200, timeout=30)
    return FakeGcs(url=url, project="modelhooks-test", log_files=(process.log_path,)), [process]


def start_gcs_emulator(workdir: Path) -> tuple[FakeGcs, list[Process]]:
    """gcp-storage-emulator (in memory), with the same client side as fake-gcs-server's."""
    RECIPES["gcp-storage-emulator"].binary()  # installed (its module is what runs)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = Process(
        "gcp-storage-emulator",
        [
            sys.executable,
            "-m",
            "gcp_storage_emulator",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
        ],
        log_path=workdir / "gcp-storage-emulator.log",
        cwd=workdir,
    )
    process.wait_ready(lambda: _status(f"{url}/storage/v1/b") == 200, timeout=30)
    return FakeGcs(url=url, project="modelhooks-test", log_files=(process.log_path,)), [process]
