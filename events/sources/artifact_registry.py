"""Artifact Registry (Docker / OCI repositories) `gcr` topic messages → canonical events.

Artifact Registry publishes to the Pub/Sub topic `gcr` of its project. The message data
is JSON: `{"action": "INSERT" | "DELETE", "digest": "HOST/PROJECT/REPO/IMAGE@sha256:…",
"tag": "HOST/PROJECT/REPO/IMAGE:TAG"}`. An untagged push has no `tag`; a tag deletion
may carry only `tag`, a manifest deletion only `digest`.

INSERT with a tag → ArtifactPushed(store="oci", model = the repository path
`PROJECT/REPO/IMAGE`, version = tag). INSERT without a tag, or under a referrer
fallback tag (`sha256-<hex>[.sig]`) → nothing. DELETE → ArtifactDeleted.

>>> msg = Inbound(kind="pubsub", id="7", data={"action": "INSERT",
...     "digest": "eu-docker.pkg.dev/p/r/bert@sha256:" + "a" * 64,
...     "tag": "eu-docker.pkg.dev/p/r/bert:3"})
>>> [(e.data.model, e.data.version) for e in from_gar_message(msg)]
[('p/r/bert', '3')]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from modelhooks.events.errors import BadRequest
from modelhooks.events.inbound import Inbound
from modelhooks.events.model import CanonicalEvent
from modelhooks.events.sources._common import as_object, json_value, optional_text, parse_time, text
from modelhooks.events.sources._oci import check_digest, deleted, is_referrer_tag, pushed

__all__ = ["from_gar_message", "is_gar_message"]


def is_gar_message(data: Any) -> bool:
    return isinstance(data, Mapping) and "action" in data and ("digest" in data or "tag" in data)


def from_gar_message(inbound: Inbound) -> list[CanonicalEvent]:
    """One `gcr` topic message → [] or one canonical event."""
    where = "gar message"
    data = as_object(json_value(inbound.data, where), where)
    action = text(data, "action", where)
    if action not in ("INSERT", "DELETE"):
        raise BadRequest(f"{where}: action {action!r} is not INSERT or DELETE", field="action")
    by_digest = _split(optional_text(data, "digest", where), "@", where, "digest")
    by_tag = _split(optional_text(data, "tag", where), ":", where, "tag")
    if by_digest and by_tag and by_digest[0] != by_tag[0]:
        raise BadRequest(f"{where}: digest and tag name different images", field="tag")
    image = (by_digest or by_tag or (None, None))[0]
    if image is None:
        raise BadRequest(f"{where}: digest is missing", field="digest")
    host, _, repository = image.partition("/")
    if not repository:
        raise BadRequest(f"{where}: {image!r} names no repository", field="digest")
    digest = check_digest(by_digest[1], where, "digest") if by_digest else None
    tag = by_tag[1] if by_tag else None
    if tag is not None and is_referrer_tag(tag):
        return []
    if action == "DELETE":
        return [
            deleted(
                host=host,
                repository=repository,
                digest=digest,
                tag=tag,
                id=inbound.id,
                time=parse_time(inbound.time, where, "publishTime"),
                where=where,
            )
        ]
    if tag is None:
        return []  # an untagged manifest: a child of an index, or a referrer
    if digest is None:
        raise BadRequest(f"{where}: digest is missing", field="digest")
    return [
        pushed(
            host=host,
            repository=repository,
            digest=digest,
            tag=tag,
            size=None,
            id=inbound.id,
            time=parse_time(inbound.time, where, "publishTime"),
            where=where,
        )
    ]


def _split(reference: str | None, sep: str, where: str, field: str) -> tuple[str, str] | None:
    """`HOST/PATH@DIGEST` or `HOST/PATH:TAG` → (HOST/PATH, DIGEST-or-TAG)."""
    if reference is None:
        return None
    # A tag separator is the last ':' after the last '/' (a host may carry a port).
    head, found, tail = reference.rpartition(sep)
    if not found or not head or not tail or (sep == ":" and "/" in tail):
        raise BadRequest(f"{where}: {field} {reference!r} is not HOST/PATH{sep}…", field=field)
    return head, tail
