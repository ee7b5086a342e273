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
from modelhooks.core.errors import NotFound
from tests.servers.objectstores import FakeGcs

pytestmark = pytest.mark.integration

_PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                    "all_proxy", "NO_PROXY", "no_proxy")  # fmt: skip


class _Forwarder(BaseHTTPRequestHandler):
    """A plain HTTP proxy: forwards absolute-form requests, remembers their paths."""

    seen: list[str]
    authorization: list[tuple[str | None, str | None]]  # each request's token, quota project

    def _forward(self) -> None:
        self.seen.append(self.path)
        self.authorization.append(
            (self.headers.get("Authorization"), self.headers.get("x-goog-user-project"))
        )
        if self.headers.get("Authorization") == "Bearer revoked":  # as GCS answers it
            answer = b'{"error": {"code": 401, "message": "Invalid Credentials"}}'
            self.send_response(401)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            return
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


Proxy = tuple[str, list[str], list[tuple[str | None, str | None]]]


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    """Its URL, the paths it forwarded, and their Authorization and quota project."""
    seen: list[str] = []
    authorization: list[tuple[str | None, str | None]] = []
    handler = type("Handler", (_Forwarder,), {"seen": seen, "authorization": authorization})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen, authorization
    server.shutdown()
    server.server_close()


def test_the_proxy_variables_are_honoured_as_requests_reads_them(
    fake_gcs: FakeGcs, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen, _ = proxy
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


def _behind(proxy: Proxy, fake_gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new bucket holding m/w.bin, on the emulator (STORAGE_EMULATOR_HOST) reached only
    through `proxy`: its name."""
    bucket = f"environment-{uuid.uuid4().hex[:12]}"
    fake_gcs.storage_client().create_bucket(bucket).blob("m/w.bin").upload_from_string(b"w")
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    monkeypatch.setenv("HTTP_PROXY", proxy[0])
    return bucket


def test_a_listing_is_authorized_by_the_given_credentials(
    fake_gcs: FakeGcs, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listings go over the JSON API without google-cloud-storage (gcs_json): the
    credentials a store is given (a Model's own, for cleanup) authorize them, their quota
    project included, as google.auth applies them."""
    from google.oauth2.credentials import Credentials

    _url, seen, authorization = proxy
    bucket = _behind(proxy, fake_gcs, monkeypatch)

    anonymous = GcsObjectStore(project=fake_gcs.project)  # the emulator's default
    assert [o.key for o in anonymous.list(bucket, "m/")] == ["m/w.bin"]
    assert authorization == [(None, None)]

    authorization.clear()
    token = Credentials(token="a-model-s-token", quota_project_id="billed-project")  # type: ignore[no-untyped-call]
    owned = GcsObjectStore(project=fake_gcs.project).with_credentials(token)
    assert [o.key for o in owned.list_versions(bucket, "m/")] == ["m/w.bin"]
    assert authorization == [("Bearer a-model-s-token", "billed-project")]
    assert seen[-1].startswith(f"{fake_gcs.url}/storage/v1/b/{bucket}/o?")
    with pytest.raises(NotFound):  # GCS's status, mapped as for every GCS call
        list(owned.list(f"missing-{uuid.uuid4().hex[:12]}", "m/"))


def test_a_refused_token_is_refreshed_and_the_request_sent_again(
    fake_gcs: FakeGcs, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token GCS refuses (401) before its expiry (revoked, rotated) is refreshed once and
    the request sent again, as google.auth's authorized sessions do."""
    from google.auth.credentials import Credentials

    class Rotated(Credentials):
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.token = "revoked"

        def refresh(self, request: object) -> None:
            self.token = "rotated"

    _url, _seen, authorization = proxy
    bucket = _behind(proxy, fake_gcs, monkeypatch)

    store = GcsObjectStore(project=fake_gcs.project).with_credentials(Rotated())
    assert store.read_range(bucket, "m/w.bin", 0, 1) == b"w"
    assert [a for a, _ in authorization] == ["Bearer revoked", "Bearer rotated"]
