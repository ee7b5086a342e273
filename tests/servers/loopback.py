"""A request handler served on loopback for the length of a `with`: the tests' stand-ins
for a registry, realm or target that is anyone's (trickling, endless, garbled answers)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` on a free loopback port, threaded; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
