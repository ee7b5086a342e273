"""Trust bound to the route, through nested envelopes: a Pub/Sub message may carry a
CloudEvent (`ce-*` attributes), an Eventarc `messagePublished` CloudEvent carries a Pub/Sub
message, and so on, as deep as a sender likes. The kind a route admits is the kind
`translate` acts on, at any depth: `kind_of` follows the same unwrapping."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.bootstrap import build
from modelhooks.delivery.http import create_app
from modelhooks.events import samples
from modelhooks.events.errors import BadRequest
from modelhooks.events.ingress import decode
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.sources import PUBSUB_MESSAGE_PUBLISHED, kind_of, translate

PUBSUB = {"Authorization": "Bearer pubsub-token"}
ROUTES = {
    "MODELHOOKS_INGRESS_AUTH": "bearer:token=pubsub-token",
    "MODELHOOKS_INGRESS_ROUTE_KINDS": "/pubsub=gcs,artifact-registry;/replay=canonical",
}
STRUCTURED = [n for n in samples.names() if "specversion" in samples.load(n)]
ENVELOPES = [n for n in samples.names() if "subscription" in samples.load(n)]


def as_message(event: dict[str, Any], n: int) -> dict[str, Any]:
    """A structured CloudEvent as a Pub/Sub push (the binding: attributes `ce-*`)."""
    attributes = {f"ce-{k}": v for k, v in event.items() if k not in ("data", "datacontenttype")}
    attributes["content-type"] = event.get("datacontenttype", "application/json")
    data = base64.b64encode(json.dumps(event.get("data")).encode()).decode()
    message = {"attributes": attributes, "messageId": f"m{n}", "data": data}
    return {"message": message, "subscription": "s"}


def published(envelope: dict[str, Any], n: int) -> dict[str, Any]:
    """A Pub/Sub push envelope as Eventarc delivers it: a `messagePublished` CloudEvent."""
    return {
        "specversion": "1.0",
        "id": f"published-{n}",
        "source": "//pubsub.googleapis.com/projects/p/topics/t",
        "type": PUBSUB_MESSAGE_PUBLISHED,
        "datacontenttype": "application/json",
        "data": envelope,
    }


def wrapped(name: str, layers: list[str]) -> dict[str, Any]:
    """Sample `name` inside `layers` of envelopes, innermost first: `message` makes a
    structured CloudEvent a Pub/Sub push, `published` a push a CloudEvent again."""
    doc: dict[str, Any] = samples.load(name)
    for n, layer in enumerate(layers):
        is_event = "specversion" in doc
        if layer == "message" and is_event:
            doc = as_message(doc, n)
        elif layer == "published" and not is_event:
            doc = published(doc, n)
    return doc


def test_a_canonical_event_inside_a_published_message_is_refused_on_a_gcs_route(
    home: Path, configure: Callable[[dict[str, str]], None], sample_models: Path
) -> None:
    """The exploit: a Pub/Sub push whose `ce-type` is `messagePublished` and whose data is
    another push carrying a canonical event. The outer kind was not determined (the data was
    not looked at) and an undetermined kind was let through to translation, which unwrapped
    the canonical event and registered it on a route that accepts only GCS and GAR."""
    configure(ROUTES)
    client: FlaskClient = create_app(build().broker()).test_client()
    inner = samples.load("canonical-pubsub-artifact-pushed")
    attributes = {
        "ce-specversion": "1.0",
        "ce-type": PUBSUB_MESSAGE_PUBLISHED,
        "ce-id": "outer-1",
        "ce-source": "//pubsub.googleapis.com/projects/p/topics/t",
    }
    data = base64.b64encode(json.dumps(inner).encode()).decode()
    outer = {
        "message": {"attributes": attributes, "messageId": "outer-1", "data": data},
        "subscription": "projects/p/subscriptions/s",
    }
    resp = client.post("/pubsub", json=outer, headers=PUBSUB)
    assert resp.status_code == 403 and resp.json is not None, resp.json
    assert resp.json["details"] == {"kind": "canonical", "path": "/pubsub"}
    assert not (home / "registry.db").exists() or not list(
        SqliteModelRegistry(home / "registry.db").list_models()
    )
    # the same nesting is fine where canonical events are welcome
    assert client.post("/replay", json=outer, headers=PUBSUB).status_code == 200
    assert [m.name for m in SqliteModelRegistry(home / "registry.db").list_models()] == [
        "sentiment"
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(STRUCTURED + ENVELOPES),
    layers=st.lists(st.sampled_from(["message", "published"]), max_size=5),
)
def test_the_kind_a_route_admits_is_the_kind_translated_at_any_depth(
    name: str, layers: list[str]
) -> None:
    """Whatever the wrapping, a delivery that translates to events has the kind of the
    sample inside it; one whose kind is undetermined never translates."""
    expected = {kind_of(i) for i in decode({}, json.dumps(samples.load(name)).encode())}
    for inbound in decode({}, json.dumps(wrapped(name, layers)).encode()):
        kind = kind_of(inbound)
        try:
            events = translate(inbound, layout=ObjectLayout(), registry_host="zot.local:5000")
        except BadRequest:
            continue
        if events:
            assert kind is not None and {kind} == expected, (kind, expected)
