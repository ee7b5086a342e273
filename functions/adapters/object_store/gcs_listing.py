"""Listing a GCS prefix over the JSON API (objects.list) without google-cloud-storage.

A push's first work is to list its version's prefix (its content digest, at ingress): with
google-cloud-storage that first listing imported the library, requests, protobuf and
google-api-core, ~190 ms of CPU in a cold start that a bare functions-framework function
answers in ~200 ms (issue 22). Here a listing is one GET a page over a urllib3 pool
(`net.endpoint_pool`: the environment's proxy, NO_PROXY and CA bundle, as requests reads
them), authorized as google-cloud-storage's client would be:

- the endpoint: STORAGE_EMULATOR_HOST (anonymous unless credentials are given, as the
  client; then google.auth is not even imported), else API_ENDPOINT_OVERRIDE, else
  `https://storage.<the credentials' universe domain>`;
- the credentials: given ones (a Model's own service account), else Application Default
  Credentials with the storage scopes; a token is fetched (google.auth's requests
  transport, imported then) when there is none or it expired, and applied by google.auth
  (`before_request`: the bearer token, a quota project);
- no retry: a failure is the delivery's, and the platform redelivers (5xx), as for every
  other adapter built on endpoint_pool.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from threading import Lock
from typing import Any
from urllib.parse import quote, urlencode

from modelhooks.core.records import ObjectInfo

__all__ = ["SCOPES", "JsonListing", "ListingError", "object_info"]

# google-cloud-storage's own (google.cloud.storage._http.Connection.SCOPE)
SCOPES = (
    "https://www.googleapis.com/auth/devstorage.full_control",
    "https://www.googleapis.com/auth/devstorage.read_only",
    "https://www.googleapis.com/auth/devstorage.read_write",
)


class ListingError(Exception):
    """GCS answered an error status (`code`), with its message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def object_info(bucket: str, item: dict[str, Any]) -> ObjectInfo:
    """An objects.list item (a noncurrent revision carries its deletion time)."""
    md5 = item.get("md5Hash")
    return ObjectInfo(
        bucket=bucket,
        key=item["name"],
        size=int(item.get("size") or 0),
        generation=str(item.get("generation") or ""),
        etag=str(item.get("etag") or ""),
        checksum=f"md5:{md5}" if md5 else f"crc32c:{item.get('crc32c') or ''}",
        current=item.get("timeDeleted") is None,
    )


class JsonListing:
    """objects.list for one set of credentials (None: as the client finds them) on
    `endpoint` (None: as the client finds it), `page_size` objects a page."""

    def __init__(
        self, credentials: Any = None, endpoint: str | None = None, *, page_size: int = 1000
    ) -> None:
        self._given = credentials
        self._endpoint = endpoint
        self._page_size = page_size
        self._lock = Lock()
        self._ready: tuple[Any, str, Any] | None = None  # credentials, API base URL, pool

    def _setup(self) -> tuple[Any, str, Any]:
        with self._lock:
            if self._ready is None:
                self._ready = _setup(self._given, self._endpoint)
            return self._ready

    def __call__(self, bucket: str, prefix: str = "", *, versions: bool = False) -> Iterator[Any]:
        """The objects under `prefix` (every revision with `versions`), page by page, as
        objects.list items; ListingError for an error status, urllib3's or google.auth's
        exceptions for a failed connection or token."""
        credentials, base, pool = self._setup()
        params = {"projection": "noAcl", "maxResults": str(self._page_size)}
        if prefix:
            params["prefix"] = prefix
        if versions:
            params["versions"] = "true"
        path = f"{base}/storage/v1/b/{quote(bucket, safe='')}/o?"
        token = ""
        while True:
            url = path + urlencode({**params, "pageToken": token} if token else params)
            headers: dict[str, str] = {}
            if credentials is not None:  # a token fetched if need be, and applied
                credentials.before_request(_token_request, "GET", url, headers)
            response = pool.urlopen(
                "GET", url, headers=headers, timeout=60, retries=False, redirect=False
            )
            if response.status >= 400:
                raise ListingError(response.status, _message(response.data))
            page = _loads(response.data)
            yield from page.get("items") or ()
            token = page.get("nextPageToken") or ""
            if not token:
                return


def _setup(credentials: Any, endpoint: str | None) -> tuple[Any, str, Any]:
    """As google.cloud.storage.Client(credentials=...) chooses its endpoint and credentials."""
    from modelhooks.adapters.net import endpoint_pool

    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    endpoint = endpoint or emulator or os.environ.get("API_ENDPOINT_OVERRIDE")
    if credentials is None and emulator:
        pass  # anonymous, as the client's AnonymousCredentials (google.auth not imported)
    elif credentials is None:
        import google.auth

        credentials, _project = google.auth.default(scopes=SCOPES)
    else:
        from google.auth.credentials import with_scopes_if_required

        credentials = with_scopes_if_required(credentials, SCOPES)  # type: ignore[no-untyped-call]
    if not endpoint:
        endpoint = f"https://storage.{getattr(credentials, 'universe_domain', 'googleapis.com')}"
    elif "://" not in endpoint:
        endpoint = f"http://{endpoint}"  # an emulator named host:port
    endpoint = endpoint.rstrip("/")
    return credentials, endpoint, endpoint_pool(endpoint)


def _token_request(*args: Any, **kwargs: Any) -> Any:
    """google.auth's transport for a token (requests, as google-cloud-storage's client uses),
    imported when a token is first needed: never for an emulator's anonymous credentials."""
    from google.auth.transport.requests import Request

    return Request()(*args, **kwargs)


def _loads(data: bytes) -> dict[str, Any]:
    answer = json.loads(data)
    return answer if isinstance(answer, dict) else {}


def _message(data: bytes) -> str:
    try:
        error = _loads(data).get("error")
    except ValueError:
        return data[:300].decode(errors="replace")
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error or data[:300].decode(errors="replace"))
