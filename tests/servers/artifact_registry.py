"""An in-process stand-in for Google Artifact Registry's REST API (v1), Docker packages only.

Google publishes no Artifact Registry emulator, so this serves exactly the REST surface the
`ArtifactRegistry` adapter uses, shaped after the published protos
(google/devtools/artifactregistry/v1: tag.proto, version.proto, service.proto) and their
HTTP mapping: camelCase JSON, `pageSize`/`pageToken`/`nextPageToken` paging (pages of at
most 1000), errors as google.rpc.Status JSON bodies.

    GET    /v1/{package}/tags                 ListTags (`filter`: `version="<name>"` only)
    GET    /v1/{package}/tags/{tag}           GetTag
    DELETE /v1/{package}/tags/{tag}           DeleteTag
    GET    /v1/{package}/versions             ListVersions (`view` BASIC | FULL, by name or number)
    POST   /v1/{package}/versions:batchDelete BatchDeleteVersions -> Operation
    GET    /v1/{location}/operations/{id}     GetOperation

Where the API documentation leaves behaviour open, this stand-in is strict (assumptions, not
observations of the real service): a BatchDeleteVersions naming a missing version is refused
whole with NOT_FOUND, and one naming a tagged version with FAILED_PRECONDITION (as
DeleteVersion does without `force`); FULL views list at most 100 `relatedTags` per version
(version.proto's documented cap). Anything else answers 501 UNIMPLEMENTED.

    >>> with ArtifactRegistryStandIn() as gar:  # doctest: +SKIP
    ...     gar.add_version("p/r/img", "sha256:…", created=datetime(2024, 1, 1, tzinfo=UTC))
    ...     gar.tag("p/r/img", "v1", "sha256:…")
    ...     gar.url, gar.calls["ListTags"]
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote

__all__ = ["ArtifactRegistryStandIn"]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
}
_PACKAGE = r"projects/[^/]+/locations/[^/]+/repositories/[^/]+/packages/[^/]+"
_ROUTES = [
    ("GET", re.compile(rf"/v1/(?P<parent>{_PACKAGE})/tags"), "ListTags"),
    ("GET", re.compile(rf"/v1/(?P<name>{_PACKAGE}/tags/[^/]+)"), "GetTag"),
    ("DELETE", re.compile(rf"/v1/(?P<name>{_PACKAGE}/tags/[^/]+)"), "DeleteTag"),
    ("GET", re.compile(rf"/v1/(?P<parent>{_PACKAGE})/versions"), "ListVersions"),
    (
        "POST",
        re.compile(rf"/v1/(?P<parent>{_PACKAGE})/versions:batchDelete"),
        "BatchDeleteVersions",
    ),
    (
        "GET",
        re.compile(r"/v1/(?P<name>projects/[^/]+/locations/[^/]+/operations/[^/]+)"),
        "GetOperation",
    ),
]


class ApiError(Exception):
    def __init__(self, code: int, message: str, status: str = "") -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status or _STATUS.get(code, "UNKNOWN")


@dataclass
class _Version:
    created: datetime
    media_type: str
    tags: set[str] = field(default_factory=set)


def _key(name: str) -> tuple[str, ...]:
    """The parts of a resource name, each unescaped (`img%2Fsub` → `img/sub`)."""
    return tuple(unquote(part) for part in name.split("/"))


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ArtifactRegistryStandIn:
    """The in-memory state, the seeding API and the server (127.0.0.1, an ephemeral port).

    `calls` counts requests by RPC name; `fail(rpc, status)` makes the next requests of an
    RPC answer an error. Images are named like the Docker path, `PROJECT/REPOSITORY/IMAGE`.
    """

    def __init__(self, location: str = "us-central1", *, pending_polls: int = 0) -> None:
        self.location = location
        self.pending_polls = pending_polls  # GetOperation calls before an operation is done
        self.calls: Counter[str] = Counter()
        self._packages: dict[tuple[str, str, str, str], dict[str, _Version]] = {}
        self._tags: dict[tuple[str, str, str, str], dict[str, str]] = {}
        self._operations: dict[str, tuple[int, dict[str, Any]]] = {}
        self._faults: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- seeding ------------------------------------------------------------------------

    def _package(self, image: str) -> tuple[str, str, str, str]:
        project, repository, name = image.split("/", 2)
        return (project, self.location, repository, name)

    def add_version(
        self, image: str, digest: str, *, created: datetime, media_type: str = OCI_MANIFEST
    ) -> None:
        """A manifest pushed at `created` (a version of the image's package)."""
        with self._lock:
            versions = self._packages.setdefault(self._package(image), {})
            versions[digest] = _Version(created, media_type)

    def tag(self, image: str, tag: str, digest: str) -> None:
        """Point `tag` at a version (moving it from another one)."""
        with self._lock:
            pkg = self._package(image)
            tags = self._tags.setdefault(pkg, {})
            if tag in tags:
                self._packages[pkg][tags[tag]].tags.discard(tag)
            tags[tag] = digest
            self._packages[pkg][digest].tags.add(tag)

    def versions(self, image: str) -> dict[str, set[str]]:
        """What is stored now: digest → its tags."""
        with self._lock:
            return {d: set(v.tags) for d, v in self._packages.get(self._package(image), {}).items()}

    def fail(self, rpc: str, status: int, times: int = 1) -> None:
        """Answer the next `times` requests of `rpc` with `status` (a google.rpc.Status)."""
        with self._lock:
            self._faults.setdefault(rpc, []).extend([status] * times)

    # -- the RPCs -----------------------------------------------------------------------

    def _name(self, pkg: tuple[str, str, str, str]) -> str:
        project, location, repository, image = pkg
        return (
            f"projects/{project}/locations/{location}/repositories/{repository}"
            f"/packages/{quote(image, safe='')}"
        )

    def _pkg_of(self, name: str) -> tuple[str, str, str, str]:
        parts = _key(name)
        pkg = (parts[1], parts[3], parts[5], parts[7])
        if pkg not in self._packages:
            raise ApiError(404, f"Requested entity was not found: {name}")
        return pkg

    def _tag_json(self, pkg: tuple[str, str, str, str], tag: str) -> dict[str, Any]:
        base = self._name(pkg)
        return {"name": f"{base}/tags/{tag}", "version": f"{base}/versions/{self._tags[pkg][tag]}"}

    @staticmethod
    def _page(items: list[Any], query: dict[str, str]) -> tuple[list[Any], str]:
        size = min(int(query.get("pageSize") or 100), 1000)
        start = int(query.get("pageToken") or 0)
        end = start + size
        return items[start:end], str(end) if end < len(items) else ""

    def list_tags(self, parent: str, query: dict[str, str], _: bytes) -> dict[str, Any]:
        pkg = self._pkg_of(parent)
        names = sorted(self._tags.get(pkg, {}))
        if flt := query.get("filter"):
            match = re.fullmatch(r'version\s*=\s*"([^"]+)"', flt)
            if not match:
                raise ApiError(400, f"the stand-in filters by version only: {flt}")
            wanted = _key(match.group(1))[-1]
            names = [n for n in names if self._tags[pkg][n] == wanted]
        page, token = self._page(names, query)
        return {"tags": [self._tag_json(pkg, n) for n in page], "nextPageToken": token}

    def get_tag(self, name: str, query: dict[str, str], _: bytes) -> dict[str, Any]:
        pkg, tag = self._pkg_of(name), _key(name)[-1]
        if tag not in self._tags.get(pkg, {}):
            raise ApiError(404, f"Requested entity was not found: {name}")
        return self._tag_json(pkg, tag)

    def delete_tag(self, name: str, query: dict[str, str], _: bytes) -> dict[str, Any]:
        pkg, tag = self._pkg_of(name), _key(name)[-1]
        digest = self._tags.get(pkg, {}).pop(tag, None)
        if digest is None:
            raise ApiError(404, f"Requested entity was not found: {name}")
        self._packages[pkg][digest].tags.discard(tag)
        return {}

    def list_versions(self, parent: str, query: dict[str, str], _: bytes) -> dict[str, Any]:
        pkg = self._pkg_of(parent)
        full = query.get("view") in ("FULL", "2")
        versions = self._packages[pkg]
        page, token = self._page(sorted(versions), query)
        found = []
        for digest in page:
            version = versions[digest]
            item: dict[str, Any] = {
                "name": f"{self._name(pkg)}/versions/{digest}",
                "createTime": _rfc3339(version.created),
                "updateTime": _rfc3339(version.created),
            }
            if full:
                tags = sorted(version.tags)[:100]
                item["relatedTags"] = [self._tag_json(pkg, t) for t in tags]
                item["metadata"] = {
                    "name": f"{pkg[1]}-docker.pkg.dev/{pkg[0]}/{pkg[2]}/{pkg[3]}@{digest}",
                    "mediaType": version.media_type,
                    "imageSizeBytes": "1024",
                }
            found.append(item)
        return {"versions": found, "nextPageToken": token}

    def batch_delete_versions(
        self, parent: str, query: dict[str, str], body: bytes
    ) -> dict[str, Any]:
        pkg = self._pkg_of(parent)
        names = json.loads(body or b"{}").get("names") or []
        if not names:
            raise ApiError(400, "names: at least one version is required")
        versions = self._packages[pkg]
        digests = [_key(n)[-1] for n in names]
        for name, digest in zip(names, digests, strict=True):
            if _key(name)[:8] != _key(parent) or digest not in versions:
                raise ApiError(404, f"Requested entity was not found: {name}")
            if versions[digest].tags:
                raise ApiError(400, f"version {name} is tagged", "FAILED_PRECONDITION")
        for digest in digests:
            del versions[digest]
        project, location = pkg[0], pkg[1]
        name = f"projects/{project}/locations/{location}/operations/{uuid.uuid4()}"
        metadata = {
            "@type": "type.googleapis.com/google.devtools.artifactregistry.v1.BatchDeleteVersionsMetadata",
        }
        operation = {"name": name, "metadata": metadata}
        self._operations[name] = (self.pending_polls, operation)
        return self._operation(name, polled=False)

    def _operation(self, name: str, *, polled: bool) -> dict[str, Any]:
        pending, operation = self._operations[name]
        if polled and pending:
            pending -= 1
            self._operations[name] = (pending, operation)
        if pending:
            return {**operation, "done": False}
        return {
            **operation,
            "done": True,
            "response": {"@type": "type.googleapis.com/google.protobuf.Empty"},
        }

    def get_operation(self, name: str, query: dict[str, str], _: bytes) -> dict[str, Any]:
        if name not in self._operations:
            raise ApiError(404, f"Requested entity was not found: {name}")
        return self._operation(name, polled=True)

    # -- HTTP ---------------------------------------------------------------------------

    def _dispatch(self, method: str, raw: str, body: bytes) -> tuple[int, dict[str, Any]]:
        path, _, qs = raw.partition("?")
        query = {k: v[-1] for k, v in parse_qs(qs).items()}
        for verb, pattern, rpc in _ROUTES:
            match = pattern.fullmatch(path)
            if verb != method or match is None:
                continue
            handler = getattr(self, re.sub(r"(?<!^)([A-Z])", r"_\1", rpc).lower())
            # the REST transport quotes path parameters: `img%2Fsub` travels as `img%252Fsub`
            name = unquote(next(iter(match.groupdict().values())))
            with self._lock:
                self.calls[rpc] += 1
                if self._faults.get(rpc):
                    raise ApiError(self._faults[rpc].pop(0), f"{rpc}: injected failure")
                return 200, handler(name, query, body)
        raise ApiError(501, f"the stand-in does not implement {method} {path}")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    status, payload = standin._dispatch(self.command, self.path, body)
                except ApiError as e:
                    status = e.code
                    payload = {"error": {"code": e.code, "message": e.message, "status": e.status}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def __enter__(self) -> ArtifactRegistryStandIn:
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
