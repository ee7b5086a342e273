"""Kept-alive HTTP(S) connections to a configured endpoint (not a host an event names: see
`net.guarded_opener` for those), over the standard library's http.client.

`endpoint_pool(url)` settles from the environment, once, what requests would read on every
request: the proxy for `url` (`net.environment_proxy`: HTTP(S)_PROXY, ALL_PROXY minus
NO_PROXY; its user:password as Proxy-Authorization) and the CA bundle (REQUESTS_CA_BUNDLE /
CURL_CA_BUNDLE, else certifi's, as requests). Through an http:// proxy, an http:// URL is
forwarded (absolute-form) and an https:// one tunnelled (CONNECT), TLS verifying the
endpoint's certificate for its name. A proxy http.client does not speak (socks://,
https://) goes through urllib3's, imported then.

Why not urllib3 for all of them: importing it (its URL regexes compiled, its TLS helpers)
cost a cold start's first GCS listing ~15 ms of CPU, more than the listing (issue 22).
Every failure to get an answer (refused, reset, timed out, TLS refused) is `HttpFailed`,
an OSError; an answer is a `Response` whatever its status. No retries, no redirects: a
delivery's retry is the platform's.

>>> pool = endpoint_pool("https://storage.googleapis.com")  # doctest: +SKIP
>>> pool.urlopen("GET", "https://storage.googleapis.com/storage/v1/b/b/o").status  # doctest: +SKIP
200
"""

from __future__ import annotations

import base64
import http.client
import os
import ssl
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from modelhooks.adapters.net import _credentials, _Pool, _Response, environment_proxy, send

__all__ = ["EndpointPool", "HttpFailed", "Response", "endpoint_pool"]


class HttpFailed(OSError):
    """No answer: `reason` is why (ConnectionRefusedError, TimeoutError, an ssl error, …);
    `tls` says the endpoint's certificate (or TLS itself) was refused."""

    def __init__(self, reason: BaseException, *, tls: bool | None = None) -> None:
        super().__init__(str(reason) or type(reason).__name__)
        self.reason = reason
        self.tls = isinstance(reason, ssl.SSLError) if tls is None else tls


class Response(_Response):
    """An answer: `status`, `reason`, `headers`, and its body as `data` (read whole) or
    `read(n)` / `stream(n)`. Its connection goes back to the pool once the body has been read
    to its end; `release_conn()` closes it instead when some is left unread."""

    _data: bytes | None = None

    @property
    def data(self) -> bytes:
        if self._data is None:
            self._data = self.read()
        return self._data

    @property
    def length_remaining(self) -> int | None:
        """What is left of a Content-Length body (None: chunked or read to the close)."""
        return None if self.fp is None else self.length

    def read(self, amt: int | None = None) -> bytes:
        try:
            return super().read(amt)
        except (OSError, http.client.HTTPException) as exc:
            self.release_conn()
            raise HttpFailed(exc) from exc

    def stream(self, amt: int = 1 << 16) -> Iterator[bytes]:
        while data := self.read(amt):
            yield data

    def drain_conn(self) -> None:
        """Read what is left (its connection can serve the next request)."""
        while self.read(1 << 16):
            pass

    def release_conn(self) -> None:
        """Done with it: its connection back to the pool if nothing is left unread."""
        if self.fp is not None:
            self.close()


class _Http(http.client.HTTPConnection):
    response_class = Response


class _Https(http.client.HTTPSConnection):
    response_class = Response


class EndpointPool:
    """Idle connections by scheme, host and port, at most `maxsize` each (a request beyond
    them opens another, closed after use, as urllib3's non-blocking pools)."""

    def __init__(
        self,
        *,
        maxsize: int,
        tls: Mapping[str, str],
        proxy: str | None = None,
        proxy_headers: Mapping[str, str] | None = None,
    ) -> None:
        self._maxsize = maxsize
        self._tls = dict(tls)  # ssl.create_default_context's cafile, capath or cadata
        self._context: ssl.SSLContext | None = None  # made on the first https connection
        parts = urlsplit(proxy) if proxy else None
        self._proxy = (parts.hostname or "", parts.port or 80) if parts else None
        self._proxy_headers = dict(proxy_headers or {})
        self._pool = _Pool(per_host=maxsize)

    def urlopen(
        self,
        method: str,
        url: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
        preload_content: bool = True,
        **_urllib3: Any,  # retries=False, redirect=False: never either
    ) -> Response:
        """`method` on `url`: its answer (read whole unless not `preload_content`)."""
        parts = urlsplit(url)
        https = parts.scheme.lower() == "https"
        key = (parts.scheme.lower(), parts.hostname or "", parts.port or (443 if https else 80))
        sent = dict(headers or {})
        if self._proxy and not https:  # forwarded: the absolute URL, to the proxy
            selector = url
            sent.update(self._proxy_headers)
        else:
            selector = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            response = send(
                self._pool,
                key,
                lambda: self._connect(key, timeout),
                method,
                selector,
                body,
                sent,
                timeout=timeout,
                reuse=True,  # a POST too: a burst's POSTs keep their connections
            )
        except (OSError, http.client.HTTPException) as exc:
            raise HttpFailed(exc) from exc
        assert isinstance(response, Response)
        if preload_content:
            response.data  # noqa: B018 (read whole: the connection is back)
        return response

    request = urlopen

    def __enter__(self) -> EndpointPool:
        return self

    def __exit__(self, *_: object) -> None:
        self.clear()

    def clear(self) -> None:
        """Close the idle connections."""
        self._pool.clear()

    def _connect(self, key: tuple[str, str, int], timeout: float | None) -> Any:
        scheme, host, port = key
        if scheme != "https":
            return _Http(*(self._proxy or (host, port)), timeout=timeout)
        if self._context is None:
            self._context = _tls_context(self._tls)
        if self._proxy is None:
            return _Https(host, port, timeout=timeout, context=self._context)
        conn = _Https(*self._proxy, timeout=timeout, context=self._context)
        conn.set_tunnel(host, port, headers=self._proxy_headers)  # CONNECT, then TLS to host
        return conn


class _ThroughUrllib3:
    """A proxy http.client does not speak (socks://, https://), through urllib3's manager:
    the same calls, its failures as HttpFailed."""

    def __init__(self, manager: Any) -> None:
        self._manager = manager

    def urlopen(
        self, method: str, url: str, body: Any = None, headers: Any = None, **kw: Any
    ) -> Any:
        import urllib3

        kw.update(retries=False, redirect=False)
        try:
            return self._manager.urlopen(method, url, body=body, headers=headers, **kw)
        except urllib3.exceptions.HTTPError as exc:
            reason = getattr(exc, "reason", None) or exc
            tls = isinstance(reason, urllib3.exceptions.SSLError | ssl.SSLError)
            raise HttpFailed(reason, tls=tls) from exc

    request = urlopen

    def __enter__(self) -> _ThroughUrllib3:
        return self

    def __exit__(self, *_: object) -> None:
        self.clear()

    def clear(self) -> None:
        self._manager.clear()


def endpoint_pool(endpoint: str, *, ca: str | None = None, maxsize: int = 64) -> Any:
    """An `EndpointPool` for a configured `endpoint`, set up as requests would on every
    request, from the environment read once: through the proxy for `endpoint`, verifying TLS
    with `ca` (PEM text), else REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE (a file or a directory),
    else certifi's bundle (requests')."""
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    tls: dict[str, str] = {}  # none: certifi's, looked up by the first https connection
    if ca:
        tls = {"cadata": ca}
    elif bundle:
        tls = {"capath" if os.path.isdir(bundle) else "cafile": bundle}
    proxy = environment_proxy(endpoint)
    if not proxy:
        return EndpointPool(maxsize=maxsize, tls=tls)
    proxy = proxy if "://" in proxy else f"http://{proxy}"  # host:port alone: an HTTP proxy
    user, password = _credentials(proxy)
    if not proxy.lower().startswith("http://"):
        return _ThroughUrllib3(_urllib3_manager(proxy, user, password, maxsize, tls))
    headers = {}
    if user:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Proxy-Authorization"] = f"Basic {token}"
    return EndpointPool(maxsize=maxsize, tls=tls, proxy=proxy, proxy_headers=headers)


def _tls_context(tls: Mapping[str, str]) -> ssl.SSLContext:
    """A context verifying certificates (and host names) with these CAs, else certifi's
    (requests' bundle; importing certifi costs an http:// endpoint ~5 ms of CPU for nothing)."""
    if not tls:
        import certifi

        tls = {"cafile": certifi.where()}
    return ssl.create_default_context(
        cafile=tls.get("cafile"), capath=tls.get("capath"), cadata=tls.get("cadata")
    )


def _urllib3_manager(
    proxy: str, user: str, password: str, maxsize: int, tls: Mapping[str, str]
) -> Any:
    import urllib3

    options: dict[str, Any] = {"maxsize": maxsize, "cert_reqs": "CERT_REQUIRED"}
    options["ssl_context"] = _tls_context(tls)
    if proxy.lower().startswith("socks"):
        from urllib3.contrib.socks import SOCKSProxyManager

        return SOCKSProxyManager(proxy, username=user, password=password, **options)
    headers = urllib3.make_headers(proxy_basic_auth=f"{user}:{password}") if user else {}
    return urllib3.proxy_from_url(proxy, proxy_headers=headers, **options)
