"""What the OCI translators share: manifest media types, referrer tags, URIs, payloads."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime

from modelhooks.events.errors import BadRequest
from modelhooks.events.model import ArtifactDeleted, ArtifactPushed, CanonicalEvent, EventData
from modelhooks.events.sources._common import canonical, payload

__all__ = [
    "MANIFEST_MEDIA_TYPES",
    "UNTAG_PLACEHOLDER",
    "UNTAG_PLACEHOLDER_DIGEST",
    "check_digest",
    "deleted",
    "is_digest",
    "is_referrer_tag",
    "pushed",
    "repository_uri",
]

# Only manifests name an artifact; blob (layer, config) events never do.
MANIFEST_MEDIA_TYPES = frozenset(
    {
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    }
)

# Untagging where DELETE by tag is refused (distribution 2.8): the tag is moved to this
# empty manifest, which is then deleted by digest. It is one well-known manifest, so the
# translators know its push and delete notifications for what they are: no artifact.
UNTAG_PLACEHOLDER = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.empty.v1+json",
            "digest": "sha256:" + hashlib.sha256(b"{}").hexdigest(),
            "size": 2,
        },
        "layers": [],
        "annotations": {"dev.modelhooks.untag": "placeholder"},
    },
    separators=(",", ":"),
).encode()
UNTAG_PLACEHOLDER_DIGEST = "sha256:" + hashlib.sha256(UNTAG_PLACEHOLDER).hexdigest()

_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$")
# The referrers fallback scheme (distribution-spec 1.1) tags an index `<alg>-<hex>`;
# cosign-style tools add a suffix (`sha256-<hex>.sig`, `.att`, `.sbom`).
_REFERRER_TAG = re.compile(r"^(?:sha256-[0-9a-f]{64}|sha512-[0-9a-f]{128})(?:\.[\w.-]+)?$")


def is_digest(reference: str) -> bool:
    return bool(_DIGEST.match(reference))


def is_referrer_tag(tag: str) -> bool:
    return bool(_REFERRER_TAG.match(tag))


def repository_uri(host: str, repository: str) -> str:
    return f"oci://{host}/{repository}"


def pushed(
    *,
    host: str,
    repository: str,
    digest: str,
    tag: str,
    size: int | None,
    id: str,
    time: datetime | None,
    where: str,
) -> CanonicalEvent:
    """ArtifactPushed for a tagged manifest: model = repository, version = tag."""
    data = payload(
        ArtifactPushed,
        where,
        model=repository,
        version=tag,
        uri=f"{repository_uri(host, repository)}@{digest}",
        digest=digest,
        store="oci",
        tag=tag,
        size=size,
    )
    return canonical(data, id=id, source=repository_uri(host, repository), subject=tag, time=time)


def deleted(
    *,
    host: str,
    repository: str,
    digest: str | None,
    tag: str | None,
    id: str,
    time: datetime | None,
    where: str,
) -> CanonicalEvent:
    """ArtifactDeleted for a manifest (digest), a tag, or a whole repository (neither)."""
    base = repository_uri(host, repository)
    uri = f"{base}:{tag}" if tag else f"{base}@{digest}" if digest else base
    data: EventData = payload(
        ArtifactDeleted,
        where,
        uri=uri,
        store="oci",
        digest=digest,
        model=repository,
        version=tag,
        tag=tag,
    )
    return canonical(data, id=id, source=base, subject=tag or digest or repository, time=time)


def check_digest(digest: str, where: str, path: str) -> str:
    """`digest` when it is `<algorithm>:<encoded>`, else BadRequest naming `path`."""
    if not is_digest(digest):
        raise BadRequest(f"{where}: {path} {digest!r} is not a digest", field=path, where=where)
    return digest
