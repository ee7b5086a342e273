"""Registry vocabulary (Kubeflow Model Registry's), shared by every ModelRegistry backend.

The natural identity of a registration is (model name, version name, artifact digest).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modelhooks.events.model import CanonicalEvent

__all__ = [
    "DELETED_AT",
    "DELETION_POLICY",
    "PUSHED_AT",
    "ArtifactState",
    "Manifest",
    "ModelArtifact",
    "ModelState",
    "ModelVersion",
    "ObjectInfo",
    "RegisteredModel",
    "Tag",
    "stamp",
]

# The facts that make the registry's state independent of delivery order: when a version
# was pushed, when its model was last deleted (sortable UTC strings, `stamp`).
PUSHED_AT = "modelhooks.pushed_at"
DELETED_AT = "modelhooks.deleted_at"
DELETION_POLICY = "modelhooks.deletion_policy"  # the latest deletion's spec.deletionPolicy
_UNKNOWN = "9999-12-31T23:59:59.999999Z"  # an event without a time: newer than any time


def stamp(event: CanonicalEvent) -> str:
    """The event's time as a sortable UTC string (ingress keeps times within 1970-9998, so
    the year has four digits and strings compare as times)."""
    if event.time is None:
        return _UNKNOWN
    return event.time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ModelState(StrEnum):
    LIVE = "LIVE"
    ARCHIVED = "ARCHIVED"


class ArtifactState(StrEnum):
    PENDING = "PENDING"
    LIVE = "LIVE"
    MARKED_FOR_DELETION = "MARKED_FOR_DELETION"
    DELETED = "DELETED"
    ABANDONED = "ABANDONED"
    REFERENCE = "REFERENCE"
    UNKNOWN = "UNKNOWN"


Properties = Mapping[str, str]


@dataclass(frozen=True)
class RegisteredModel:
    id: str
    name: str
    state: ModelState = ModelState.LIVE
    description: str = ""
    custom_properties: Properties = field(default_factory=dict)


@dataclass(frozen=True)
class ModelVersion:
    id: str
    model_id: str
    name: str
    state: ModelState = ModelState.LIVE
    description: str = ""
    custom_properties: Properties = field(default_factory=dict)


@dataclass(frozen=True)
class ModelArtifact:
    id: str
    version_id: str
    name: str
    uri: str
    digest: str
    state: ArtifactState = ArtifactState.LIVE
    custom_properties: Properties = field(default_factory=dict)


@dataclass(frozen=True)
class ObjectInfo:
    """One object in a store. `generation` is the store's immutable revision id
    (GCS generation, S3 versionId or ETag, a local file's modification time and size);
    `checksum` the store's own content checksum where it has one (GCS md5/crc32c, S3 ETag)."""

    bucket: str
    key: str
    size: int
    generation: str
    etag: str = ""
    checksum: str = ""
    current: bool = True  # False: an old (noncurrent) revision of a versioned bucket


@dataclass(frozen=True)
class Tag:
    """A tag of an OCI repository: the digest it names, when that manifest was pushed (None:
    the registry does not say) and, for an index, the digests it lists (kept with it)."""

    name: str
    digest: str
    pushed_at: datetime | None = None
    children: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    """A manifest no tag names (registries that can list them: Artifact Registry)."""

    digest: str
    pushed_at: datetime | None = None
    children: tuple[str, ...] = ()
