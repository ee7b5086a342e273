"""A small HTTP(S) listener that records what a server delivered to it (webhooks, events).

Example::

    with NotificationSink(port=minio.notify_port) as sink:
        s3.put_object(...)
        request = sink.wait_for(lambda r: b"ObjectCreated" in r.body)

``responder`` lets a test answer like a real function would (e.g. an AdmissionReview).
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Delivery:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Responder = Callable[[Delivery], tuple[int, dict[str, str], bytes]]


def _ok(_: Delivery) -> tuple[int, dict[str, str], bytes]:
    return 200, {"Content-Type": "text/plain"}, b"ok"


class NotificationSink:
    def __init__(
        self,
        port: int = 0,
        *,
        ssl_context: ssl.SSLContext | None = None,
        responder: Responder = _ok,
    ) -> None:
        self.deliveries: list[Delivery] = []
        self._cond = threading.Condition()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                delivery = Delivery(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                status, headers, payload = responder(delivery)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                with sink._cond:
                    sink.deliveries.append(delivery)
                    sink._cond.notify_all()

            do_GET = do_POST = do_PUT = do_HEAD = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        if ssl_context is not None:
            self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
        self.port: int = self._server.server_address[1]
        scheme = "https" if ssl_context else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> NotificationSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def wait_for(
        self, predicate: Callable[[Delivery], bool] = lambda _: True, timeout: float = 30.0
    ) -> Delivery:
        """The first delivery matching ``predicate``; AssertionError after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for delivery in self.deliveries:
                    if predicate(delivery):
                        return delivery
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    seen = [(d.method, d.path, d.body[:200]) for d in self.deliveries]
                    raise AssertionError(f"no matching delivery within {timeout}s; got {seen}")
                self._cond.wait(remaining)
