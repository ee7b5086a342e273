"""The HTTP surface, framework-free: a request is (method, path, headers, body) and the
answer a `Response`. Two thin adapters carry it: Flask (what functions-framework runs: one
function per target, and the test client) and ASGI (`modelhooks serve`, on uvicorn:
modelhooks.delivery.server).

`modelhooks serve` answers:
    POST /functions/<name>   one function
    POST /admission/validate, /admission/mutate   AdmissionReviews (the admission function)
    POST /<any other path>   the broker: every function whose Trigger matches, replies routed on
    GET  /healthz            readiness
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any

import msgspec

from modelhooks.core.errors import ModelhooksError, NotFound, PayloadTooLarge
from modelhooks.delivery.broker import Broker, single
from modelhooks.delivery.encoding import Response, error_response, internal_error, json_response
from modelhooks.delivery.runtime import (
    Delivery,
    Outcome,
    deliver,
    entered,
    ingest_each,
    run_all,
    worst,
)

if TYPE_CHECKING:
    import flask

__all__ = [
    "Handler",
    "call_function",
    "create_app",
    "flask_app",
    "guarded",
    "headers_of",
    "read_body",
    "routes",
    "to_flask",
]

# (method, path, headers, body) -> Response
Handler = Callable[[str, str, Mapping[str, str], bytes], Response]


def guarded(handler: Handler, where: str) -> Handler:
    """`handler`, never raising: errors of the tree answer their JSON status, anything else
    a JSON 500 without internals and one log line with the traceback. A refusal for good is
    answered 200 to a sender that would retry it for ever (`_retries_every_failure`)."""

    def handle(method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        try:
            response = handler(method, path, headers, body)
        except ModelhooksError as exc:
            response = error_response(exc)
        except Exception as exc:
            return internal_error(exc, where)
        if _for_good(response.status) and _retries_every_failure(headers):
            return msgspec.structs.replace(response, status=200)  # the reasons as they were
        return response

    return handle


# distribution's notification endpoint retries every answer but a 2xx or 3xx, for ever, and
# what it notifies next waits behind it (one retrying sink, one queue): answered 4xx, a push
# our route refuses for good (bad input, not this route's or tenant's kind or location, a
# Conflict) held back every later notification of that registry. Its envelope's type:
_DISTRIBUTION_EVENTS = "application/vnd.docker.distribution.events."


def _retries_every_failure(headers: Mapping[str, str]) -> bool:
    ctype = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    return ctype.strip().lower().startswith(_DISTRIBUTION_EVENTS)


def _for_good(status: int) -> bool:
    """A refusal no retry changes: bad input, not this route's or tenant's, a Conflict. Not
    unauthenticated (the sender's to fix), a 404 (a path mistyped in its configuration, or
    what it names not readable yet), too large, timed out or throttled: those it retries."""
    return status in (400, 403, 409, 422)


def not_post(method: str, path: str) -> Response:
    """Deliveries are POSTs: any other method is refused 405 (`modelhooks serve`'s routes and
    each functions-framework target alike), its body never read as an event."""
    doc = {"error": "method_not_allowed", "message": f"{method} {path}: use POST"}
    answer = json_response(405, doc)
    return Response(405, {**answer.headers, "Allow": "POST"}, answer.body)


def function_delivery(name: str, delivery: Delivery) -> Handler:
    """One function's endpoint: events of types it does not accept are acknowledged."""

    def handle(method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        fn = delivery.function(name)
        if fn.kind == "admission":  # AdmissionReviews, not events
            from modelhooks.delivery.admission import admission_endpoint, refused

            if len(body) > delivery.max_review_bytes:
                limit = delivery.max_review_bytes
                return refused(PayloadTooLarge(f"review over the limit of {limit} bytes"))
            return admission_endpoint(fn.handle)(method, path, headers, body)
        if method != "POST":  # a functions-framework target's too, as serve's routes
            return not_post(method, path)
        return deliver(headers, body, delivery, partial(single, fn, delivery), path)

    return guarded(handle, f"function {name}")


def publish(broker: Broker, headers: Mapping[str, str], body: bytes, path: str) -> Response:
    """The broker. Answers with every outcome of the chain. Paths let upstreams be told
    apart (per-route authentication and accepted kinds).

    With a sink (`K_SINK`, as the ingress Service in the cluster has) this is the ingress
    instead: the canonical events go to the sink (the Knative Broker), named by their
    content, and 202 answers (200 when each was skipped, with the reasons)."""
    delivery = broker.delivery
    events, refused = ingest_each(headers, body, delivery, path)
    if delivery.sink is not None:
        forwarded: list[str] = []
        answered: list[Outcome] = [o for o, _ in refused]
        for event in events:
            named = entered(event, delivery)
            if isinstance(named, Outcome):
                answered.append(named)
            else:
                delivery.sink(named)
                forwarded.append(named.id)
        doc = {"forwarded": forwarded, "outcomes": [o.as_json() for o in answered]}
        status = worst([o.status for o in answered]) if answered else 202
        return json_response(status if status >= 300 else 202 if forwarded else 200, doc)
    outcomes = [o for o, _ in refused] + run_all(events, broker.publish, delivery.deadline)
    doc = {"events": [e.id for e in events], "outcomes": [o.as_json() for o in outcomes]}
    status = worst([o.status for o in outcomes]) if outcomes else 200
    return json_response(200 if status < 300 else status, doc)


def routes(broker: Broker, only: frozenset[str] = frozenset()) -> Handler:
    """Every route of `modelhooks serve`; with `only`, just those functions' (and no broker)."""
    delivery = broker.delivery
    hosted = [n for n in delivery.names if not only or n in only]
    functions = {name: function_delivery(name, delivery) for name in hosted}
    from modelhooks.delivery.admission import PATHS as ADMISSION_PATHS

    def handle(method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        if path == "/healthz":
            return json_response(200, {"status": "ok", "functions": hosted})
        if path.rstrip("/") in ADMISSION_PATHS and "admission" in functions:
            return functions["admission"](method, path, headers, body)
        if method != "POST":
            return not_post(method, path)
        if path.startswith("/functions/"):
            name = path.removeprefix("/functions/").rstrip("/")
            if name not in functions:
                raise NotFound(f"no function {name!r}", known=hosted)
            return functions[name](method, path, headers, body)
        if only:
            raise NotFound(f"{path}: this server answers only {', '.join(sorted(only))}")
        return publish(broker, headers, body, path)

    return guarded(handle, "modelhooks serve")


# --- Flask (functions-framework targets, and the test client) ------------------------------


def to_flask(resp: Response, *, streamed: bool = False) -> flask.Response:
    """`resp` for Flask; `streamed`, as an iterable (functions-framework then leaves the rest
    of the request body unread)."""
    import flask

    body = iter([resp.body]) if streamed else resp.body
    return flask.Response(body, status=resp.status, headers=resp.headers)


def read_body(request: flask.Request, limit: int) -> bytes:
    """The request body, read no further than one byte past the limit (so an oversized
    delivery is refused without buffering it, whatever Content-Length claims)."""
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLarge(f"body of {length} bytes is over the limit of {limit}")
    if length is not None:
        # the stream ends at the length announced: read it as functions-framework does
        # after every response (it reads the body then, cached, rather than twice)
        return request.get_data()
    chunks, size = [], 0
    while size <= limit:  # a stream read may return less than asked: loop to EOF or limit
        chunk = request.stream.read(min(1 << 16, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def headers_of(environ: Mapping[str, Any]) -> dict[str, str]:
    """A WSGI request's headers as `dict(request.headers)` has them (werkzeug's names: from
    `HTTP_CE_ID`, `Ce-Id`), read from the environ at once instead of name by name."""
    out = {}
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            if key not in _CONTENT:
                out[_header_name(key[5:])] = value
        elif key in _CONTENT_TYPE_OR_LENGTH and value:
            out[_header_name(key)] = value
    return out


_CONTENT = frozenset({"HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"})
_CONTENT_TYPE_OR_LENGTH = frozenset({"CONTENT_TYPE", "CONTENT_LENGTH"})


@lru_cache(maxsize=256)
def _header_name(key: str) -> str:
    return key.replace("_", "-").title()


def flask_view(handler: Handler, limit: int) -> Callable[[], flask.Response]:
    """A Flask view answering every request with `handler`."""

    def view() -> flask.Response:
        import flask

        request = flask.request
        try:
            body = read_body(request, limit)
        except ModelhooksError as exc:
            return to_flask(error_response(exc))
        headers = headers_of(request.environ)
        return to_flask(handler(request.method, request.path, headers, body))

    return view


def call_function(name: str, request: flask.Request, delivery: Delivery) -> flask.Response:
    """A functions-framework target: one delivery to one function. A body refused as too
    large is answered without reading on: functions-framework reads every request's whole
    body into memory after the answer (its after_request), but not a streamed answer's, so
    the refusal streams (the WSGI server discards the rest, a chunk at a time)."""
    webhook = delivery.function(name).kind == "admission"
    limit = delivery.max_review_bytes if webhook else delivery.max_body_bytes
    try:
        body = read_body(request, limit)
        if request.content_length is None and len(body) > limit:  # a stream read past it
            raise PayloadTooLarge(f"body over the limit of {limit} bytes")
    except ModelhooksError as exc:
        if webhook:
            from modelhooks.delivery.admission import refused

            return to_flask(refused(exc), streamed=True)
        return to_flask(error_response(exc), streamed=True)
    handler = function_delivery(name, delivery)
    return to_flask(handler(request.method, request.path, headers_of(request.environ), body))


def create_app(broker: Broker) -> flask.Flask:
    """`modelhooks serve`'s routes as a Flask app (tests, embedding in a WSGI server)."""
    return flask_app(routes(broker), broker.delivery.max_body_bytes)


def flask_app(handler: Handler, max_body_bytes: int) -> flask.Flask:
    """A Flask app answering every path and method with `handler`."""
    import flask

    app = flask.Flask("modelhooks")
    view = flask_view(handler, max_body_bytes)
    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]
    app.add_url_rule("/", "root", view, methods=methods)
    app.add_url_rule("/<path:rest>", "any", lambda rest: view(), methods=methods)
    return app
