"""Registry vocabulary (Kubeflow Model Registry's), shared by every ModelRegistry backend.

The natural identity of a registration is (model name, version name, artifact digest).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from modelhooks.events.model import CanonicalEvent

__all__ = [
    "DELETED_AT",
    "DELETED_UIDS",
    "DELETION_POLICY",
    "INTERNAL_PREFIX",
    "PUSHED_AT",
    "REGISTERED_BY",
    "SIGNATURE",
    "UIDLESS_DELETED_AT",
    "ArtifactState",
    "Manifest",
    "ModelArtifact",
    "ModelState",
    "ModelVersion",
    "ObjectInfo",
    "Properties",
    "RegisteredModel",
    "Tag",
    "Typed",
    "json_values",
    "owner_of",
    "stamp",
    "typed",
]

# The facts that make the registry's state independent of delivery order: when a version
# was pushed, when its model was last deleted (sortable UTC strings, `stamp`).
PUSHED_AT = "modelhooks.pushed_at"
DELETED_AT = "modelhooks.deleted_at"
# … and whose deletion ended which Model's registration: a deletion's time is its sender's
# clock (a deletion sent again late is stamped late), so a Model's deletion (it names its
# uid) ends only what that uid registered. A version keeps the uids of the (8 latest)
# Models that registered it, each with its latest registration's time (a JSON object); a
# model the uids of its (8 latest) deleted Models, each with the earliest time its deletion
# was sent at (a JSON object), and the time of its latest deletion naming no uid (a hand
# replay, an event from before uids were kept, a deleted uid forgotten past the 8; absent on
# a model recorded before: its `deleted_at`, every deletion then counting so).
REGISTERED_BY = "modelhooks.registered_by"
DELETED_UIDS = "modelhooks.deleted_uids"
UIDLESS_DELETED_AT = "modelhooks.uidless_deleted_at"
DELETION_POLICY = "modelhooks.deletion_policy"  # the latest deletion's spec.deletionPolicy
# A version's signature record (`sign`: signature.uri, .root_digest, .signer,
# .artifact_digest) is held by a live version alone: archiving it drops the record.
SIGNATURE = "signature."
# modelhooks' own records (prune's plans: `modelhooks:prune`), kept as registered models no
# event can name (':' is in no model name an event carries): not models, `registry list`,
# `export` and `import` pass them by
INTERNAL_PREFIX = "modelhooks:"
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


Properties = Mapping[str, str]  # values are text; a `Typed` one keeps its JSON value too


class Typed(str):
    """A custom property value of a JSON type other than string (int, float, bool, object,
    array): a `str`, its JSON text, for every reader of properties as text, holding the
    value, so a backend that keeps types (Kubeflow's MetadataDoubleValue…, SQLite's JSON)
    writes it typed and reads it back as a `Typed`. Backends that keep text only (the
    Kubernetes CRDs' string map) keep its text. Handler-written properties stay `str`.

    >>> accuracy = Typed(0.95)
    >>> accuracy, accuracy.value, accuracy == "0.95"
    ('0.95', 0.95, True)
    """

    value: Any

    def __new__(cls, value: Any) -> Typed:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
        self = super().__new__(cls, text)
        self.value = value
        return self

    def __getnewargs__(self) -> tuple[Any]:  # copy and pickle make it again from its value
        return (self.value,)


def typed(value: Any) -> str:
    """A JSON value as a property value: a string as itself, null as "", anything else
    `Typed` (ValueError for what JSON cannot hold: NaN, infinities, other objects)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return Typed(value)
    except TypeError as exc:
        raise ValueError(f"not a JSON value: {exc}") from None


def json_values(properties: Properties) -> dict[str, Any]:
    """Properties as JSON values: a `Typed`'s value, text as text."""
    return {k: v.value if isinstance(v, Typed) else v for k, v in properties.items()}


# The records are frozen msgspec Structs, not dataclasses: making a Struct class costs a
# fraction of a dataclass's (cold start). Copy one with changes by msgspec.structs.replace.


class RegisteredModel(msgspec.Struct, frozen=True):
    id: str
    name: str
    state: ModelState = ModelState.LIVE
    description: str = ""
    custom_properties: Properties = msgspec.field(default_factory=dict)


def owner_of(model: RegisteredModel) -> str:
    """The namespace that owns `model`: the one that registered it (its `namespace`
    property), "default" for a model registered without one. register refuses another
    namespace's archiving of it, cleanup counts another's model of the name as in use.

    >>> owner_of(RegisteredModel("1", "bert"))
    'default'
    >>> owner_of(RegisteredModel("1", "bert", custom_properties={"namespace": "team-a"}))
    'team-a'
    """
    return model.custom_properties.get("namespace", "default")


class ModelVersion(msgspec.Struct, frozen=True):
    id: str
    model_id: str
    name: str
    state: ModelState = ModelState.LIVE
    description: str = ""
    custom_properties: Properties = msgspec.field(default_factory=dict)


class ModelArtifact(msgspec.Struct, frozen=True):
    id: str
    version_id: str
    name: str
    uri: str
    digest: str
    state: ArtifactState = ArtifactState.LIVE
    custom_properties: Properties = msgspec.field(default_factory=dict)


class ObjectInfo(msgspec.Struct, frozen=True):
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


class Tag(msgspec.Struct, frozen=True):
    """A tag of an OCI repository: the digest it names, when that manifest was pushed (None:
    the registry does not say) and, for an index, the digests it lists (kept with it)."""

    name: str
    digest: str
    pushed_at: datetime | None = None
    children: tuple[str, ...] = ()


class Manifest(msgspec.Struct, frozen=True):
    """A manifest no tag names (registries that can list them: Artifact Registry)."""

    digest: str
    pushed_at: datetime | None = None
    children: tuple[str, ...] = ()
