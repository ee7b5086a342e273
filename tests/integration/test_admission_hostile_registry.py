"""Admission against a registry answering what no registry should (a hostile one, or a proxy's
HTML on 200): the real verifier (StoreModelVerifier over the distribution client) and the
handler. Whatever it answers, an unsigned model is never admitted: the check fails, naming
what could not be read. A server of ~30 lines serves the answers: no registry serves them."""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import TITLE
from modelhooks.adapters.signing import KeySigner
from modelhooks.adapters.signing.admission import StoreModelVerifier
from modelhooks.adapters.signing.bundle import MEDIA_TYPE
from tests.e2e.admission_helpers import signed_model
from tests.unit.signing_material import make_key
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
    written = 0  # bytes of the endless answers written (until the client closed)

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, head: bool) -> None:
        repo = self.path.split("/")[2]
        if repo == "endless":  # no digest header: a tag is resolved by GETting its manifest
            self._endless(head)
            return
        body = MANIFESTS[repo]
        if "/referrers/" in self.path:
            body = json.dumps(REFERRERS).encode()
        self.send_response(200)
        self.send_header("Docker-Content-Digest", "sha256:" + hashlib.sha256(body).hexdigest())
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _endless(self, head: bool) -> None:
        self.send_response(200)
        self.send_header("Connection", "close")
        self.end_headers()
        chunk = b" " * (1 << 20)
        while not head:
            try:
                self.wfile.write(chunk)
            except OSError:
                return
            type(self).written += len(chunk)
            if type(self).written > 4 << 30:
                return

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


@pytest.mark.parametrize("mutate", [True, False])
def test_an_endless_answer_is_read_no_further_than_a_manifest_can_be(
    garbage: str, mutate: bool
) -> None:
    """A registry answering a manifest without end: read to 4 MiB (distribution's limit on a
    manifest), then refused. It was read whole by a thread the answer no longer waited for,
    which filled the webhook's memory (3.1 GB at its peak for 1.5 GB answered): a Pod naming
    any tag there, covered by a policy or not (the mutating webhook resolves every tag)."""
    _Garbage.written = 0
    started = time.monotonic()
    decision = run(
        review(pod(f"{garbage}/endless/m:v1"), mutate=mutate),
        Policies(policy()),
        StoreModelVerifier(OciClients()),
        review_timeout=5.0,
    )
    said = " ".join(decision.warnings) if mutate else decision.message
    assert "the answer is over 4194304 bytes" in said, said
    assert time.monotonic() - started < 4.0
    time.sleep(0.5)  # whatever still reads it would go on meanwhile
    assert _Garbage.written < 64 << 20


class _Sha512Liar(BaseHTTPRequestHandler):
    """In front of a real registry: asked what a sha512 digest names, it answers a signed
    model's sha256 digest (`claimed`); everything else is the registry's own answer."""

    upstream = ""
    claimed = ""

    def log_message(self, *args: object) -> None:
        pass

    def _forward(self, head: bool) -> None:
        if "/manifests/sha512:" in self.path:
            self.send_response(200)
            self.send_header("Docker-Content-Digest", self.claimed)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        request = urllib.request.Request(self.upstream + self.path, method=self.command)
        for name in ("Accept", "Range"):
            if self.headers.get(name):
                request.add_header(name, self.headers[name])
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                status, headers, body = resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            status, headers, body = e.code, e.headers, e.read()
        self.send_response(status)
        for name in ("Content-Type", "Docker-Content-Digest"):
            if headers.get(name):
                self.send_header(name, headers[name])
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._forward(head=False)

    def do_HEAD(self) -> None:
        self._forward(head=True)


def test_a_digest_of_another_algorithm_is_not_taken_from_the_registry(
    ociregistry: Any, tmp_path: Path
) -> None:
    """`r.io/m@sha512:…` (containerd pulls by it, checking the sha512): the digest admission
    verified was the one the registry said it named, unchecked, so a registry claiming a
    signed model's sha256 got any model admitted."""
    keys = make_key(tmp_path, "trusted")
    _, reference, digest = signed_model(
        ociregistry, "hostile/bert", tmp_path, KeySigner.from_file(keys.private)
    )
    trusted = policy(keys=[{"name": "team", "pem": keys.public.read_text()}])
    verifier = StoreModelVerifier(OciClients())
    pinned = f"{reference.rpartition(':')[0]}@{digest}"
    assert run(review(pod(pinned)), Policies(trusted), verifier).allowed  # signed: admitted
    _Sha512Liar.upstream, _Sha512Liar.claimed = ociregistry.url, digest
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sha512Liar)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        liar = f"127.0.0.1:{server.server_address[1]}/hostile/bert@sha512:{'e' * 128}"
        decision = run(review(pod(liar)), Policies(trusted), verifier)
    finally:
        server.shutdown()
        server.server_close()
    assert not decision.allowed, "a sha512 reference was admitted as the digest claimed for it"
    assert "pin it by its sha256 digest" in decision.message


def test_a_registry_that_never_answers_holds_a_bounded_number_of_threads(
    ociregistry: Any, tmp_path: Path
) -> None:
    """Each review answers by its deadline, and its calls went on in their threads for as long
    as the socket waited (a minute): a pool per review, 8 threads and connections each, so 50
    reviews of a registry accepting and never answering left 400 of both alive. Now that
    registry holds 8 (the calls given up on; more are not made until one ends), and another
    registry's model is still decided."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    keys = make_key(tmp_path, "trusted")
    _, reference, digest = signed_model(
        ociregistry, "hostile/alive", tmp_path, KeySigner.from_file(keys.private)
    )
    trusted = Policies(policy(keys=[{"name": "team", "pem": keys.public.read_text()}]))
    verifier = StoreModelVerifier(OciClients())
    host = f"127.0.0.1:{listener.getsockname()[1]}"
    try:
        for i in range(50):
            refs = [f"{host}/m{i}/x{j}:v1" for j in range(8)]
            started = time.monotonic()
            for mutate in (True, False):
                decision = run(
                    review(pod(*refs), mutate=mutate), trusted, verifier, review_timeout=0.2
                )
                assert mutate or not decision.allowed
            assert time.monotonic() - started < 1.0
        time.sleep(0.2)
        alive = [t for t in threading.enumerate() if t.name.startswith("admission")]
        assert len(alive) <= 16 and len(held) <= 8, (len(alive), len(held))
        pinned = f"{reference.rpartition(':')[0]}@{digest}"
        assert run(review(pod(pinned)), trusted, verifier).allowed
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()
