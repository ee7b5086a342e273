"""`DistributionRegistry` through the Docker token flow of a real distribution v3 (`auth:
token`, the `distribution3_token_auth` fixture) whose realm is the harness's token server:
push, list, resolve and untag with one token per scope (counted at the realm), shared by
the clients of a host and by threads; the clear errors for no credentials, a wrong
password and a user the realm grants too little; a token the registry rejects is fetched
again, one the client knows expired too; and the realm's redirect to another host does not
carry the credentials."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import (
    DistributionRegistry,
)
from modelhooks.core.errors import Forbidden
from tests.integration.test_oci_registry import image
from tests.servers.registries import OciRegistry
from tests.servers.token_auth import TokenServer

pytestmark = pytest.mark.integration


def _writer(tokens: TokenServer) -> tuple[str, str]:
    return "writer", tokens.users["writer"][0]


def _client(
    registry: OciRegistry, auth: tuple[str, str] | None, repo: str
) -> tuple[OciClients, DistributionRegistry]:
    clients = OciClients(auth, allow_local=True)
    return clients, clients.for_uri(f"oci://{registry.host}/{repo}:v1")[0]


def _repo(kind: str) -> str:
    return f"auth/{kind}-{uuid.uuid4().hex[:8]}"


def test_push_list_resolve_untag_with_one_token_per_scope(
    distribution3_token_auth: OciRegistry, token_server: TokenServer
) -> None:
    repo = _repo("flow")
    clients, client = _client(distribution3_token_auth, _writer(token_server), repo)
    digest = image(client, repo, "v1", b"weights")
    image(client, repo, "v2", b"weights")
    assert sorted(client.tags(repo)) == ["v1", "v2"]
    assert client.resolve(repo, "v1") == digest
    client.delete_tag(repo, "v2")
    assert sorted(client.tags(repo)) == ["v1"]
    assert client.resolve(repo, "v2") is None

    seen = token_server.seen(repo)
    scopes = {scope for request in seen for scope in request.scopes}
    assert scopes == {f"repository:{repo}:{actions}" for actions in ("pull", "pull,push", "delete")}
    assert all(r.user == "writer" and r.issued for r in seen)
    assert all(r.service == TokenServer.service for r in seen)
    assert len(seen) == len(scopes)  # one token per scope, not one per request

    # Another client of the same host (OciClients) takes the same tokens.
    again = clients.for_uri(f"oci://{distribution3_token_auth.host}/{repo}:v1")[0]
    assert again is not client
    assert again.resolve(repo, "v1") == digest
    assert len(token_server.seen(repo)) == len(scopes)


def test_threads_share_one_token(
    distribution3_token_auth: OciRegistry, token_server: TokenServer
) -> None:
    repo = _repo("threads")
    _, client = _client(distribution3_token_auth, _writer(token_server), repo)
    digest = image(client, repo, "v1", b"weights")
    _, fresh = _client(distribution3_token_auth, _writer(token_server), repo)  # empty cache
    before = token_server.fetches(f"repository:{repo}:pull")
    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(lambda _: fresh.resolve(repo, "v1"), range(32)))
    assert found == [digest] * 32
    assert token_server.fetches(f"repository:{repo}:pull") == before + 1


def test_a_streamed_blob_read_answers_the_challenge(
    distribution3_token_auth: OciRegistry, token_server: TokenServer
) -> None:
    repo = _repo("stream")
    _, writer = _client(distribution3_token_auth, _writer(token_server), repo)
    data = bytes(range(256)) * 40
    digest = writer.push_blob(repo, data)
    reader_auth = ("reader", token_server.users["reader"][0])
    _, reader = _client(distribution3_token_auth, reader_auth, repo)  # no token yet: a 401
    pieces = [bytes(p) for p in reader.blob_chunks(repo, digest, 100, 9000, 4096)]
    assert [len(p) for p in pieces] == [4096, 4096, 808]
    assert b"".join(pieces) == data[100:9100]
    assert [r.issued for r in token_server.seen(repo) if r.user == "reader"] == [True]
    _, anonymous = _client(distribution3_token_auth, None, repo)
    with pytest.raises(Forbidden):
        list(anonymous.blob_chunks(repo, digest, 0, 10, 10))


def test_anonymous_is_told_to_configure_credentials(
    distribution3_token_auth: OciRegistry, token_server: TokenServer
) -> None:
    repo = _repo("anonymous")
    _, client = _client(distribution3_token_auth, None, repo)
    with pytest.raises(Forbidden, match=r"oci\.username and oci\.password") as raised:
        client.resolve(repo, "v1")
    assert distribution3_token_auth.url in raised.value.message
    seen = token_server.seen(repo)
    assert [(r.user, r.issued, r.authorization) for r in seen] == [(None, False, None)]


def test_a_wrong_password_is_forbidden_without_the_secret(
    distribution3_token_auth: OciRegistry, token_server: TokenServer
) -> None:
    repo, wrong = _repo("wrong"), f"not-{uuid.uuid4().hex}"
    _, client = _client(distribution3_token_auth, ("writer", wrong), repo)
    with pytest.raises(Forbidden) as raised:
        client.push_blob(repo, b"weights")
    text = raised.value.diagnostics()
    assert distribution3_token_auth.url in text
    assert f"127.0.0.1:{token_server.port}/token" in text  # the realm
    assert "writer" in text and wrong not in text
    assert [r.user for r in token_server.seen(repo)] == ["?"]


def test_a_user_granted_too_little_is_forbidden_after_one_retry(
    distribution3_token_auth: OciRegistry, token_server: TokenServer
) -> None:
    repo = _repo("reader")
    _, client = _client(distribution3_token_auth, ("reader", token_server.users["reader"][0]), repo)
    assert client.resolve(repo, "v1") is None  # pulling is allowed: the tag is not there
    with pytest.raises(Forbidden, match=r"refused POST .* to user 'reader'"):
        client.push_blob(repo, b"weights")
    assert token_server.fetches(f"repository:{repo}:pull,push") == 1


def test_a_token_past_its_expiry_is_fetched_again(
    distribution3_token_auth: OciRegistry, token_server: TokenServer
) -> None:
    repo = _repo("expiry")
    _, client = _client(distribution3_token_auth, _writer(token_server), repo)
    digest = image(client, repo, "v1", b"weights")
    pull = f"repository:{repo}:pull"
    with token_server.issuing(expires_in=2):
        _, short = _client(distribution3_token_auth, _writer(token_server), repo)
        before = token_server.fetches(pull)
        assert short.resolve(repo, "v1") == digest
        assert short.resolve(repo, "v1") == digest
        assert token_server.fetches(pull) == before + 1
        time.sleep(2.1)  # the client knows it has expired: it asks for a new one
        assert short.resolve(repo, "v1") == digest
        assert token_server.fetches(pull) == before + 2


def test_a_token_the_registry_rejects_is_fetched_again(
    distribution3_token_auth: OciRegistry, token_server: TokenServer
) -> None:
    repo = _repo("rejected")
    _, client = _client(distribution3_token_auth, _writer(token_server), repo)
    digest = image(client, repo, "v1", b"weights")
    pull = f"repository:{repo}:pull"
    _, stale = _client(distribution3_token_auth, _writer(token_server), repo)
    before = token_server.fetches(pull)
    # The realm announces 300 s but the JWT expired 100 s ago (past the registry's leeway):
    # the registry refuses the new token and the client does not loop.
    with token_server.issuing(expires_in=300, backdate=400), pytest.raises(Forbidden):
        stale.resolve(repo, "v1")
    assert token_server.fetches(pull) == before + 1
    # The cached token is still "fresh" to the client; the registry's 401 makes it fetch anew.
    assert stale.resolve(repo, "v1") == digest
    assert token_server.fetches(pull) == before + 2


def test_the_realm_redirect_to_another_host_carries_no_credentials(
    distribution3_token_auth: OciRegistry, token_server: TokenServer
) -> None:
    repo = _repo("redirect")
    user, password = _writer(token_server)
    _, client = _client(distribution3_token_auth, (user, password), repo)
    with token_server.issuing(redirect_to=token_server.elsewhere), pytest.raises(Forbidden):
        client.resolve(repo, "v1")
    first, redirected = token_server.seen(repo)
    assert first.authorization is not None and first.authorization.startswith("Basic ")
    assert redirected.authorization is None  # at localhost: another host than the realm's
    assert not redirected.issued


class _Recorder:
    """A registry an event names that is not ours: every request answered 401 with
    `challenge`, its Authorization recorded (None: asked anonymously)."""

    def __init__(self, challenge: str) -> None:
        import http.server
        import threading

        self.seen: list[str | None] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.seen.append(self.headers.get("Authorization"))
                self.send_response(401)
                self.send_header("WWW-Authenticate", challenge)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_HEAD = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _ours(
    registry: OciRegistry, tokens: TokenServer, hosts: str
) -> tuple[OciClients, tuple[str, str]]:
    """Clients with the writer's credentials for the hosts `hosts` names (oci.credential_hosts)."""
    from modelhooks.adapters.oci.auth import parse_hosts

    writer = _writer(tokens)
    return OciClients(writer, allow_local=True, credential_hosts=parse_hosts(hosts)), writer


def test_the_credentials_reach_the_credential_hosts_and_never_another(
    distribution3_token_auth: OciRegistry, token_server: TokenServer
) -> None:
    """oci.username's credentials went to whichever registry an event or a Model named and
    to whichever realm its challenge named. Listed (the registry and its realm) they work;
    the same registry under a name not listed (localhost), a registry of someone else's
    (Basic, or Bearer naming our realm to buy a token with them), and a realm not listed
    get no Authorization: each is recorded."""
    registry, realm = distribution3_token_auth, f"127.0.0.1:{token_server.port}"
    clients, _ = _ours(registry, token_server, f"{registry.host},{realm}")
    repo = _repo("listed")
    client = clients.for_uri(f"oci://{registry.host}/{repo}:v1")[0]
    digest = image(client, repo, "v1", b"weights")
    assert client.resolve(repo, "v1") == digest
    assert {r.user for r in token_server.seen(repo)} == {"writer"}

    # the same registry by another name, not listed: asked anonymously, our realm too
    port = registry.host.rsplit(":", 1)[1]
    alias = clients.for_uri(f"oci://localhost:{port}/{repo}:v1")[0]
    with pytest.raises(Forbidden, match=r"oci\.credential_hosts"):
        alias.resolve(repo, "v1")
    assert [r.authorization for r in token_server.seen(repo)][-1] is None

    # someone else's registries: Basic, and Bearer naming our realm for our repository
    basic = _Recorder('Basic realm="evil"')
    bearer = _Recorder(
        f'Bearer realm="{token_server.url}",service="{TokenServer.service}",'
        f'scope="repository:{repo}:pull,push"'
    )
    try:
        for evil in (basic, bearer):
            with pytest.raises(Forbidden):
                clients.for_uri(f"oci://{evil.host}/{repo}:v1")[0].resolve(repo, "v1")
        assert basic.seen == [None] and bearer.seen == [None]  # one 401, nothing sent again
    finally:
        basic.close()
        bearer.close()
    asked = token_server.seen(repo)[-1]
    assert (asked.user, asked.authorization, asked.issued) == (None, None, False)

    # the registry listed, its realm not: the realm is asked anonymously
    alone, _ = _ours(registry, token_server, registry.host)
    other = _repo("realm")
    with pytest.raises(Forbidden, match=rf"oci\.credential_hosts names \({registry.host}\)"):
        alone.for_uri(f"oci://{registry.host}/{other}:v1")[0].resolve(other, "v1")
    assert [(r.user, r.authorization) for r in token_server.seen(other)] == [(None, None)]
