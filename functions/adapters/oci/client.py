"""A small client for the OCI distribution API (manifests, blobs, referrers) over HTTP(S),
with basic auth. `OciClients` hands out one per registry host, with the credentials the
composition root configured (`oci.username` / `oci.password`).

>>> client, repo, ref = OciClients().for_uri("oci://127.0.0.1:5000/models/bert:v1")  # doctest: +SKIP
>>> client.manifest(repo, ref)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from modelhooks.core.errors import (
    BadRequest,
    Conflict,
    ModelhooksError,
    NotFound,
    Unavailable,
)

if TYPE_CHECKING:
    import urllib.request

__all__ = [
    "EMPTY",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "TITLE",
    "OciClient",
    "OciClients",
    "digest_of",
    "parse_uri",
]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
_ACCEPT = ", ".join(
    [OCI_MANIFEST, OCI_INDEX, "application/vnd.docker.distribution.manifest.v2+json"]
)
EMPTY = {"mediaType": "application/vnd.oci.empty.v1+json", "digest": "", "size": 2}
TITLE = "org.opencontainers.image.title"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class OciClient:
    """Just enough of the OCI distribution API, over HTTP(S) with optional basic auth."""

    def __init__(
        self,
        base_url: str,
        *,
        auth: tuple[str, str] | None = None,
        opener: urllib.request.OpenerDirector | None = None,
    ) -> None:
        import urllib.request  # on first use: a function that never pulls pays nothing

        self.base_url = base_url.rstrip("/")
        self._open = (opener or urllib.request.build_opener()).open
        self._headers = {}
        if auth:
            import base64

            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"

    def request(
        self, method: str, path: str, body: bytes | None = None, **headers: str
    ) -> tuple[int, dict[str, str], bytes]:
        url = path if path.startswith("http") else f"{self.base_url}{path}"
        import urllib.error
        import urllib.request

        req = urllib.request.Request(url, data=body, method=method)
        for k, v in {**self._headers, **headers}.items():
            req.add_header(k.replace("_", "-"), v)
        try:
            with self._open(req, timeout=60) as resp:
                return resp.status, dict(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers.items()), e.read()
        except OSError as e:
            raise Unavailable(f"registry {self.base_url} unreachable", reason=str(e)) from e

    def _check(self, status: int, body: bytes, what: str) -> None:
        if status < 300:
            return
        cls: type[ModelhooksError] = {404: NotFound, 409: Conflict}.get(status, Unavailable)
        if 400 <= status < 500 and status not in (404, 409, 429):
            cls = BadRequest
        raise cls(
            f"registry refused {what}", status=status, body=body[:300].decode(errors="replace")
        )

    def manifest(self, repo: str, ref: str) -> tuple[dict[str, Any], str, int]:
        """(manifest JSON, digest, size) of a tag or digest."""
        status, _, body = self.request("GET", f"/v2/{repo}/manifests/{ref}", Accept=_ACCEPT)
        self._check(status, body, f"manifest {repo}:{ref}")
        return json.loads(body), digest_of(body), len(body)

    def blob_range(self, repo: str, digest: str, start: int, length: int) -> bytes:
        status, _, body = self.request(
            "GET", f"/v2/{repo}/blobs/{digest}", Range=f"bytes={start}-{start + length - 1}"
        )
        if status == 416:
            return b""
        self._check(status, body, f"blob {digest}")
        return body if status == 206 else body[start : start + length]

    def push_blob(self, repo: str, data: bytes) -> str:
        digest = digest_of(data)
        if self.request("HEAD", f"/v2/{repo}/blobs/{digest}")[0] == 200:
            return digest
        status, headers, body = self.request("POST", f"/v2/{repo}/blobs/uploads/")
        self._check(status, body, "blob upload")
        location = headers.get("Location", "")
        sep = "&" if "?" in location else "?"
        url = location if location.startswith("http") else f"{self.base_url}{location}"
        status, _, body = self.request(
            "PUT", f"{url}{sep}digest={digest}", data, Content_Type="application/octet-stream"
        )
        self._check(status, body, "blob upload")
        return digest

    def push_manifest(self, repo: str, ref: str, manifest: dict[str, Any]) -> str:
        data = json.dumps(manifest, separators=(",", ":")).encode()
        media = str(manifest["mediaType"])
        status, _, body = self.request(
            "PUT", f"/v2/{repo}/manifests/{ref}", data, Content_Type=media
        )
        self._check(status, body, f"manifest push {repo}:{ref}")
        return digest_of(data)

    def referrers(self, repo: str, digest: str) -> list[dict[str, Any]]:
        """Referrers of `digest`: the referrers API, else the `sha256-<hex>` fallback tag."""
        status, _, body = self.request("GET", f"/v2/{repo}/referrers/{digest}", Accept=OCI_INDEX)
        if status == 200:  # an empty index may say "manifests": null
            return list(json.loads(body).get("manifests") or [])
        try:
            index, _, _ = self.manifest(repo, digest.replace(":", "-"))
        except NotFound:
            return []
        return list(index.get("manifests") or [])

    def has_referrers_api(self, repo: str, digest: str) -> bool:
        return self.request("GET", f"/v2/{repo}/referrers/{digest}", Accept=OCI_INDEX)[0] == 200


def parse_uri(uri: str) -> tuple[str, str, str]:
    """(host, repository, tag or digest) of `oci://host[:port]/repo[:tag|@digest]`."""
    host, _, rest = uri.removeprefix("oci://").partition("/")
    if "@" in rest:
        repo, _, ref = rest.partition("@")
    elif ":" in rest.rsplit("/", 1)[-1]:
        repo, _, ref = rest.rpartition(":")
    else:
        repo, ref = rest, "latest"
    if not host or not repo:
        raise BadRequest(f"{uri}: expected oci://host/repository[:tag|@digest]")
    return host, repo, ref


class OciClients:
    """Clients for the registries events name, all with the same credentials (none by
    default): plain HTTP for loopback registries, HTTPS otherwise. Connections go only to
    public addresses unless `allow_local` (modelhooks.adapters.net)."""

    def __init__(
        self,
        auth: tuple[str, str] | None = None,
        *,
        allow_local: bool = True,
        allowed_hosts: frozenset[str] = frozenset(),
    ) -> None:
        self.auth = auth
        self.allow_local, self.allowed_hosts = allow_local, allowed_hosts
        self._opener: urllib.request.OpenerDirector | None = None

    def for_uri(self, uri: str) -> tuple[OciClient, str, str]:
        """(client, repository, tag or digest) for an `oci://` URI."""
        host, repo, ref = parse_uri(uri)
        loopback = host.rsplit(":", 1)[0] in ("127.0.0.1", "localhost", "[::1]")
        base = f"{'http' if loopback else 'https'}://{host}"
        if self._opener is None:  # built on first use (cold start)
            from modelhooks.adapters.net import guarded_opener

            self._opener = guarded_opener(
                allow_local=self.allow_local, allowed_hosts=self.allowed_hosts
            )
        return OciClient(base, auth=self.auth, opener=self._opener), repo, ref
