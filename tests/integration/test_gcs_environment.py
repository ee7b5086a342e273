"""The GCS adapter reads the proxy environment once, when it builds its client, and then
behaves as requests does when it reads it on every request: HTTP_PROXY is used, NO_PROXY
bypasses it (against fake-gcs-server, through a real forwarding proxy)."""

from __future__ import annotations

import threading
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from modelhooks.adapters.object_store.gcs import GcsObjectStore
from tests.servers.objectstores import FakeGcs

pytestmark = pytest.mark.integration

_PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                    "all_proxy", "NO_PROXY", "no_proxy")  # fmt: skip


class _Forwarder(BaseHTTPRequestHandler):
    """A plain HTTP proxy: forwards absolute-form requests, remembers their paths."""

    seen: list[str]

    def _forward(self) -> None:
        self.seen.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        request = urllib.request.Request(self.path, data=body, headers=headers, method=self.command)
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                status, answer, reply = resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as e:
            status, answer, reply = e.code, e.read(), e.headers
        self.send_response(status)
        for key, value in reply.items():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Forwarder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_the_proxy_variables_are_honoured_as_requests_reads_them(
    fake_gcs: FakeGcs, proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = proxy
    bucket = f"environment-{uuid.uuid4().hex[:12]}"
    fake_gcs.storage_client().create_bucket(bucket)
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    monkeypatch.setenv("HTTP_PROXY", url)

    proxied = GcsObjectStore(project=fake_gcs.project)
    proxied.put(bucket, "m/weights.bin", b"weights")
    assert proxied.read_range(bucket, "m/weights.bin", 0, 7) == b"weights"
    assert [o.key for o in proxied.list(bucket, "m/")] == ["m/weights.bin"]
    assert len(seen) >= 3 and all(p.startswith(fake_gcs.url) for p in seen), seen

    seen.clear()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    bypassing = GcsObjectStore(project=fake_gcs.project)
    assert bypassing.read_range(bucket, "m/weights.bin", 0, 7) == b"weights"
    assert [o.key for o in bypassing.list(bucket, "m/")] == ["m/weights.bin"]
    assert seen == []

    monkeypatch.delenv("HTTP_PROXY")  # settled when the client was built
    assert proxied.read_range(bucket, "m/weights.bin", 2, 3) == b"igh"
    assert len(seen) == 1
