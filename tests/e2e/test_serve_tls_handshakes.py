"""`modelhooks serve` over HTTPS (the admission certificate) under clients that connect and
never finish their TLS handshake: each is cut off at the read timeout, its descriptor
closed, while the server answers others. The loop's SSL layer gave a handshake 60 s, so a
client opening connections faster than they expired ran the process out of descriptors."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import pytest

from tests.e2e.packaging import free_port
from tests.servers.tls import CertificateAuthority, serving_pair

pytestmark = pytest.mark.e2e

MODELHOOKS = str(Path(sys.executable).with_name("modelhooks"))
READ_TIMEOUT = 1.0
STALLED = 300


def descriptors_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextmanager
def serving_https(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes], ssl.SSLContext]]:
    """`modelhooks serve` over HTTPS on a free port: (port, process, a client context
    trusting its CA) once /healthz answers; stopped at exit."""
    ca, cert, key = serving_pair(tmp_path / "pki")
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    environ.update(
        MODELHOOKS_ADMISSION_TLS_CERT_FILE=str(cert),
        MODELHOOKS_ADMISSION_TLS_KEY_FILE=str(key),
        MODELHOOKS_SERVE_WATCH_INTERVAL="0",
    )
    argv = [MODELHOOKS, "serve", "--port", str(port), "--home", str(tmp_path / "home")]
    argv += ["--serve-read-timeout", str(READ_TIMEOUT)]
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=environ)
    context = client_context(ca)
    try:
        deadline = time.monotonic() + 30
        while not healthy(port, context):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield port, proc, context
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def client_context(ca: CertificateAuthority) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca.cert_file))


def healthy(port: int, context: ssl.SSLContext) -> bool:
    try:
        url = f"https://127.0.0.1:{port}/healthz"
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def client_hello() -> bytes:
    """The first flight of a real TLS client."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def closed(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (it sent nothing before)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_https_handshakes_never_finished_are_cut_off_at_the_read_timeout(
    tmp_path: Path,
) -> None:
    """300 connections, half silent and half with half a ClientHello: the server holds a
    descriptor for each, answers /healthz over HTTPS meanwhile, and closes them all at the
    read timeout (they stayed 60 s): its descriptors come back to what they were."""
    with serving_https(tmp_path) as (port, proc, context), ExitStack() as stack:
        baseline = descriptors_of(proc.pid)
        hello = client_hello()
        socks = []
        began = time.monotonic()
        for i in range(STALLED):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
            if i % 2:
                sock.sendall(hello[: len(hello) // 2])
            socks.append(sock)
        answered = healthy(port, context)
        held = descriptors_of(proc.pid)
        assert all(closed(sock) for sock in socks)
        took = time.monotonic() - began
        deadline = time.monotonic() + 5
        while descriptors_of(proc.pid) > baseline and time.monotonic() < deadline:
            time.sleep(0.05)
        after = descriptors_of(proc.pid)
    print(f"\ndescriptors: {baseline} before, {held} held, {after} after {took:.1f} s")
    assert answered
    assert held >= baseline + STALLED // 2  # accepted, on the clock
    assert took < READ_TIMEOUT + 3
    assert after <= baseline
