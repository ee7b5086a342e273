"""Connections to hosts events name: checked on the addresses the name resolves to, at
connection time, in every notation; nothing reaches a local listener unless allowed; and
credentials do not follow a redirect to another host."""

from __future__ import annotations

import http.server
import threading
import urllib.request
from collections.abc import Iterator
from typing import ClassVar

import pytest

from modelhooks.adapters.net import guarded_opener
from modelhooks.core.errors import Forbidden


class _Listener(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, str]]] = []
    redirect_to = ""

    def do_GET(self) -> None:
        type(self).seen.append(dict(self.headers.items()))
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", type(self).redirect_to)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[int]:
    _Listener.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Listener)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1", "2130706433", "0x7f.0.0.1", "localhost"])
def test_a_local_listener_is_never_reached_by_default(listener: int, host: str) -> None:
    opener = guarded_opener(allow_local=False)
    with pytest.raises(Forbidden, match="non-public"):
        opener.open(f"http://{host}:{listener}/", timeout=5)
    assert _Listener.seen == []


def test_a_named_host_is_allowed_and_local_targets_when_configured(listener: int) -> None:
    named = guarded_opener(allow_local=False, allowed_hosts=frozenset({f"localhost:{listener}"}))
    with named.open(f"http://localhost:{listener}/", timeout=5) as resp:
        assert resp.read() == b"ok"
    with guarded_opener(allow_local=True).open(f"http://127.0.0.1:{listener}/", timeout=5) as r:
        assert r.read() == b"ok"


def test_credentials_do_not_follow_a_redirect_to_another_host(listener: int) -> None:
    _Listener.redirect_to = f"http://localhost:{listener}/final"  # another host name
    req = urllib.request.Request(f"http://127.0.0.1:{listener}/redirect")
    req.add_header("Authorization", "Basic c2VjcmV0")
    with guarded_opener(allow_local=True).open(req, timeout=5) as resp:
        assert resp.read() == b"ok"
    first, final = _Listener.seen
    assert "Authorization" in first and "Authorization" not in final


def test_a_name_that_does_not_exist_is_bad_input_not_a_transient_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from modelhooks.core.errors import BadRequest, Unavailable

    opener = guarded_opener(allow_local=False)
    with pytest.raises(BadRequest, match="does not resolve"):  # .invalid never resolves
        opener.open("https://no-such-host.invalid/v2/", timeout=5)
    for name in ("a" * 64 + ".example.com", "a..example.com"):  # the idna codec's UnicodeError
        with pytest.raises(BadRequest, match="is not a host name"):
            opener.open(f"https://{name}/v2/", timeout=5)

    def flaky(*args: object, **kwargs: object) -> object:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", flaky)
    with pytest.raises(Unavailable, match="cannot resolve"):  # DNS down: try again later
        opener.open("https://registry.example.com/v2/", timeout=5)
