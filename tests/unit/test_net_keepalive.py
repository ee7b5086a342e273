"""The guarded opener keeps connections alive: requests to one host reuse a connection
once the previous answer was read to its end; an answer left unread, a connection the
server closed while idle, an error answer and concurrent requests each behave."""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from modelhooks.adapters.net import guarded_opener


@dataclass
class Server:
    url: str
    connections: list[int] = field(default_factory=list)  # one entry per accepted connection
    close_after_each: bool = False


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server("")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            state.connections.append(1)

        def _answer(self, body: bytes) -> None:
            status = 404 if self.path.startswith("/missing") else 200
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            if state.close_after_each:  # an idle timeout, without saying Connection: close
                self.close_connection = True

        def do_GET(self) -> None:
            size = int(self.path.rpartition("/")[2] or 0) if "/big/" in self.path else 0
            self._answer(b"x" * size if size else self.path.encode())

        def do_HEAD(self) -> None:
            self._answer(self.path.encode())

        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers["Content-Length"]))
            self._answer(b"posted " + data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield state
    httpd.shutdown()
    httpd.server_close()


def _get(opener: urllib.request.OpenerDirector, url: str) -> bytes:
    with opener.open(url, timeout=5) as resp:
        return bytes(resp.read())


def test_requests_to_one_host_reuse_one_connection(server: Server) -> None:
    opener = guarded_opener(allow_local=True)
    for n in range(20):
        assert _get(opener, f"{server.url}/item/{n}") == f"/item/{n}".encode()
    request = urllib.request.Request(f"{server.url}/head", method="HEAD")
    with opener.open(request, timeout=5) as resp:
        assert resp.status == 200
    post = urllib.request.Request(f"{server.url}/post", data=b"body", method="POST")
    with opener.open(post, timeout=5) as resp:
        assert resp.read() == b"posted body"
    assert _get(opener, f"{server.url}/after-head") == b"/after-head"
    assert len(server.connections) == 2  # the POST on a new one (it is never sent twice)


def test_a_request_without_a_timeout_reuses_the_connection_too(server: Server) -> None:
    opener = guarded_opener(allow_local=True)
    for n in range(3):
        with opener.open(f"{server.url}/plain/{n}") as resp:  # urllib's default timeout
            assert resp.read() == f"/plain/{n}".encode()
    assert len(server.connections) == 1


def test_an_answer_left_unread_is_not_followed_on_its_connection(server: Server) -> None:
    opener = guarded_opener(allow_local=True)
    with opener.open(f"{server.url}/big/200000", timeout=5) as resp:
        assert resp.read(10) == b"x" * 10  # the rest is still on the wire
    assert _get(opener, f"{server.url}/next") == b"/next"
    assert len(server.connections) == 2


def test_an_error_answer_read_through_the_error_keeps_the_connection(server: Server) -> None:
    opener = guarded_opener(allow_local=True)
    with pytest.raises(urllib.error.HTTPError) as raised:
        opener.open(f"{server.url}/missing", timeout=5)
    assert raised.value.code == 404 and raised.value.read() == b"/missing"
    assert _get(opener, f"{server.url}/found") == b"/found"
    assert len(server.connections) == 1


def test_a_connection_the_server_closed_while_idle_is_replaced(server: Server) -> None:
    server.close_after_each = True
    opener = guarded_opener(allow_local=True)
    for n in range(5):
        assert _get(opener, f"{server.url}/again/{n}") == f"/again/{n}".encode()
    post = urllib.request.Request(f"{server.url}/post", data=b"once", method="POST")
    with opener.open(post, timeout=5) as resp:
        assert resp.read() == b"posted once"
    assert len(server.connections) == 6


def test_concurrent_requests_each_get_their_own_connection_then_share_them(
    server: Server,
) -> None:
    opener = guarded_opener(allow_local=True)

    def worker(n: int) -> list[bytes]:
        return [_get(opener, f"{server.url}/w{n}/{i}") for i in range(25)]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(worker, range(8)))
    assert answers == [[f"/w{n}/{i}".encode() for i in range(25)] for n in range(8)]
    # reused (the sequential tests count exactly; under a loaded machine more are opened)
    assert 1 <= len(server.connections) < 8 * 25


def test_connections_are_reused_in_a_process_holding_over_1024_files(server: Server) -> None:
    """An idle connection's check must work past select(2)'s FD_SETSIZE: a process holding
    more files (a long-lived serve, a test run) reused no connection at all."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        opener = guarded_opener(allow_local=True)
        for n in range(5):
            assert _get(opener, f"{server.url}/item/{n}") == f"/item/{n}".encode()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert len(server.connections) == 1
