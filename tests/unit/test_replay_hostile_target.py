"""`modelhooks replay --to` a target that answers without end: a body of many megabytes,
or one trickled a byte at a time. Its answer is read bounded in size and in time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from modelhooks.cli import common, main
from modelhooks.events import samples

SOURCE = str(Path(samples.__file__).parent / "canonical-artifact-pushed.json")
HUGE = 64 << 20  # the error page's size, as its Content-Length says


@pytest.fixture
def target() -> Iterator[Callable[[Callable[[BaseHTTPRequestHandler], None]], str]]:
    """A target answering each POST with `answer(handler)`; its URL."""
    servers: list[ThreadingHTTPServer] = []

    def start(answer: Callable[[BaseHTTPRequestHandler], None]) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    answer(self)
                except OSError:  # the client went away
                    self.close_connection = True

            def log_message(self, *_: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_huge_error_page_is_read_bounded_and_cut(
    home: Path, target: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 500 whose body was read whole (1 GiB: 3 GB of replay's memory) and printed whole."""
    sent = [0]

    def huge(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(500)
        handler.send_header("Content-Length", str(HUGE))
        handler.end_headers()
        while sent[0] < HUGE:
            handler.wfile.write(b"y" * (1 << 16))
            sent[0] += 1 << 16

    url = target(huge)
    assert main(["replay", SOURCE, "--to", url, "--quiet", "--home", str(home)]) == 3
    err = capsys.readouterr().err
    assert "1 x HTTP 500: yyy" in err and "more characters)" in err
    assert max(len(line) for line in err.splitlines()) < 1100
    time.sleep(0.5)  # the server's last writes fail once the connection is closed
    assert sent[0] < 16 << 20, f"{sent[0]} bytes read of the answer"


def test_an_answer_trickled_a_byte_at_a_time_stops_at_the_deadline(
    home: Path, target: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each byte came within the socket's timeout, so the answer was waited for whole."""
    monkeypatch.setattr(common, "ANSWER_SECONDS", 1.0)

    def trickle(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(500)
        handler.send_header("Content-Length", "100")
        handler.end_headers()
        for _ in range(100):  # 5 s in all
            handler.wfile.write(b"z")
            handler.wfile.flush()
            time.sleep(0.05)

    url = target(trickle)
    started = time.monotonic()
    assert main(["replay", SOURCE, "--to", url, "--quiet", "--home", str(home)]) == 3
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert f"stopped: {url} did not answer: no answer within 1 s;" in err, err
    assert took < 4, took
