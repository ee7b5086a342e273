"""A cold start's first GCS push (issue 22): the register target, then the sign target, each
in a fresh interpreter as functions-framework starts it, answer an Eventarc finalize of a
real model on fake-gcs-server (register lists it for its content digest; sign lists, reads
and hashes it, and writes the signature next to it) without importing google-cloud-storage
and what it brings (google-api-core, protobuf, grpc): the store speaks GCS's JSON API
(modelhooks.adapters.object_store.gcs_json); nor requests or urllib3; and sign with a key, nothing of
pydantic, Sigstore, model_signing or x509."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from modelhooks.events import samples
from tests.e2e.packaging import binary
from tests.servers.objectstores import FakeGcs

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

# what the google-cloud-storage client imports, and the store must not, nor requests (the
# store's pool reads the proxy settings as requests does: net.environment_proxy), nor
# urllib3 (the pool is http.client's: endpoints.endpoint_pool), nor urllib.request (~1.5 ms:
# with no *_proxy variable set, there is nothing for its getproxies() to read)
STORAGE = ("google.cloud.storage", "google.api_core", "google.protobuf", "grpc", "requests",
           "urllib3", "urllib.request")  # fmt: skip
# what signing with a key needs none of: sigstore_models' pydantic models (a bundle is written
# as their JSON: signing.bundle), model_signing (verification's), cryptography's x509 (a
# certificate's), its OpenSSL backend (ECDSA's constructor imports it: signing.keys._ecdsa)
SIGNING = ("pydantic", "sigstore_models", "sigstore", "model_signing", "cryptography.x509",
           "cryptography.hazmat.backends")  # fmt: skip

FIRST_EVENT = """
import json, sys
import functions_framework
app = functions_framework.create_app(sys.argv[1], "main.py", "http")
headers, body = json.loads(sys.stdin.read())
response = app.test_client().post("/", data=body.encode(), headers=headers)
print(json.dumps([response.status_code, response.get_json(), sorted(sys.modules)]))
"""


def first_event(
    target: str, env: dict[str, str], event: tuple[dict[str, str], bytes]
) -> tuple[int, Any, list[str]]:
    """`target`'s answer to its first event, and the modules it had imported by then."""
    headers, body = event
    out = subprocess.run(
        [sys.executable, "-c", FIRST_EVENT, target],
        input=json.dumps([headers, body.decode()]),
        cwd=ROOT,
        env={**env, "FUNCTION_TARGET": target},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    status, reply, modules = json.loads(out.stdout.splitlines()[-1])
    return status, reply, modules


def test_the_first_gcs_push_is_answered_without_google_cloud_storage(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    bucket, prefix = f"cold-{uuid.uuid4().hex[:12]}", "models/cold/1/"
    store = fake_gcs.storage_client().create_bucket(bucket)
    for key in ("weights.bin", "config.json", "_SUCCESS"):
        store.blob(prefix + key).upload_from_string(key.encode())
    marker = store.get_blob(prefix + "_SUCCESS")
    doc = copy.deepcopy(samples.load("gcs-eventarc-finalized-marker"))
    doc["id"], doc["bucket"], doc["subject"] = uuid.uuid4().hex, bucket, f"objects/{prefix}"
    doc["data"] |= {"bucket": bucket, "name": prefix + "_SUCCESS"}
    doc["data"] |= {"generation": str(marker.generation), "md5Hash": marker.md5_hash}
    key = tmp_path / "key.pem"
    key.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    env = {k: v for k, v in env.items() if not k.lower().endswith("_proxy")}  # none: as a start
    env |= {**fake_gcs.env, "GOOGLE_CLOUD_PROJECT": fake_gcs.project}
    env |= {"MODELHOOKS_HOME": str(tmp_path / "home"), "MODELHOOKS_STORE_BACKEND": "cloud"}
    env |= {"MODELHOOKS_LOG_LEVEL": "WARNING"}

    status, reply, modules = first_event("register", env, binary(doc))
    assert status == 200, reply
    assert reply["uri"] == f"gs://{bucket}/{prefix}"
    assert reply["digest"].startswith("content-sha256:")  # from the listing
    assert sorted(m for m in modules if m.startswith(STORAGE)) == []

    signing = {**env, "MODELHOOKS_SIGNING_KEY": str(key)}
    status, reply, modules = first_event("sign", signing, binary({**doc, "id": "again"}))
    assert status == 200, reply
    signature = reply["signature_uri"]
    assert signature.startswith(f"gs://{bucket}/{prefix}")
    assert store.get_blob(signature.removeprefix(f"gs://{bucket}/")) is not None  # written
    assert sorted(m for m in modules if m.startswith(STORAGE)) == []
    assert sorted(m for m in modules if _within(m, SIGNING)) == []


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)
