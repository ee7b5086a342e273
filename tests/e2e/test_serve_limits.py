"""`modelhooks serve` under hostile clients: stalled half-requests cost no thread, a body
shorter than its Content-Length is cut off (408), keep-alive works, and the server keeps
answering throughout."""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from contextlib import closing as _closing

import pytest

from tests.e2e.conftest import Served
from tests.e2e.packaging import free_port

pytestmark = pytest.mark.e2e

STALLED = 500


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.fixture
def served(serve: Callable[..., Served]) -> Iterator[Served]:
    yield serve(free_port(), "--serve-read-timeout", "1", "--serve-threads", "4")


def test_stalled_half_requests_hold_no_threads_and_the_server_answers(served: Served) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    with ExitStack() as stack:
        for i in range(STALLED):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Len" if i % 2 else b"POS")
        time.sleep(0.5)
        started = time.monotonic()
        conn = stack.enter_context(
            _closing(http.client.HTTPConnection("127.0.0.1", port, timeout=10))
        )
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() and time.monotonic() - started < 2
        assert threads_of(served.process.pid) < 20, "threads grew with the stalled connections"


def test_a_body_shorter_than_its_length_is_cut_off_with_408(served: Served) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        started = time.monotonic()
        response = http.client.HTTPResponse(sock)
        response.begin()
        assert response.status == 408
        assert time.monotonic() - started < 5
        assert json.loads(response.read())["error"] == "request_timeout"


def test_keep_alive_serves_many_requests_on_one_connection(served: Served) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    with _closing(http.client.HTTPConnection("127.0.0.1", port, timeout=10)) as conn:
        conn.connect()
        first = conn.sock
        for _ in range(20):
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            assert (response.getheader("connection") or "").lower() != "close"
        assert conn.sock is first  # never reconnected


def test_answers_carry_their_length(served: Served) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    with _closing(http.client.HTTPConnection("127.0.0.1", port, timeout=10)) as conn:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        body = response.read()
        assert response.getheader("content-length") == str(len(body))
        assert response.getheader("transfer-encoding") is None
