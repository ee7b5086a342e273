"""`modelhooks serve` SIGKILLed after a transfer took effect and answered, before the
delivery log's group commit wrote its record (the kill lands there almost always), on
the real MinIO and distribution v3: the staging bucket emptied, the platform delivers the
request again to the restarted serve. It is answered as the first time, the artifact stays
LIVE and nothing is copied (it copied again: 404 for good, the artifact ABANDONED)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets
import signal
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.core.records import ArtifactState
from modelhooks.events import requests as examples
from tests.e2e.conftest import Served
from tests.e2e.packaging import free_port
from tests.servers.objectstores import Minio
from tests.servers.registries import OciRegistry

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def _answer(url: str, event: dict[str, Any]) -> tuple[int, Any]:
    req = urllib.request.Request(
        url,
        data=json.dumps(event).encode(),
        headers={"Content-Type": "application/cloudevents+json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _recorded(home: Path, event_id: str) -> bool:
    db = home / "deliveries.db"
    if not db.exists():
        return False
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return bool(conn.execute("SELECT 1 FROM deliveries WHERE id=?", (event_id,)).fetchone())


def test_a_transfer_killed_before_its_record_and_redelivered_with_its_source_gone(
    minio: Minio, distribution3: OciRegistry, serve: Callable[..., Served], tmp_path: Path
) -> None:
    bucket = f"crash-transfer-{secrets.token_hex(4)}"
    with minio.s3_client() as s3:
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="models/bert/1/weights.bin", Body=os.urandom(50_000))
    port = free_port()
    home = tmp_path / f"home-{port}"
    flags = ("--store-allow-local-targets", "true")
    env = {
        "MODEL_SYNC_SOURCE_AWS_ACCESS_KEY_ID": minio.access_key,
        "MODEL_SYNC_SOURCE_AWS_SECRET_ACCESS_KEY": minio.secret_key,
        "MODEL_SYNC_SOURCE_AWS_ENDPOINT": minio.endpoint_url,
        "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state"),
    }
    served = serve(port, *flags, env=env)
    for attempt in range(20):
        event: dict[str, Any] = copy.deepcopy(examples.load("transfer-requested"))
        event["id"] = f"transfer-{attempt}-{secrets.token_hex(4)}"
        event["data"].update(
            source={"type": "s3", "bucket": bucket, "key": "models/bert/1/", "region": minio.region},
            destination={"type": "oci", "uri": f"{distribution3.host}/crash-transfer/{bucket}:{attempt}",
                         "format": "artifact"},
            model={"name": f"crash-transfer-{bucket}"},
            version={"name": str(attempt)},
        )  # fmt: skip
        first = _answer(f"{served.url}/functions/transfer", event)
        assert first[0] == 200, first
        os.kill(served.process.pid, signal.SIGKILL)
        served.process.wait(timeout=10)
        if not _recorded(home, event["id"]):
            break
        served = serve(port, *flags, env=env)
    else:
        pytest.fail("every record was written before the kill")
    with minio.s3_client() as s3:  # the staging bucket emptied after the copy
        s3.delete_object(Bucket=bucket, Key="models/bert/1/weights.bin")

    again = serve(port, *flags, env=env)
    assert _answer(f"{again.url}/functions/transfer", event) == first
    registry = SqliteModelRegistry(home / "registry.db")
    try:
        model = registry.get_model(event["data"]["model"]["name"])
        assert model is not None
        version = registry.get_version(model.id, str(attempt))
        assert version is not None
        (artifact,) = registry.list_artifacts(version.id)
        assert artifact.state == ArtifactState.LIVE, artifact.custom_properties
    finally:
        registry.close()
