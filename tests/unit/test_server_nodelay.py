"""`modelhooks serve`'s listening socket says it is TCP, so asyncio sets TCP_NODELAY on every
accepted connection: without it each second request on a kept-alive connection waited
~40 ms (Nagle against delayed ACK), e.g. every AdmissionReview after the first."""

from __future__ import annotations

import gc
import socket
from typing import Any

import pytest

from modelhooks.delivery import server
from modelhooks.delivery.encoding import json_response


def test_the_listening_socket_is_tcp_so_connections_get_nodelay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvicorn

    seen: list[socket.socket] = []

    def capture(self: Any, sockets: list[socket.socket]) -> None:
        seen.extend(sockets)

    monkeypatch.setattr(uvicorn.Server, "run", capture)
    server.run(lambda *_: json_response(200, {}), host="127.0.0.1", port=0)
    (sock,) = seen
    try:
        assert sock.proto == socket.IPPROTO_TCP  # asyncio's _set_nodelay requires it
        accepted = socket.create_connection(sock.getsockname())
        conn, _ = sock.accept()
        asyncio_sets = conn.proto == socket.IPPROTO_TCP
        assert asyncio_sets, "accepted connections would keep Nagle on"
        conn.close()
        accepted.close()
    finally:
        sock.close()
        gc.unfreeze()  # server.run froze this test process's objects
