"""`modelhooks serve`'s bounds hold on both event loops it may run on: uvloop (libuv, when
installed) and asyncio's own (where uvloop has no wheel). `_bounded_protocol` leans on the
transport (write-buffer limits and pause_writing, pause_reading, timers, abort, TLS): each
hostile client below meets the server of `modelhooks.delivery.server.run` on each loop, in
this process, on a loopback port."""

from __future__ import annotations

import gc
import http.client
import json
import os
import queue
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from modelhooks.delivery import server
from modelhooks.delivery.encoding import Response, json_response
from modelhooks.delivery.server import Limits
from tests.servers.tls import CertificateAuthority, serving_pair

TIMEOUT = 0.5  # the read timeout the servers below run with
BIG = 8 << 20  # an answer no socket buffer holds


@dataclass
class App:
    """The handler the servers run: `/big` answers BIG bytes, `/block` waits until released,
    anything else answers 200 with what it was sent."""

    handled: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    entered: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def __call__(self, method: str, path: str, headers: Any, body: bytes) -> Response:
        self.handled.append(path)
        if path == "/big":
            return Response(200, {"Content-Type": "application/octet-stream"}, b"x" * BIG)
        if path == "/block":
            self.entered.release()
            self.release.wait(30)
        return json_response(200, {"path": path, "length": len(body)})


@dataclass
class Running:
    port: int
    app: App
    uvicorn: Any  # uvicorn.Server
    thread: threading.Thread

    def connections(self) -> set[Any]:
        return set(self.uvicorn.server_state.connections)

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 5) -> float:
        """Seconds until `check()` held."""
        started = time.monotonic()
        while not check():
            assert time.monotonic() - started < timeout, f"no {what} after {timeout} s"
            time.sleep(0.01)
        return time.monotonic() - started


@pytest.fixture(params=["asyncio", "uvloop"])
def start(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Running]]:
    """Starts `server.run` in a thread on the loop of the parameter; stopped at the end."""
    import uvicorn

    loop: str = request.param
    monkeypatch.setattr(server, "event_loop", lambda: loop)
    made: queue.Queue[Any] = queue.Queue()
    original = uvicorn.Server.run

    def run(self: Any, sockets: Any = None) -> None:
        made.put(self)
        original(self, sockets=sockets)

    monkeypatch.setattr(uvicorn.Server, "run", run)
    started: list[tuple[threading.Thread, Running]] = []

    def start_(
        limits: Limits | None = None,
        tls: tuple[str, str] | None = None,
    ) -> Running:
        app = App()
        ports: queue.Queue[int] = queue.Queue()
        thread = threading.Thread(
            target=server.run,
            args=(app,),
            kwargs={
                "host": "127.0.0.1",
                "port": 0,
                "limits": limits or Limits(read_timeout=TIMEOUT),
                "tls": tls,
                "on_ready": lambda _, port: ports.put(port),
            },
            daemon=True,
        )
        thread.start()
        running = Running(ports.get(timeout=10), app, made.get(timeout=10), thread)
        started.append((thread, running))
        running.wait_for("start", lambda: bool(running.uvicorn.started))
        (listener,) = running.uvicorn.servers
        assert type(listener).__module__.split(".")[0] == loop
        return running

    yield start_
    for thread, running in started:
        running.app.release.set()
        running.uvicorn.should_exit = True
        thread.join(15)
        assert not thread.is_alive(), "the server did not stop"
    gc.unfreeze()  # server.run froze this process's objects


def connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # before connecting: the window is agreed then
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def read_to_close(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, ssl.SSLError):  # an abort
        pass
    return data


def read_answer(answers: Any) -> tuple[int, dict[str, str], bytes]:
    status = int(answers.readline().split()[1])
    headers = {}
    while (line := answers.readline()) not in (b"\r\n", b""):
        name, value = line.decode("latin-1").split(":", 1)
        headers[name.lower()] = value.strip()
    return status, headers, answers.read(int(headers["content-length"]))


# -- an answer left unread: pause_writing, a timer, abort --------------------------------


def test_an_answer_left_unread_aborts_its_connection_after_the_read_timeout(
    start: Callable[..., Running],
) -> None:
    running = start()
    with connect(running.port, rcvbuf=4096) as sock:
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        running.wait_for("a connection", lambda: bool(running.connections()))
        took = running.wait_for("the connection aborted", lambda: not running.connections())
        assert len(read_to_close(sock)) < BIG
    assert took < TIMEOUT + 2


def test_an_answer_the_client_reads_is_whole_however_big(
    start: Callable[..., Running],
) -> None:
    """Its writes pause and resume many times (a small receive window): each resume stops
    the clock."""
    running = start()
    with connect(running.port, rcvbuf=4096) as sock:
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body = read_answer(sock.makefile("rb"))
    assert status == 200 and len(body) == BIG


# -- the headers' deadline, silent connections ----------------------------------------


def test_headers_that_stall_are_answered_408_after_the_read_timeout(
    start: Callable[..., Running],
) -> None:
    running = start()
    with connect(running.port) as silent, connect(running.port) as partial:
        began = time.monotonic()
        partial.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        answer = read_to_close(partial)
        assert read_to_close(silent) == b""
        took = time.monotonic() - began
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"] == "request_timeout"
    assert TIMEOUT * 0.8 < took < TIMEOUT + 2


def test_a_body_that_stalls_is_answered_408_after_the_read_timeout(
    start: Callable[..., Running],
) -> None:
    running = start()
    with connect(running.port) as sock:
        began = time.monotonic()
        sock.sendall(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345")
        answer = read_to_close(sock)
        took = time.monotonic() - began
    assert answer.startswith(b"HTTP/1.1 408 ") and b"connection: close" in answer.lower()
    assert TIMEOUT * 0.8 < took < TIMEOUT + 2
    assert running.app.handled == []


# -- a refused body: linger --------------------------------------------------------------


def test_a_body_refused_413_is_drained_and_its_connection_kept(
    start: Callable[..., Running],
) -> None:
    running = start(Limits(read_timeout=TIMEOUT, max_body_bytes=1024))
    body = b"x" * (4 << 20)
    with connect(running.port) as sock:
        sock.sendall(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        sock.sendall(body)  # in one go: never reset
        answers = sock.makefile("rb")
        status, headers, _ = read_answer(answers)
        assert status == 413 and headers.get("connection") != "close"
        sock.sendall(b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert read_answer(answers)[0] == 200
    assert running.app.handled == ["/b"]


def test_a_slow_sender_of_a_refused_body_is_cut_off_after_the_linger(
    start: Callable[..., Running],
) -> None:
    running = start(Limits(read_timeout=5, max_body_bytes=1024, linger=TIMEOUT))
    with connect(running.port) as sock:
        sock.sendall(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n")
        began = time.monotonic()
        answer = b""
        sock.settimeout(0.05)
        while not answer and time.monotonic() - began < 5:
            sock.sendall(b"x")  # 20 bytes a second
            with suppress(TimeoutError):
                answer = sock.recv(65536)
        took = time.monotonic() - began
    assert answer.startswith(b"HTTP/1.1 413 ") and b"connection: close" in answer.lower()
    assert TIMEOUT * 0.8 < took < TIMEOUT + 2


# -- pipelining: pause_reading / resume_reading --------------------------------------


def test_pipelined_requests_left_unanswered_are_read_ahead_64_kib_at_most(
    start: Callable[..., Running],
) -> None:
    running = start()
    running.app.release.clear()
    one = b"GET /block HTTP/1.1\r\nHost: x\r\n\r\n"
    with connect(running.port) as sock:
        sock.setblocking(False)
        sent, began = 0, time.monotonic()
        while time.monotonic() - began < 1.5:
            try:
                sent += sock.send(one * 1000)
            except BlockingIOError:
                time.sleep(0.01)
        (protocol,) = running.connections()
        held = len(protocol._held)
        running.app.release.set()
    assert held <= (64 << 10) + (256 << 10)  # the bound, and one read more
    assert sent < 32 << 20


def test_pipelined_requests_are_each_answered_in_order(start: Callable[..., Running]) -> None:
    running = start()
    with connect(running.port) as sock:
        sock.sendall(b"".join(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(200)))
        answers = sock.makefile("rb")
        paths = [json.loads(read_answer(answers)[2])["path"] for _ in range(200)]
    assert paths == [f"/{i}" for i in range(200)]


# -- connections: the limit, a client gone, half-closed ------------------------------


def test_requests_over_the_connection_limit_are_answered_503(
    start: Callable[..., Running],
) -> None:
    """`max_connections` connections with a request in flight are served, the next gets 503:
    uvicorn counts the connection asking among those in flight, so the 503 came one early."""
    running = start(Limits(read_timeout=5, max_connections=3, threads=3))
    held = [connect(running.port) for _ in range(3)]
    try:
        for sock in held:
            sock.sendall(b"GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
            assert running.app.entered.acquire(timeout=5)  # the third too: not a 503
        with connect(running.port) as fourth:
            fourth.sendall(b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_answer(fourth.makefile("rb"))[0] == 503
        running.app.release.set()
        assert [read_answer(s.makefile("rb"))[0] for s in held] == [200, 200, 200]
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_client_gone_while_its_request_is_handled_frees_its_connection(
    start: Callable[..., Running], how: str
) -> None:
    running = start()
    sock = connect(running.port)
    sock.sendall(b"GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
    assert running.app.entered.acquire(timeout=5)
    if how == "reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    running.wait_for("the connection gone", lambda: not running.connections())
    running.app.release.set()
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=5)
    conn.request("GET", "/after")
    assert conn.getresponse().status == 200
    conn.close()


def test_a_client_that_half_closes_after_its_request_frees_its_connection(
    start: Callable[..., Running],
) -> None:
    """Its request is handled; its answer is not sent (uvicorn closes on the end of the
    input, as Knative, Pub/Sub and the apiserver never half-close), on either loop."""
    running = start()
    running.app.release.clear()
    with connect(running.port) as sock:
        sock.sendall(b"GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
        assert running.app.entered.acquire(timeout=5)
        sock.shutdown(socket.SHUT_WR)
        running.wait_for("the connection gone", lambda: not running.connections())
        running.app.release.set()
        assert read_to_close(sock) == b""
    assert running.app.handled == ["/block"]


def test_a_body_cut_off_by_a_half_close_is_not_handled(start: Callable[..., Running]) -> None:
    running = start()
    with connect(running.port) as sock:
        sock.sendall(b"POST /cut HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 50)
        sock.shutdown(socket.SHUT_WR)
        assert read_to_close(sock) == b""
        running.wait_for("the connection gone", lambda: not running.connections())
    assert running.app.handled == []


SERVE_SLOWLY = """
import sys, time
from modelhooks.delivery import server
from modelhooks.delivery.encoding import json_response
server.event_loop = lambda: sys.argv[1]
def slow(method, path, headers, body):
    time.sleep(1)
    return json_response(200, {"path": path})
server.run(slow, host="127.0.0.1", port=0, on_ready=lambda _, port: print(port, flush=True))
"""


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_delivery_in_flight_when_stopped_is_answered(loop: str, stop: signal.Signals) -> None:
    """Kubernetes stops a Pod with SIGTERM, a person with Ctrl-C: the server stops taking
    connections, answers what it is handling (Connection: close), then exits."""
    argv = [sys.executable, "-c", SERVE_SLOWLY, loop]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with connect(port) as sock:
            sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.3)  # being handled
            proc.send_signal(stop)
            status, headers, body = read_answer(sock.makefile("rb"))
        proc.wait(timeout=15)
    assert status == 200 and json.loads(body) == {"path": "/slow"}
    assert headers["connection"] == "close"
    assert proc.returncode == -stop  # uvicorn raises the signal again once it has stopped


# -- TCP_NODELAY -------------------------------------------------------------------------


def test_accepted_connections_have_nagle_off(start: Callable[..., Running]) -> None:
    running = start()
    with connect(running.port) as sock:
        sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        read_answer(sock.makefile("rb"))
        (protocol,) = running.connections()
        accepted = protocol.transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


# -- TLS -----------------------------------------------------------------------------------


@pytest.fixture
def pki(tmp_path: Path) -> tuple[CertificateAuthority, Path, Path]:
    return serving_pair(tmp_path)


def tls_connect(port: int, ca: CertificateAuthority, rcvbuf: int | None = None) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(ca.cert_file))
    return context.wrap_socket(connect(port, rcvbuf), server_hostname="127.0.0.1")


def test_https_answers_whole_and_reloads_its_certificate(
    start: Callable[..., Running], pki: tuple[CertificateAuthority, Path, Path], tmp_path: Path
) -> None:
    ca, cert, key = pki
    running = start(tls=(str(cert), str(key)))
    with tls_connect(running.port, ca) as sock:
        answers = sock.makefile("rb")
        for path in (b"/a", b"/big", b"/b"):  # kept alive, bodies whole
            sock.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path)
            status, _, body = read_answer(answers)
            assert status == 200
            assert (
                len(body) == BIG if path == b"/big" else json.loads(body)["path"] == path.decode()
            )
        subject = dict(x[0] for x in sock.getpeercert()["subject"])
        assert subject["commonName"] == "first"
    second_cert, second_key = ca.issue("second", tmp_path / "second")
    shutil.copy(second_key, key)
    shutil.copy(second_cert, cert)
    with tls_connect(running.port, ca) as sock:
        assert dict(x[0] for x in sock.getpeercert()["subject"])["commonName"] == "second"


def test_an_https_answer_left_unread_is_cut_off_after_the_keep_alive_close(
    start: Callable[..., Running], pki: tuple[CertificateAuthority, Path, Path]
) -> None:
    """The SSL layer takes the whole answer and hides its socket's buffer (no pause_writing):
    the keep-alive close (which waits for that buffer, then for the client's close_notify)
    is cut off after the read timeout; it was held 30 s more, the SSL layer's own bound."""
    ca, cert, key = pki
    running = start(Limits(read_timeout=TIMEOUT, keepalive=1), tls=(str(cert), str(key)))
    with tls_connect(running.port, ca, rcvbuf=4096) as sock:
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        running.wait_for("a connection", lambda: bool(running.connections()))
        took = running.wait_for("the connection aborted", lambda: not running.connections())
    assert took < 1 + TIMEOUT + 2


@pytest.mark.parametrize(
    "opening", [b"", b"GET / HTTP/1.1\r\nHost: x\r\n"], ids=["silent", "partial"]
)
def test_https_connections_whose_headers_stall_free_their_slot_in_time(
    start: Callable[..., Running], pki: tuple[CertificateAuthority, Path, Path], opening: bytes
) -> None:
    """Closed at the read timeout (with a 408 when part of a request came), and gone a read
    timeout later at most, the client's close_notify or not: that close waited 30 s for it."""
    ca, cert, key = pki
    running = start(tls=(str(cert), str(key)))
    with tls_connect(running.port, ca) as sock:  # and never reads
        sock.sendall(opening)
        running.wait_for("a connection", lambda: bool(running.connections()))
        took = running.wait_for("the connection gone", lambda: not running.connections())
        answer = read_to_close(sock)
    assert took < 2 * TIMEOUT + 2
    assert answer.startswith(b"HTTP/1.1 408 ") if opening else answer == b""


def client_hello() -> bytes:
    """The first flight of a real TLS client."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_https_handshakes_never_finished_are_counted_and_closed_after_the_read_timeout(
    start: Callable[..., Running], pki: tuple[CertificateAuthority, Path, Path]
) -> None:
    """Connections that send nothing, or half a ClientHello, take a slot each while they
    handshake, and are closed (their descriptors too) at the read timeout, while a client
    that completes its handshake is answered. The loop's SSL layer gave them 60 s, uncounted
    (uvicorn asks for no handshake timeout, and counts a connection once it is handshaken)."""
    ca, cert, key = pki
    running = start(tls=(str(cert), str(key)))
    baseline = descriptors()
    hello = client_hello()
    with ExitStack() as stack:
        began = time.monotonic()  # before the first accept: the clocks start after
        stalled = [stack.enter_context(connect(running.port)) for _ in range(40)]
        for sock in stalled[::2]:
            sock.sendall(hello[: len(hello) // 2])
        running.wait_for("the handshakes counted", lambda: len(running.connections()) == 40)
        with tls_connect(running.port, ca) as sock:
            sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_answer(sock.makefile("rb"))[0] == 200
        assert all(read_to_close(sock) == b"" for sock in stalled)
        took = time.monotonic() - began
        running.wait_for("the handshakes gone", lambda: not running.connections())
    assert TIMEOUT * 0.8 < took < TIMEOUT + 2
    running.wait_for("the descriptors back", lambda: descriptors() <= baseline)


def test_https_handshakes_take_slots_of_max_connections(
    start: Callable[..., Running], pki: tuple[CertificateAuthority, Path, Path]
) -> None:
    """Handshaking connections count as silent plain ones do: with max_connections of
    them open, a request is answered 503; once they are gone, 200."""
    ca, cert, key = pki
    running = start(Limits(read_timeout=1.5, max_connections=2), tls=(str(cert), str(key)))
    with connect(running.port), connect(running.port):
        running.wait_for("the handshakes counted", lambda: len(running.connections()) == 2)
        with tls_connect(running.port, ca) as sock:
            sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_answer(sock.makefile("rb"))[0] == 503
        running.wait_for("the handshakes gone", lambda: not running.connections())
        with tls_connect(running.port, ca) as sock:
            sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_answer(sock.makefile("rb"))[0] == 200


def test_a_server_stopping_aborts_the_handshakes_under_way(
    start: Callable[..., Running], pki: tuple[CertificateAuthority, Path, Path]
) -> None:
    """uvicorn waits for the connections it counts to end before it exits: a handshake is
    cut off, not waited for."""
    _, cert, key = pki
    running = start(Limits(read_timeout=30), tls=(str(cert), str(key)))
    with connect(running.port) as sock:
        running.wait_for("the handshake counted", lambda: bool(running.connections()))
        began = time.monotonic()
        running.uvicorn.should_exit = True
        running.thread.join(10)
        assert not running.thread.is_alive()
        assert read_to_close(sock) == b""
    assert time.monotonic() - began < 3


def test_a_close_after_the_connection_is_gone_arms_no_timer() -> None:
    """uvicorn's error paths may close the transport after connection_lost: that close
    armed an abort nothing disarmed, holding the protocol for the read timeout."""
    import asyncio

    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from modelhooks.delivery.server import _bounded_protocol

    class Transport(asyncio.Transport):
        closing = False

        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return default

        def set_write_buffer_limits(self, high: Any = None, low: Any = None) -> None:
            pass

        def is_closing(self) -> bool:
            return self.closing

        def close(self) -> None:
            self.closing = True

        def pause_reading(self) -> None:
            pass

        def resume_reading(self) -> None:
            pass

    loop = asyncio.new_event_loop()
    try:
        config = Config(server.Asgi(App(), Limits()), log_level="warning")
        protocol = _bounded_protocol(30.0)(config, ServerState(), {}, _loop=loop)
        protocol.connection_made(Transport())
        protocol.connection_lost(None)
        assert protocol._due == {}
        protocol.transport.close()  # as uvicorn's run_asgi does when the app failed
        assert protocol._due == {}, "a timer armed for a connection already gone"
    finally:
        loop.close()
