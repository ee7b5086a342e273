"""What distribution v3 (v3.1.2, the `distribution3` fixture) supports, recorded against
the real server, and its notifications run through our translator.

- tag DELETE: 202, the tag goes, the manifest stays (distribution 2.8 answers 400);
- referrers API: none, `GET /v2/<name>/referrers/<digest>` is 404 (like 2.8; zot has it), so
  signatures use the `sha256-<hex>` fallback tag there;
- notifications: the same `{"events": [...]}` envelope as 2.8, but sent as
  `application/vnd.docker.distribution.events.v2+json`; the target is an OCI descriptor, so
  a tag or manifest delete carries `"mediaType": ""`, `"digest": ""` and `"size": 0` where
  2.8 left the fields out. A tag delete is notified (target.tag, no digest); a delete by
  digest is notified for the manifest and for each tag it removed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import requests

from modelhooks.events.ingress import decode
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ArtifactDeleted, ArtifactPushed, CanonicalEvent
from modelhooks.events.sources import translate
from tests.integration.test_smoke_oci import OCI_MANIFEST, push_artifact
from tests.servers import Delivery, NotificationSink
from tests.servers.registries import OciRegistry

pytestmark = pytest.mark.integration

EVENTS_V2 = "application/vnd.docker.distribution.events.v2+json"


def _tags(http: requests.Session, registry: OciRegistry, repo: str) -> list[str]:
    listed = http.get(f"{registry.url}/v2/{repo}/tags/list")
    assert listed.status_code == 200, listed.text
    return sorted(listed.json().get("tags") or [])


def _events(sink: NotificationSink, repo: str) -> list[dict[str, Any]]:
    return [
        e
        for d in list(sink.deliveries)
        for e in d.json().get("events", [])
        if e.get("target", {}).get("repository") == repo
    ]


def _wait_event(
    sink: NotificationSink, repo: str, match: Callable[[dict[str, Any]], bool]
) -> Delivery:
    def has(delivery: Delivery) -> bool:
        events = json.loads(delivery.body).get("events", [])
        return any(e.get("target", {}).get("repository") == repo and match(e) for e in events)

    return sink.wait_for(has, timeout=30)


def _translated(deliveries: list[Delivery], repo: str) -> list[CanonicalEvent]:
    out: list[CanonicalEvent] = []
    for delivery in deliveries:
        for inbound in decode(delivery.headers, delivery.body):
            assert inbound.kind == "webhook"
            out += [
                e
                for e in translate(inbound, layout=ObjectLayout())
                if getattr(e.data, "model", None) == repo
            ]
    return out


def test_distribution3_tag_delete_no_referrers_and_notifications(
    distribution3: OciRegistry,
) -> None:
    reg = distribution3
    repo = f"smoke/model-{uuid.uuid4().hex[:8]}"
    with NotificationSink(reg.notify_port) as sink, requests.Session() as http:
        digest = push_artifact(http, reg, repo, "v1", {"weights.bin": b"w" * 1024})
        body = http.get(f"{reg.url}/v2/{repo}/manifests/v1", headers={"Accept": OCI_MANIFEST})
        put = http.put(
            f"{reg.url}/v2/{repo}/manifests/v2",
            data=body.content,
            headers={"Content-Type": OCI_MANIFEST},
        )
        assert put.status_code == 201, put.text
        assert _tags(http, reg, repo) == ["v1", "v2"]

        # A referrer (manifest with a subject) is accepted, but there is no referrers API.
        subject = {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(body.content)}
        sig_tag = digest.replace(":", "-") + ".sig"  # cosign-style: the translator skips it
        signature = push_artifact(http, reg, repo, sig_tag, {"model.sig": b"s"}, subject=subject)
        accept = {"Accept": OCI_MANIFEST}  # v3 answers 404 for an OCI manifest without it
        signed = http.get(f"{reg.url}/v2/{repo}/manifests/{signature}", headers=accept)
        again = http.put(  # the spec's "I processed the subject" header is absent
            f"{reg.url}/v2/{repo}/manifests/{signature}",
            data=signed.content,
            headers={"Content-Type": OCI_MANIFEST},
        )
        assert again.status_code == 201, again.text
        assert "OCI-Subject" not in again.headers
        referrers = http.get(
            f"{reg.url}/v2/{repo}/referrers/{digest}",
            headers={"Accept": "application/vnd.oci.image.index.v1+json"},
        )
        assert referrers.status_code == 404, referrers.text
        assert referrers.text.strip() == "404 page not found"  # the router's: no such route

        # Tag DELETE: 202, only the tag goes.
        untag = http.delete(f"{reg.url}/v2/{repo}/manifests/v2")
        assert untag.status_code == 202, untag.text
        assert _tags(http, reg, repo) == [sig_tag, "v1"]
        assert (
            http.head(f"{reg.url}/v2/{repo}/manifests/{digest}", headers=accept).status_code == 200
        )
        again = http.delete(f"{reg.url}/v2/{repo}/manifests/v2")
        assert again.status_code == 404
        assert again.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN"

        # Delete by digest: the manifest and every tag pointing at it.
        gone = http.delete(f"{reg.url}/v2/{repo}/manifests/{digest}")
        assert gone.status_code == 202, gone.text
        assert _tags(http, reg, repo) == [sig_tag]
        assert (
            http.head(f"{reg.url}/v2/{repo}/manifests/{digest}", headers=accept).status_code == 404
        )

        _wait_event(sink, repo, lambda e: e["action"] == "push" and e["target"]["digest"] == digest)
        _wait_event(
            sink, repo, lambda e: e["action"] == "delete" and e["target"].get("tag") == "v2"
        )
        _wait_event(
            sink, repo, lambda e: e["action"] == "delete" and e["target"].get("tag") == "v1"
        )
        _wait_event(
            sink, repo, lambda e: e["action"] == "delete" and e["target"].get("digest") == digest
        )
        deliveries = [d for d in list(sink.deliveries) if repo.encode() in d.body]

    # The envelope: 2.8's shape, a new media type, the bearer header we configured.
    for delivery in deliveries:
        assert delivery.method == "POST"
        assert delivery.path == "/distribution3-events"
        assert delivery.headers["authorization"] == f"Bearer {reg.notify_token}"
        assert delivery.headers["content-type"] == EVENTS_V2
    events = _events(sink, repo)
    pushes = [e for e in events if e["action"] == "push" and e["target"].get("tag") == "v1"]
    assert len(pushes) == 1
    target = pushes[0]["target"]
    assert (target["mediaType"], target["digest"], target["repository"]) == (
        OCI_MANIFEST,
        digest,
        repo,
    )
    assert pushes[0]["request"]["host"] == reg.host
    deletes = [e["target"] for e in events if e["action"] == "delete"]
    by_tag = {t["tag"]: t for t in deletes if t.get("tag")}
    assert set(by_tag) == {"v1", "v2"}
    assert {(t["mediaType"], t["digest"], t["size"]) for t in by_tag.values()} == {("", "", 0)}
    by_digest = [t for t in deletes if not t.get("tag") and t.get("digest") == digest]
    assert len(by_digest) == 1
    assert by_digest[0]["mediaType"] == ""

    # Our translator takes v3's envelope as it takes 2.8's.
    canonical = _translated(deliveries, repo)
    pushed = [e.data for e in canonical if isinstance(e.data, ArtifactPushed)]
    uri = f"oci://{reg.host}/{repo}@{digest}"
    assert sorted((p.model, p.version, p.digest, p.uri) for p in pushed) == [
        (repo, "v1", digest, uri),
        (repo, "v2", digest, uri),
    ]  # the signature's `sha256-<hex>.sig` tag and digest-only pushes register nothing
    deleted = sorted(
        ((d.tag, d.digest) for d in (e.data for e in canonical) if isinstance(d, ArtifactDeleted)),
        key=str,
    )
    assert deleted == sorted([("v2", None), ("v1", None), (None, digest)], key=str)
