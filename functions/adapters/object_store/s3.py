"""`S3ObjectStore`: Amazon S3 and S3-compatible stores (MinIO) through boto3 (imported
lazily).

A conditional write is PutObject with `If-None-Match: *`; ranged reads are GetObject with
a Range header; an object's generation is its VersionId, or its ETag when unversioned.
Listings are paginated underneath (ListObjectsV2, ListObjectVersions); `delete_many` is
DeleteObjects, at most 1000 keys a request.

Reads (GetObject, ListObjectsV2) of a bucket botocore has reached go out directly
(`s3_direct`: signed here, through the client's own pool, a third of botocore's CPU a
call); whatever does not succeed that way is sent again through botocore, whose retries
and errors are the adapter's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from modelhooks.adapters.object_store.s3_direct import DirectReads
from modelhooks.core.errors import (
    BadRequest,
    Conflict,
    CredentialsRefused,
    Forbidden,
    ModelhooksError,
    NotFound,
    Throttled,
    Transient,
    Unavailable,
    batch_failure,
)
from modelhooks.core.extras import require
from modelhooks.core.records import ObjectInfo

__all__ = ["S3ObjectStore", "s3_error"]

_NOT_FOUND = {"404", "NoSuchKey", "NoSuchBucket", "NotFound"}
_CONFLICT = {"412", "409", "PreconditionFailed", "ConditionalRequestConflict"}
_THROTTLED = {"429", "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded"}
_DENIED = {"403", "AccessDenied", "AllAccessDisabled"}
_UNAUTHENTICATED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"}
_GONE = _NOT_FOUND | {"NoSuchVersion"}  # per-key codes of DeleteObjects meaning "already gone"
_TRANSIENT = {"InternalError", "ServiceUnavailable", "RequestTimeout", "500", "503"}
# the store refusing a bucket or object name an event carried (`..` or `.` segments, `//`,
# NUL, over 1024 bytes, upper case): no retry changes the name
_BAD_NAME = {
    "InvalidBucketName",
    "KeyTooLongError",
    "XMinioInvalidBucketName",
    "XMinioInvalidObjectName",
    "XMinioInvalidResourceName",
}
DELETE_BATCH = 1000  # DeleteObjects' limit


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def s3_error(exc: Exception, bucket: str, key: str = "") -> ModelhooksError:
    """The modelhooks error for a botocore exception."""
    code = _code(exc)
    where = f"s3://{bucket}/{key}"
    details = {"bucket": bucket, "key": key, "reason": str(exc)}
    if code in _NOT_FOUND:
        return NotFound(f"{where} does not exist", **details)
    if code in _CONFLICT:
        return Conflict(f"{where} already exists or changed", **details)
    if code in _THROTTLED:
        return Throttled(f"S3 throttled a request on {where}", **details)
    if code in _UNAUTHENTICATED:
        return CredentialsRefused(f"S3 refused the credentials for {where}", **details)
    if code in _DENIED:
        return Forbidden(f"S3 denied access to {where}", **details)
    if code in _BAD_NAME:
        return BadRequest(f"S3 refused the name {where} ({code})", **details)
    return Unavailable(f"S3 failed on {where}", **details)  # 5xx, connection, timeouts


class S3ObjectStore:
    """S3 buckets. The client is built on first use (or injected).

    >>> store = S3ObjectStore(endpoint_url="http://127.0.0.1:9000")  # doctest: +SKIP
    >>> store.put("models", "bert/1/model.sig", b"{}", if_absent=True)  # doctest: +SKIP
    """

    def __init__(
        self,
        client: Any = None,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        max_connections: int = 32,
        credentials: Mapping[str, str] | None = None,
        direct_reads: bool = True,
    ) -> None:
        """`direct_reads=False`: every request through botocore (for comparison)."""
        if client is None:  # its library is imported on first use: checked here, at build
            require("aws", "s3:// URIs (S3)")
        self._client = client
        self._endpoint_url = endpoint_url
        self._region = region
        self._max_connections = max_connections
        # aws_access_key_id, aws_secret_access_key[, aws_session_token]; None: boto3's chain
        self._credentials = dict(credentials) if credentials else None
        self._direct_reads = direct_reads
        self._direct: DirectReads | None = None
        self._direct_made = threading.Lock()

    def with_credentials(
        self, access_key_id: str, secret_access_key: str, session_token: str | None = None
    ) -> S3ObjectStore:
        """The same store (endpoint, region, pool size) acting with these keys instead of
        the process's (a Model's own Secret, for cleanup)."""
        keys = {"aws_access_key_id": access_key_id, "aws_secret_access_key": secret_access_key}
        if session_token:
            keys["aws_session_token"] = session_token
        return S3ObjectStore(
            endpoint_url=self._endpoint_url,
            region=self._region,
            max_connections=self._max_connections,
            credentials=keys,
            direct_reads=self._direct_reads,
        )

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                max_pool_connections=self._max_connections,
                retries={"mode": "adaptive", "max_attempts": 5},
                s3={"addressing_style": "path" if self._endpoint_url else "auto"},
            )
            # a session of its own (boto3's default one is shared: creating clients on it
            # from concurrent deliveries is not thread-safe, and it keeps the credentials it
            # first found); its own keys, else the usual chain (environment, files, role)
            session = boto3.session.Session(**(self._credentials or {}))
            self._client = session.client(
                "s3", endpoint_url=self._endpoint_url, region_name=self._region, config=config
            )
        return self._client

    @property
    def _directly(self) -> DirectReads | None:
        """The client's direct reads (made with it), None when off."""
        if self._direct is None and self._direct_reads:
            with self._direct_made:  # one per store: it registers hooks on the client
                if self._direct is None:
                    self._direct = DirectReads(self.client)
        return self._direct if self._direct is not None and self._direct.enabled else None

    def _get(self, bucket: str, key: str, start: int, length: int) -> Any:
        """The body of a ranged GetObject: direct when it can be, else botocore's (which
        raises what it raises)."""
        direct = self._directly
        body = direct.get(bucket, key, start, length) if direct is not None else None
        if body is not None:
            return body
        if direct is not None:
            direct.before()
        body = self.client.get_object(
            Bucket=bucket, Key=key, Range=f"bytes={start}-{start + length - 1}"
        )["Body"]
        if direct is not None:
            direct.learn(bucket, key)
        return body

    def _list_page(self, bucket: str, prefix: str, token: str | None) -> dict[str, Any]:
        direct = self._directly
        page = direct.list_page(bucket, prefix, token) if direct is not None else None
        if page is not None:
            return page
        if direct is not None:
            direct.before()
        more = {"ContinuationToken": token} if token else {}
        page = self.client.list_objects_v2(Bucket=bucket, Prefix=prefix, **more)
        if direct is not None:
            direct.learn(bucket)
        return dict(page)

    @staticmethod
    def _generation(meta: dict[str, Any]) -> tuple[str, str]:
        etag = str(meta.get("ETag", "")).strip('"')
        version = meta.get("VersionId")
        return (str(version) if version and version != "null" else etag), etag

    def stat(self, bucket: str, key: str) -> ObjectInfo | None:
        try:
            meta = self.client.head_object(Bucket=bucket, Key=key)
        except Exception as e:
            if _code(e) in _NOT_FOUND:
                return None
            if _code(e) == "400":  # a HEAD's answer has no body to name its reason
                self._why_refused(bucket, key)
            raise s3_error(e, bucket, key) from e
        generation, etag = self._generation(meta)
        size = int(meta.get("ContentLength", 0))
        return ObjectInfo(bucket, key, size, generation, etag, checksum=f"etag:{etag}")

    def _why_refused(self, bucket: str, key: str) -> None:
        """Raise BadRequest when the store refuses `bucket`/`key` as a name: asked of a GET
        of its first byte, whose answer says why (HEAD's 400 does not, and was taken as the
        store failing: 503, an event naming `models/../m/` redelivered for ever)."""
        try:
            self.client.get_object(Bucket=bucket, Key=key, Range="bytes=0-0")["Body"].close()
        except Exception as e:
            if _code(e) in _BAD_NAME:
                raise s3_error(e, bucket, key) from e

    def list(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        """ListObjectsV2, page by page (continuation tokens, as botocore's paginator)."""
        token: str | None = None
        try:
            while True:
                page = self._list_page(bucket, prefix, token)
                for item in page.get("Contents", []):
                    generation, etag = self._generation(item)
                    size = int(item["Size"])
                    yield ObjectInfo(bucket, item["Key"], size, generation, etag, f"etag:{etag}")
                following = page.get("NextContinuationToken") if page.get("IsTruncated") else None
                if not following:
                    return
                if following == token:  # botocore's paginator refuses a loop too
                    where = f"s3://{bucket}/{prefix}"
                    raise Unavailable(f"S3 repeated a continuation token listing {where}")
                token = following
        except ModelhooksError:
            raise
        except Exception as e:
            raise s3_error(e, bucket, prefix) from e

    def list_versions(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every revision (ListObjectVersions, paginated): `IsLatest` is `current`, the
        generation is the VersionId itself ("null" for an object stored while versioning
        was off, or in an unversioned bucket). Delete markers are not objects: skipped."""
        try:
            pages = self.client.get_paginator("list_object_versions").paginate(
                Bucket=bucket, Prefix=prefix
            )
            for page in pages:
                for item in page.get("Versions", []):
                    etag = str(item.get("ETag", "")).strip('"')
                    yield ObjectInfo(
                        bucket,
                        item["Key"],
                        int(item["Size"]),
                        str(item.get("VersionId") or "null"),
                        etag,
                        f"etag:{etag}",
                        current=bool(item.get("IsLatest", True)),
                    )
        except Exception as e:
            raise s3_error(e, bucket, prefix) from e

    def read_range(self, bucket: str, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        try:
            data: bytes = self._get(bucket, key, start, length).read()
        except Exception as e:
            if _code(e) in ("InvalidRange", "416"):  # start at or past the end
                return b""
            raise s3_error(e, bucket, key) from e
        return data

    def read_chunks(
        self, bucket: str, key: str, start: int, length: int, chunk_size: int
    ) -> Iterator[bytes]:
        """One ranged GetObject, its body read a piece at a time (a request per piece costs
        the client and the server far more than the bytes)."""
        if length <= 0:
            return
        try:
            body = self._get(bucket, key, start, length)
        except Exception as e:
            if _code(e) in ("InvalidRange", "416"):  # start at or past the end
                return
            raise s3_error(e, bucket, key) from e
        try:
            while length > 0:
                try:
                    data: bytes = body.read(min(chunk_size, length))
                except Exception as e:  # the connection failed mid-body
                    raise s3_error(e, bucket, key) from e
                if not data:
                    return
                length -= len(data)
                yield data
        finally:
            body.close()

    def put(self, bucket: str, key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
        extra = {"IfNoneMatch": "*"} if if_absent else {}
        try:
            response = self.client.put_object(Bucket=bucket, Key=key, Body=data, **extra)
        except Exception as e:
            raise s3_error(e, bucket, key) from e
        generation, etag = self._generation(response)
        return ObjectInfo(bucket, key, len(data), generation, etag)

    def delete(self, bucket: str, key: str) -> None:
        try:
            self.client.delete_object(Bucket=bucket, Key=key)
        except Exception as e:
            if _code(e) not in _NOT_FOUND:  # deleting what is gone succeeds
                raise s3_error(e, bucket, key) from e

    def delete_many(
        self, bucket: str, objects: Sequence[ObjectInfo], *, versions: bool = False
    ) -> dict[str, str]:
        """DeleteObjects (`Quiet`), ⌈n/1000⌉ requests; per-key `Errors` become the returned
        {key: reason}, a key already gone counts as deleted.

        No generation check for current objects: S3 has no precondition on DeleteObjects
        for general-purpose buckets (its per-object ETag/size/time conditions are for
        directory buckets only), so an object rewritten since it was listed is deleted by
        key all the same (in a versioned bucket that adds a delete marker, and the
        rewritten data stays as a noncurrent version). With `versions`, each object's
        VersionId (its generation from `list_versions`) is deleted: exactly that revision.

        A whole request that fails transiently (5xx, throttling, connection) is counted
        and the other chunks are still sent; then Unavailable or Throttled is raised. A
        whole request refused for good (access denied on the bucket) raises at once.
        """
        refused: dict[str, str] = {}
        failed: list[ModelhooksError] = []
        for start in range(0, len(objects), DELETE_BATCH):
            chunk = objects[start : start + DELETE_BATCH]
            identifiers = [self._identifier(obj, versions) for obj in chunk]
            try:
                response = self.client.delete_objects(
                    Bucket=bucket, Delete={"Objects": identifiers, "Quiet": True}
                )
            except Exception as e:
                error = s3_error(e, bucket)
                if isinstance(error, NotFound):  # no such bucket: everything is gone
                    continue
                if not isinstance(error, Transient):
                    raise error from e
                failed.extend([error] * len(chunk))
                continue
            for item in response.get("Errors", []):
                key, code = str(item.get("Key", "")), str(item.get("Code", ""))
                reason = f"{code}: {item.get('Message', '')}".rstrip(": ")
                if code in _GONE:
                    continue
                if code in _THROTTLED:
                    failed.append(Throttled(f"S3 throttled deleting {key}", reason=reason))
                elif code in _TRANSIENT:
                    failed.append(Unavailable(f"S3 failed deleting {key}", reason=reason))
                else:  # AccessDenied, a locked object: this key stays, for good
                    refused[key] = f"{refused[key]}; {reason}" if key in refused else reason
        if failed:
            raise batch_failure(failed, len(objects), f"s3://{bucket}")
        return refused

    @staticmethod
    def _identifier(obj: ObjectInfo, versions: bool) -> dict[str, str]:
        # an ETag as generation means `list` (no VersionId known): delete by key
        if versions and obj.generation and obj.generation != obj.etag:
            return {"Key": obj.key, "VersionId": obj.generation}
        return {"Key": obj.key}
