"""GCS's JSON API over kept-alive connections, without google-cloud-storage.

A push's first work is to list its version's prefix (its content digest, at ingress), and
sign's is to read the objects and write the signature: with google-cloud-storage that first
request imported the library, requests, protobuf, google-api-core and grpc, ~190 ms of CPU
in a cold start that a bare functions-framework function answers in ~200 ms (issue 22).
Here each call is one request over an http.client pool (`endpoints.endpoint_pool`: the
environment's proxy, NO_PROXY and CA bundle, as requests reads them; not urllib3, whose
import cost that first listing ~15 ms of CPU), authorized as google-cloud-storage's client
would be:

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
from collections.abc import Iterator, Mapping
from threading import Lock
from typing import Any
from urllib.parse import quote, urlencode

from modelhooks.core.records import ObjectInfo

__all__ = ["SCOPES", "GcsStatus", "JsonApi", "object_info"]

# google-cloud-storage's own (google.cloud.storage._http.Connection.SCOPE)
SCOPES = (
    "https://www.googleapis.com/auth/devstorage.full_control",
    "https://www.googleapis.com/auth/devstorage.read_only",
    "https://www.googleapis.com/auth/devstorage.read_write",
)


class GcsStatus(Exception):
    """GCS answered an error status (`code`), with its message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def object_info(bucket: str, item: Mapping[str, Any]) -> ObjectInfo:
    """An object's JSON resource (a noncurrent revision carries its deletion time)."""
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


class JsonApi:
    """The JSON API for one set of credentials (None: as the client finds them) on
    `endpoint` (None: as the client finds it), both settled on first use."""

    def __init__(self, credentials: Any = None, endpoint: str | None = None) -> None:
        self._given = credentials
        self._endpoint = endpoint
        self._lock = Lock()
        self._ready: tuple[Any, str, Any] | None = None  # credentials, API base URL, pool

    def _setup(self) -> tuple[Any, str, Any]:
        with self._lock:
            if self._ready is None:
                self._ready = _setup(self._given, self._endpoint)
            return self._ready

    def request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        stream: bool = False,
    ) -> Any:
        """`method` on the API's `path` (e.g. "/storage/v1/b/B/o"): the endpoints.Response
        (its body unread with `stream`); GcsStatus for an error status but 416,
        endpoints.HttpFailed or google.auth's exceptions for a failed connection or token. A 401 refreshes the
        token and is sent once more, as google.auth's authorized sessions do."""
        credentials, base, pool = self._setup()
        url = base + path + (f"?{urlencode(params)}" if params else "")

        def send() -> Any:
            sent = dict(headers or {})
            if credentials is not None:  # a token fetched if need be, and applied
                credentials.before_request(_token_request, method, url, sent)
            return pool.urlopen(
                method,
                url,
                body=body,
                headers=sent,
                timeout=60,
                preload_content=not stream,
            )

        response = send()
        if response.status == 401 and credentials is not None:
            response.drain_conn()
            credentials.refresh(_token_request)
            response = send()
        if response.status >= 400 and response.status != 416:
            data = response.read() if stream else response.data
            response.release_conn()
            raise GcsStatus(response.status, _message(data))
        return response

    def resource(self, method: str, path: str, params: Mapping[str, str], **kw: Any) -> Any:
        """The JSON document answered to `method` on `path`."""
        return _loads(self.request(method, path, params, **kw).data)

    def objects(
        self, bucket: str, prefix: str = "", *, versions: bool = False, page_size: int = 1000
    ) -> Iterator[dict[str, Any]]:
        """objects.list: the objects under `prefix` (every revision with `versions`), page by
        page as it goes."""
        params = {"projection": "noAcl", "maxResults": str(page_size)}
        if prefix:
            params["prefix"] = prefix
        if versions:
            params["versions"] = "true"
        token = ""
        while True:
            page = self.resource(
                "GET", object_path(bucket), {**params, "pageToken": token} if token else params
            )
            yield from page.get("items") or ()
            token = page.get("nextPageToken") or ""
            if not token:
                return


def object_path(bucket: str, key: str | None = None, *, prefix: str = "") -> str:
    """`{prefix}/storage/v1/b/B/o[/KEY]` (prefix: "/download" for media, "/upload")."""
    path = f"{prefix}/storage/v1/b/{quote(bucket, safe='')}/o"
    return path if key is None else f"{path}/{quote(key, safe='')}"


def _setup(credentials: Any, endpoint: str | None) -> tuple[Any, str, Any]:
    """As google.cloud.storage.Client(credentials=...) chooses its endpoint and credentials."""
    from modelhooks.adapters.endpoints import endpoint_pool

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
