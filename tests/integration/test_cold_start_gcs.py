"""A cold start's first GCS push (issue 22): the register target, in a fresh interpreter as
functions-framework starts it, answers an Eventarc finalize of a real model on
fake-gcs-server (its listing gives the content digest) without importing
google-cloud-storage and what it brings (google-api-core, protobuf, grpc): the listing goes
over the JSON API (modelhooks.adapters.object_store.gcs_listing)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from modelhooks.events import samples
from tests.e2e.packaging import binary
from tests.servers.objectstores import FakeGcs

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

# what the google-cloud-storage client imports, and a listing must not
STORAGE = ("google.cloud.storage", "google.api_core", "google.protobuf", "grpc")

FIRST_EVENT = """
import json, sys
import functions_framework
app = functions_framework.create_app("register", "main.py", "http")
headers, body = json.loads(sys.stdin.read())
response = app.test_client().post("/", data=body.encode(), headers=headers)
print(json.dumps([response.status_code, response.get_json(), sorted(sys.modules)]))
"""


def test_the_first_gcs_push_is_answered_without_google_cloud_storage(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    bucket, prefix = f"cold-{uuid.uuid4().hex[:12]}", "models/cold/1/"
    store = fake_gcs.storage_client().create_bucket(bucket)
    for key in ("weights.bin", "config.json", "_SUCCESS"):
        store.blob(prefix + key).upload_from_string(key.encode())
    marker = store.get_blob(prefix + "_SUCCESS")
    doc = copy.deepcopy(samples.load("gcs-eventarc-finalized-marker"))
    doc["id"], doc["bucket"], doc["subject"] = uuid.uuid4().hex, bucket, f"objects/{prefix}"
    doc["data"] |= {"bucket": bucket, "name": prefix + "_SUCCESS"}
    doc["data"] |= {"generation": str(marker.generation), "md5Hash": marker.md5_hash}
    headers, body = binary(doc)

    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    env |= {**fake_gcs.env, "GOOGLE_CLOUD_PROJECT": fake_gcs.project}
    env |= {"FUNCTION_TARGET": "register", "MODELHOOKS_HOME": str(tmp_path)}
    env |= {"MODELHOOKS_STORE_BACKEND": "cloud", "MODELHOOKS_LOG_LEVEL": "WARNING"}
    out = subprocess.run(
        [sys.executable, "-c", FIRST_EVENT],
        input=json.dumps([headers, body.decode()]),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    status, reply, modules = json.loads(out.stdout.splitlines()[-1])
    assert status == 200, reply
    assert reply["uri"] == f"gs://{bucket}/{prefix}"
    assert reply["digest"].startswith("content-sha256:")  # from the listing
    assert sorted(m for m in modules if m.startswith(STORAGE)) == []
