"""Hostile requests through each functions-framework target (`functions-framework --target X`,
the Cloud Run source folders), as outside testers send them: Flask's own paths (bodies not
UTF-8, Content-Types wrong or absent, ce-* headers malformed, specversion 0.3, data_base64 not
base64, batches, 0-byte bodies, methods other than POST, paths other than /) and the shapes
test_fuzz_ingress sends `modelhooks serve`, mutated at random (seeded, bounded). No answer is
a 5xx but a declared transient one, every 4xx is JSON with a reason; a method other than POST
is refused 405 by a target as by serve, and takes nothing."""

from __future__ import annotations

import base64
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.events import samples
from modelhooks.handlers import NAMES, load
from tests.unit.test_fuzz_ingress import TRANSIENT

pytestmark = pytest.mark.usefixtures("sample_models")

ROOT = Path(__file__).resolve().parents[2]
EVENT_TARGETS = [n for n in NAMES if load(n).kind == "events"]
CONTENT_TYPES = [
    "application/json",
    "application/cloudevents+json",
    "application/cloudevents-batch+json",
    "application/cloudevents+json; charset=utf-16",
    "text/plain",
    "",
]
ODD = ["\x00", "\ud800", "../..", "a" * 2000, "0.3", "!!!", "", "sha256:zz", -1, None, [], {}]


def target(name: str) -> FlaskClient:
    from functions_framework import create_app

    return create_app(target=name, source=str(ROOT / "functions" / "main.py")).test_client()


def check(response: Any) -> None:
    status = response.status_code
    if status >= 400 and response.request.method != "HEAD":
        assert response.is_json, (status, response.data[:300])
        doc = response.get_json()
        assert isinstance(doc, dict) and (doc.get("message") or doc.get("outcomes")), doc
    if status >= 500:
        doc = response.get_json()
        codes = {doc.get("error")} | {
            (o.get("error") or {}).get("error") for o in doc.get("outcomes", [])
        }
        assert codes - {None} <= TRANSIENT, (status, doc)
        assert status in (429, 503), (status, doc)


def mutate(doc: Any, rng: random.Random) -> Any:
    """Replace, drop or add one value somewhere in `doc` (a copy)."""
    doc = json.loads(json.dumps(doc))
    parent: Any = None
    key: Any = None
    node = doc
    while isinstance(node, dict | list) and node and rng.random() < 0.7:
        parent, key = node, rng.choice(list(node) if isinstance(node, dict) else range(len(node)))
        node = node[key]
    if parent is None:
        return rng.choice(ODD) if rng.random() < 0.1 else doc
    action = rng.choice(["replace", "drop", "add"])
    if action == "drop":
        del parent[key]
    elif action == "add" and isinstance(parent, dict):
        parent[rng.choice(["x", "data_base64", "specversion", "\x00"])] = rng.choice(ODD)
    else:
        parent[key] = rng.choice(ODD)
    return doc


def hostile(rng: random.Random) -> tuple[str, str, dict[str, str], bytes]:
    """One request: method, path, headers, body."""
    doc = mutate(samples.load(rng.choice(samples.names())), rng)
    mode = rng.choice(["as-is", "structured", "batch", "binary", "pubsub", "bytes"])
    headers: dict[str, str] = {"Content-Type": rng.choice(CONTENT_TYPES)}
    if mode == "binary" and isinstance(doc, dict):
        for k, v in doc.items():
            if k not in ("data", "data_base64") and isinstance(v, str) and v.isprintable():
                headers[f"ce-{k}"[:200]] = v[:200]
        if rng.random() < 0.3:
            headers["ce-specversion"] = rng.choice(["0.3", "", "1.0, 1.0", "2"])
        body = json.dumps(doc.get("data"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    elif mode == "pubsub":
        raw = json.dumps(doc).encode("utf-8", "surrogatepass")
        message: dict[str, Any] = {
            "data": rng.choice([base64.b64encode(raw).decode(), "!!!", 5]),
            "messageId": rng.choice(["m", "", 7]),
            "attributes": rng.choice([{}, {"a": 1}, {"a": ["x"]}, "x", {"\x00": "y"}]),
        }
        envelope = {
            "message": message,
            "subscription": rng.choice(["projects/p/subscriptions/s", 5]),
        }
        envelope["deliveryAttempt"] = rng.choice([1, "x", -1, 10**30])
        body = json.dumps(envelope).encode()
    elif mode == "bytes":
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
    else:
        doc = [doc] if mode == "batch" else doc
        body = json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")
    method = rng.choice(["POST"] * 6 + ["GET", "PUT", "DELETE", "PATCH", "HEAD"])
    path = rng.choice(["/", "/", "/x", "/functions/register", "/../etc", "/%00"])
    return method, path, headers, body


@pytest.mark.parametrize("name", NAMES)
def test_hostile_requests_through_each_target(name: str, home: Path) -> None:
    """~150 seeded hostile requests per target (a few seconds each)."""
    client = target(name)
    rng = random.Random(f"ff-{name}")
    for _ in range(150):
        method, path, headers, body = hostile(rng)
        check(client.open(path, method=method, headers=headers, data=body))
    assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("name", EVENT_TARGETS)
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_a_method_other_than_post_is_refused_405_as_serve_does(
    name: str, method: str, home: Path
) -> None:
    """A valid event sent with GET (PUT, ...) to a target was delivered to its function
    (register registered it), while serve answers 405: one rule, 405 naming the method."""
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import create_app

    doc = samples.load("canonical-artifact-pushed")
    body = json.dumps(doc).encode()
    ctype = {"Content-Type": "application/cloudevents+json"}
    for client, path in (
        (target(name), "/"),
        (create_app(build().broker()).test_client(), f"/functions/{name}"),
    ):
        answer = client.open(path, method=method, headers=ctype, data=body)
        assert answer.status_code == 405, (path, answer.status_code, answer.get_json())
        assert answer.get_json()["error"] == "method_not_allowed"
        assert method in answer.get_json()["message"] and answer.headers["Allow"] == "POST"
    if (home / "registry.db").exists():  # nothing registered
        assert SqliteModelRegistry(home / "registry.db").get_model("sentiment") is None


class Counting(io.RawIOBase):
    """A request body of `size` bytes that counts what the server reads of it."""

    def __init__(self, size: int) -> None:
        self.size, self.read_bytes = size, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.size - self.read_bytes)
        buffer[:n] = b"a" * n
        self.read_bytes += n
        return n


@pytest.mark.parametrize("name", ["register", "admission"])
@pytest.mark.parametrize("length", [None, "99999999999"])  # chunked; a length over the limit
def test_an_oversized_body_is_refused_without_reading_it_all(
    name: str, length: str | None, home: Path
) -> None:
    """functions-framework reads every request's whole body into memory after the answer
    (its after_request read_request): a 40 MB chunked body (an endless one) was read to its
    end once the target had refused it past 3 MB, and a Content-Length past the limit with
    a body cut short answered a 500 HTML page (ClientDisconnected in that read). Now the
    refusal is answered without reading on (the WSGI server discards the rest)."""
    from werkzeug.test import EnvironBuilder

    app = target(name).application
    environ = EnvironBuilder(
        method="POST", path="/", headers={"Content-Type": "application/json"}
    ).get_environ()
    body = Counting(40 << 20)
    environ["wsgi.input"] = body
    environ.pop("CONTENT_LENGTH", None)
    if length is None:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
        environ["wsgi.input_terminated"] = True
    else:
        environ["CONTENT_LENGTH"] = length
    statuses: list[str] = []
    answer = b"".join(app(environ, lambda status, headers, *_: statuses.append(status)))
    if name == "admission":  # an AdmissionReview refusing it, as the API server reads one
        assert statuses[0].startswith("200"), (statuses, answer[:200])
        assert b'"allowed": false' in answer
    else:
        assert statuses[0].startswith("413"), (statuses, answer[:200])
        assert json.loads(answer)["error"] == "payload_too_large"
    assert body.read_bytes <= (4 << 20), body.read_bytes  # the limit (3 MiB) and a read
