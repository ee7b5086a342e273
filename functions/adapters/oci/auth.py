"""Registry authentication for `DistributionRegistry`, driven by the registry's challenges
(the Docker token protocol). A request answered 401 with

    WWW-Authenticate: Bearer realm="https://auth.example/token",service="registry",
                      scope="repository:models/bert:pull,push"

gets a token from the realm (`GET realm?service=…&scope=…` with the configured basic
credentials, or anonymously when there are none), cached per scope until it expires, and is
sent once more with `Authorization: Bearer …`. `WWW-Authenticate: Basic` gets the basic
credentials, and the host is remembered as basic: no 401 round trip afterwards. The scope a
registry asked for is remembered per repository and method, so later requests carry the
cached token at once. One `RegistryAuth` serves one registry from many threads.

The credentials (a user and password, or Artifact Registry's access token) are in
`modelhooks.adapters.oci.credentials`.

Security: the realm request goes through the registry's own (guarded) opener, so the
address rule applies to it too; a realm over plain http is refused unless the registry
itself is on loopback; the opener drops Authorization on a redirect to another host
(`modelhooks.adapters.net`). An event or a Model names the registry, and the registry its
realm, so the credentials go only where they are meant to: to the hosts `credential_hosts`
names (`oci.credential_hosts`: patterns such as `registry.example.com`, `reg.example:5000`,
`*.example.com`), registry and realm alike (Docker Hub's realm is `auth.docker.io`), and to a
realm only for a registry they go to (another naming that realm would get the token); Google's
(the users `oauth2accesstoken`, `_token`, `_json_key`, `_json_key_base64`: a cloud-platform
access token or a key) to Google's registries and realms alone (`*.pkg.dev`, `gcr.io`,
`*.gcr.io`). Any other registry or realm is asked anonymously. No error message carries a
secret.

>>> auth = RegistryAuth(base_url, StaticCredentials("u", "p"), opener.open)  # doctest: +SKIP
>>> auth.answer("GET", url, headers["WWW-Authenticate"], sent=None)  # doctest: +SKIP
'Bearer eyJ…'
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from modelhooks.core.errors import Forbidden, ModelhooksError, PayloadTooLarge, Unavailable

if TYPE_CHECKING:
    from modelhooks.adapters.oci.credentials import Credentials

__all__ = [
    "GOOGLE_USERS",
    "Challenge",
    "RegistryAuth",
    "host_matches",
    "parse_challenges",
    "parse_hosts",
]

_SET_CREDENTIALS = "set oci.username and oci.password"
_MAX_TOKEN = 1 << 20  # a realm's answer: a token (a JWT of a few KB), read no further
# and within this in all (each read of the socket waits 30 s at most): a realm the registry
# names may be anyone's, and one trickling its answer held the delivery's thread as long
_TOKEN_SECONDS = 60.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_REPOSITORY = re.compile(r"^/v2/(.+)/(?:manifests|blobs|tags|referrers)/")

# RFC 9110 §11: challenge = scheme [ 1*SP ( token68 / #auth-param ) ]
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_SCHEME = re.compile(rf"[\s,]*({_TOKEN})")
_PARAM = re.compile(rf'\s*({_TOKEN})\s*=\s*(?:"((?:[^"\\]|\\.)*)"|({_TOKEN}))\s*')
_TOKEN68 = re.compile(r"\s*[A-Za-z0-9\-._~+/]+=*\s*(?=,|$)")
_SEPARATOR = re.compile(r"\s*,")
# Google's registry users, whose password is a Google credential, and Google's registry hosts
GOOGLE_USERS = frozenset({"oauth2accesstoken", "_token", "_json_key", "_json_key_base64"})
_GOOGLE_HOST = re.compile(r"(?:[a-z0-9-]+\.)*(?:pkg\.dev|gcr\.io)")
# a credential host pattern: `*.` (any subdomain), then a DNS name, an IPv4 address or a
# bracketed IPv6 one, and perhaps a port
_HOST_PATTERN = re.compile(
    r"(?P<wild>\*\.)?(?P<host>[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*"
    r"|\[[0-9a-f:.]+\])(?::(?P<port>[0-9]{1,5}))?"
)
_DEFAULT_PORTS = {"https": 443, "http": 80}


def parse_hosts(text: str) -> tuple[str, ...]:
    """The host patterns of a comma-separated list (`oci.credential_hosts`), lower case;
    ValueError naming one that is none: a pattern is a host (`reg.example`), perhaps with a
    port (`reg.example:5000`), or `*.` and a domain (`*.example.com`: its subdomains, not
    itself). A host without a port is that host on its scheme's port only, as Docker keys
    its credentials: `reg.example:8443` may be another service.

    >>> parse_hosts(" Registry.example.com, *.corp.example ,127.0.0.1:5000")
    ('registry.example.com', '*.corp.example', '127.0.0.1:5000')
    """
    patterns = tuple(p.strip().lower() for p in text.split(",") if p.strip())
    for pattern in patterns:
        found = _HOST_PATTERN.fullmatch(pattern)
        if (
            not found
            or (found["port"] and not 0 < int(found["port"]) < 65536)
            or (found["wild"] and "." not in found["host"])  # `*.com`: anyone's
        ):
            raise ValueError(f"{pattern!r} is not a host pattern (host, host:port, or *.domain)")
    return patterns


def host_matches(patterns: Collection[str], url: str) -> bool:
    """Whether `url`'s host (and port) is one `patterns` names (see `parse_hosts`).

    >>> host_matches(["*.example.com", "reg.example:5000"], "https://a.b.example.com/token")
    True
    >>> [host_matches(["reg.example"], u) for u in ("https://reg.example:443/v2/",
    ...     "https://reg.example:8443", "https://reg.example.evil")]
    [True, False, False]
    """
    try:
        parts = urlsplit(url)
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:  # a port out of range, a bracketed host that is no IP address
        return False
    default = _DEFAULT_PORTS.get(parts.scheme)
    for pattern in patterns:
        found = _HOST_PATTERN.fullmatch(pattern.lower())
        if not host or not found:
            continue
        named, wild = found["host"].strip("[]"), bool(found["wild"])
        named_port = int(found["port"]) if found["port"] else default
        if (port or default) == named_port and (
            host.endswith("." + named) if wild else host == named
        ):
            return True
    return False
    if not host or port == _DEFAULT_PORTS.get(parts.scheme):
        port = None
    for pattern in patterns:
        found = _HOST_PATTERN.fullmatch(pattern)
        named_port = int(found["port"]) if found and found["port"] else None
        if (
            not found
            or (None if named_port == _DEFAULT_PORTS.get(parts.scheme) else named_port) != port
        ):
            continue
        named = found["host"].strip("[]")
        if host == named if not found["wild"] else host.endswith("." + named):
            return True
    return False


@dataclass(frozen=True)
class Challenge:
    """One challenge of a `WWW-Authenticate` header: its scheme (lower case) and parameters
    (names lower case, values unquoted)."""

    scheme: str
    params: Mapping[str, str] = field(default_factory=dict)


def parse_challenges(header: str) -> list[Challenge]:
    """Every challenge of a `WWW-Authenticate` value; quoted values may hold commas.

    >>> [(c.scheme, c.params["scope"]) for c in parse_challenges(
    ...     'Bearer realm="https://a/t",scope="repository:a/b:pull,push"')]
    [('bearer', 'repository:a/b:pull,push')]
    """
    found: list[Challenge] = []
    pos = 0
    while scheme := _SCHEME.match(header, pos):
        pos, params = scheme.end(), dict[str, str]()
        if not (param := _PARAM.match(header, pos)) and (token68 := _TOKEN68.match(header, pos)):
            pos = token68.end()  # e.g. `Negotiate abc==`: nothing we use
        while param:
            quoted, plain = param.group(2), param.group(3)
            value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else plain
            params[param.group(1).lower()] = value
            pos, param = param.end(), None
            if separator := _SEPARATOR.match(header, pos):  # another parameter, or a challenge
                param = _PARAM.match(header, separator.end())
                pos = separator.end() if param else pos
        found.append(Challenge(scheme.group(1).lower(), params))
        if pos < len(header) and not _SEPARATOR.match(header, pos):
            break  # not a header we can read further
    return found


Open = Callable[..., Any]  # OpenerDirector.open


@dataclass
class _Token:
    value: str
    expires: float  # on the monotonic clock


class RegistryAuth:
    """The Authorization one registry (`base_url`) wants: `header()` before a request,
    `answer()` to its 401, `denied()` when the answer was refused too. Thread-safe.
    `registry_realms`: the token realm this registry names gets the credentials whatever its
    host, when the registry does (the transfer function's: one registry is configured)."""

    def __init__(
        self,
        base_url: str,
        credentials: Credentials | None,
        open: Open,
        *,
        credential_hosts: Collection[str] | None = None,
        registry_realms: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url, self._clock = base_url, clock
        self._registry_realms = registry_realms
        self._open, self._configured = open, credentials
        self._hosts = None if credential_hosts is None else tuple(credential_hosts)
        self._loopback = (urlsplit(base_url).hostname or "") in _LOOPBACK
        self.credentials = self._for(base_url)
        self._lock = threading.Lock()
        self._basic = False  # the registry challenged with Basic: send it every time
        self._scopes: dict[tuple[str, str], tuple[str, str, str]] = {}  # (method, repo) → key
        self._tokens: dict[tuple[str, str, str], _Token] = {}  # (realm, service, scope) → token
        self._fetching: dict[tuple[str, str, str], threading.Lock] = {}

    def header(self, method: str, url: str) -> str | None:
        """What to send first: basic for a basic registry, else the cached token of the scope
        this method on this repository needed last time (None: send nothing, see the 401)."""
        if self._basic and self.credentials is not None:
            return self.credentials.authorization()
        with self._lock:
            key = self._scopes.get((method, _repository(url)))
            token = self._tokens.get(key) if key else None
        return f"Bearer {token.value}" if token and token.expires > self._clock() else None

    def answer(self, method: str, url: str, challenge: str, sent: str | None) -> str:
        """The Authorization to retry with after a 401 that carried `challenge` (the
        `WWW-Authenticate` value), `sent` being what that request carried."""
        challenges = {c.scheme: c for c in parse_challenges(challenge)}
        if bearer := challenges.get("bearer"):
            params = bearer.params
            scope = _canonical(params.get("scope", ""))
            key = (params.get("realm", ""), params.get("service", ""), scope)
            with self._lock:
                self._scopes[(method, _repository(url))] = key
            rejected = sent.removeprefix("Bearer ") if sent and sent.startswith("Bearer ") else None
            return f"Bearer {self._token(key, rejected)}"
        if "basic" in challenges:
            if self.credentials is None and self._configured is not None:
                raise Forbidden(f"registry {self.base_url} asks for credentials; {self._where()}")
            if self.credentials is None:
                raise Forbidden(
                    f"registry {self.base_url} requires credentials: {_SET_CREDENTIALS}"
                )
            if sent is not None and sent.startswith("Basic "):
                raise self.denied(method, url, challenge)
            self._basic = True
            return self.credentials.authorization()
        raise Forbidden(
            f"registry {self.base_url} answered 401 without a Bearer or Basic challenge",
            challenge=challenge[:200],
        )

    def denied(self, method: str, url: str, challenge: str) -> ModelhooksError:
        """The error for a request refused again with the credentials `answer` gave."""
        what = f"{method} {urlsplit(url).path}"
        scope = next((c.params.get("scope", "") for c in parse_challenges(challenge)), "")
        if self.credentials is None:
            why = self._where() if self._configured is not None else _SET_CREDENTIALS
            return Forbidden(
                f"registry {self.base_url} requires credentials for {what}: {why}", scope=scope
            )
        return Forbidden(
            f"registry {self.base_url} refused {what} to user {self.credentials.username!r}",
            scope=scope,
        )

    def _for(self, url: str) -> Credentials | None:
        """The configured credentials, when they may go to `url`'s host: one the credential
        hosts name, and Google's to Google's registries and realms alone (an event names the
        registry, and the registry its realm: the credentials went wherever they said)."""
        credentials = self._configured
        if credentials is None:
            return None
        if self._hosts is not None and not host_matches(self._hosts, url):
            return None
        if credentials.username not in GOOGLE_USERS:
            return credentials
        try:
            host = (urlsplit(url).hostname or "").lower()
        except ValueError:
            return None
        return credentials if _GOOGLE_HOST.fullmatch(host) else None

    def _where(self) -> str:
        """Why the configured credentials were not sent (an error's reason, no secret)."""
        user = self._configured.username if self._configured is not None else ""
        if self._hosts is None and user in GOOGLE_USERS:
            return (
                "the configured ones are Google's, sent to Google's registries alone "
                "(*.pkg.dev, gcr.io)"
            )
        return (
            "the configured ones go only to the hosts oci.credential_hosts names "
            f"({', '.join(self._hosts or ()) or 'none'}): add this one if it is meant to have them"
        )

    def _token(self, key: tuple[str, str, str], rejected: str | None) -> str:
        """The cached token of `key`, unless expired or just rejected; else a new one (one
        fetch per scope at a time: the other threads wait and take it)."""
        with self._lock:
            lock = self._fetching.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                cached = self._tokens.get(key)
            if cached and cached.expires > self._clock() and cached.value != rejected:
                return cached.value
            value, expires_in = self._fetch(*key)
            margin = min(30.0, expires_in / 10)  # a token must not expire on its way
            with self._lock:
                now = self._clock()
                if len(self._tokens) >= 1024:  # a long-lived process meets many repositories
                    self._tokens = {k: t for k, t in self._tokens.items() if t.expires > now}
                self._tokens[key] = _Token(value, now + expires_in - margin)
            return value

    def _fetch(self, realm: str, service: str, scope: str) -> tuple[str, float]:
        import urllib.error
        import urllib.request

        try:
            parts = urlsplit(realm)
            port = f":{parts.port}" if parts.port else ""  # never a user:password@ of the realm
        except ValueError:  # a port out of range, a bracketed host that is no IP address
            parts, port = urlsplit(""), "?"
        if not parts.hostname or port == "?":
            raise Forbidden(f"registry {self.base_url} sent a Bearer challenge without a realm")
        where = f"token realm {parts.scheme}://{parts.hostname}{port}{parts.path}"
        where += f" of registry {self.base_url}"
        if parts.scheme != "https" and not (parts.scheme == "http" and self._loopback):
            raise Forbidden(f"{where} is not https: refused")
        query = ([("service", service)] if service else []) + [("scope", s) for s in scope.split()]
        url = realm + ("&" if parts.query else "?") + urlencode(query) if query else realm
        request = urllib.request.Request(url, method="GET")
        # the realm's host must be one the credentials go to, and so must the registry's:
        # a registry they do not go to, naming a realm they do (auth.docker.io, a pkg.dev
        # one), would get the token they buy for whatever scope it asked
        # (`registry_realms`: the realm this registry names, whatever its host)
        credentials = self.credentials
        if credentials is not None and not self._registry_realms:
            credentials = self._for(realm)
        if credentials is not None:
            request.add_header("Authorization", credentials.authorization())
        from modelhooks.adapters.net import Late, read_before

        try:
            with self._open(request, timeout=30) as response:
                deadline = time.monotonic() + _TOKEN_SECONDS
                body = read_before(response, _MAX_TOKEN + 1, deadline)
            if len(body) > _MAX_TOKEN:  # a token, not an endless answer held in memory
                raise PayloadTooLarge(f"{where}: the answer is over {_MAX_TOKEN} bytes")
        except Late:
            raise Unavailable(f"{where}: no token within {_TOKEN_SECONDS:g} s") from None
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code not in (401, 403):
                raise Unavailable(f"{where} answered {exc.code}", status=exc.code) from None
            if credentials is None and self._configured is not None:
                raise Forbidden(f"{where} requires credentials; {self._where()}") from None
            if credentials is None:
                raise Forbidden(f"{where} requires credentials: {_SET_CREDENTIALS}") from None
            user = credentials.username
            raise Forbidden(f"{where} refused the credentials of user {user!r}") from None
        except OSError as exc:
            raise Unavailable(f"{where} unreachable", reason=str(exc)) from None
        return _read_token(body, where)


def _read_token(body: bytes, where: str) -> tuple[str, float]:
    """(token, seconds it lasts) from a realm's answer: `token` or OAuth2's `access_token`;
    `expires_in` defaults to 60 seconds (the protocol's minimum)."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    token = (doc.get("token") or doc.get("access_token")) if isinstance(doc, dict) else None
    if not isinstance(token, str) or not token:
        raise Unavailable(f"{where} answered without a token")
    expires_in = doc.get("expires_in") if isinstance(doc, dict) else None
    seconds = float(expires_in) if isinstance(expires_in, int | float) and expires_in > 0 else 60.0
    return token, seconds


def _canonical(scope: str) -> str:
    """`scope` with its scopes and each one's actions sorted: distribution lists actions in
    any order (`pull,push` or `push,pull`), and they are one token."""
    scopes = []
    for one in scope.split():
        resource, colon, actions = one.rpartition(":")
        scopes.append(f"{resource}:{','.join(sorted(set(actions.split(','))))}" if colon else one)
    return " ".join(sorted(scopes))


def _repository(url: str) -> str:
    """The repository a `/v2/<name>/…` URL is about ("" for `/v2/` itself)."""
    found = _REPOSITORY.match(urlsplit(url).path)
    return found.group(1) if found else ""
