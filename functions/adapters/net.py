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
import socket
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from modelhooks.core.addresses import ALLOW_HINT, refused_address
from modelhooks.core.errors import BadRequest, Forbidden, Unavailable

__all__ = ["guarded_opener", "read_environment_once"]

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
    `allowed_hosts`, host or host:port, lower case)."""
    connect = _connector(allow_local, allowed_hosts)

    class Http(http.client.HTTPConnection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._create_connection = connect

    class Https(http.client.HTTPSConnection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._create_connection = connect

    class HttpHandler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> Any:
            return self.do_open(Http, req)

    class HttpsHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> Any:
            return self.do_open(Https, req, context=self._context)  # type: ignore[attr-defined]

    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), HttpHandler, HttpsHandler, _SameHostCredentials
    )


class _SameHostCredentials(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never take the Authorization header to another host."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlsplit(newurl).netloc != req.host:
            for name in ("Authorization", "Proxy-Authorization"):
                new.headers.pop(name, None)
                new.unredirected_hdrs.pop(name, None)
        return new


def read_environment_once(session: Any, endpoint: str) -> Any:
    """`session` (a requests.Session talking to `endpoint`) with what requests reads from
    the environment on EVERY request settled now: the proxy for `endpoint` (HTTP(S)_PROXY,
    ALL_PROXY, minus NO_PROXY) and REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE. Reading them took
    two scans of os.environ a request (a sixth of an admission review's CPU)."""
    import os

    from requests.utils import get_environ_proxies

    session.proxies.update(get_environ_proxies(endpoint))
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle and session.verify is True:
        session.verify = bundle
    session.trust_env = False
    return session
