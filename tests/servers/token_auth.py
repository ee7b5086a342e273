"""A token realm for distribution's `auth: token` (the Docker token protocol), in process.

`GET /token?service=S&scope=repository:NAME:ACTIONS` with HTTP basic credentials answers
`{"token", "access_token", "expires_in", "issued_at"}`: an ES256 JWT whose `x5c` header holds
a self-signed certificate made at start, written as the registry's `rootcertbundle`
(distribution v3's verifier checks the x5c chain against that bundle, then iss, aud =
service, exp/nbf with 60 s leeway, and the `access` claim). Each user is granted the
requested actions it is allowed; no or wrong credentials: 401. Every request is recorded
(`requests`), so tests count token fetches per scope.

Example::

    with TokenServer(tmpdir, users={"alice": ("pw", {"pull", "push"})}) as tokens:
        start_distribution3(workdir, auth=tokens.registry_auth())
        ...
        assert tokens.fetches("repository:models/bert:pull,push") == 1
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.servers.tls import CertificateAuthority


@dataclass(frozen=True)
class TokenRequest:
    """One request to the realm: who asked (None: anonymous; "?": bad credentials), for
    which scopes, whether a token was issued, and the Authorization header it carried."""

    user: str | None
    scopes: tuple[str, ...]
    service: str
    issued: bool
    authorization: str | None


class TokenServer:
    """The realm on ``url`` (http://127.0.0.1:P/token). ``users``: name → (password, the
    actions it may be granted). ``expires_in`` and ``backdate`` (seconds the JWT's exp lies
    before what ``expires_in`` announces: the registry rejects a token past exp + 60 s) and
    ``redirect_to`` (answer 302 there instead) are changed with ``issuing()``."""

    service = "modelhooks-test-registry"
    issuer = "modelhooks-test-token-server"

    def __init__(self, directory: Path, *, users: Mapping[str, tuple[str, set[str]]]) -> None:
        self.users = {name: (pw, frozenset(actions)) for name, (pw, actions) in users.items()}
        self.directory = directory
        self.requests: list[TokenRequest] = []
        self.expires_in, self.backdate, self.redirect_to = 300, 0, ""
        self._lock = threading.Lock()
        root = CertificateAuthority.create(directory, self.issuer)  # signs the tokens itself
        self._key = serialization.load_pem_private_key(root.key_file.read_bytes(), password=None)
        cert = x509.load_pem_x509_certificate(root.cert_pem)
        self._x5c = [base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()]
        self.cert_file = root.cert_file  # the registry's rootcertbundle
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/token"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> TokenServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def elsewhere(self) -> str:
        """This realm under another host name (localhost): a target for ``redirect_to``."""
        return f"http://localhost:{self.port}/issue"

    def registry_auth(self) -> dict[str, Any]:
        """The `auth:` section of a distribution configuration that trusts this realm."""
        return {
            "token": {
                "realm": self.url,
                "service": self.service,
                "issuer": self.issuer,
                "rootcertbundle": str(self.cert_file),
            }
        }

    def fetches(self, scope: str) -> int:
        """How many tokens were issued for `scope`."""
        with self._lock:
            return sum(1 for r in self.requests if r.issued and scope in r.scopes)

    def seen(self, repository: str) -> list[TokenRequest]:
        """Every request whose scopes name `repository`."""
        with self._lock:
            return [r for r in self.requests if any(f":{repository}:" in s for s in r.scopes)]

    @contextlib.contextmanager
    def issuing(
        self, *, expires_in: int = 300, backdate: int = 0, redirect_to: str = ""
    ) -> Iterator[None]:
        saved = self.expires_in, self.backdate, self.redirect_to
        self.expires_in, self.backdate, self.redirect_to = expires_in, backdate, redirect_to
        try:
            yield
        finally:
            self.expires_in, self.backdate, self.redirect_to = saved

    def _user(self, authorization: str | None) -> str | None:
        scheme, _, encoded = (authorization or "").partition(" ")
        if scheme.lower() != "basic":
            return None
        name, _, password = base64.b64decode(encoded).decode().partition(":")
        known = self.users.get(name)
        return name if known and known[0] == password else "?"

    def _token(self, user: str, scopes: list[str]) -> str:
        allowed = self.users[user][1]
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            granted = [a for a in actions.split(",") if a in allowed]
            access.append({"type": kind, "name": name, "actions": granted})
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": user,
            "aud": self.service,
            "exp": now + self.expires_in - self.backdate,
            "nbf": now - 10 - self.backdate,
            "iat": now - self.backdate,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        return jwt.encode(claims, self._key, algorithm="ES256", headers={"x5c": self._x5c})

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                scopes = [s for value in query.get("scope", []) for s in value.split()]
                authorization = self.headers.get("Authorization")
                if server.redirect_to and url.path == "/token":
                    self._record(None, scopes, query, False, authorization)
                    target = f"{server.redirect_to}?{url.query}"
                    self._answer(302, b"", {"Location": target})
                    return
                user = server._user(authorization)
                if user is None or user == "?":
                    self._record(user, scopes, query, False, authorization)
                    self._answer(
                        401,
                        b'{"details":"unauthorized"}',
                        {"WWW-Authenticate": 'Basic realm="token"'},
                    )
                    return
                token = server._token(user, scopes)
                self._record(user, scopes, query, True, authorization)
                issued = dt.datetime.now(dt.UTC).isoformat()
                body = {
                    "token": token,
                    "access_token": token,
                    "expires_in": server.expires_in,
                    "issued_at": issued,
                }
                self._answer(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

            def _record(
                self,
                user: str | None,
                scopes: list[str],
                query: dict[str, list[str]],
                issued: bool,
                authorization: str | None,
            ) -> None:
                service = (query.get("service") or [""])[0]
                seen = TokenRequest(user, tuple(scopes), service, issued, authorization)
                with server._lock:
                    server.requests.append(seen)

            def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
