"""OCI registry notifications → canonical events.

Two producers:

- distribution (docker registry 2.x/3.x) notification endpoints: POST
  `{"events": [...]}`, each event with id, timestamp, action (push | pull | mount |
  delete), target {mediaType, digest, size, repository, url, tag}, request {host, …}.
  Blob events look like manifest events: only manifest media types count. A delete
  names a manifest (digest), a tag (tag) or a repository (neither) and carries no
  mediaType.
- zot's events extension: CloudEvents from source `zotregistry.dev`, types
  `zotregistry.image.updated` / `zotregistry.image.deleted` (also `…lint_failed`,
  `…scanned`, `zotregistry.repository.created`, ignored here), data {name, reference,
  digest, mediaType, manifest}; `reference` is the tag, or the digest when pushed or
  deleted by digest. Zot does not say which host it serves, so the registry host comes
  from configuration (`registry_host`) or from a URL-shaped `source`.

A manifest pushed under a tag → ArtifactPushed(model=repository, version=tag). Pushes by
digest only, fallback referrer tags (`sha256-<hex>[.sig]`) and the untag placeholder
(`UNTAG_PLACEHOLDER`, pushed and deleted when pruning on distribution 2.8) → nothing.
Deletes → ArtifactDeleted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from modelhooks.events.errors import BadRequest
from modelhooks.events.inbound import Inbound
from modelhooks.events.model import CanonicalEvent
from modelhooks.events.sources._common import (
    as_object,
    each,
    json_value,
    optional_text,
    parse_time,
    text,
    value_at,
)
from modelhooks.events.sources._oci import (
    MANIFEST_MEDIA_TYPES,
    UNTAG_PLACEHOLDER,
    UNTAG_PLACEHOLDER_DIGEST,
    check_digest,
    deleted,
    is_digest,
    is_pullable_digest,
    is_referrer_tag,
    is_url_host,
    pushed,
)
from modelhooks.events.sources._types import ZOT_TYPE_PREFIX

__all__ = [
    "UNTAG_PLACEHOLDER",
    "UNTAG_PLACEHOLDER_DIGEST",
    "ZOT_DEFAULT_SOURCE",
    "ZOT_TYPE_PREFIX",
    "from_distribution_notification",
    "from_zot_event",
    "is_distribution_notification",
    "is_pullable_digest",
    "is_url_host",
]

ZOT_DEFAULT_SOURCE = "zotregistry.dev"


def is_distribution_notification(body: Any) -> bool:
    return isinstance(body, Mapping) and "events" in body


def from_distribution_notification(inbound: Inbound) -> list[CanonicalEvent]:
    """A distribution notification envelope → one canonical event per relevant event."""
    where = "distribution notification"
    body = as_object(json_value(inbound.data, where), where, "body")
    events = body.get("events")
    if not isinstance(events, Sequence) or isinstance(events, str):
        raise BadRequest(f"{where}: events must be a list", field="events")

    def one(n: int, event: Any) -> CanonicalEvent | None:
        where = f"distribution event {n}"
        return _distribution_event(as_object(event, where, "event"), n, inbound, where)

    return each(events, one)


def _distribution_event(
    event: Mapping[str, Any], n: int, inbound: Inbound, where: str
) -> CanonicalEvent | None:
    action = text(event, "action", where)
    if action not in ("push", "delete"):
        return None  # pull, mount
    media_type = optional_text(event, "target.mediaType", where)
    tag = optional_text(event, "target.tag", where)
    if action == "push" and (media_type not in MANIFEST_MEDIA_TYPES or not tag):
        return None  # a blob, or a manifest pushed by digest (child of an index, referrer)
    if media_type is not None and media_type not in MANIFEST_MEDIA_TYPES:
        return None  # a blob delete
    if tag and is_referrer_tag(tag):
        return None
    digest = optional_text(event, "target.digest", where)
    if digest is not None:
        check_digest(digest, where, "target.digest")
    if digest == UNTAG_PLACEHOLDER_DIGEST:
        return None  # our untag workaround at work, not an artifact
    host = text(event, "request.host", where)
    repository = text(event, "target.repository", where)
    event_id = optional_text(event, "id", where) or f"{inbound.id}:{n}"
    time = parse_time(optional_text(event, "timestamp", where), where, "timestamp")
    if action == "delete":
        return deleted(
            host=host,
            repository=repository,
            digest=digest,
            tag=tag,
            id=event_id,
            time=time,
            where=where,
        )
    if digest is None:
        raise BadRequest(f"{where}: target.digest is missing", field="target.digest")
    size = value_at(event, "target.size", where)
    return pushed(
        host=host,
        repository=repository,
        digest=digest,
        tag=str(tag),
        size=size if type(size) is int and 0 <= size < 1 << 63 else None,  # as told, if sane
        id=event_id,
        time=time,
        where=where,
    )


def from_zot_event(inbound: Inbound, *, registry_host: str | None = None) -> list[CanonicalEvent]:
    """A zot events-extension CloudEvent → [] or one canonical event."""
    where = "zot event"
    attrs = inbound.attributes
    event_type = text(attrs, "type", where)
    action = event_type.removeprefix(ZOT_TYPE_PREFIX)
    if action not in ("image.updated", "image.deleted"):
        return []  # repository.created, image.lint_failed, image.scanned
    data = as_object(json_value(inbound.data, where), where)
    repository = text(data, "name", where)
    reference = text(data, "reference", where)
    media_type = optional_text(data, "mediaType", where)
    if media_type is not None and media_type not in MANIFEST_MEDIA_TYPES:
        return []
    by_digest = is_digest(reference)
    tag = None if by_digest else reference
    if tag is not None and is_referrer_tag(tag):
        return []
    digest = optional_text(data, "digest", where) or (reference if by_digest else None)
    if digest is not None:
        check_digest(digest, where, "digest")
    if digest == UNTAG_PLACEHOLDER_DIGEST:
        return []  # our untag workaround at work, not an artifact
    if action == "image.updated" and (tag is None or _is_referrer(data)):
        return []
    host = _zot_host(attrs, registry_host, where)
    event_id = attrs.get("id") or inbound.id
    time = parse_time(attrs.get("time"), where, "time")
    if action == "image.deleted":
        return [
            deleted(
                host=host,
                repository=repository,
                digest=digest,
                tag=tag,
                id=event_id,
                time=time,
                where=where,
            )
        ]
    if digest is None or tag is None:
        raise BadRequest(f"{where}: digest is missing", field="digest")
    return [
        pushed(
            host=host,
            repository=repository,
            digest=digest,
            tag=tag,
            size=None,
            id=event_id,
            time=time,
            where=where,
        )
    ]


def _zot_host(attrs: Mapping[str, str], configured: str | None, where: str) -> str:
    if configured:
        return configured
    source = attrs.get("source", "")
    try:
        host = urlsplit(source).netloc if "://" in source else ""
    except ValueError:  # a bracketed host that is no IP address: named no host
        host = ""
    if not host:
        raise BadRequest(
            f"{where}: source {source!r} does not name the registry host; set "
            "ingress.registry_host (--ingress-registry-host, MODELHOOKS_INGRESS_REGISTRY_HOST) "
            "to the registry zot's events come from, or zot's event source to its URL",
            field="source",
        )
    return host


def _is_referrer(data: Mapping[str, Any]) -> bool:
    """A manifest with a `subject` is a referrer (signature, SBOM) of another one."""
    manifest = data.get("manifest")
    if not isinstance(manifest, str):
        return False
    try:
        parsed = json.loads(manifest)
    except (ValueError, RecursionError):
        return False
    return isinstance(parsed, Mapping) and "subject" in parsed
