"""`modelhooks replay --raw`: stored upstream documents go to a server unchanged, so its
authentication and translators run on them (and failures name the function and reason)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import MODELHOOKS, Served
from tests.e2e.packaging import free_port
from tests.local_store import lay_model

pytestmark = pytest.mark.e2e

SAMPLE = Path(__file__).resolve().parents[2] / "events" / "samples" / "s3-minio-put-marker.json"


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MODELHOOKS, "replay", str(SAMPLE), "--raw", "--quiet", *args],
        capture_output=True,
        text=True,
    )


def test_raw_documents_meet_the_servers_auth_and_translators(
    serve: Callable[..., Served],
) -> None:
    served = serve(
        free_port(),
        "--ingress-auth",
        "bearer:token=broker",
        "--ingress-route-auth",
        "/minio-events=bearer:token=minio",
    )
    url = f"{served.url}/minio-events"
    lay_model(served.home, "models", "models/sentiment/1")  # what the notification names
    refused = replay("--to", url)
    assert refused.returncode == 2 and "HTTP 401" in refused.stderr, refused.stderr
    assert served.registrations() == []
    done = replay("--to", url, "--header", "Authorization: Bearer minio")
    assert done.returncode == 0, done.stderr
    assert [r["model"] for r in served.registrations()] == ["sentiment"]
    assert replay().returncode == 2  # --raw needs --to
