"""`modelhooks serve` under hostile clients: stalled half-requests cost no thread, a body
shorter than its Content-Length is cut off (408), keep-alive works, an oversized body sent in
one go is answered 413 (never a connection reset: drained, within bounds, before the answer),
and the server keeps answering throughout."""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, suppress
from contextlib import closing as _closing
from pathlib import Path
from typing import Any

import pytest
import requests

from modelhooks.delivery.server import Limits
from tests.e2e.conftest import Served
from tests.e2e.packaging import free_port
from tests.local_store import lay_model

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


def test_silent_and_trickling_connections_are_cut_off_and_free_their_slots(
    served: Served,
) -> None:
    """More connections than `max_connections` that send nothing, half a request line or
    headers without their end: each closes after the read timeout (the ones that sent
    something with a 408 and its reason) and the server answers again. Without a deadline
    for the headers they held every slot for good and all else got 503."""
    port = int(served.url.rsplit(":", 1)[1])
    openings = [b"", b"POS", b"POST / HTTP/1.1\r\nHost: x\r\n", b"GET /healthz HTTP/1.1\r\n"]
    with ExitStack() as stack:
        socks = []
        for i in range(Limits().max_connections + 10):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
            sock.sendall(openings[i % len(openings)])
            socks.append(sock)
        last = len(socks) - len(openings)
        answers = {i % len(openings): _read_to_close(socks[i]) for i in range(last, len(socks))}
        served.wait_for(  # every slot was taken; they free up
            "the slots freed",
            lambda: requests.get(f"{served.url}/healthz", timeout=5).status_code == 200,
            timeout=10,
        )
    assert answers[0] == b""
    for i in range(1, len(openings)):
        assert answers[i].startswith(b"HTTP/1.1 408 "), answers[i]
        assert b"connection: close" in answers[i].lower()
        reason = json.loads(answers[i].split(b"\r\n\r\n", 1)[1])
        assert reason == {
            "error": "request_timeout",
            "message": "the request headers did not arrive in time",
        }


def test_a_kept_alive_connection_whose_next_headers_stall_is_cut_off(served: Served) -> None:
    """The headers' deadline holds for every request on a connection, not only its first: a
    second request that sends half its headers is answered 408 after the read timeout."""
    port = int(served.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = sock.makefile("rb")
        assert _read_answer(answers)[0] == 200
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        status, body = _read_answer(answers)
        assert answers.read() == b""  # closed
    assert status == 408 and time.monotonic() - started < 5
    assert json.loads(body)["message"] == "the request headers did not arrive in time"


def test_a_client_that_pipelines_without_reading_costs_bounded_memory(served: Served) -> None:
    """Requests sent back to back on one connection, none of the answers read: the server
    reads ahead at most 64 KiB of them (uvicorn read on for each request and after each
    answer; with a deadline for the headers alone, a client got 500 MB into the server
    within seconds: 1 GiB of memory)."""
    port = int(served.url.rsplit(":", 1)[1])
    peak_before = _peak_memory_of(served.process.pid)
    requests_ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 1000
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sent = _send_for(sock, requests_, 3)
    assert sent < 32 << 20, f"the server took {sent >> 20} MiB of unanswered requests"
    assert _peak_memory_of(served.process.pid) - peak_before < 64 << 20


def test_pipelined_requests_are_each_answered_in_order(served: Served) -> None:
    """Requests written back to back, bodies and all, well past the 64 KiB read ahead: each
    is answered, in order, on the one connection (a request is parsed only once the one
    before it is answered, the rest held unparsed)."""
    port = int(served.url.rsplit(":", 1)[1])
    pad = "a" * 1000
    sent = b"".join(
        f"POST /functions/nope-{i} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(pad)}\r\n"
        f"\r\n{pad}".encode()
        for i in range(300)
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(sent)
        answers = sock.makefile("rb")
        for i in range(300):
            status, body = _read_answer(answers)
            assert status == 404
            assert json.loads(body)["message"] == f"no function 'nope-{i}'"


def test_headers_over_the_limit_are_answered_431_with_the_reason(served: Served) -> None:
    """A request's line and headers over 64 KiB are refused with 431 and the reason, and the
    connection closes: many headers, or one whose value does not end (the parser gathers a
    value until it ends: unbounded, a client grew the server's memory until the timeout)."""
    port = int(served.url.rsplit(":", 1)[1])
    many = b"X-Pad: " + b"a" * 200 + b"\r\n"
    for head in (many * 350, b"X-Pad: " + b"a" * (70 << 10)):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + head)
            answer = _read_to_close(sock)
        assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer
        assert b"connection: close" in answer.lower()
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {
            "error": "headers_too_large",
            "message": "the request headers are over the limit of 65536 bytes",
        }
    assert requests.get(f"{served.url}/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (b"HELLO THERE\r\n\r\n", "Invalid method encountered"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nNo colon\r\n\r\n", "Invalid header token"),
    ],
    ids=["method", "header"],
)
def test_a_request_that_is_not_http_is_answered_400_with_the_reason(
    served: Served, request_: bytes, reason: str
) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request_)
        answer = _read_to_close(sock)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    assert b"connection: close" in answer.lower()
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {
        "error": "bad_request",
        "message": f"not a valid HTTP/1.1 request: {reason}",
    }


def test_requests_pipelined_before_a_refused_one_are_answered_first(served: Served) -> None:
    """Requests sent in one packet before one the parser refuses each get their own answer,
    in order, then the refusal (answered at once, the 400 was read as the first one's)."""
    port = int(served.url.rsplit(":", 1)[1])
    ok = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(ok * 3 + b"HELLO THERE\r\n\r\n" + ok)
        answers = sock.makefile("rb")
        assert [_read_answer(answers)[0] for _ in range(3)] == [200, 200, 200]
        status, answer = _read_answer(answers)
        assert (status, json.loads(answer)["error"]) == (400, "bad_request")
        assert answers.read() == b""  # closed: nothing after the refused request is read


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"zz\r\n{}\r\n0\r\n\r\n", "Invalid character in chunk size"),
        (b"2\r\n{}\r\n0\r\nX-Trailer: \x00\r\n\r\n", "Invalid header value char"),
    ],
    ids=["chunk-size", "trailer"],
)
def test_a_body_the_parser_refuses_is_answered_400_with_the_reason_after_those_before(
    served: Served, body: bytes, reason: str
) -> None:
    """A chunked body llhttp refuses is answered 400 with the reason, after the requests
    pipelined before it (the refusal waited for its own request's answer, whose app waited
    for the rest of the body: a 408 at the read timeout, which Knative retries)."""
    port = int(served.url.rsplit(":", 1)[1])
    ok = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    refused = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    for before in (b"", ok):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(before + refused)
            answers = sock.makefile("rb")
            if before:
                assert _read_answer(answers)[0] == 200
            status, answer = _read_answer(answers)
            assert (status, json.loads(answer)) == (
                400,
                {"error": "bad_request", "message": f"not a valid HTTP/1.1 request: {reason}"},
            )
            assert answers.read() == b""


def test_a_body_cut_off_by_its_sender_is_not_handled(served: Served) -> None:
    """A request whose sender closes before its Content-Length arrived is no delivery: what
    came of its body was handled as the whole of it (here a complete CloudEvent: registered)."""
    port = int(served.url.rsplit(":", 1)[1])

    def pushed(version: str) -> bytes:
        where = lay_model(served.home, "models", f"models/cut-off/{version}")
        event = {
            "specversion": "1.0",
            "id": f"cut-off-{version}",
            "source": "/test",
            "type": "dev.modelhooks.artifact.pushed",
            "data": {
                "model": "cut-off",
                "version": version,
                "uri": f"{where.as_uri()}/",
                "digest": f"local-generation:{version}",
                "store": "local",
            },
        }
        return json.dumps(event).encode()

    body = pushed("1")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/cloudevents+json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body) + 10, body)
        )
        sock.shutdown(socket.SHUT_WR)
        assert _read_to_close(sock) == b""  # nobody to answer
    answer = requests.post(
        f"{served.url}/",
        data=pushed("2"),
        headers={"Content-Type": "application/cloudevents+json"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    versions = {
        row.get("version") for row in served.registrations() if row.get("model") == "cut-off"
    }
    assert versions == {"2"}, served.registrations()


def test_an_http_1_1_request_without_host_is_answered_400_and_its_body_not_handled(
    served: Served,
) -> None:
    """RFC 9112 3.2: a server answers 400 to an HTTP/1.1 request with no Host (httptools
    parses one; h11 refused it). The body is read and dropped; HTTP/1.0 needs no Host."""
    port = int(served.url.rsplit(":", 1)[1])
    body = b'{"specversion": "1.0"}'
    request_ = b"POST /functions/register HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request_ + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = sock.makefile("rb")
        status, answer = _read_answer(answers)
        assert status == 400
        assert json.loads(answer)["message"] == (
            "an HTTP/1.1 request must carry a Host header (RFC 9112, 3.2)"
        )
        assert _read_answer(answers)[0] == 200  # the connection goes on: the body was read
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        assert _read_to_close(sock).startswith(b"HTTP/1.1 200 ")


def _read_answer(answers: Any) -> tuple[int, bytes]:
    """One answer's status and body from a buffered reader of a connection."""
    status = int(answers.readline().split()[1])
    length = 0
    while (line := answers.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, answers.read(length)


def test_answers_left_unread_close_the_connection(served: Served) -> None:
    """A client that sends requests and never reads what they answer is cut off once the
    answers have waited for it for the read timeout (the server waited for good, holding a
    connection slot)."""
    port = int(served.url.rsplit(":", 1)[1])
    pid = served.process.pid
    sockets_before = _sockets_of(pid)
    name = "x" * 50_000  # each answer names it: 50 kB answers fill the buffers in ~100
    request = f"POST /functions/{name} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        _send_for(sock, request.encode() * 20, 2)
        served.wait_for("the unread connection closed", lambda: _sockets_of(pid) <= sockets_before)


def _send_for(sock: socket.socket, data: bytes, seconds: float) -> int:
    """Send `data` again and again for `seconds`, reading nothing; the bytes sent."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    sent, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            sent += sock.send(data)
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:  # closed by the server
            break
    return sent


def _sockets_of(pid: int) -> int:
    fds, count = f"/proc/{pid}/fd", 0
    for fd in os.listdir(fds):
        with suppress(FileNotFoundError):  # closed meanwhile
            count += os.readlink(f"{fds}/{fd}").startswith("socket:")
    return count


def _peak_memory_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        peak = next(line for line in status if line.startswith("VmHWM:"))
    return int(peak.split()[1]) * 1024


def _read_to_close(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


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


def test_serve_runs_on_uvloop(served: Served) -> None:
    """uvloop is a dependency (serve's event loop, in C), and serve as installed loads it
    (TCP_NODELAY and the rest, on both loops: tests/unit/test_server_loops.py)."""
    maps = Path(f"/proc/{served.process.pid}/maps").read_text()
    assert "uvloop/loop." in maps, "serve runs on asyncio's pure-Python loop"


def test_answers_carry_their_length(served: Served) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    with _closing(http.client.HTTPConnection("127.0.0.1", port, timeout=10)) as conn:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        body = response.read()
        assert response.getheader("content-length") == str(len(body))
        assert response.getheader("transfer-encoding") is None


OVERSIZED = [4 << 20, 16 << 20]  # over ingress.max_body_bytes (3 MiB)
ATTEMPTS = 20
LINGER = Limits().linger  # what `modelhooks serve` runs with


def oversized_event(size: int) -> bytes:
    head = b'{"specversion": "1.0", "id": "big", "source": "/t", "type": "t", "data": "'
    return head + b"a" * size + b'"}'


def raw_post(port: int, body: bytes, connection: str) -> tuple[int, bytes]:
    """One POST written with a single sendall (headers and body), then its answer read."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/cloudevents+json\r\n"
            + f"Connection: {connection}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.read()


def client_post(port: int, body: bytes, connection: str) -> tuple[int, bytes]:
    if connection == "requests":
        resp = requests.post(
            f"http://127.0.0.1:{port}/",
            data=body,
            headers={"Content-Type": "application/cloudevents+json"},
            timeout=30,
        )
        return resp.status_code, resp.content
    with _closing(http.client.HTTPConnection("127.0.0.1", port, timeout=30)) as conn:
        conn.request("POST", "/", body, {"Content-Type": "application/cloudevents+json"})
        response = conn.getresponse()
        return response.status, response.read()


@pytest.mark.parametrize("size", OVERSIZED, ids=["4MiB", "16MiB"])
@pytest.mark.parametrize("client", ["close", "keep-alive", "requests", "http.client"])
def test_an_oversized_body_sent_in_one_go_reads_its_413_never_a_reset(
    served: Served, size: int, client: str
) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    body = oversized_event(size)
    post = raw_post if client in ("close", "keep-alive") else client_post
    outcomes = []
    for _ in range(ATTEMPTS):
        try:
            status, answer = post(port, body, client)
        except OSError as exc:  # a reset: Knative would redeliver what must be dead-lettered
            outcomes.append(type(exc).__name__)
            continue
        reason = json.loads(answer)
        outcomes.append(f"{status} {reason['error']}")
        assert "over the limit" in reason["message"]
    assert outcomes == ["413 payload_too_large"] * ATTEMPTS


def test_a_drained_413_keeps_its_connection(served: Served) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    with _closing(http.client.HTTPConnection("127.0.0.1", port, timeout=30)) as conn:
        conn.request("POST", "/", oversized_event(4 << 20), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 413 and response.getheader("connection") is None
        response.read()
        first = conn.sock
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200 and conn.sock is first


def test_a_slow_sender_of_a_refused_body_is_cut_off_after_the_linger(served: Served) -> None:
    """The drain is bounded: a sender trickling a 16 MiB body is answered and closed after
    `linger` seconds, and the server answers others meanwhile."""
    port = int(served.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {16 << 20}\r\n\r\n{{".encode()
        )
        started, received, closed_after = time.monotonic(), b"", None
        other = requests.get(f"{served.url}/healthz", timeout=2)  # while it drains
        while time.monotonic() - started < 3 * LINGER:
            try:
                sock.sendall(b"a" * 64)
                chunk = sock.recv(65536)
            except TimeoutError:
                continue  # nothing to read yet: keep trickling
            except OSError:  # reset once the server closes on the unread trickle
                closed_after = time.monotonic() - started
                break
            if not chunk:
                closed_after = time.monotonic() - started
                break
            received += chunk
    assert other.status_code == 200
    assert closed_after is not None, f"still open after {3 * LINGER} s of trickling"
    assert LINGER - 0.5 < closed_after < LINGER + 5  # + slack for a loaded machine
    if received:  # read before the reset: the 413, closing
        assert received.startswith(b"HTTP/1.1 413") and b"connection: close" in received.lower()
