"""Registry authentication (modelhooks.adapters.oci.auth) without a registry: challenge
parsing, the token cache (expiry on a fake clock, one fetch for racing threads), the realm
rules (https unless the registry is on loopback), basic remembered per host, the redirect
rule for the token flow on loopback listeners, and Artifact Registry's oauth2accesstoken
with fake Application Default Credentials."""

from __future__ import annotations

import base64
import http.server
import io
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from email.message import Message
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from modelhooks import bootstrap
from modelhooks.adapters.net import guarded_opener
from modelhooks.adapters.oci.auth import (
    Challenge,
    RegistryAuth,
    host_matches,
    parse_challenges,
    parse_hosts,
)
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.credentials import (
    CLOUD_PLATFORM,
    AccessTokenCredentials,
    StaticCredentials,
    credentials_for,
)
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core.errors import ConfigError, Forbidden, Unavailable
from modelhooks.core.settings import load_settings

# ---- parsing ---------------------------------------------------------------------------


def test_distributions_challenge_with_commas_inside_the_scope() -> None:
    header = (
        'Bearer realm="https://auth.example/token",service="registry.example",'
        'scope="repository:a/b:pull,push",error="invalid_token"'
    )
    assert parse_challenges(header) == [
        Challenge(
            "bearer",
            {
                "realm": "https://auth.example/token",
                "service": "registry.example",
                "scope": "repository:a/b:pull,push",
                "error": "invalid_token",
            },
        )
    ]


def test_several_challenges_spaces_escapes_and_bare_tokens() -> None:
    header = (
        'Negotiate abc==, BASIC realm="say \\"hi\\", please" , '
        'Bearer realm = "https://a/t" ,scope="repository:x:pull repository:y:pull",charset=UTF-8'
    )
    found = parse_challenges(header)
    assert [c.scheme for c in found] == ["negotiate", "basic", "bearer"]
    assert found[0].params == {}
    assert found[1].params == {"realm": 'say "hi", please'}
    assert found[2].params == {
        "realm": "https://a/t",
        "scope": "repository:x:pull repository:y:pull",
        "charset": "UTF-8",
    }


def test_nothing_to_parse() -> None:
    assert parse_challenges("") == []
    assert parse_challenges("Basic") == [Challenge("basic", {})]


# ---- the token flow against a scripted opener -------------------------------------------


class _Response(io.BytesIO):
    status = 200

    def __enter__(self) -> _Response:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _Realm:
    """An opener standing in for a realm: records requests, answers tokens or a status."""

    def __init__(self, status: int = 200, doc: dict[str, Any] | None = None) -> None:
        self.status, self.requests = status, list[urllib.request.Request]()
        self.doc = doc
        self.lock, self.delay = threading.Lock(), 0.0

    def __call__(self, request: urllib.request.Request, timeout: float) -> _Response:
        time.sleep(self.delay)
        with self.lock:
            self.requests.append(request)
            n = len(self.requests)
        if self.status != 200:
            raise urllib.error.HTTPError(request.full_url, self.status, "no", Message(), None)
        return _Response(json.dumps(self.doc or {"token": f"t{n}", "expires_in": 100}).encode())


def _challenge(scope: str, realm: str = "https://auth.example/token") -> str:
    return f'Bearer realm="{realm}",service="reg",scope="{scope}"'


URL = "https://reg.example/v2/models/bert/manifests/v1"


def test_a_token_is_fetched_with_the_credentials_and_cached_per_scope() -> None:
    realm, now = _Realm(), [0.0]
    auth = RegistryAuth(
        "https://reg.example", StaticCredentials("u", "p"), realm, clock=lambda: now[0]
    )
    assert auth.header("GET", URL) is None  # nothing known yet: no credentials sent blindly
    pull = _challenge("repository:models/bert:pull")
    assert auth.answer("GET", URL, pull, sent=None) == "Bearer t1"
    (sent,) = realm.requests
    assert sent.full_url == (
        "https://auth.example/token?service=reg&scope=repository%3Amodels%2Fbert%3Apull"
    )
    assert sent.get_header("Authorization") == "Basic " + base64.b64encode(b"u:p").decode()
    assert auth.header("GET", URL) == "Bearer t1"  # remembered for GET on this repository
    assert auth.header("PUT", URL) is None  # another method may need another scope
    assert auth.answer("HEAD", URL, pull, sent=None) == "Bearer t1"  # same scope: no fetch
    push = _challenge("repository:models/bert:pull,push")
    assert auth.answer("PUT", URL, push, sent=None) == "Bearer t2"
    assert len(realm.requests) == 2
    now[0] = 100 - 10 + 0.1  # expires_in 100, less a 10 % margin
    assert auth.header("GET", URL) is None
    assert auth.answer("GET", URL, pull, sent=None) == "Bearer t3"


def test_a_token_the_registry_rejected_is_replaced_and_several_scopes_are_asked_apart() -> None:
    realm = _Realm()
    auth = RegistryAuth("https://reg.example", None, realm)
    two = _challenge("repository:a:pull repository:b:pull")
    assert auth.answer("GET", URL, two, sent=None) == "Bearer t1"
    assert realm.requests[0].get_header("Authorization") is None  # anonymous
    assert realm.requests[0].full_url.endswith(
        "&scope=repository%3Aa%3Apull&scope=repository%3Ab%3Apull"
    )
    assert auth.answer("GET", URL, two, sent="Bearer t1") == "Bearer t2"


def test_the_order_of_actions_and_scopes_makes_no_other_token() -> None:
    realm = _Realm()
    auth = RegistryAuth("https://reg.example", None, realm)
    one = _challenge("repository:b:push,pull repository:a:pull")
    other = _challenge("repository:a:pull repository:b:pull,push,pull")
    assert auth.answer("GET", URL, one, sent=None) == "Bearer t1"
    assert auth.answer("PUT", URL, other, sent=None) == "Bearer t1"
    assert len(realm.requests) == 1
    assert realm.requests[0].full_url.endswith(
        "&scope=repository%3Aa%3Apull&scope=repository%3Ab%3Apull%2Cpush"
    )


def test_access_token_and_default_lifetime() -> None:
    realm, now = _Realm(doc={"access_token": "oauth"}), [0.0]
    auth = RegistryAuth("https://reg.example", None, realm, clock=lambda: now[0])
    assert auth.answer("GET", URL, _challenge("s"), sent=None) == "Bearer oauth"
    now[0] = 53.0  # 60 s when expires_in is absent, less 6 s
    assert auth.header("GET", URL) == "Bearer oauth"
    now[0] = 54.5
    assert auth.header("GET", URL) is None


def test_racing_threads_fetch_one_token() -> None:
    realm = _Realm()
    realm.delay = 0.05
    auth = RegistryAuth("https://reg.example", StaticCredentials("u", "p"), realm)
    pull = _challenge("repository:models/bert:pull")
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda _: auth.answer("GET", URL, pull, sent=None), range(16)))
    assert set(got) == {"Bearer t1"} and len(realm.requests) == 1


@pytest.mark.parametrize(
    ("status", "credentials", "match"),
    [
        (
            401,
            StaticCredentials("u", "hunter2"),
            r"token realm https://auth\.example/token of "
            r"registry https://reg\.example refused the credentials of user 'u'",
        ),
        (403, StaticCredentials("u", "hunter2"), "refused the credentials"),
        (401, None, r"requires credentials: set oci\.username and oci\.password"),
    ],
)
def test_a_realm_that_refuses(status: int, credentials: Any, match: str) -> None:
    auth = RegistryAuth("https://reg.example", credentials, _Realm(status=status))
    with pytest.raises(Forbidden, match=match) as raised:
        auth.answer("GET", URL, _challenge("s"), sent=None)
    assert "hunter2" not in raised.value.diagnostics()


def test_a_realm_in_trouble_is_transient() -> None:
    with pytest.raises(Unavailable, match="answered 503"):
        RegistryAuth("https://reg.example", None, _Realm(status=503)).answer(
            "GET", URL, _challenge("s"), sent=None
        )
    with pytest.raises(Unavailable, match="without a token"):
        RegistryAuth("https://reg.example", None, _Realm(doc={"nope": 1})).answer(
            "GET", URL, _challenge("s"), sent=None
        )


@pytest.mark.parametrize(
    "realm", ["http://auth.example/token", "http://127.0.0.1:9/token", "file:///etc/passwd", ""]
)
def test_a_plain_http_realm_is_refused_for_a_registry_off_loopback(realm: str) -> None:
    opener = _Realm()
    auth = RegistryAuth("https://reg.example", StaticCredentials("u", "p"), opener)
    with pytest.raises(Forbidden):
        auth.answer("GET", URL, _challenge("s", realm=realm), sent=None)
    assert opener.requests == []  # the credentials went nowhere


def test_a_plain_http_realm_is_fine_for_a_loopback_registry() -> None:
    opener = _Realm()
    auth = RegistryAuth("http://127.0.0.1:5000", None, opener)
    assert auth.answer("GET", URL, _challenge("s", realm="http://127.0.0.1:5001/t"), None)
    assert len(opener.requests) == 1


def test_basic_is_remembered_and_refusals_are_clear() -> None:
    auth = RegistryAuth("https://reg.example", StaticCredentials("u", "p"), _Realm())
    basic = 'Basic realm="registry"'
    expected = "Basic " + base64.b64encode(b"u:p").decode()
    assert auth.header("GET", URL) is None
    assert auth.answer("GET", URL, basic, sent=None) == expected
    assert auth.header("DELETE", "https://reg.example/v2/other/tags/list") == expected
    with pytest.raises(Forbidden, match="refused GET /v2/models/bert/manifests/v1 to user 'u'"):
        auth.answer("GET", URL, basic, sent=expected)
    anonymous = RegistryAuth("https://reg.example", None, _Realm())
    with pytest.raises(Forbidden, match=r"set oci\.username and oci\.password"):
        anonymous.answer("GET", URL, basic, sent=None)
    with pytest.raises(Forbidden, match="without a Bearer or Basic challenge"):
        auth.answer("GET", URL, 'Digest realm="x"', sent=None)


# ---- DistributionRegistry over real sockets: basic once, and the redirect rule -----------


class _Registry(http.server.BaseHTTPRequestHandler):
    """`/v2/basic/...`: wants basic u:p. `/v2/r/blobs/...`: wants a Bearer token from
    `/token`, then redirects the blob to `storage_host` (another host name)."""

    seen: ClassVar[list[tuple[str, str, str | None]]] = []  # (host header, path, auth)
    storage_host = ""
    basic = "Basic " + base64.b64encode(b"u:p").decode()

    def do_GET(self) -> None:
        authorization = self.headers.get("Authorization")
        type(self).seen.append((self.headers.get("Host", ""), self.path, authorization))
        if self.path.startswith("/v2/basic/"):
            if authorization != self.basic:
                return self._send(401, b"", {"WWW-Authenticate": 'Basic realm="r"'})
            return self._send(200, b'{"tags": ["v1"]}', {})
        if self.path.startswith("/token"):
            ok = authorization == self.basic
            body = json.dumps({"token": "T", "expires_in": 300}).encode()
            return self._send(200 if ok else 401, body if ok else b"", {})
        if self.path.startswith("/v2/r/blobs/"):
            if authorization != "Bearer T":
                host = self.headers["Host"]  # 127.0.0.1:port
                realm = f'Bearer realm="http://{host}/token",service="s",'
                return self._send(
                    401, b"", {"WWW-Authenticate": realm + 'scope="repository:r:pull"'}
                )
            location = f"http://{type(self).storage_host}/storage/blob"
            return self._send(307, b"", {"Location": location})
        if self.path == "/storage/blob":
            return self._send(200, b"the bytes", {})
        self._send(404, b"", {})

    def do_HEAD(self) -> None:
        self.do_GET()

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[str]:
    _Registry.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    port = int(server.server_address[1])
    _Registry.storage_host = f"localhost:{port}"  # the same listener under another name
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    server.shutdown()
    server.server_close()


def test_basic_costs_one_challenge_per_host(registry: str) -> None:
    client = DistributionRegistry(
        registry, auth=("u", "p"), opener=guarded_opener(allow_local=True)
    )
    assert list(client.tags("basic")) == ["v1"]
    assert list(client.tags("basic")) == ["v1"]
    assert client.request("HEAD", "/v2/basic/manifests/v1")[0] == 200
    auths = [a for _, _, a in _Registry.seen]
    assert auths == [None, _Registry.basic, _Registry.basic, _Registry.basic]


def test_the_bearer_token_does_not_follow_a_redirect_to_another_host(registry: str) -> None:
    client = DistributionRegistry(
        registry, auth=("u", "p"), opener=guarded_opener(allow_local=True)
    )
    assert client.blob_range("r", "sha256:abc", 0, 100) == b"the bytes"
    seen = [(host.split(":")[0], path.split("?")[0], a) for host, path, a in _Registry.seen]
    assert seen == [
        ("127.0.0.1", "/v2/r/blobs/sha256:abc", None),
        ("127.0.0.1", "/token", _Registry.basic),
        ("127.0.0.1", "/v2/r/blobs/sha256:abc", "Bearer T"),
        ("localhost", "/storage/blob", None),  # another host: no token, no password
    ]


def test_a_second_refusal_raises_instead_of_looping(registry: str) -> None:
    client = DistributionRegistry(
        registry, auth=("u", "wrong"), opener=guarded_opener(allow_local=True)
    )
    with pytest.raises(Forbidden, match="refused"):
        client.tags("basic").__next__()
    assert len(_Registry.seen) == 2


# ---- Artifact Registry: oauth2accesstoken ----------------------------------------------


class FakeAdc:
    """google.auth credentials as far as we use them: token, valid, refresh(request)."""

    def __init__(self) -> None:
        self.token: str | None = None
        self.valid = False
        self.refreshes: list[Any] = []

    def refresh(self, request: Any) -> None:
        self.refreshes.append(request)
        self.token, self.valid = f"ya29.access-{len(self.refreshes)}", True


def _decoded(header: str) -> str:
    assert header.startswith("Basic ")
    return base64.b64decode(header.removeprefix("Basic ")).decode()


def test_the_access_token_is_refreshed_only_when_expired() -> None:
    adc = FakeAdc()
    credentials = AccessTokenCredentials(adc)
    assert _decoded(credentials.authorization()) == "oauth2accesstoken:ya29.access-1"
    assert _decoded(credentials.authorization()) == "oauth2accesstoken:ya29.access-1"
    assert len(adc.refreshes) == 1
    adc.valid = False  # google-auth's view: expired
    assert _decoded(credentials.authorization()) == "oauth2accesstoken:ya29.access-2"


def test_application_default_credentials_are_asked_for_cloud_platform(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import google.auth

    adc, asked = FakeAdc(), list[Any]()

    def default(scopes: list[str] | None = None, **_: Any) -> tuple[FakeAdc, str]:
        asked.append(scopes)
        return adc, "project"

    monkeypatch.setattr(google.auth, "default", default)
    credentials = credentials_for("oauth2accesstoken", "")
    assert isinstance(credentials, AccessTokenCredentials)
    assert asked == []  # nothing at build time
    assert _decoded(credentials.authorization()).endswith(":ya29.access-1")
    assert asked == [[CLOUD_PLATFORM]] == [["https://www.googleapis.com/auth/cloud-platform"]]


def test_the_access_token_goes_to_the_realm(monkeypatch: pytest.MonkeyPatch) -> None:
    realm = _Realm()
    auth = RegistryAuth("https://us-docker.pkg.dev", AccessTokenCredentials(FakeAdc()), realm)
    challenge = _challenge("repository:p/r/i:pull", realm="https://us-docker.pkg.dev/v2/token")
    auth.answer("GET", URL, challenge, sent=None)
    assert _decoded(str(realm.requests[0].get_header("Authorization"))) == (
        "oauth2accesstoken:ya29.access-1"
    )


def test_credentials_for_the_settings() -> None:
    assert credentials_for("", "ignored") is None
    assert credentials_for("oauth2accesstoken", "a-literal-token") == StaticCredentials(
        "oauth2accesstoken", "a-literal-token"
    )
    assert credentials_for("bob", "") == StaticCredentials("bob", "")


BOB = {"MODELHOOKS_OCI_USERNAME": "bob", "MODELHOOKS_OCI_PASSWORD": "s3cret"}


def test_bootstrap_wires_the_access_token() -> None:
    settings = load_settings(env={"MODELHOOKS_OCI_USERNAME": "oauth2accesstoken"})
    assert isinstance(bootstrap._oci(settings).auth, AccessTokenCredentials)
    settings = load_settings(env={**BOB, "MODELHOOKS_OCI_CREDENTIAL_HOSTS": "reg.example"})
    assert bootstrap._oci(settings).auth == StaticCredentials("bob", "s3cret")
    assert "s3cret" not in repr(bootstrap._oci(settings).auth)


@pytest.mark.parametrize(
    "credentials",
    [AccessTokenCredentials(FakeAdc()), StaticCredentials("oauth2accesstoken", "ya29.literal")],
    ids=["adc", "literal"],
)
@pytest.mark.parametrize(
    ("registry", "realm"),
    [
        ("https://evil.example", "https://evil.example/token"),  # an event names the host
        ("https://us-docker.pkg.dev", "https://evil.example/token"),  # its challenge the realm
        ("https://pkg.dev.evil.example", "https://pkg.dev.evil.example/v2/token"),
        ("https://evil.example", "https://us-docker.pkg.dev/v2/token"),  # Google's token to evil
    ],
)
def test_a_google_access_token_goes_to_google_s_registries_alone(
    credentials: Any, registry: str, realm: str
) -> None:
    """An access token (`oauth2accesstoken`: Application Default Credentials' cloud-platform
    token, or one configured) went to whichever registry an event or a Model named, and to
    whichever realm that registry's challenge named: `oci://evil.example/m:1` in a Model's
    source handed the function's Google credentials to evil.example. Such a registry or realm
    is asked anonymously now (and a Basic one refused, saying why)."""
    opener = _Realm()
    auth = RegistryAuth(registry, credentials, opener)
    auth.answer("GET", URL, _challenge("repository:m:pull", realm=realm), sent=None)
    assert opener.requests[0].get_header("Authorization") is None
    if "evil" in registry:
        with pytest.raises(Forbidden, match="Google's registries"):
            auth.answer("GET", URL, 'Basic realm="registry"', sent=None)
        assert not str(auth.header("GET", URL)).startswith("Basic")


def test_a_google_access_token_goes_to_container_registry_too() -> None:
    gcr = RegistryAuth("https://gcr.io", StaticCredentials("oauth2accesstoken", "t"), _Realm())
    assert _decoded(gcr.answer("GET", URL, 'Basic realm="x"', sent=None)) == "oauth2accesstoken:t"


@pytest.mark.parametrize(
    ("patterns", "url", "matches"),
    [
        ("reg.example", "https://reg.example/v2/", True),
        ("reg.example", "https://REG.example:443/v2/", True),  # its scheme's port, named
        ("reg.example:443", "https://reg.example/v2/", True),
        ("reg.example", "https://reg.example:8443/v2/", False),  # another port: another one
        ("reg.example:5000", "http://reg.example:5000/v2/", True),
        ("reg.example:5000", "http://reg.example:5001/v2/", False),
        ("reg.example", "https://reg.example.evil/v2/", False),
        ("reg.example", "https://evilreg.example/v2/", False),
        ("reg.example", "https://a.reg.example/v2/", False),
        ("*.example.com", "https://a.b.example.com/token", True),
        ("*.example.com", "https://example.com/token", False),  # its subdomains, not itself
        ("*.example.com", "https://evilexample.com/token", False),
        ("*.example.com", "https://example.com.evil/token", False),
        ("[::1]:5000", "http://[::1]:5000/v2/", True),
        ("127.0.0.1:5000, auth.docker.io", "https://auth.docker.io/token", True),
        ("reg.example", "https://reg.example:99999/v2/", False),  # no port: nothing
        ("reg.example", "https:///v2/", False),
    ],
)
def test_credential_hosts_match_host_and_port(patterns: str, url: str, matches: bool) -> None:
    assert host_matches(parse_hosts(patterns), url) is matches


@pytest.mark.parametrize(
    "bad",
    [
        "*",
        "*.",
        "*.com",
        "evil*.com",
        "a/b",
        "https://reg.example",
        "reg.example:0",
        "a:99999",
        "u@reg.example",
    ],
)
def test_a_credential_host_that_is_no_pattern_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a host pattern"):
        parse_hosts(f"reg.example,{bad}")
    settings = load_settings(env={**BOB, "MODELHOOKS_OCI_CREDENTIAL_HOSTS": bad})
    with pytest.raises(
        ConfigError, match=r"MODELHOOKS_OCI_CREDENTIAL_HOSTS: .* not a host pattern"
    ):
        bootstrap._oci(settings)


def test_a_registry_user_without_credential_hosts_is_refused_at_start() -> None:
    """oci.username's credentials went to whichever registry an event or a Model named
    (oci://evil.example/m:1) and to whichever realm its challenge named: without hosts
    named, start-up is refused naming both settings; Google's users keep Google's hosts."""
    with pytest.raises(ConfigError) as caught:
        bootstrap._oci(load_settings(env=BOB))
    message = caught.value.message
    assert "MODELHOOKS_OCI_USERNAME" in message and "MODELHOOKS_OCI_CREDENTIAL_HOSTS" in message
    assert "evil.example" in message and "auth.docker.io" in message and "s3cret" not in message
    zot = load_settings(env={**BOB, "MODELHOOKS_INGRESS_REGISTRY_HOST": "zot.example:5000"})
    with pytest.raises(ConfigError, match=r"e\.g\. zot\.example:5000"):
        bootstrap._oci(zot)
    google = load_settings(
        env={"MODELHOOKS_OCI_USERNAME": "_json_key", "MODELHOOKS_OCI_PASSWORD": "{}"}
    )
    assert bootstrap._oci(google).credential_hosts is None  # Google's rule alone
    assert bootstrap._oci(load_settings(env={})).auth is None  # anonymous: nothing to name


@pytest.mark.parametrize(
    ("registry", "realm", "to_registry", "to_realm"),
    [
        ("https://reg.example", "https://reg.example/token", True, True),
        ("https://reg.example", "https://auth.example/token", True, True),  # listed
        ("https://evil.example", "https://evil.example/token", False, False),  # an event's
        ("https://reg.example", "https://evil.example/token", True, False),  # a challenge's
        ("https://evil.example", "https://auth.example/token", False, False),  # nor its token
    ],
)
def test_static_credentials_go_to_the_credential_hosts_alone(
    registry: str, realm: str, to_registry: bool, to_realm: bool
) -> None:
    """A registry (or realm) the patterns do not name is asked anonymously; a Basic one
    is refused saying which hosts the credentials go to."""
    opener = _Realm()
    hosts = parse_hosts("reg.example,auth.example")
    auth = RegistryAuth(registry, StaticCredentials("u", "p"), opener, credential_hosts=hosts)
    assert (auth.credentials is not None) is to_registry
    auth.answer("GET", URL, _challenge("repository:m:pull", realm=realm), sent=None)
    sent = opener.requests[0].get_header("Authorization")
    assert (sent is not None) is to_realm
    if to_realm:
        assert _decoded(str(sent)) == "u:p"
    if to_registry:
        assert _decoded(auth.answer("GET", URL, 'Basic realm="r"', sent=None)) == "u:p"
    else:
        with pytest.raises(Forbidden, match=r"oci\.credential_hosts names \(reg\.example, auth"):
            auth.answer("GET", URL, 'Basic realm="r"', sent=None)
        assert auth.header("GET", URL) is None or "Basic" not in str(auth.header("GET", URL))


def test_oci_clients_give_their_registries_the_patterns() -> None:
    clients = OciClients(("u", "p"), credential_hosts=parse_hosts("*.corp.example"))
    assert clients.for_uri("oci://r.corp.example/m:1")[0].auth.credentials is not None
    assert clients.for_uri("oci://evil.example/m:1")[0].auth.credentials is None


@pytest.mark.parametrize(
    ("registry", "to_realm"),
    [("https://reg.example", True), ("https://evil.example", False)],
)
def test_registry_realms_the_realm_a_listed_registry_names_gets_the_credentials(
    registry: str, to_realm: bool
) -> None:
    """The transfer function's rule: its credentials are for one registry
    (MODEL_SYNC_<SIDE>_OCI_REGISTRY), which names its token server (Docker Hub's
    auth.docker.io): they reach it, as the Job sends them; an unlisted registry naming a
    realm still gets nothing from it."""
    opener = _Realm()
    auth = RegistryAuth(
        registry,
        StaticCredentials("u", "p"),
        opener,
        credential_hosts=parse_hosts("reg.example"),
        registry_realms=True,
    )
    auth.answer("GET", URL, _challenge("repository:m:pull", "https://auth.example/t"), sent=None)
    sent = opener.requests[0].get_header("Authorization")
    assert (sent is not None) is to_realm
    if to_realm:
        assert _decoded(str(sent)) == "u:p"


def test_the_transfer_function_sends_its_registry_s_realm_the_credentials() -> None:
    from modelhooks.adapters.transfer.run import _oci_clients

    cfg = SimpleNamespace(
        allow_local=False,
        allowed_hosts=frozenset(),
        get={
            "destination_oci_username": "u",
            "destination_oci_password": "p",
            "destination_oci_registry": "registry-1.docker.io",
        }.get,
    )
    clients = _oci_clients(cfg, "destination")  # type: ignore[arg-type]
    assert clients.registry_realms and clients.credential_hosts == {"registry-1.docker.io"}
