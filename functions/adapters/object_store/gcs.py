"""`GcsObjectStore`: Google Cloud Storage through google-cloud-storage (imported lazily),
but for listings, which go over the JSON API without it (gcs_listing: a cold start's first
work is a listing).

A conditional write uses `ifGenerationMatch=0` (create only); ranged reads are media GETs
with a Range header; an object's generation is its immutable revision id. Listings follow
`nextPageToken` pages of `page_size` objects. `delete_many` sends one DELETE per object,
`workers` at a time, each conditional on the listed generation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Any

from modelhooks.adapters.object_store.gcs_listing import JsonListing, object_info
from modelhooks.core.errors import (
    Conflict,
    CredentialsRefused,
    Forbidden,
    ModelhooksError,
    NotFound,
    Permanent,
    Throttled,
    Unavailable,
    batch_failure,
)
from modelhooks.core.extras import require
from modelhooks.core.records import ObjectInfo

__all__ = ["GcsObjectStore", "gcs_error"]


def gcs_error(exc: Exception, bucket: str, key: str = "") -> ModelhooksError:
    """The modelhooks error for a google-cloud-storage / google-api-core exception."""
    code = getattr(exc, "code", None)
    where = f"gs://{bucket}/{key}"
    details = {"bucket": bucket, "key": key, "reason": str(exc)}
    if code == 404:
        return NotFound(f"{where} does not exist", **details)
    if code in (409, 412):
        return Conflict(f"{where} already exists or changed", **details)
    if code == 429:
        return Throttled(f"GCS throttled a request on {where}", **details)
    if code == 401:
        return CredentialsRefused(f"GCS refused the credentials for {where}", **details)
    if code == 403:
        return Forbidden(f"GCS denied access to {where}", **details)
    return Unavailable(f"GCS failed on {where}", **details)  # 5xx, transport, timeouts


class GcsObjectStore:
    """GCS buckets. The client is built on first use (or injected, e.g. for an emulator).

    >>> store = GcsObjectStore()  # doctest: +SKIP
    >>> store.read_range("models", "bert/1/config.json", 0, 1024)  # doctest: +SKIP
    """

    def __init__(
        self,
        client: Any = None,
        *,
        project: str | None = None,
        workers: int = 16,
        page_size: int = 1000,
        credentials: Any = None,
    ) -> None:
        if client is None:  # its library is imported on first use: checked here, at build
            require("gcp", "gs:// URIs (GCS)")
        self._client = client
        self._project = project
        self._workers = max(1, workers)
        self._page_size = page_size  # GCS's own maximum; asked for so every server pages
        self._credentials = credentials  # google.auth credentials; None: ADC

    def with_credentials(self, credentials: Any, project: str | None = None) -> GcsObjectStore:
        """The same store acting with `credentials` (e.g. a service-account key's) instead of
        Application Default Credentials (a Model's own Secret, for cleanup)."""
        return GcsObjectStore(
            project=project or self._project,
            workers=self._workers,
            page_size=self._page_size,
            credentials=credentials,
        )

    @property
    def client(self) -> Any:
        if self._client is None:
            from google.cloud import storage

            from modelhooks.adapters.net import read_environment_once

            client = storage.Client(project=self._project, credentials=self._credentials)
            read_environment_once(client._http, client._connection.API_BASE_URL)
            self._client = client
        return self._client

    def _blob(self, bucket: str, key: str) -> Any:
        return self.client.bucket(bucket).blob(key)

    @staticmethod
    def _info(bucket: str, blob: Any) -> ObjectInfo:
        return object_info(bucket, blob._properties)  # the object's JSON resource

    def stat(self, bucket: str, key: str) -> ObjectInfo | None:
        try:
            blob = self.client.bucket(bucket).get_blob(key)
        except Exception as e:
            raise gcs_error(e, bucket, key) from e
        return None if blob is None else self._info(bucket, blob)

    @cached_property
    def _listing(self) -> JsonListing:
        """Listings over the JSON API, without google-cloud-storage (gcs_listing: a push's
        first work, in a cold start); an injected client's endpoint and credentials."""
        if self._client is not None:
            client = self._client
            return JsonListing(
                client._credentials, client._connection.API_BASE_URL, page_size=self._page_size
            )
        return JsonListing(self._credentials, page_size=self._page_size)

    def list(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        try:
            for item in self._listing(bucket, prefix):  # the next page as it goes
                yield object_info(bucket, item)
        except Exception as e:
            raise gcs_error(e, bucket, prefix) from e

    def list_versions(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every revision (`versions=true`): noncurrent ones have `current=False`."""
        try:
            for item in self._listing(bucket, prefix, versions=True):
                yield object_info(bucket, item)
        except Exception as e:
            raise gcs_error(e, bucket, prefix) from e

    def read_range(self, bucket: str, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        try:
            data: bytes = self._blob(bucket, key).download_as_bytes(
                start=start, end=start + length - 1, checksum=None
            )
        except Exception as e:
            if getattr(e, "code", None) == 416:  # start at or past the end
                return b""
            raise gcs_error(e, bucket, key) from e
        return data

    def read_chunks(
        self, bucket: str, key: str, start: int, length: int, chunk_size: int
    ) -> Iterator[bytes]:
        """One ranged media GET on the client's authorized session, its body streamed a
        piece at a time (download_as_bytes would hold the range whole)."""
        if length <= 0:
            return
        from google.api_core.exceptions import from_http_response

        blob = self._blob(bucket, key)
        try:
            response = blob._get_transport(self.client).request(
                "GET",
                blob._get_download_url(self.client),
                headers={"Range": f"bytes={start}-{start + length - 1}"},
                stream=True,
                timeout=60,
            )
        except Exception as e:
            raise gcs_error(e, bucket, key) from e
        with response:
            if response.status_code == 416:  # start at or past the end
                return
            if response.status_code >= 300:
                error = from_http_response(response)  # type: ignore[no-untyped-call]
                raise gcs_error(error, bucket, key) from error
            skip = start if response.status_code == 200 else 0  # the Range was ignored
            try:
                for data in response.iter_content(chunk_size):
                    if skip:
                        data, skip = data[skip:], max(0, skip - len(data))
                    if len(data) > length:
                        data = data[:length]
                    if data:
                        length -= len(data)
                        yield data
                    if length <= 0:
                        return
            except Exception as e:  # the connection failed mid-body
                raise gcs_error(e, bucket, key) from e

    def put(self, bucket: str, key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
        blob = self._blob(bucket, key)
        try:
            blob.upload_from_string(data, if_generation_match=0 if if_absent else None)
        except Exception as e:
            raise gcs_error(e, bucket, key) from e
        return self._info(bucket, blob)

    def delete(self, bucket: str, key: str) -> None:
        try:
            self._blob(bucket, key).delete()
        except Exception as e:
            if getattr(e, "code", None) != 404:  # deleting what is gone succeeds
                raise gcs_error(e, bucket, key) from e

    def delete_many(
        self, bucket: str, objects: Sequence[ObjectInfo], *, versions: bool = False
    ) -> dict[str, str]:
        """One DELETE per object, `workers` at a time, each with `ifGenerationMatch` on the
        listed generation: a rewritten object answers 412 and is reported, not deleted;
        404 (gone) is success. With `versions`, the listed generation itself is deleted
        (`generation=`), which is how a noncurrent revision goes.

        Why not a JSON batch (`client.batch()`, up to 100 calls a request): fake-gcs-server
        does not implement the batch endpoint (v1.54 answers it with a body the client
        rejects, "not multi-part"), so it can be neither tested nor measured there; GCS
        also throttles each part of a batch like a request of its own. Measured against
        fake-gcs-server on 2 cores, 2,500 deletes: 1 worker 4.5 s, 4: 3.2 s, 8: 3.1 s,
        16: 2.9 s, 32: 2.8 s (the emulator, not the client, is the limit there). With more
        than 10 workers, give the client's HTTP session a pool as large (requests keeps
        10 connections a host by default and drops the extra ones).
        """
        if not objects:
            return {}
        handle = self.client.bucket(bucket)

        def delete(obj: ObjectInfo) -> ModelhooksError | None:
            generation = int(obj.generation) if obj.generation.isdigit() else None
            try:
                if versions:
                    handle.blob(obj.key, generation=generation).delete()
                else:
                    handle.blob(obj.key).delete(if_generation_match=generation)
            except Exception as e:
                if getattr(e, "code", None) == 404:  # deleting what is gone succeeds
                    return None
                return gcs_error(e, bucket, obj.key)
            return None

        with ThreadPoolExecutor(self._workers, thread_name_prefix="gcs-delete") as pool:
            outcomes = list(pool.map(delete, objects))
        refused: dict[str, str] = {}
        transient: list[ModelhooksError] = []
        for obj, error in zip(objects, outcomes, strict=True):
            if isinstance(error, Conflict):
                refused[obj.key] = f"changed since listed (generation {obj.generation})"
            elif isinstance(error, Permanent):
                refused[obj.key] = f"{error.code}: {error.details.get('reason', error)}"
            elif error is not None:
                transient.append(error)
        if transient:
            raise batch_failure(transient, len(objects), f"gs://{bucket}")
        return refused
