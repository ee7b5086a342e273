"""The location a `Model`'s `spec.source` names, read one way by every function (register
registers it, cleanup deletes it, notify matches a purge to its Model).

Exactly one of:
- `oci.reference`: `host/repository[:tag][@digest]` → `oci://…` (the digest, if written:
  sha256 or sha512);
- `gcs.uri` / `s3.uri`: `gs://…` / `s3://…` (or `file://…` in the embedded local store);
- `http.url` + `http.sha256`: a tarball or zip the publisher serves over HTTPS, named by its
  sha256 — resolved by the spec itself, never fetched to be named; a URL with credentials
  (`user:password@host`) is refused without naming them: the location is carried in events,
  registries, status conditions, Events and log lines, a wider audience than the Model's
  (credentials go in `secretRef`).

>>> model_source({"http": {"url": "https://example.com/m.tar.gz", "sha256": "a" * 64}}).digest[:9]
'sha256:aa'
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from modelhooks.core.errors import BadRequest
from modelhooks.events.model import StoreKind, is_pullable_digest

__all__ = ["Source", "model_source"]

_SHA256 = re.compile(r"[a-f0-9]{64}")
_USERINFO = re.compile(r"https://[^/?#]*@")  # an authority with a user (and password)


class Source(msgspec.Struct, frozen=True):  # a Struct: cheaper to make than a dataclass
    uri: str
    store: StoreKind
    digest: str = ""  # known from the spec alone: an @digest reference, http's sha256


def model_source(source: Any) -> Source:
    """The location `spec.source` names; BadRequest naming the field otherwise."""
    if not isinstance(source, dict):
        raise BadRequest("spec.source: expected an object", field="spec.source")
    oci, http = source.get("oci"), source.get("http")
    if isinstance(oci, dict) and isinstance(oci.get("reference"), str):
        reference = oci["reference"]
        pinned = reference.rpartition("@")[2] if "@" in reference else ""
        digest = pinned if is_pullable_digest(pinned) else ""
        return Source(f"oci://{reference}", "oci", digest)
    if isinstance(http, dict):
        url, sha = http.get("url"), http.get("sha256")
        if not isinstance(url, str) or not url.startswith("https://"):
            raise BadRequest("spec.source.http.url: expected an https:// URL", field="spec.source")
        if _USERINFO.match(url):  # said without the URL: its password would go everywhere
            raise BadRequest(
                "spec.source.http.url: credentials in the URL (user:password@host) are not "
                "taken; name a Secret in spec.source.secretRef",
                field="spec.source",
            )
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            raise BadRequest("spec.source.http.sha256: expected 64 hex digits", field="spec.source")
        return Source(url, "http", f"sha256:{sha}")
    for kind, scheme in (("gcs", "gs://"), ("s3", "s3://")):
        found = source.get(kind)
        uri = found.get("uri") if isinstance(found, dict) else None
        if isinstance(uri, str):
            if uri.startswith("file://"):  # the embedded local store
                return Source(uri, "local")
            if uri.startswith(scheme):
                return Source(uri, "gcs" if kind == "gcs" else "s3")
            raise BadRequest(
                f"spec.source.{kind}.uri {uri!r} is not a {scheme} URI", field="spec.source"
            )
    raise BadRequest(
        "spec.source: expected oci.reference, gcs.uri, s3.uri or http.url", field="spec.source"
    )
