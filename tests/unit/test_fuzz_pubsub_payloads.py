"""Fuzzing inside Pub/Sub messages: what a Pub/Sub push carries is base64 (a Cloud Storage
notification's object resource, an Artifact Registry `gcr` message, a CloudEvent's data),
so mutating the envelope only ever swaps that string whole. Here the decoded payload and
the attributes are mutated and re-encoded, pushed wrapped, unwrapped (`x-goog-pubsub-*`
headers) and inside an Eventarc `messagePublished` CloudEvent: no answer is a 5xx except a
declared transient one, and every 4xx is JSON with a reason."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from flask.testing import FlaskClient
from hypothesis import given
from hypothesis import strategies as st

from modelhooks.events import samples
from modelhooks.events.sources import PUBSUB_MESSAGE_PUBLISHED
from tests.unit.test_fuzz_ingress import FUZZ, check, client, mutate

__all__ = ["client"]  # the module-scoped server of test_fuzz_ingress

_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,100}")  # an attribute name that can be a header name
PUSHES = [n for n in samples.names() if "subscription" in samples.load(n)]


def _encoded(value: Any) -> str:
    raw = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return base64.b64encode(raw).decode()


@FUZZ
@given(data=st.data())
def test_mutated_pubsub_payloads(client: FlaskClient, data: st.DataObject) -> None:
    envelope = samples.load(data.draw(st.sampled_from(PUSHES), label="sample"))
    message = envelope["message"]
    payload: Any = json.loads(base64.b64decode(message["data"])) if message.get("data") else {}
    target = data.draw(st.sampled_from(["payload", "attributes", "both"]), label="mutated")
    if target != "attributes":
        payload = mutate(payload, data)
    if target != "payload":
        attributes = mutate(message.get("attributes") or {}, data)
        message = {**message, "attributes": attributes}
    message = {**message, "data": _encoded(payload)}
    mode = data.draw(st.sampled_from(["wrapped", "unwrapped", "eventarc"]), label="mode")
    headers = {"Content-Type": "application/json"}
    if mode == "unwrapped":
        headers["x-goog-pubsub-message-id"] = str(message.get("messageId"))[:100]
        attributes = message.get("attributes")
        for key, value in (attributes if isinstance(attributes, dict) else {}).items():
            name, text = str(key), str(value)
            if _TOKEN.fullmatch(name) and text.isascii() and text.isprintable():
                headers[name] = text[:200]
        body = base64.b64decode(message["data"])
    else:
        doc: Any = {**envelope, "message": message}
        if mode == "eventarc":
            doc = {
                "specversion": "1.0",
                "id": "fuzz",
                "source": "//pubsub.googleapis.com/projects/p/topics/t",
                "type": PUBSUB_MESSAGE_PUBLISHED,
                "data": doc,
            }
            headers["Content-Type"] = "application/cloudevents+json"
        body = json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")
    path = data.draw(
        st.sampled_from(["/", "/functions/register", "/functions/prune", "/functions/cleanup"])
    )
    check(client, client.post(path, data=body, headers=headers))


def test_a_bucket_id_that_makes_no_uri_is_bad_input(client: FlaskClient) -> None:
    """Found by the fuzzing above: a Cloud Storage notification whose bucketId attribute was
    a list named `gs://[]/…`, which urlsplit refuses (a bracketed host that is no IP
    address) with a ValueError: a 500. It is bad input, whatever the route."""
    envelope = samples.load("gcs-pubsub-finalize-marker")
    for bucket in ([], "[x]", "[::1"):
        envelope["message"]["attributes"]["bucketId"] = bucket
        answer = client.post("/", json=envelope)
        assert answer.status_code == 400, (bucket, answer.get_json())
        check(client, answer)


def test_base64_fields_holding_text_that_is_not_ascii_are_a_400(client: FlaskClient) -> None:
    """base64.b64decode raises ValueError, not binascii.Error, for a str that is not ASCII
    ('K', the Kelvin sign, NFKC-folds to a base64 letter): a Pub/Sub push's message.data or
    a structured CloudEvent's data_base64 holding one was an internal error, a 500."""
    push = samples.load(PUSHES[0])
    push["message"]["data"] = "\u212a"
    event = {"specversion": "1.0", "id": "x", "source": "s", "type": "t", "data_base64": "é="}
    for body, ctype in ((push, "application/json"), (event, "application/cloudevents+json")):
        resp = client.post("/", data=json.dumps(body), content_type=ctype)
        assert resp.status_code == 400, resp.get_data(as_text=True)
        assert resp.json is not None and "base64" in resp.json["message"]
