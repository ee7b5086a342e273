"""Every recorded upstream delivery (`events/samples/`, where each came from in its
PROVENANCE.md) through the real HTTP path, `modelhooks serve` as the ingress (K_SINK): the
canonical events it becomes, as the Broker receives them, or the 2xx it is ignored with, or
the 4xx and the reason it is refused with; never a 500. A sample added without its expected
outcome here fails `test_every_sample_has_its_expected_outcome`."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from flask.testing import FlaskClient

from modelhooks import bootstrap
from modelhooks.events import samples

pytestmark = pytest.mark.usefixtures("sample_models")

PUSHED, DELETED = "dev.modelhooks.artifact.pushed", "dev.modelhooks.artifact.deleted"
CREATED, UPDATED = "dev.modelhooks.model.created", "dev.modelhooks.model.updated"
MODEL_DELETED, PRUNE = "dev.modelhooks.model.deleted", "dev.modelhooks.prune.requested"
GCS = "//storage.googleapis.com/projects/_/buckets/models"
GAR = "oci://europe-west4-docker.pkg.dev/ml-prod/models/sentiment"
K8S = "https://10.96.0.1:443"
REGISTRY = "oci://registry.local:5000"
CONTENT = "content-sha256:"  # a bucket push is named by its content as it enters


class Event(NamedTuple):
    """What a canonical event must say: its type and source, and these fields of its data
    (a value ending in ':' is a prefix)."""

    type: str
    source: str
    data: dict[str, Any]


class Refused(NamedTuple):
    status: int
    reason: str


def pushed(source: str, model: str, version: str, uri: str, digest: str, **more: Any) -> Event:
    return Event(PUSHED, source, {"model": model, "version": version, "uri": uri,
                                  "digest": digest, **more})  # fmt: skip


def gcs(version: str = "1", model: str = "sentiment") -> dict[str, str]:
    return {"model": model, "version": version, "uri": f"gs://models/models/{model}/{version}/"}


S1 = gcs()
OCI_1 = "sha256:cc5c6806f5e0a2d82d53e852da3a9b6904e19bfd56db4ea12d2bd6f1c33ef771"
GAR_1 = "sha256:29e1aef7b8a2adc32db99b040f5c7a0f5393e2cf9448c144793f4ccd69cca298"
MARKER = "modelhooks.dev/marker"  # the upstream identity of the marker, kept
LABELS = {"framework": "pytorch", "commit": "9f2c1e7"}  # the object's metadata
ZOT = "does not name the registry host; set ingress.registry_host"

EXPECTED: dict[str, list[Event] | Refused] = {
    "canonical-artifact-pushed": [
        pushed("/modelhooks/replay", **S1, digest=CONTENT, store="gcs", namespace="ml")
    ],
    "canonical-pubsub-artifact-pushed": [
        pushed("/modelhooks/replay", **S1, digest=CONTENT, namespace="ml")
    ],
    "gar-delete": [Event(DELETED, GAR, {"uri": f"{GAR}@{GAR_1}", "digest": GAR_1, "store": "oci"})],
    "gar-delete-tag": [
        Event(DELETED, GAR, {"uri": f"{GAR}:1", "digest": None, "tag": "1", "version": "1"})
    ],
    "gar-eventarc-insert": [
        pushed(GAR, "ml-prod/models/sentiment", "1", f"{GAR}@{GAR_1}", GAR_1, tag="1")
    ],
    "gar-insert": [
        pushed(GAR, "ml-prod/models/sentiment", "1", f"{GAR}@{GAR_1}", GAR_1, store="oci")
    ],
    "gar-insert-untagged": [],  # a child of an index, or a referrer
    "gcs-eventarc-deleted-marker": [
        Event(DELETED, GCS, {**S1, "digest": "gcs-generation:1795453331523407"})
    ],
    "gcs-eventarc-finalized-marker": [pushed(GCS, **S1, digest=CONTENT, store="gcs")],
    "gcs-eventarc-finalized-weights": [],  # not the ready marker
    "gcs-eventarc-metadata-updated": [],  # metadata only
    "gcs-pubsub-archive-marker": [],  # noncurrent now: the artifact.deleted of versioned buckets?
    "gcs-pubsub-delete-weights": [Event(DELETED, GCS, {**S1, "digest": None})],
    "gcs-pubsub-finalize-attributes-only": [  # payloadFormat NONE: no object, no labels
        pushed(GCS, **S1, digest=CONTENT, labels={MARKER: "gcs-generation:1795453331523407"})
    ],
    "gcs-pubsub-finalize-marker": [
        pushed(
            GCS, **S1, digest=CONTENT, labels={**LABELS, MARKER: "gcs-generation:1795453331523407"}
        )
    ],
    "gcs-pubsub-finalize-overwrote": [  # the marker written again: its new generation
        pushed(
            GCS, **S1, digest=CONTENT, labels={**LABELS, MARKER: "gcs-generation:1795453392010203"}
        )
    ],
    "gcs-pubsub-metadata-update": [],  # metadata only
    "gcs-pubsub-overwrite-delete": [],  # the finalize of the new generation speaks for it
    "k8s-ref-delete": [Event(MODEL_DELETED, K8S, {"name": "sentiment", "namespace": "ml"})],
    "k8s-resource-add": [
        Event(CREATED, K8S, {"name": "sentiment", "namespace": "ml", "version": "1"})
    ],
    "k8s-resource-add-other-kind": [],
    "k8s-resource-delete": [
        Event(MODEL_DELETED, K8S, {"name": "sentiment", "namespace": "ml", "version": "1"})
    ],
    "k8s-resource-update": [
        Event(UPDATED, K8S, {"name": "sentiment", "namespace": "ml", "version": "1"})
    ],
    "k8s-resource-update-deleting": [  # deletionTimestamp set: the Model is being deleted
        Event(MODEL_DELETED, K8S, {"name": "sentiment", "namespace": "ml"})
    ],
    "knative-ping-prune": [
        Event(
            PRUNE,
            "/apis/v1/namespaces/modelhooks/pingsources/prune-models",
            {"uri": "oci://registry.local:5000/models/sentiment"},
        )
    ],
    "oci-distribution-blob-push": [],
    "oci-distribution-delete": [
        Event(DELETED, f"{REGISTRY}/sentiment", {"digest": OCI_1, "tag": None}),
        Event(DELETED, f"{REGISTRY}/sentiment", {"uri": f"{REGISTRY}/sentiment:1", "tag": "1"}),
    ],
    # distribution's own format test: a manifest pushed by digest and two layers
    "oci-distribution-envelope-untagged": [],
    "oci-distribution-index-push": [  # after a pull and a mount, ignored
        pushed(
            f"{REGISTRY}/models/sentiment",
            "models/sentiment",
            "2",
            f"{REGISTRY}/models/sentiment@sha256:" + "a1" * 32,
            "sha256:" + "a1" * 32,
            tag="2",
            size=856,
        )
    ],
    "oci-distribution-manifest-list-push": [
        pushed(
            f"{REGISTRY}/models/sentiment",
            "models/sentiment",
            "3",
            f"{REGISTRY}/models/sentiment@sha256:" + "e5" * 32,
            "sha256:" + "e5" * 32,
            tag="3",
        )
    ],
    "oci-distribution-pull": [],
    "oci-distribution-push": [
        pushed(f"{REGISTRY}/sentiment", "sentiment", "1", f"{REGISTRY}/sentiment@{OCI_1}", OCI_1)
    ],
    "oci-distribution-referrer-push": [],
    "s3-aws-batch": [
        pushed("s3://models", "sentiment", "1", "s3://models/models/sentiment/1/", CONTENT),
        Event(DELETED, "s3://models", {"uri": "s3://models/models/sentiment/0/", "digest": None}),
    ],
    "s3-aws-put-marker": [
        pushed(
            "s3://models",
            "sentiment",
            "1",
            "s3://models/models/sentiment/1/",
            CONTENT,
            labels={MARKER: "s3-version:3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY"},
        )
    ],
    "s3-aws-put-marker-space-in-key": [  # 'sentiment+v2/1%2Brc1': '+' a space, %2B a '+'
        pushed(
            "s3://models",
            "sentiment v2",
            "1+rc1",
            "s3://models/models/sentiment v2/1+rc1/",
            CONTENT,
            store="s3",
        )
    ],
    "s3-minio-copy-marker-versioned": [  # a ready marker copied in: a push
        pushed("s3://models", "sentiment", "1", "s3://models/models/sentiment/1/", CONTENT)
    ],
    "s3-minio-delete-marker-created": [  # its versionId names the delete marker: no digest
        Event(
            DELETED,
            "s3://models",
            {"uri": "s3://models/models/sentiment/1/", "version": "1", "digest": None},
        )
    ],
    "s3-minio-put-marker": [
        pushed("s3://models", "sentiment", "1", "s3://models/models/sentiment/1/", CONTENT)
    ],
    "s3-removed": [
        Event(DELETED, "s3://models", {"uri": "s3://models/models/sentiment/1/", "version": "1"})
    ],
    "s3-test-event": [],  # sent when a notification configuration is saved
    "scheduler-pubsub-prune-requested": [
        Event(
            PRUNE,
            "//cloudscheduler.googleapis.com/projects/ml-prod/locations/us-central1/jobs/"
            "modelhooks-prune-sentiment",
            {"uri": "oci://us-docker.pkg.dev/ml-prod/models/sentiment"},
        )
    ],
    "zot-image-deleted": Refused(400, ZOT),
    "zot-image-updated": Refused(400, ZOT),
    "zot-repository-created": [],
}


@pytest.fixture
def ingress(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FlaskClient, list]]:  # type: ignore[type-arg]
    """`modelhooks serve` as the ingress: what it forwards lands in a local K_SINK."""
    from modelhooks.delivery.http import create_app

    got: list[tuple[dict[str, str], Any]] = []

    class Sink(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append(({k.lower(): v for k, v in self.headers.items()}, json.loads(body)))
            self.send_response(202)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Sink)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    monkeypatch.setenv("K_SINK", f"http://127.0.0.1:{server.server_port}/")
    bootstrap.reset()
    try:
        yield create_app(bootstrap.build().broker()).test_client(), got
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_every_sample_has_its_expected_outcome() -> None:
    assert sorted(EXPECTED) == samples.names()


def matches(want: Any, got: Any) -> bool:
    if isinstance(want, str) and want.endswith(":") and isinstance(got, str):
        return got.startswith(want)
    return bool(want == got)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_sample_through_serve_becomes_its_canonical_events(
    name: str,
    ingress: tuple[FlaskClient, list[tuple[dict[str, str], Any]]],
) -> None:
    client, sink = ingress
    raw = samples.body(name)
    structured = "specversion" in json.loads(raw)
    ctype = "application/cloudevents+json" if structured else "application/json"
    resp = client.post("/", data=raw, content_type=ctype)
    expected = EXPECTED[name]
    answer = resp.get_data(as_text=True)
    if isinstance(expected, Refused):
        assert (resp.status_code, sink) == (expected.status, []), answer
        assert expected.reason in resp.json["message"], answer
        return
    assert resp.status_code == (202 if expected else 200), answer
    got = [(h["ce-type"], h["ce-source"], body) for h, body in sink]
    assert [(t, s) for t, s, _ in got] == [(e.type, e.source) for e in expected], answer
    for want, (_, _, data) in zip(expected, got, strict=True):
        wrong = {k: data.get(k) for k, v in want.data.items() if not matches(v, data.get(k))}
        assert not wrong, f"{name}: {wrong} in {data}"


def test_an_id_a_translator_builds_from_the_payload_is_taken_by_the_next_function(
    ingress: tuple[FlaskClient, list[tuple[dict[str, str], Any]]],
) -> None:
    """A translated event's id comes from its payload (a registry notification's `id`, an S3
    key): one of 3,000 characters was forwarded as such, and the next function's ingress,
    taking an id of at most 1,024 bytes, refused it 400 (dead-lettered). It is fitted: cut
    short with a digest of it whole, so two such ids sharing a beginning stay apart."""
    from modelhooks.events.ingress import MAX_NAME_BYTES, decode

    client, sink = ingress
    ids = []
    for last in "ab":
        doc = json.loads(samples.body("oci-distribution-push"))
        doc["events"][0]["id"] = "x" * 2999 + last
        resp = client.post("/", json=doc)
        assert resp.status_code == 202, resp.get_data(as_text=True)
        headers, body = sink.pop()
        (inbound,) = decode(headers, json.dumps(body).encode())  # as the next function takes it
        ids.append(inbound.id)
        assert len(inbound.id.encode()) <= MAX_NAME_BYTES
    assert ids[0] != ids[1]


def s3_removed(key: str) -> dict[str, Any]:
    doc = json.loads(samples.body("s3-removed"))
    doc["Records"][0]["s3"]["object"]["key"] = key
    return doc


def oci_pushed(event_id: str) -> dict[str, Any]:
    doc = json.loads(samples.body("oci-distribution-push"))
    doc["events"][0]["id"] = event_id
    return doc


@pytest.mark.parametrize(
    "delivery",
    [
        s3_removed("models/sentiment/1/we%09ights.bin"),  # S3 keys may hold any character
        s3_removed("models/sentiment/1/a%0Ab%7Fc%00.bin"),
        oci_pushed("push\t1"),  # a registry's event id
    ],
    ids=["s3-tab", "s3-lf-del-nul", "oci-id-tab"],
)
def test_an_id_or_subject_a_translator_builds_holds_no_control_character(
    ingress: tuple[FlaskClient, list[tuple[dict[str, str], Any]]], delivery: dict[str, Any]
) -> None:
    """CloudEvents attributes hold no control character (the spec's rule; ingress refuses
    one in a header or attribute), yet an id or subject built from an object's key or a
    registry event's id held it as such: forwarded to the Broker (202), the next function's
    ingress refused it 400 ('ce-id: holds a control character'), dead-lettered, never acted
    on. Each is written as its %XX escape."""
    from modelhooks.events.ingress import decode

    client, sink = ingress
    resp = client.post("/", json=delivery)
    assert resp.status_code == 202, resp.get_data(as_text=True)
    headers, body = sink.pop()
    (inbound,) = decode(headers, json.dumps(body).encode())  # as the next function takes it
    named = inbound.id + (inbound.attributes.get("subject") or "")
    assert "%09" in named or "%0A" in named, named
    assert not any(c < " " or c == "\x7f" for c in named), named


def with_bucket(name: str, bucket: str) -> tuple[dict[str, Any], str]:
    """A deletion `name` (a sample) naming `bucket`; the field naming it."""
    doc = json.loads(samples.body(name))
    if name == "s3-removed":
        doc["Records"][0]["s3"]["bucket"]["name"] = bucket
        return doc, "s3.bucket.name"
    if name == "gcs-pubsub-delete-weights":
        doc["message"]["attributes"]["bucketId"] = bucket
        return doc, "bucketId"
    doc["data"]["bucket"] = bucket
    return doc, "bucket"


@pytest.mark.parametrize("bucket", ["a\tb", "b" * 1500, "é" * 700, "a/../b"])
@pytest.mark.parametrize(
    "name", ["s3-removed", "gcs-pubsub-delete-weights", "gcs-eventarc-deleted-marker"]
)
def test_a_deletion_naming_no_bucket_is_refused_naming_it(
    ingress: tuple[FlaskClient, list[tuple[dict[str, str], Any]]], name: str, bucket: str
) -> None:
    """A bucket name is one rule (events.model.Bucket): a push's is read as its content
    is, but a deletion's was taken as it came, so one holding a control character or
    past 1,024 bytes was forwarded (202) in the event's source (`s3://<bucket>`), which
    the next function's ingress refused 400: dead-lettered. Now 400 at once, naming it."""
    client, sink = ingress
    doc, field = with_bucket(name, bucket)
    structured = "specversion" in doc
    resp = client.post(
        "/",
        data=json.dumps(doc),
        content_type="application/cloudevents+json" if structured else "application/json",
    )
    assert (resp.status_code, sink) == (400, []), resp.get_data(as_text=True)
    assert field in resp.json["message"], resp.json


@pytest.mark.parametrize("attribute", ["ce-id", "ce-source"])
@pytest.mark.parametrize("value", ["x" * 1025, "é" * 513])
def test_a_cloudevent_a_pubsub_message_carries_has_a_bounded_id_and_source(
    ingress: tuple[FlaskClient, list[tuple[dict[str, str], Any]]], attribute: str, value: str
) -> None:
    """A CloudEvent carried by a Pub/Sub message (the binding's `ce-*` attributes) takes an
    id and a source of at most 1,024 bytes of UTF-8, as every other mode does (c892805):
    they were taken unbounded and forwarded (202), and the next function's ingress refused
    them 400 ('is over 1024 bytes of UTF-8'): dead-lettered. Now 400 at once, naming it."""
    client, sink = ingress
    doc = json.loads(samples.body("canonical-pubsub-artifact-pushed"))
    doc["message"]["attributes"][attribute] = value
    resp = client.post("/", json=doc)
    assert (resp.status_code, sink) == (400, []), resp.get_data(as_text=True)
    assert f"message.attributes.{attribute}" in resp.json["message"], resp.json
    assert "over 1024 bytes" in resp.json["message"], resp.json


@pytest.mark.parametrize("name", ["gar-insert", "gcs-pubsub-finalize-marker"])
def test_a_pubsub_message_pushed_unwrapped_without_its_metadata_is_refused_saying_so(
    ingress: tuple[FlaskClient, list[tuple[dict[str, str], Any]]], name: str
) -> None:
    """A subscription pushing unwrapped (--push-no-wrapper) without writing its metadata
    sends the message data alone, no message id nor attributes: nothing to name the event
    by. It was refused as 'webhook body: unknown shape (expected S3 `Records` or registry
    `events`)', which sent the operator looking at S3; now the 400 names the setting."""
    import base64

    client, sink = ingress
    data = base64.b64decode(json.loads(samples.body(name))["message"]["data"])
    resp = client.post("/", data=data, content_type="application/json")
    assert (resp.status_code, sink) == (400, []), resp.get_data(as_text=True)
    message = resp.json["message"]
    assert "Pub/Sub" in message and "--push-no-wrapper-write-metadata" in message, message
