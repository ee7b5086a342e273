"""The OCI distribution API with plain requests against distribution 2.8 and zot.

Shows the capability differences a generic adapter must detect: distribution answers a
tag DELETE with 400 and has no referrers API; zot supports both. Each registry's
notification (distribution's envelope, zot's CloudEvent) reaches a local listener.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any
from urllib.parse import urljoin

import pytest
import requests

from tests.servers import Delivery, NotificationSink
from tests.servers.registries import OciRegistry

pytestmark = pytest.mark.integration

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
EMPTY = {"mediaType": "application/vnd.oci.empty.v1+json", "data": b"{}"}
ARTIFACT_TYPE = "application/vnd.modelhooks.model.v1"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _push_blob(http: requests.Session, url: str, repo: str, data: bytes) -> dict[str, Any]:
    start = http.post(f"{url}/v2/{repo}/blobs/uploads/")
    assert start.status_code == 202, start.text
    location = urljoin(url, start.headers["Location"])
    sep = "&" if "?" in location else "?"
    done = http.put(
        f"{location}{sep}digest={_digest(data)}",
        data=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert done.status_code == 201, done.text
    return {"digest": _digest(data), "size": len(data)}


def push_artifact(
    http: requests.Session,
    registry: OciRegistry,
    repo: str,
    reference: str,
    files: dict[str, bytes],
    subject: dict[str, Any] | None = None,
) -> str:
    """Push blobs + an OCI manifest (config: the empty descriptor); returns the digest."""
    config = _push_blob(http, registry.url, repo, EMPTY["data"])  # type: ignore[arg-type]
    layers = [
        {
            **_push_blob(http, registry.url, repo, data),
            "mediaType": "application/octet-stream",
            "annotations": {"org.opencontainers.image.title": name},
        }
        for name, data in files.items()
    ]
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {**config, "mediaType": EMPTY["mediaType"]},
        "layers": layers,
    }
    if subject:
        manifest["subject"] = subject
    body = json.dumps(manifest).encode()
    put = http.put(
        f"{registry.url}/v2/{repo}/manifests/{reference}",
        data=body,
        headers={"Content-Type": OCI_MANIFEST},
    )
    assert put.status_code == 201, put.text
    assert put.headers["Docker-Content-Digest"] == _digest(body)
    return _digest(body)


def _tags(http: requests.Session, registry: OciRegistry, repo: str) -> list[str]:
    listed = http.get(f"{registry.url}/v2/{repo}/tags/list")
    assert listed.status_code == 200, listed.text
    return sorted(listed.json().get("tags") or [])


def _mentions(repo: str) -> Any:
    return lambda d: repo.encode() in d.body


def test_docker_registry_push_list_delete_and_notification(docker_registry: OciRegistry) -> None:
    repo = f"smoke/model-{uuid.uuid4().hex[:8]}"
    with NotificationSink(docker_registry.notify_port) as sink, requests.Session() as http:
        digest = push_artifact(http, docker_registry, repo, "v1", {"weights.bin": b"w" * 1024})
        assert _tags(http, docker_registry, repo) == ["v1"]

        untag = http.delete(f"{docker_registry.url}/v2/{repo}/manifests/v1")
        assert untag.status_code == 400
        assert untag.json()["errors"][0]["code"] == "DIGEST_INVALID"
        referrers = http.get(f"{docker_registry.url}/v2/{repo}/referrers/{digest}")
        assert referrers.status_code == 404

        delivery = sink.wait_for(_manifest_pushed(digest), timeout=30)
        deleted = http.delete(f"{docker_registry.url}/v2/{repo}/manifests/{digest}")
        assert deleted.status_code == 202
        gone = http.get(
            f"{docker_registry.url}/v2/{repo}/manifests/{digest}", headers={"Accept": OCI_MANIFEST}
        )
        assert gone.status_code == 404
        assert _tags(http, docker_registry, repo) == []
    _check_distribution_envelope(delivery, docker_registry, repo, digest)


def _manifest_pushed(digest: str) -> Any:
    def match(delivery: Delivery) -> bool:
        events = json.loads(delivery.body).get("events", [])
        return any(e["action"] == "push" and e["target"]["digest"] == digest for e in events)

    return match


def _check_distribution_envelope(
    delivery: Delivery, registry: OciRegistry, repo: str, digest: str
) -> None:
    assert delivery.headers["authorization"] == f"Bearer {registry.notify_token}"
    assert delivery.headers["content-type"].startswith(
        "application/vnd.docker.distribution.events.v1+json"
    )
    pushes = [
        e
        for e in delivery.json()["events"]
        if e["action"] == "push" and e["target"]["digest"] == digest
    ]
    assert pushes, delivery.body[:500]
    assert pushes[0]["target"]["repository"] == repo
    assert pushes[0]["target"]["mediaType"] == OCI_MANIFEST
    assert pushes[0]["target"]["tag"] == "v1"


def test_zot_push_referrers_tag_delete_and_cloudevent(zot: OciRegistry) -> None:
    repo = f"smoke/model-{uuid.uuid4().hex[:8]}"
    with NotificationSink(zot.notify_port) as sink, requests.Session() as http:
        digest = push_artifact(http, zot, repo, "v1", {"weights.bin": b"w" * 1024})
        http.put(  # a second tag on the same manifest
            f"{zot.url}/v2/{repo}/manifests/v2",
            data=http.get(
                f"{zot.url}/v2/{repo}/manifests/v1", headers={"Accept": OCI_MANIFEST}
            ).content,
            headers={"Content-Type": OCI_MANIFEST},
        ).raise_for_status()
        assert _tags(http, zot, repo) == ["v1", "v2"]

        subject = {"mediaType": OCI_MANIFEST, "digest": digest, "size": 0}
        manifest = http.get(f"{zot.url}/v2/{repo}/manifests/{digest}")
        subject["size"] = len(manifest.content)
        signature = push_artifact(
            http, zot, repo, "sha256-sig", {"model.sig": b"signature"}, subject=subject
        )
        referrers = http.get(f"{zot.url}/v2/{repo}/referrers/{digest}")
        assert referrers.status_code == 200
        assert [m["digest"] for m in referrers.json()["manifests"]] == [signature]

        untag = http.delete(f"{zot.url}/v2/{repo}/manifests/v2")
        assert untag.status_code == 202
        assert _tags(http, zot, repo) == ["sha256-sig", "v1"]
        assert http.head(f"{zot.url}/v2/{repo}/manifests/{digest}").status_code == 200

        delivery = sink.wait_for(_mentions(repo), timeout=30)
    assert delivery.method == "POST"
    structured = delivery.headers.get("content-type", "").startswith("application/cloudevents")
    event = delivery.json() if structured else {"specversion": delivery.headers["ce-specversion"]}
    assert event["specversion"] == "1.0"
