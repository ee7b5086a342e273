"""Outbound HTTP(S) to hosts that events name: each connection resolves the host, checks
every address it resolves to (modelhooks.core.addresses) and connects to the address it
checked, so a name cannot be re-pointed between the check and the connection (DNS
rebinding). TLS still verifies the certificate for the host name. Proxies from the
environment are not used for these connections (a proxy would hide the address), and a
redirect to another host does not carry the credentials.

>>> opener = guarded_opener(allow_local=False)  # doctest: +SKIP
>>> opener.open("https://registry.example.com/v2/", timeout=30)  # doctest: +SKIP
"""

from __future__ import annotations

import http.client
import ipaddress
import os
import select
import socket
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from modelhooks.core.addresses import ALLOW_HINT, refused_address
from modelhooks.core.errors import BadRequest, Forbidden, Unavailable

if TYPE_CHECKING:  # urllib.request is imported by what uses it: an endpoint pool does not
    import urllib.request

__all__ = ["Late", "environment_proxy", "guarded_opener", "read_before", "read_environment_once"]

# getaddrinfo's answers that a name does not exist (not a transient DNS failure: EAI_AGAIN)
_NO_SUCH_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


def _connector(allow_local: bool, allowed_hosts: frozenset[str]) -> Any:
    def create_connection(
        address: tuple[str, int], timeout: Any = None, source_address: Any = None, **_: Any
    ) -> socket.socket:
        host, port = address
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            if exc.errno in _NO_SUCH_NAME:  # the name does not exist: retrying cannot help
                raise BadRequest(f"{host} does not resolve: {exc.strerror}", host=host) from None
            raise Unavailable(f"cannot resolve {host}: {exc.strerror}", host=host) from None
        except UnicodeError:  # the idna codec: a label over 63 characters, or empty ('a..b')
            raise BadRequest(f"{host} is not a host name", host=host) from None
        if (
            not allow_local
            and host.lower() not in allowed_hosts
            and (f"{host}:{port}".lower() not in allowed_hosts)
        ):
            for info in infos:
                reason = refused_address(ipaddress.ip_address(str(info[4][0]).split("%")[0]))
                if reason:
                    raise Forbidden(f"{host} resolves to a {reason}", host=host, hint=ALLOW_HINT)
        last: OSError | None = None
        for family, kind, proto, _canonical, sockaddr in infos:  # the checked addresses
            sock = socket.socket(family, kind, proto)
            try:
                if timeout is not None and timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
                    sock.settimeout(timeout)
                sock.connect(sockaddr)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
        raise last or OSError(f"no address for {host}")

    return create_connection


def guarded_opener(
    *, allow_local: bool, allowed_hosts: frozenset[str] = frozenset()
) -> urllib.request.OpenerDirector:
    """An opener whose connections go only to addresses the rule allows (all of them with
    `allow_local`, e.g. a registry on this machine in tests; any address of the hosts in
    `allowed_hosts`, host or host:port, lower case). Its connections are kept alive and
    reused by the next request to the same host (`_KeptAlive`)."""
    import urllib.request

    connect = _connector(allow_local, allowed_hosts)

    class Http(http.client.HTTPConnection):
        response_class = _Response

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._create_connection = connect

    class Https(http.client.HTTPSConnection):
        response_class = _Response

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._create_connection = connect

    pool = _Pool()

    class HttpHandler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> Any:
            return _kept_alive(pool, Http, req, {})

    class HttpsHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> Any:
            return _kept_alive(pool, Https, req, {"context": self._context})  # type: ignore[attr-defined]

    class SameHostCredentials(urllib.request.HTTPRedirectHandler):
        """Follow redirects, but never take the Authorization header to another host."""

        def redirect_request(
            self,
            req: urllib.request.Request,
            fp: Any,
            code: int,
            msg: str,
            headers: Any,
            newurl: str,
        ) -> urllib.request.Request | None:
            new = super().redirect_request(req, fp, code, msg, headers, newurl)
            if new is not None and urlsplit(newurl).netloc != req.host:
                for name in ("Authorization", "Proxy-Authorization"):
                    new.headers.pop(name, None)
                    new.unredirected_hdrs.pop(name, None)
            return new

    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), HttpHandler, HttpsHandler, SameHostCredentials
    )


class _Response(http.client.HTTPResponse):
    """A response that hands its connection back (`release(reusable)`) once it has been read
    to its end, or closed: reusable only when nothing of it is left unread on the wire."""

    release: Any = None

    def _finished(self, reusable: bool) -> None:
        release, self.release = self.release, None
        if release is not None:
            release(reusable and not self.will_close)

    def read(self, amt: int | None = None) -> bytes:
        data = super().read(amt)
        if self.fp is None:
            self._finished(True)
        return data

    def readinto(self, b: Any) -> int:
        n = super().readinto(b)
        if self.fp is None:
            self._finished(True)
        return n

    def close(self) -> None:
        drained = self.fp is None or (not self.chunked and self.length == 0)
        super().close()
        self._finished(drained)


class _Pool:
    """Idle connections by (connection class, host:port), at most `per_host` each and
    `hosts` places (hosts come from events: bounded, the least recently used go)."""

    def __init__(self, per_host: int = 16, hosts: int = 64) -> None:
        self._idle: OrderedDict[tuple[type, str], list[http.client.HTTPConnection]] = OrderedDict()
        self._per_host, self._hosts = per_host, hosts
        self._lock = threading.Lock()
        weakref.finalize(self, _close_all, self._idle)  # the opener went: so do its sockets

    def take(self, key: tuple[type, str]) -> http.client.HTTPConnection | None:
        while True:
            with self._lock:
                idle = self._idle.get(key)
                conn = idle.pop() if idle else None
            if conn is None or not _dropped(conn):
                return conn
            conn.close()  # the server closed it while it was idle

    def give(self, key: tuple[type, str], conn: http.client.HTTPConnection) -> None:
        evicted: list[http.client.HTTPConnection] = []
        with self._lock:
            idle = self._idle.setdefault(key, [])
            self._idle.move_to_end(key)
            if len(idle) < self._per_host:
                idle.append(conn)
            else:
                evicted.append(conn)
            while len(self._idle) > self._hosts:
                evicted += self._idle.popitem(last=False)[1]
        for old in evicted:
            old.close()

    def clear(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle = dict(self._idle)
            self._idle.clear()
        _close_all(idle)


def _close_all(idle: dict[Any, list[http.client.HTTPConnection]]) -> None:
    for conns in list(idle.values()):
        for conn in conns:
            conn.close()
    idle.clear()


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """An idle connection the peer closed (or wrote to: nothing is owed to us) is readable.
    Asked of poll(2), not select(2), which refuses a descriptor past FD_SETSIZE (1024): in a
    process holding more files, every idle connection counted as dropped (none reused)."""
    if conn.sock is None:
        return True
    try:
        poller = select.poll()
        poller.register(conn.sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


# Sent again on a fresh connection when a kept-alive one turns out closed by the server
# (nothing of the request was processed): safe for idempotent methods only.
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


def send(
    pool: _Pool,
    key: Any,
    connect: Callable[[], http.client.HTTPConnection],
    method: str,
    selector: str,
    body: Any,
    headers: Mapping[str, str],
    *,
    timeout: float | None,
    reuse: bool,
    **request: Any,
) -> http.client.HTTPResponse:
    """`method` on a connection of `pool` for `key` (an idle one when `reuse`, else one
    `connect` makes): the answer, whose connection goes back to the pool once it is read to
    its end (a `_Response`'s `release`). A kept-alive connection the server closed while
    idle is replaced once for an idempotent method; what else the connection raises
    (OSError, http.client.HTTPException) is raised, the connection closed."""
    conn = pool.take(key) if reuse else None
    while True:
        reused = conn is not None
        try:
            if conn is None:
                conn = connect()
            elif conn.sock is not None:
                conn.sock.settimeout(timeout)
            conn.request(method, selector, body, dict(headers), **request)
            response = conn.getresponse()
        except _STALE:
            if conn is not None:
                conn.close()
            if reused and method in _IDEMPOTENT:
                conn = None  # a kept-alive connection the server had closed: once more
                continue
            raise
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        break
    done = conn

    def release(reusable: bool) -> None:
        if reusable:
            pool.give(key, done)
        else:
            done.close()

    response.release = release  # type: ignore[attr-defined]
    return response


def _kept_alive(
    pool: _Pool, cls: type[http.client.HTTPConnection], req: urllib.request.Request, kw: Any
) -> http.client.HTTPResponse:
    """What urllib's do_open does, on a pooled connection instead of a new one per request
    (urllib sends `Connection: close` every time: a TCP and TLS handshake per request)."""
    key = (cls, req.host)
    headers = dict(req.unredirected_hdrs)
    headers.update({k: v for k, v in req.headers.items() if k not in headers})
    headers = {name.title(): value for name, value in headers.items()}
    method = req.get_method()
    # a request that must not be sent twice goes on a new connection: a kept-alive one the
    # server closed while idle fails it, and it could not be sent again
    wanted = req.timeout  # this request's (none given: the default)
    try:
        response = send(
            pool,
            key,
            lambda: cls(req.host, timeout=req.timeout, **kw),
            method,
            req.selector,
            req.data,
            headers,
            timeout=wanted if wanted is None or isinstance(wanted, int | float) else None,
            reuse=method in _IDEMPOTENT,
            encode_chunked=req.has_header("Transfer-encoding"),
        )
    except OSError as exc:
        import urllib.error

        raise urllib.error.URLError(exc) from exc
    assert isinstance(response, _Response)
    response.url = req.get_full_url()
    response.msg = response.reason  # type: ignore[assignment]
    return response


class Late(TimeoutError):
    """An answer not read whole by its deadline (a socket's own timeout is TimeoutError)."""


def read_before(resp: Any, most: int, deadline: float) -> bytes:
    """At most `most` bytes of `resp`'s body, read before `deadline` (time.monotonic), else
    Late. read1 by read1 (each what one read of the socket gives): the socket's
    timeout bounds each read only, so an answer trickled a byte at a time is stopped at the
    deadline, not at its end. The registry client and the CLI's POSTs both read so."""
    read = getattr(resp, "read1", resp.read)
    chunks, size = [], 0
    while size < most:
        if time.monotonic() > deadline:
            raise Late
        chunk = read(most - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_environment_once(session: Any, endpoint: str) -> Any:
    """`session` (a requests.Session talking to `endpoint`) with what requests reads from
    the environment on EVERY request settled now: the proxy for `endpoint` (HTTP(S)_PROXY,
    ALL_PROXY, minus NO_PROXY) and REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE. Reading them took
    two scans of os.environ a request (a sixth of an admission review's CPU)."""
    from requests.utils import get_environ_proxies

    session.proxies.update(get_environ_proxies(endpoint))
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle and session.verify is True:
        session.verify = bundle
    session.trust_env = False
    return session


def environment_proxy(url: str) -> str | None:
    """The proxy requests takes from the environment for `url`: none when NO_PROXY (or
    no_proxy) names its host, else the first of urllib's `getproxies()` for
    scheme://host, scheme, all://host, all. NO_PROXY names a host by its name or name:port,
    or a domain of it (`example.com` or `.example.com`: a.example.com), or for an IPv4
    address, by that address or a network (a.b.c.d/n) it lies in; what urllib's
    `proxy_bypass` bypasses is bypassed too."""
    if sys.platform == "linux" and not any(k.lower().endswith("_proxy") for k in os.environ):
        return None  # all getproxies() reads here: urllib.request not imported (cold start)
    import urllib.request

    parts = urlsplit(url)
    host = parts.hostname
    if host is None or _no_proxy(host, parts.port, os.environ):
        return None
    proxies = urllib.request.getproxies()
    for key in (f"{parts.scheme}://{host}", parts.scheme, f"all://{host}", "all"):
        if key in proxies:
            return proxies[key]
    return None


def _no_proxy(host: str, port: int | None, environ: Any) -> bool:
    listed = environ.get("no_proxy") or environ.get("NO_PROXY") or ""
    names = [name for name in listed.replace(" ", "").split(",") if name]
    address = _ipv4(host)
    if address is not None:
        for name in names:
            if name.count("/") == 1:
                network, bits = name.split("/")
                base, size = _ipv4(network), _int(bits)
                if base is not None and size is not None and 1 <= size <= 32:
                    mask = (0xFFFFFFFF << (32 - size)) & 0xFFFFFFFF
                    if address & mask == base & mask:
                        return True
            elif host == name:
                return True
    else:
        with_port = f"{host}:{port}" if port else host
        for name in (name.lstrip(".") for name in names):
            if name in (host, with_port) or any(h.endswith(f".{name}") for h in (host, with_port)):
                return True
    import urllib.request

    try:
        return bool(urllib.request.proxy_bypass(host))
    except (TypeError, socket.gaierror):
        return False


def _ipv4(text: str) -> int | None:
    """`text` as inet_aton reads an IPv4 address (as requests does), else None."""
    try:
        return int.from_bytes(socket.inet_aton(text), "big")
    except OSError:
        return None


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _credentials(proxy: str) -> tuple[str, str]:
    """The proxy URL's user and password, unquoted; ("", "") unless it has both."""
    parts = urlsplit(proxy)
    if parts.username is None or parts.password is None:
        return "", ""
    return unquote(parts.username), unquote(parts.password)
