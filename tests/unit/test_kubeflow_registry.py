"""`KubeflowModelRegistry` error mapping, auth and paging against a tiny local HTTP stub.

The stub only stands in for answers a healthy real server will not give on demand (5xx,
429, 401, timeouts, pages); the adapter's behaviour on the real server is in
tests/integration/test_kubeflow_registry.py.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from modelhooks.adapters.model_registry.kubeflow import API_PATH, KubeflowModelRegistry
from modelhooks.core.errors import (
    BadRequest,
    Conflict,
    CredentialsRefused,
    Forbidden,
    ModelhooksError,
    NotFound,
    Throttled,
    Unavailable,
)
from modelhooks.core.records import RegisteredModel

Answer = tuple[int, Any, dict[str, str]]


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Stub:
    """Answers every request with `answer(seen)`; remembers what it saw."""

    answer: Callable[[Seen], Answer]
    url: str = ""
    seen: list[Seen] = field(default_factory=list)


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            seen = Seen(
                method=self.command,
                path=parts.path.removeprefix(API_PATH),
                query=dict(parse_qsl(parts.query)),
                headers=dict(self.headers.items()),
                body=json.loads(raw) if raw else None,
            )
            stub.seen.append(seen)
            status, body, headers = stub.answer(seen)
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)  # unless the client gave up (timeout tests)

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def stub() -> Iterator[Stub]:
    stub = Stub(answer=lambda seen: (500, {"code": "x", "message": "unset"}, {}))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    server.daemon_threads = False  # server_close() joins every request thread
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def registry(stub: Stub) -> Iterator[KubeflowModelRegistry]:
    registry = KubeflowModelRegistry(stub.url, timeout=0.5)
    yield registry
    registry.close()


def error(status: int, message: str, **headers: str) -> Callable[[Seen], Answer]:
    return lambda seen: (status, {"code": "x", "message": message}, headers)


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (500, "database is down", Unavailable),
        (503, "no upstream", Unavailable),
        (429, "slow down", Throttled),
        (401, "no token", CredentialsRefused),
        (403, "not yours", Forbidden),
        (400, "invalid character 'o' in literal null", BadRequest),
        (422, "required field 'name' is zero value.", BadRequest),
        (409, "registered model with name m already exists: conflict", Conflict),
        (400, "registered model with name m already exists", Conflict),
    ],
)
def test_http_errors_map_to_the_error_tree(
    stub: Stub,
    registry: KubeflowModelRegistry,
    status: int,
    message: str,
    expected: type[ModelhooksError],
) -> None:
    stub.answer = error(status, message)
    with pytest.raises(expected) as raised:
        registry.create_model("m", properties={})
    assert type(raised.value) is expected
    assert message in raised.value.message and str(status) in raised.value.message


def test_throttling_keeps_retry_after(stub: Stub, registry: KubeflowModelRegistry) -> None:
    stub.answer = error(429, "slow down", **{"Retry-After": "7"})
    with pytest.raises(Throttled) as raised:
        registry.list_models()
    assert raised.value.details["retry_after"] == "7"


def test_a_non_json_error_body_is_quoted(stub: Stub, registry: KubeflowModelRegistry) -> None:
    stub.answer = lambda seen: (502, "<html>Bad Gateway</html>", {})
    with pytest.raises(Unavailable, match="Bad Gateway"):
        registry.get_model("m")


def test_missing_things(stub: Stub, registry: KubeflowModelRegistry) -> None:
    stub.answer = error(404, "no registered models found for name=m: not found")
    assert registry.get_model("m") is None
    with pytest.raises(NotFound):
        registry.update_model(RegisteredModel(id="7", name="m"))
    with pytest.raises(NotFound):
        registry.create_version("7", "1", properties={})
    assert [s.method for s in stub.seen] == ["GET", "GET", "GET"]  # read first: never written


def test_a_closed_port_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    registry = KubeflowModelRegistry(f"http://127.0.0.1:{port}", timeout=2)
    with pytest.raises(Unavailable, match="failed"):
        registry.get_model("m")
    registry.close()


def test_a_slow_server_is_unavailable(stub: Stub, registry: KubeflowModelRegistry) -> None:
    def slow(seen: Seen) -> Answer:
        time.sleep(1)
        return 200, {}, {}

    stub.answer = slow
    with pytest.raises(Unavailable, match="timed out"):
        registry.get_model("m")


def test_requests_in_flight_are_bounded_by_connections(stub: Stub) -> None:
    """At most `connections` requests at once (the server's PostgreSQL pool keeps only 2
    idle connections); the others wait their turn."""
    guard, now, most = threading.Lock(), [0], [0]

    def counted(seen: Seen) -> Answer:
        with guard:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.1)
        with guard:
            now[0] -= 1
        return 200, {"id": "1", "name": "m", "state": "LIVE"}, {}

    stub.answer = counted
    registry = KubeflowModelRegistry(stub.url, timeout=5, connections=3)
    threads = [threading.Thread(target=registry.get_model, args=("m",)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    registry.close()
    assert most[0] == 3 and len(stub.seen) == 8


def test_turns_are_first_come_first_served() -> None:
    """A thread that gives its turn back cannot take it again ahead of one waiting; a
    waiter that times out leaves the queue and gets nothing."""
    from modelhooks.adapters.model_registry.kubeflow import _Turns

    turns = _Turns(1)
    assert turns.acquire(timeout=1)
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append("waiter" * turns.acquire(timeout=5)))
    waiter.start()
    time.sleep(0.1)  # the waiter queues
    turns.release()
    assert not turns.acquire(timeout=0.1)  # its turn went to the waiter
    waiter.join(5)
    assert got == ["waiter"]
    turns.release()
    assert turns.acquire(timeout=0.1)  # free again, no one waiting
    assert not turns.acquire(timeout=0.1)  # one turn only: this one times out …
    turns.release()
    assert turns.acquire(timeout=0.1)  # … and left no place in the queue behind


def test_bearer_token(stub: Stub) -> None:
    stub.answer = lambda seen: (200, {"id": "1", "name": "m", "state": "LIVE"}, {})
    with_token = KubeflowModelRegistry(stub.url + API_PATH + "/", token="s3cret")
    without = KubeflowModelRegistry(stub.url)
    assert with_token.get_model("m") == without.get_model("m") == RegisteredModel("1", "m")
    with_token.close()
    without.close()
    assert stub.seen[0].headers["Authorization"] == "Bearer s3cret"
    assert "Authorization" not in stub.seen[1].headers
    assert stub.seen[0].path == stub.seen[1].path == "/registered_model"


def _pages(seen: Seen) -> Answer:
    """Three models, two a page, like a server that caps pageSize at 2."""
    names = ["a", "b", "c"]
    start = int(seen.query.get("nextPageToken", "0"))
    items = [{"id": str(i + 1), "name": names[i]} for i in range(start, min(start + 2, 3))]
    token = str(start + 2) if start + 2 < 3 else ""
    return 200, {"items": items, "nextPageToken": token, "pageSize": 2, "size": len(items)}, {}


def test_listings_follow_next_page_tokens(stub: Stub, registry: KubeflowModelRegistry) -> None:
    stub.answer = _pages
    assert [m.name for m in registry.list_models()] == ["a", "b", "c"]
    assert [s.query.get("nextPageToken") for s in stub.seen] == [None, "2"]
    assert all(s.query["pageSize"] for s in stub.seen)


def test_scoped_listings_are_used_where_the_server_can_run_them(
    stub: Stub, registry: KubeflowModelRegistry
) -> None:
    version = {"id": "5", "name": "1", "registeredModelId": "4"}
    stub.answer = lambda seen: (200, {"items": [version], "nextPageToken": ""}, {})
    assert [v.id for v in registry.list_versions("4")] == ["5"]
    assert [s.path for s in stub.seen] == ["/registered_models/4/versions"]


def test_a_broken_scoped_listing_falls_back_to_the_global_one(
    stub: Stub, registry: KubeflowModelRegistry
) -> None:
    versions = [
        {"id": "5", "name": "1", "registeredModelId": "4"},
        {"id": "6", "name": "1", "registeredModelId": "9"},
    ]

    def answer(seen: Seen) -> Answer:
        if seen.path == "/model_versions":
            return 200, {"items": versions, "nextPageToken": ""}, {}
        if "externalId" in seen.query:  # exact, on every server version
            return 404, {"code": "x", "message": "no model versions found: not found"}, {}
        message = 'error listing model versions: ERROR: relation "parentcontext" does not exist'
        return 500, {"code": "x", "message": message + " (SQLSTATE 42P01)"}, {}

    stub.answer = answer
    assert [v.id for v in registry.list_versions("4")] == ["5"]
    stub.seen.clear()
    # The lookup of register and sign stays exact: no externalId of ours, no version (a
    # version another client wrote is adopted when creating it conflicts), never a scan.
    assert registry.get_version("9", "1") is None
    assert [(s.path, s.query) for s in stub.seen] == [
        ("/model_version", {"externalId": "modelhooks:9:1"})
    ]


def test_requests_is_not_imported_with_the_module() -> None:
    code = (
        "import sys, modelhooks.bootstrap, modelhooks.adapters.model_registry.kubeflow; "
        "assert 'requests' not in sys.modules, 'requests imported'; "
        "assert 'urllib3' not in sys.modules, 'urllib3 imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_proxy_of_the_environment_is_used(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY (with its credentials) carries the requests to a registry NO_PROXY does
    not name, as requests would send them."""
    stub.answer = lambda seen: (200, {"id": "1", "name": "m"}, {})
    proxied = stub.url.replace("http://", "http://user:pw@")
    monkeypatch.setenv("HTTP_PROXY", proxied)
    monkeypatch.setenv("NO_PROXY", "elsewhere.example")
    registry = KubeflowModelRegistry("http://model-registry.example:8080", token="t")
    assert registry.get_model("m") == RegisteredModel("1", "m")
    registry.close()
    (seen,) = stub.seen
    headers = {k.lower(): v for k, v in seen.headers.items()}
    assert headers["host"] == "model-registry.example:8080"
    assert headers["proxy-authorization"] == "Basic dXNlcjpwdw=="  # user:pw
    assert headers["authorization"] == "Bearer t"
    assert seen.path == "/registered_model" and seen.query == {"name": "m"}


def test_no_proxy_goes_direct(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:  # a proxy that is not there
        sock.bind(("127.0.0.1", 0))
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{sock.getsockname()[1]}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    stub.answer = lambda seen: (200, {"id": "1", "name": "m"}, {})
    registry = KubeflowModelRegistry(stub.url)
    assert registry.get_model("m") == RegisteredModel("1", "m")
    registry.close()
    monkeypatch.delenv("NO_PROXY")
    through_the_proxy = KubeflowModelRegistry(stub.url, timeout=2)
    with pytest.raises(Unavailable):
        through_the_proxy.get_model("m")
    through_the_proxy.close()


def test_a_broken_next_page_falls_back_to_the_servers_own_pages(
    stub: Stub, registry: KubeflowModelRegistry
) -> None:
    def answer(seen: Seen) -> Answer:
        if "nextPageToken" in seen.query:  # v0.3.0 on PostgreSQL
            message = 'missing FROM-clause entry for table "context" (SQLSTATE 42P01)'
            return 500, {"code": "x", "message": message}, {}
        if "pageSize" in seen.query:
            return 200, {"items": [{"id": "1", "name": "a"}], "nextPageToken": "MTox"}, {}
        everything = [{"id": "1", "name": "a"}, {"id": "2", "name": "b"}]
        return 200, {"items": everything, "nextPageToken": ""}, {}

    stub.answer = answer
    assert [m.name for m in registry.list_models()] == ["a", "b"]
    assert len(stub.seen) == 3
