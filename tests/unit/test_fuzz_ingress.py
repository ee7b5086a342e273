"""Fuzzing every ingress shape through `modelhooks serve`'s routes: no answer is a 5xx
except a declared transient one, every 4xx is JSON with a reason, and the server stays
healthy. Bodies are real samples mutated at random, random JSON and random bytes, in every
CloudEvents mode, Pub/Sub push, and native webhook shape."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.bootstrap import build
from modelhooks.delivery.http import create_app
from modelhooks.events import requests as examples
from modelhooks.events import samples

FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
CONTENT_TYPES = [
    "application/json",
    "application/cloudevents+json",
    "application/cloudevents-batch+json",
    "text/plain",
    "",
]
TRANSIENT = {"unavailable", "throttled", "transient"}

leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**60), max_value=10**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["\x00", "\ud800", "../..", "a" * 300, "gs://", "oci://127.0.0.1/x", "-1"]),
)
json_values = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlaskClient]:
    import os

    from modelhooks import bootstrap

    saved = dict(os.environ)
    for var in list(os.environ):
        if var.startswith("MODELHOOKS_") or var in ("K_SINK", "PORT"):
            del os.environ[var]
    os.environ["MODELHOOKS_HOME"] = str(tmp_path_factory.mktemp("fuzz") / "home")
    bootstrap.reset()
    yield create_app(build().broker()).test_client()
    bootstrap.reset()
    os.environ.clear()
    os.environ.update(saved)


def check(client: FlaskClient, response: Any) -> None:
    status = response.status_code
    if status >= 400:
        assert response.is_json, (status, response.data[:300])
        doc = response.get_json()
        assert isinstance(doc, dict) and (doc.get("message") or doc.get("outcomes")), doc
    if status >= 500:
        codes = {doc.get("error")} | {
            (o.get("error") or {}).get("error") for o in doc.get("outcomes", [])
        }
        assert codes - {None} <= TRANSIENT, (status, doc)
        assert status in (429, 503), (status, doc)


def mutate(doc: Any, data: st.DataObject) -> Any:
    """Replace, drop or add one value somewhere in `doc`."""
    doc = copy.deepcopy(doc)
    path: list[Any] = []
    node = doc
    while isinstance(node, dict | list) and node and data.draw(st.booleans(), label="descend"):
        key = data.draw(st.sampled_from(list(node) if isinstance(node, dict) else range(len(node))))
        path.append(key)
        node = node[key]
    action = data.draw(st.sampled_from(["replace", "drop", "add"]), label="action")
    if not path:
        return data.draw(json_values) if action == "replace" else doc
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if action == "drop":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[data.draw(st.text(max_size=12), label="new key")] = data.draw(json_values)
    else:
        parent[path[-1]] = data.draw(json_values, label="value")
    return doc


@FUZZ
@given(data=st.data())
def test_mutated_samples_in_every_mode(client: FlaskClient, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(samples.names()), label="sample")
    doc = mutate(samples.load(name), data)
    mode = data.draw(st.sampled_from(["as-is", "structured", "batch", "binary", "pubsub"]))
    headers: dict[str, str] = {}
    if mode == "binary" and isinstance(doc, dict):
        for key, value in doc.items():
            if (
                key not in ("data", "data_base64")
                and isinstance(value, str)
                and value.isprintable()
            ):
                headers[f"ce-{key}"[:200]] = value[:200]
        body = json.dumps(doc.get("data"), ensure_ascii=False).encode("utf-8", "surrogatepass")
        ctype = "application/json"
    elif mode == "pubsub":
        raw = json.dumps(doc).encode("utf-8", "surrogatepass")
        attrs = data.draw(st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3))
        envelope = {
            "message": {
                "data": base64.b64encode(raw).decode(),
                "messageId": "m",
                "attributes": attrs,
            },
            "subscription": "projects/p/subscriptions/s",
        }
        body, ctype = json.dumps(envelope).encode(), "application/json"
    else:
        if mode == "batch":
            doc = [doc]
        body = json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")
        ctype = {"structured": "application/cloudevents+json"}.get(
            mode, "application/cloudevents-batch+json" if mode == "batch" else "application/json"
        )
    path = data.draw(st.sampled_from(["/", "/functions/register", "/functions/sign", "/x"]))
    check(client, client.post(path, data=body, headers={**headers, "Content-Type": ctype}))


@FUZZ
@given(data=st.data())
def test_mutated_transfer_requests(client: FlaskClient, data: st.DataObject) -> None:
    """A transfer request's data mutated anywhere: 400 naming the field, or 503 (this
    process has no MODEL_SYNC_* credentials); never a 500, never a copy."""
    doc = mutate(examples.load("transfer-requested")["data"], data)
    event = {**examples.load("transfer-requested"), "data": doc}
    body = json.dumps(event, ensure_ascii=False).encode("utf-8", "surrogatepass")
    answer = client.post("/", data=body, headers={"Content-Type": "application/cloudevents+json"})
    check(client, answer)
    assert answer.status_code in (400, 503), answer.get_json()


@FUZZ
@given(
    body=json_values,
    ctype=st.sampled_from(CONTENT_TYPES),
    path=st.sampled_from(["/", "/functions/register"]),
)
def test_random_json(client: FlaskClient, body: Any, ctype: str, path: str) -> None:
    raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    check(client, client.post(path, data=raw, headers={"Content-Type": ctype}))


@FUZZ
@given(
    body=st.binary(max_size=300),
    ctype=st.sampled_from(CONTENT_TYPES),
    headers=st.dictionaries(
        st.sampled_from(
            [
                "ce-specversion",
                "ce-id",
                "ce-source",
                "ce-type",
                "ce-time",
                "x-goog-pubsub-message-id",
            ]
        ),
        st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=30),
        max_size=5,
    ),
)
def test_random_bytes_and_headers(
    client: FlaskClient, body: bytes, ctype: str, headers: dict[str, str]
) -> None:
    check(client, client.post("/", data=body, headers={**headers, "Content-Type": ctype}))


@FUZZ
@given(depth=st.integers(1, 5000), kind=st.sampled_from(["[", '{"a":']))
def test_deep_nesting(client: FlaskClient, depth: int, kind: str) -> None:
    close = "]" if kind == "[" else "}"
    body = (kind * depth + "1" + close * depth).encode()
    check(client, client.post("/", data=body, headers={"Content-Type": "application/json"}))


def test_the_server_is_healthy_after_the_fuzzing(client: FlaskClient) -> None:
    assert client.get("/healthz").status_code == 200
