"""What the OCI translators share: manifest media types, referrer tags, URIs, payloads."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from urllib.parse import urlsplit

from modelhooks.events.errors import BadRequest
from modelhooks.events.model import (
    ArtifactDeleted,
    ArtifactPushed,
    CanonicalEvent,
    EventData,
    is_digest,
    is_pullable_digest,
)
from modelhooks.events.sources._common import canonical, payload

__all__ = [
    "MANIFEST_MEDIA_TYPES",
    "UNTAG_PLACEHOLDER",
    "UNTAG_PLACEHOLDER_DIGEST",
    "check_digest",
    "deleted",
    "is_digest",
    "is_pullable_digest",
    "is_referrer_tag",
    "is_registry_host",
    "is_url_host",
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

# A registry host (name or bracketed IPv6, optional port) and a repository's path components,
# as the distribution spec names them: what the registry adapters will accept of the URI
_HOST = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?"
)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
# The referrers fallback scheme (distribution-spec 1.1) tags an index `<alg>-<hex>`;
# cosign-style tools add a suffix (`sha256-<hex>.sig`, `.att`, `.sbom`).
_REFERRER_TAG = re.compile(r"(?:sha256-[0-9a-f]{64}|sha512-[0-9a-f]{128})(?:\.[\w.-]+)?")


def is_referrer_tag(tag: str) -> bool:
    return bool(_REFERRER_TAG.fullmatch(tag))


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
    _check_name(host, repository, where)
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
    _check_name(host, repository, where)
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


def is_url_host(host: str) -> bool:
    """Whether a URL can be made with `host`: urlsplit refuses brackets that hold no IPv6
    address (`[1:2:3]`), a ValueError wherever the registry's URL is made."""
    try:
        urlsplit(f"//{host}")
    except ValueError:
        return False
    return True


def is_registry_host(host: str) -> bool:
    """Whether `host` is a registry's host, perhaps with a port (`zot.example:5000`): what
    an oci:// reference names before its repository (ingress.registry_host is checked so)."""
    return bool(_HOST.fullmatch(host)) and is_url_host(host)


def _check_name(host: str, repository: str, where: str) -> None:
    """BadRequest unless `host` and `repository` are what a registry names (a host such as
    `r:5000@evil` or `evil/x`, an upper-case repository, made URIs no adapter reads the same)."""
    if not is_registry_host(host):
        raise BadRequest(f"{where}: {host!r} is not a registry host", field="host", where=where)
    if not _REPOSITORY.fullmatch(repository):
        raise BadRequest(
            f"{where}: {repository!r} is not a repository name (lower-case path components)",
            field="repository",
            where=where,
        )
