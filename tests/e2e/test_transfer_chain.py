"""A `transfer.requested` POSTed to `modelhooks serve` (a route for canonical events) → the
transfer function copies the model from MinIO to distribution v3 as an OCI image on no base,
signs it with the key of its own MODEL_SYNC_* configuration and registers it → its
`model.registered` reply walks on to notify. The image's files verify with upstream
`model_signing`; the same request delivered again changes nothing."""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import model_signing
import pytest
import requests

from modelhooks.events import requests as examples
from tests.e2e.conftest import Served
from tests.integration.transfer_helpers import pull
from tests.servers._proc import free_port
from tests.servers.objectstores import Minio
from tests.servers.registries import OciRegistry
from tests.unit.signing_material import make_key

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

TOKEN = "for-the-producer"


def test_a_transfer_request_through_serve_copies_signs_and_registers(
    minio: Minio, distribution3: OciRegistry, serve: Callable[..., Served], tmp_path: Path
) -> None:
    bucket, repo = f"transfer-e2e-{secrets.token_hex(4)}", f"transfer-e2e/{secrets.token_hex(4)}"
    files = {"config.json": b'{"layers": 2}', "weights.bin": secrets.token_bytes(150_000)}
    with minio.s3_client() as s3:
        s3.create_bucket(Bucket=bucket)
        for key, data in files.items():
            s3.put_object(Bucket=bucket, Key=f"models/bert/3/{key}", Body=data)
    keys = make_key(tmp_path)
    served = serve(
        free_port(),
        "--ingress-auth", f"bearer:token={TOKEN}",
        "--ingress-route-kinds", "/producer=canonical",
        "--store-allow-local-targets", "true",
        "--tenancy-tenants", f"ml=s3://{bucket},oci://{distribution3.host}/transfer-e2e/*",
        env={
            "MODEL_SYNC_SOURCE_AWS_ACCESS_KEY_ID": minio.access_key,
            "MODEL_SYNC_SOURCE_AWS_SECRET_ACCESS_KEY": minio.secret_key,
            "MODEL_SYNC_SOURCE_AWS_ENDPOINT": minio.endpoint_url,
            "MODEL_SYNC_SIGNING_KEY": str(keys.private),
            "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state"),
        },
    )  # fmt: skip
    event: dict[str, Any] = copy.deepcopy(examples.load("transfer-requested"))
    event["id"] = f"transfer-{secrets.token_hex(6)}"
    event["data"].update(
        source={"type": "s3", "bucket": bucket, "key": "models/bert/3/", "region": minio.region},
        destination={
            "type": "oci",
            "uri": f"{distribution3.host}/{repo}:3",
            "base_image": "scratch",
        },
        model={"name": "bert-transfer", "owner": "nlp"},
        version={"name": "3"},
        sign=True,
    )

    def post(body: dict[str, Any]) -> requests.Response:
        return requests.post(
            f"{served.url}/producer",
            data=json.dumps(body),
            headers={
                "Content-Type": "application/cloudevents+json",
                "Authorization": f"Bearer {TOKEN}",
            },
            timeout=120,
        )

    answer = post(event)
    assert answer.status_code == 200, answer.text
    outcomes = {o["function"]: o for o in answer.json()["outcomes"]}
    assert outcomes["transfer"]["status"] == 200, outcomes
    assert "notify" in outcomes  # the reply, model.registered, walked on
    (row,) = served.registrations()
    assert (row["model"], row["version"]) == ("bert-transfer", "3")
    assert row["uri"].startswith(f"oci://{distribution3.host}/{repo}@sha256:")
    model = pull(row["uri"], tmp_path / "pulled")
    assert {p.name for p in model.iterdir()} == {"config.json", "weights.bin", "model.sig"}
    verifier = model_signing.verifying.Config().use_elliptic_key_verifier(public_key=keys.public)
    verifier.verify(model, model / "model.sig")

    again = post({**event, "id": f"{event['id']}-again"})
    assert again.status_code == 200, again.text
    assert served.registrations() == [row]

    # a request from another tenant's bucket through the same route: 403, nothing copied
    foreign = copy.deepcopy(event)
    foreign["id"], foreign["data"]["source"]["bucket"] = f"{event['id']}-foreign", "elsewhere"
    refused = post(foreign)
    assert refused.status_code == 403, refused.text
    assert served.registrations() == [row]
