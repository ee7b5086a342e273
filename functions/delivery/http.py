"""HTTP entry points on Flask (what functions-framework runs): one function per target,
or every function behind the in-process broker (`modelhooks serve`)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from modelhooks.core.errors import ModelhooksError, NotFound, PayloadTooLarge
from modelhooks.delivery.broker import Broker, single
from modelhooks.delivery.runtime import (
    Delivery,
    Response,
    deliver,
    error_response,
    ingest,
    internal_error,
    json_response,
    worst,
)

if TYPE_CHECKING:
    import flask

__all__ = ["call_function", "create_app", "to_flask"]


def to_flask(resp: Response) -> flask.Response:
    import flask

    return flask.Response(resp.body, status=resp.status, headers=resp.headers)


def call_function(name: str, request: flask.Request, delivery: Delivery) -> Response:
    """One delivery to one function; never an unexplained 500 (see `internal_error`)."""
    try:
        fn = delivery.function(name)
        dispatch = partial(single, fn, delivery)
        body = read_body(request, delivery.max_body_bytes)
        return deliver(dict(request.headers), body, delivery, dispatch, request.path)
    except ModelhooksError as exc:
        return error_response(exc)
    except Exception as exc:
        return internal_error(exc, f"function {name}")


def read_body(request: flask.Request, limit: int) -> bytes:
    """The request body, read no further than one byte past the limit (so an oversized
    delivery is refused without buffering it, whatever Content-Length claims)."""
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"body of {request.content_length} bytes is over the limit of {limit}"
        )
    chunks, size = [], 0
    while size <= limit:  # a stream read may return less than asked: loop to EOF or limit
        chunk = request.stream.read(min(1 << 16, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def publish(request: flask.Request, broker: Broker) -> Response:
    """`POST /` (or any path outside /functions/): the broker. Answers with every outcome
    of the chain. Paths let upstreams be told apart, e.g. for per-route authentication.

    With a sink (`K_SINK`, as the ingress Service in the cluster has) this is the ingress
    instead: the canonical events go to the sink (the Knative Broker) and 202 answers."""
    delivery = broker.delivery
    try:
        body = read_body(request, delivery.max_body_bytes)
        events = ingest(dict(request.headers), body, delivery, request.path)
        if delivery.sink is not None:
            for event in events:
                delivery.sink(event)
            return json_response(202, {"forwarded": [e.id for e in events]})
    except ModelhooksError as exc:
        return error_response(exc)
    outcomes = [o for event in events for o in broker.publish(event)]
    doc = {"events": [e.id for e in events], "outcomes": [o.as_json() for o in outcomes]}
    status = worst([o.status for o in outcomes]) if outcomes else 200
    return json_response(200 if status < 300 else status, doc)


def create_app(broker: Broker) -> flask.Flask:
    """The `modelhooks serve` app: /functions/<name>, / (broker), /healthz."""
    import flask

    delivery = broker.delivery
    app = flask.Flask("modelhooks")

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> flask.Response:
        from werkzeug.exceptions import HTTPException

        if isinstance(exc, HTTPException):  # 404, 405, …: answered in JSON too
            doc = {"error": exc.name.lower().replace(" ", "_"), "message": exc.description}
            return to_flask(json_response(exc.code or 500, doc))
        return to_flask(internal_error(exc, "modelhooks serve"))

    @app.post("/functions/<name>")
    def function(name: str) -> flask.Response:
        if name not in delivery.names:
            err = NotFound(f"no function {name!r}", known=list(delivery.names))
            return to_flask(error_response(err))
        return to_flask(call_function(name, flask.request, delivery))

    @app.post("/", defaults={"path": ""})
    @app.post("/<path:path>")
    def route(path: str) -> flask.Response:
        return to_flask(publish(flask.request, broker))

    @app.get("/healthz")
    def healthz() -> flask.Response:
        doc = {"status": "ok", "functions": list(delivery.names)}
        return to_flask(json_response(200, doc))

    return app
