"""A configured endpoint's pool (endpoints.endpoint_pool, over http.client) against
fake-gcs-server: its connections kept alive; an https endpoint reached through a real
CONNECT proxy (its credentials sent to the proxy alone), its certificate verified with the
environment's CA bundle; a failure to get an answer is HttpFailed, naming a refused
certificate as such."""

from __future__ import annotations

import base64
import contextlib
import select
import socket
import socketserver
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelhooks.adapters.endpoints import HttpFailed, endpoint_pool
from modelhooks.adapters.object_store.gcs import GcsObjectStore
from modelhooks.core.errors import Unavailable
from tests.servers.objectstores import FakeGcs
from tests.servers.tls import CertificateAuthority

pytestmark = pytest.mark.integration

_PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                    "all_proxy", "NO_PROXY", "no_proxy", "REQUESTS_CA_BUNDLE",
                    "CURL_CA_BUNDLE")  # fmt: skip


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways between `a` and `b` until either side closes."""
    with contextlib.suppress(OSError):
        while True:
            readable, _, _ = select.select([a, b], [], [], 10)
            if not readable:
                return
            for src in readable:
                chunk = src.recv(65536)
                if not chunk:
                    return
                (b if src is a else a).sendall(chunk)


def _serve(handler: type[socketserver.BaseRequestHandler]) -> tuple[socketserver.TCPServer, int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


@pytest.fixture
def https_gcs(fake_gcs: FakeGcs, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """fake-gcs-server behind TLS (a byte forwarder with a certificate of a private CA for
    127.0.0.1): its https URL and the CA's certificate file."""
    ca = CertificateAuthority.create(tmp_path / "ca")
    context = ca.server_context("127.0.0.1", tmp_path / "ca")
    host, port = fake_gcs.url.removeprefix("http://").split(":")

    class Forward(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                tls = context.wrap_socket(self.request, server_side=True)
            except (OSError, ValueError):
                return  # a client that does not trust us hangs up in the handshake
            with tls, socket.create_connection((host, int(port))) as back:
                _pump(tls, back)

    server, tls_port = _serve(Forward)
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    yield f"https://127.0.0.1:{tls_port}", tmp_path / "ca.pem"
    server.shutdown()
    server.server_close()


@pytest.fixture
def tunnel() -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """A CONNECT proxy: its address and each tunnel it opened (target, Proxy-Authorization)."""
    opened: list[tuple[str, str | None]] = []

    class Connect(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            method, target, _ = self.rfile.readline().decode().split(" ", 2)
            headers = {}
            while (line := self.rfile.readline().decode().strip()) != "":
                name, _, value = line.partition(":")
                headers[name.lower()] = value.strip()
            opened.append((target, headers.get("proxy-authorization")))
            if method != "CONNECT":
                self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            host, port = target.rsplit(":", 1)
            with socket.create_connection((host, int(port))) as back:
                self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self.wfile.flush()
                _pump(self.connection, back)

    server, port = _serve(Connect)
    yield f"127.0.0.1:{port}", opened
    server.shutdown()
    server.server_close()


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_an_https_endpoint_is_tunnelled_through_the_proxy_and_verified(
    https_gcs: tuple[str, Path],
    tunnel: tuple[str, list[tuple[str, str | None]]],
    fake_gcs: FakeGcs,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, ca = https_gcs
    proxy, opened = tunnel
    bucket = f"endpoints-{uuid.uuid4().hex[:12]}"
    fake_gcs.storage_client().create_bucket(bucket)
    _clean(monkeypatch)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    monkeypatch.setenv("HTTPS_PROXY", f"http://us%3Aer:p%40ss@{proxy}")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca))

    store = GcsObjectStore(project=fake_gcs.project)
    store.put(bucket, "m/weights.bin", b"weights")
    assert store.read_range(bucket, "m/weights.bin", 1, 5) == b"eight"
    assert [o.key for o in store.list(bucket, "m/")] == ["m/weights.bin"]
    credentials = "Basic " + base64.b64encode(b"us:er:p@ss").decode()
    # one tunnel, to the endpoint, kept alive for the three requests
    assert opened == [(url.removeprefix("https://"), credentials)]

    monkeypatch.delenv("REQUESTS_CA_BUNDLE")  # certifi's bundle: the private CA is unknown
    with pytest.raises(Unavailable) as refused:
        list(GcsObjectStore(project=fake_gcs.project).list(bucket, "m/"))
    failure = refused.value.__cause__
    assert isinstance(failure, HttpFailed) and failure.tls, failure


def test_connections_are_kept_alive_and_a_refused_one_is_http_failed(
    fake_gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clean(monkeypatch)
    pool = endpoint_pool(fake_gcs.url)
    sockets = []
    for _ in range(3):
        response = pool.urlopen("GET", f"{fake_gcs.url}/storage/v1/b?project=p", timeout=10)
        assert response.status == 200 and response.data.startswith(b"{")
        ((conn,),) = pool._pool._idle.values()  # back once read: the same one each time
        sockets.append(conn.sock)
    assert sockets[0] is sockets[1] is sockets[2]
    streamed = pool.urlopen("GET", f"{fake_gcs.url}/storage/v1/b", preload_content=False)
    assert not any(pool._pool._idle.values())  # in use until its body is read
    assert b"".join(streamed.stream(4)).startswith(b"{")
    pool.clear()

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    with pytest.raises(HttpFailed) as failed:
        endpoint_pool(nobody).urlopen("GET", nobody, timeout=5)
    assert isinstance(failed.value.reason, ConnectionRefusedError) and not failed.value.tls
