"""Admission against a registry answering what no registry should (a hostile one, or a proxy's
HTML on 200): the real verifier (StoreModelVerifier over the distribution client) and the
handler. Whatever it answers, an unsigned model is never admitted: the check fails, naming
what could not be read. A server of ~30 lines serves the answers: no registry serves them."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import TITLE
from modelhooks.adapters.signing.admission import StoreModelVerifier
from modelhooks.adapters.signing.bundle import MEDIA_TYPE
from tests.unit.test_admission import Policies, pod, policy, review, run

pytestmark = pytest.mark.integration

# repository → the manifest it answers (with a referrer that names a signature bundle)
MANIFESTS = {
    "html": b"<html><body>Welcome</body></html>",
    "list": b"[1, 2]",
    "no-layer-digest": json.dumps({"layers": [{"annotations": {TITLE: "model.tar"}}]}).encode(),
    "layers-null": b'{"layers": [null, "x"]}',
}
REFERRERS = {"manifests": [{"artifactType": MEDIA_TYPE}]}  # no digest to fetch it by


class _Garbage(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, head: bool) -> None:
        repo = self.path.split("/")[2]
        body = MANIFESTS[repo]
        if "/referrers/" in self.path:
            body = json.dumps(REFERRERS).encode()
        self.send_response(200)
        self.send_header("Docker-Content-Digest", "sha256:" + hashlib.sha256(body).hexdigest())
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)


@pytest.fixture(scope="module")
def garbage() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("repo", sorted(MANIFESTS))
@pytest.mark.parametrize("by", ["tag", "digest"])
def test_a_registry_answering_garbage_never_gets_a_model_admitted(
    garbage: str, repo: str, by: str
) -> None:
    digest = "sha256:" + hashlib.sha256(MANIFESTS[repo]).hexdigest()
    reference = f"{garbage}/{repo}/m:v1" if by == "tag" else f"{garbage}/{repo}/m@{digest}"
    decision = run(review(pod(reference)), Policies(policy()), StoreModelVerifier(OciClients()))
    assert not decision.allowed, f"{reference} admitted unverified"
    assert "VerificationPolicy ns/p [enforce]" in decision.message
    assert "could not be read" in decision.message or "no signature" in decision.message
