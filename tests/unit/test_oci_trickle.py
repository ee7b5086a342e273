"""A registry an event or a Model names may be anyone's: one trickling its answer (a byte
now and then, each within the socket's 60 s) was read for as long as it trickled, holding
the delivery's thread. An answer's body is read within ANSWER_SECONDS in all now."""

from __future__ import annotations

import http.server
import time
from collections.abc import Iterator
from typing import Any

import pytest

from modelhooks.adapters.oci import auth, distribution
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core.errors import Unavailable
from tests.servers.loopback import serving

BODY = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}'


def _trickle(out: Any, body: bytes) -> None:
    """`body` a byte every 0.1 s, until the client gives up."""
    for byte in body:
        try:
            out.write(bytes([byte]))
            out.flush()
        except OSError:
            return
        time.sleep(0.1)


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Every GET: its headers at once, then the body a byte every 0.1 s."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        _trickle(self.wfile, BODY)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def trickle() -> Iterator[str]:
    with serving(_Trickle) as url:
        yield url


def test_a_trickled_answer_is_cut_off_at_the_deadline(
    trickle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(distribution, "ANSWER_SECONDS", 1.0)
    started = time.monotonic()
    with pytest.raises(Unavailable, match="within 1 s"):
        DistributionRegistry(trickle).manifest("m", "v1")
    assert time.monotonic() - started < 3  # the whole answer takes 8 s


class _TrickledToken(http.server.BaseHTTPRequestHandler):
    """/v2/…: 401 naming this server's /token as the realm, which answers a byte every 0.1 s."""

    def do_GET(self) -> None:
        if not self.path.startswith("/token"):
            realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="{realm}",service="r"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        token = b'{"token": "' + b"t" * 80 + b'"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(token)))
        self.end_headers()
        _trickle(self.wfile, token)

    def log_message(self, *_: object) -> None:
        pass


def test_a_trickled_token_is_cut_off_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The realm is named by the registry, anyone's as much as the registry is: its answer
    is bounded in time as the registry's are (read whole before: 9 s here)."""
    monkeypatch.setattr(auth, "_TOKEN_SECONDS", 1.0)
    with serving(_TrickledToken) as url:
        started = time.monotonic()
        with pytest.raises(Unavailable, match="no token within 1 s"):
            DistributionRegistry(url).manifest("m", "v1")
        assert time.monotonic() - started < 3
