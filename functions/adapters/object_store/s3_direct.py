"""S3 reads without botocore's per-call machinery: GetObject and ListObjectsV2 signed
(SigV4) here and sent through the boto3 client's own connection pool.

A botocore call costs ~1-2 ms of CPU whatever its size (the request built from the service
model, a dozen event hooks, retry bookkeeping, the answer parsed into dicts; a page of 1,000
listed keys ~40 ms): for a model of 1,001 small files that is most of the time signing takes
(issue 22). A direct GET costs a third of it, a direct listing page a tenth.

How to reach a bucket is learned from botocore itself: the bucket's URL (endpoint, path or
virtual-host addressing, region redirects: what its endpoint rules decided) and the
signing scope (region, service) are read from the last GetObject or ListObjectsV2 request
botocore sent for that bucket with success, on the same thread (its `before-send` event).
Until then, and for any answer but a success (an error status, a redirect, a failed
connection, a body that is not a listing), `get` and `list_page` answer None and the
caller sends the same request through botocore: its retries, redirects and error parsing
apply exactly as before, and its success teaches the bucket again. A bucket whose direct
request was refused (a redirect, 400, 403) where botocore's then succeeded is botocore's
from then on: a store that takes botocore's requests and not these costs one request more,
once.

Everything else is the client's: its credentials (as it refreshes them), its HTTP session
(proxies, TLS verification, client certificate, timeouts, pool) and its `before-send`
event, which a direct request goes through like botocore's own (hooks that count or answer
requests see it). A client without credentials (unsigned) or signing otherwise than
AWS4-HMAC-SHA256 for the service "s3" is left to botocore.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote_plus, urlsplit

__all__ = ["DirectReads"]

_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_SCOPE = re.compile(r"AWS4-HMAC-SHA256 Credential=[^/]+/\d{8}/([^/]+)/(s3)/aws4_request\b")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_BUCKETS = 256  # buckets remembered (they come from events: bounded)
_REFUSED = frozenset({301, 307, 400, 403})  # this request is wrong here, not the moment


@dataclass(frozen=True)
class _Bucket:
    root: str  # scheme://host[:port]
    path: str  # the bucket's path: "/name" (path-style), "" (virtual-hosted)
    host: str  # the Host header botocore signs
    region: str
    service: str


def _host(url: str) -> str:
    """The Host header as botocore signs it (and http.client sends it)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port is not None and parts.port != _DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{parts.port}"
    return host


def _encode(text: str) -> str:
    """SigV4's URI encoding of a query name or value (RFC 3986 unreserved kept)."""
    return quote(text, safe="-_.~")


class DirectReads:
    """Direct GetObject / ListObjectsV2 for the buckets botocore has reached on `client`."""

    def __init__(self, client: Any) -> None:
        getter = getattr(client, "_get_credentials", None)  # botocore's (private) accessor
        self._credentials: Any = getter() if callable(getter) else None
        self._session: Any = getattr(getattr(client, "_endpoint", None), "http_session", None)
        self._events = client.meta.events
        self._buckets: dict[str, _Bucket | None] = {}  # None: botocore's alone
        # on this thread: the last request botocore sent, the bucket of a refused direct one
        self._sent = threading.local()
        self._key: tuple[tuple[str, str, str, str], bytes] | None = None  # signing key
        self.enabled = self._credentials is not None and self._session is not None
        if self.enabled:
            for operation in ("GetObject", "ListObjectsV2"):
                self._events.register(f"before-send.s3.{operation}", self._seen)

    # --- learning from botocore -------------------------------------------------------

    def _seen(self, request: Any, **_: Any) -> None:
        self._sent.request = request

    def before(self) -> None:
        """Called before a botocore request whose success `learn` is told of."""
        self._sent.request = None

    def learn(self, bucket: str, key: str | None = None) -> None:
        """botocore just read `key` of `bucket` (None: listed it) on this thread."""
        request, self._sent.request = getattr(self._sent, "request", None), None
        refused, self._sent.refused = getattr(self._sent, "refused", None), None
        if request is None or not self.enabled:
            return
        if refused == bucket or (bucket in self._buckets and self._buckets[bucket] is None):
            self._buckets[bucket] = None  # refused directly, taken from botocore
            return
        auth = request.headers.get("Authorization") or b""
        scope = _SCOPE.match(auth.decode() if isinstance(auth, bytes) else str(auth))
        url = str(request.url).split("?", 1)[0]
        if key is not None:  # an object's URL: the bucket's, "/", the key (as botocore quotes it)
            quoted = "/" + quote(key, safe="/~")
            if not url.endswith(quoted):
                return
            url = url[: -len(quoted)]
        parts = urlsplit(url)
        if scope is None or parts.scheme not in _DEFAULT_PORTS:
            self._buckets.pop(bucket, None)
            return
        if len(self._buckets) >= _BUCKETS and bucket not in self._buckets:
            self._buckets.clear()  # (buckets botocore alone reads included: tried again)
        root = f"{parts.scheme}://{parts.netloc}"
        region, service = scope.groups()
        self._buckets[bucket] = _Bucket(root, parts.path.rstrip("/"), _host(url), region, service)

    # --- requests ---------------------------------------------------------------------

    def get(self, bucket: str, key: str, start: int, length: int) -> Any:
        """The body of a ranged GetObject (botocore's StreamingBody: a short body raises
        IncompleteReadError; an empty one for a range past the end), or None: botocore's to
        send."""
        at = self._buckets.get(bucket)
        if at is None:
            return None
        self._sent.refused = None
        path = f"{at.path}/{quote(key, safe='/~')}"
        headers = self._signed(at, path, "", {"range": f"bytes={start}-{start + length - 1}"})
        response = self._send(f"{at.root}{path}", headers, "GetObject")
        if response is None:
            return None
        from botocore.response import StreamingBody

        if response.status_code in (200, 206):
            return StreamingBody(response.raw, response.headers.get("content-length"))
        _discard(response)
        if response.status_code == 416:  # the range starts at or past the end: nothing
            return StreamingBody(io.BytesIO(), 0)
        self._refused(bucket, response.status_code)
        return None

    def list_page(self, bucket: str, prefix: str, token: str | None) -> dict[str, Any] | None:
        """A ListObjectsV2 page as botocore parses it (Contents: Key, Size, ETag;
        IsTruncated, NextContinuationToken), or None: botocore's to send."""
        at = self._buckets.get(bucket)
        if at is None:
            return None
        self._sent.refused = None
        params = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
        if token:
            params["continuation-token"] = token
        query = "&".join(f"{_encode(k)}={_encode(v)}" for k, v in sorted(params.items()))
        path = at.path or "/"
        response = self._send(
            f"{at.root}{path}?{query}", self._signed(at, path, query, {}), "ListObjectsV2"
        )
        if response is None:
            return None
        if response.status_code != 200:
            _discard(response)
            self._refused(bucket, response.status_code)
            return None
        try:
            return _listing(response.content)
        except Exception:  # not a listing (a proxy's page, a truncated body): botocore's turn
            return None

    def _refused(self, bucket: str, status: int) -> None:
        if status in _REFUSED:
            self._sent.refused = bucket

    def _send(self, url: str, headers: dict[str, str], operation: str) -> Any:
        from botocore.awsrequest import AWSPreparedRequest, HeadersDict

        # botocore's own requests' headers (names read case-insensitively, by hooks too);
        # not urllib3's HTTPHeaderDict, which urllib3 1.x (boto3 allows it) does not export
        request = AWSPreparedRequest("GET", url, HeadersDict(headers), None, True)
        try:
            answers = self._events.emit(f"before-send.s3.{operation}", request=request)
            answered = next((r for _, r in answers if r is not None), None)
            return answered if answered is not None else self._session.send(request)
        except Exception:  # a failed connection: botocore's turn (it retries, maps the error)
            return None

    def _signed(
        self, at: _Bucket, path: str, query: str, extra: Mapping[str, str]
    ) -> dict[str, str]:
        credentials = self._credentials.get_frozen_credentials()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        scope = (credentials.secret_key, stamp[:8], at.region, at.service)
        cached = self._key
        if cached is None or cached[0] != scope:
            cached = self._key = (scope, _signing_key(*scope))
        return signed_headers(credentials, at, path, query, extra, stamp, cached[1])


def _signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    key = f"AWS4{secret}".encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def signed_headers(
    credentials: Any,
    at: _Bucket,
    path: str,
    query: str,
    extra: Mapping[str, str],
    stamp: str,
    key: bytes | None = None,
) -> dict[str, str]:
    """The headers of a GET of `path?query` (both as sent: S3 signs them as they are) at
    `stamp` (YYYYMMDDTHHMMSSZ), signed with AWS Signature Version 4 as botocore's
    S3SigV4Auth signs them (`extra`: more headers to sign, lower-case names)."""
    headers = {"host": at.host, **extra, "x-amz-content-sha256": _EMPTY_SHA256}
    headers["x-amz-date"] = stamp
    if credentials.token:
        headers["x-amz-security-token"] = credentials.token
    names = sorted(headers)
    signed = ";".join(names)
    canonical = "\n".join(
        ("GET", path, query, *(f"{n}:{headers[n]}" for n in names), "", signed, _EMPTY_SHA256)
    )
    scope = f"{stamp[:8]}/{at.region}/{at.service}/aws4_request"
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{digest}"
    key = key or _signing_key(credentials.secret_key, stamp[:8], at.region, at.service)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}"
    )
    return headers


def _discard(response: Any) -> None:
    """Read an error's (short) body so that its connection goes back to the pool."""
    try:
        response.raw.read()
        response.raw.release_conn()
    except Exception:
        pass  # a connection that failed is closed, not pooled


def _listing(body: bytes) -> dict[str, Any]:
    from xml.etree import ElementTree

    root = ElementTree.fromstring(body)
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    if root.tag != f"{ns}ListBucketResult":
        raise ValueError(f"not a listing: {root.tag}")
    encoded = root.findtext(f"{ns}EncodingType") == "url"
    contents = []
    for item in root.iterfind(f"{ns}Contents"):
        key = item.findtext(f"{ns}Key") or ""
        contents.append(
            {
                "Key": unquote_plus(key) if encoded else key,
                "Size": int(item.findtext(f"{ns}Size") or 0),
                "ETag": item.findtext(f"{ns}ETag") or "",
            }
        )
    page: dict[str, Any] = {"Contents": contents}
    page["IsTruncated"] = root.findtext(f"{ns}IsTruncated") == "true"
    token = root.findtext(f"{ns}NextContinuationToken")
    if token:
        page["NextContinuationToken"] = token
    return page
