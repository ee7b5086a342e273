"""`GcsObjectStore`: Google Cloud Storage through google-cloud-storage (imported lazily).

A conditional write uses `ifGenerationMatch=0` (create only); ranged reads are media GETs
with a Range header; an object's generation is its immutable revision id.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from modelhooks.core.errors import (
    Conflict,
    Forbidden,
    ModelhooksError,
    NotFound,
    Throttled,
    Unauthenticated,
    Unavailable,
)
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
        return Unauthenticated(f"GCS refused the credentials for {where}", **details)
    if code == 403:
        return Forbidden(f"GCS denied access to {where}", **details)
    return Unavailable(f"GCS failed on {where}", **details)  # 5xx, transport, timeouts


class GcsObjectStore:
    """GCS buckets. The client is built on first use (or injected, e.g. for an emulator).

    >>> store = GcsObjectStore()  # doctest: +SKIP
    >>> store.read_range("models", "bert/1/config.json", 0, 1024)  # doctest: +SKIP
    """

    def __init__(self, client: Any = None, *, project: str | None = None) -> None:
        self._client = client
        self._project = project

    @property
    def client(self) -> Any:
        if self._client is None:
            from google.cloud import storage

            self._client = storage.Client(project=self._project)
        return self._client

    def _blob(self, bucket: str, key: str) -> Any:
        return self.client.bucket(bucket).blob(key)

    @staticmethod
    def _info(bucket: str, blob: Any) -> ObjectInfo:
        return ObjectInfo(
            bucket=bucket,
            key=blob.name,
            size=int(blob.size or 0),
            generation=str(blob.generation or ""),
            etag=str(blob.etag or ""),
            checksum=f"md5:{blob.md5_hash}" if blob.md5_hash else f"crc32c:{blob.crc32c or ''}",
        )

    def stat(self, bucket: str, key: str) -> ObjectInfo | None:
        try:
            blob = self.client.bucket(bucket).get_blob(key)
        except Exception as e:
            raise gcs_error(e, bucket, key) from e
        return None if blob is None else self._info(bucket, blob)

    def list(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        try:
            for blob in self.client.list_blobs(bucket, prefix=prefix or None):
                yield self._info(bucket, blob)
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
