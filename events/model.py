"""The canonical events: one vocabulary, whatever the upstream.

Each `data` payload is a frozen, versioned model; its JSON Schema lives in
`events/schemas/<type>.v<N>.json` and is named by the CloudEvent's `dataschema`.
An artifact is always named by an immutable reference (OCI digest, GCS generation,
S3 versionId/ETag): floating references are resolved once, at ingress.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import msgspec
from msgspec import Meta, field

from modelhooks.events.errors import BadRequest

__all__ = [
    "EVENT_TYPES",
    "ArtifactDeleted",
    "ArtifactPurged",
    "ArtifactPushed",
    "CanonicalEvent",
    "EventData",
    "ModelCreated",
    "ModelDeleted",
    "ModelRegistered",
    "ModelSigned",
    "ModelUpdated",
    "PruneRequested",
    "TagsPruned",
    "data_class",
    "parse",
]

SCHEMA_BASE = "https://modelhooks.dev/schemas"
StoreKind = Literal["local", "gcs", "s3", "oci", "http"]
# One grammar for model and version names, whatever the upstream: path segments (an OCI
# repository has several) of letters, digits, '.', '_', '-' and inner spaces, each starting
# with a letter, digit or '_' (so never '.' or '..'); no control characters, no empty
# segments, no leading or trailing space.
_SEGMENT = r"[A-Za-z0-9_](?:[A-Za-z0-9._ -]*[A-Za-z0-9._-])?"
NAME_PATTERN = rf"^{_SEGMENT}(?:/{_SEGMENT})*$"
VERSION_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._+-]*$"
Name = Annotated[
    str,
    Meta(min_length=1, max_length=253, pattern=NAME_PATTERN, description="a model name"),
]
VersionName = Annotated[
    str,
    Meta(min_length=1, max_length=128, pattern=VERSION_PATTERN, description="a version name"),
]
# A Kubernetes namespace (DNS label): the tenant.
Namespace = Annotated[
    str, Meta(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
]
D = TypeVar("D", bound="EventData")


def _doc(text: str) -> Meta:
    return Meta(description=text)


class EventData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every canonical payload (msgspec: cheap to import, fast to validate)."""

    TYPE: ClassVar[str]
    VERSION: ClassVar[int] = 1

    @classmethod
    def dataschema(cls) -> str:
        return f"{SCHEMA_BASE}/{cls.TYPE}.v{cls.VERSION}.json"

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    def replace(self: D, **changes: Any) -> D:
        return msgspec.structs.replace(self, **changes)


_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$")
_FIELD = re.compile(r"field `(?P<name>[^`]+)`")


def parse(cls: type[D], raw: Any, where: str = "data") -> D:
    """Validate a decoded JSON value as `cls`; BadRequest names the offending field."""
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        m = _AT.match(str(exc))
        msg = m["msg"] if m else str(exc)
        path = (m["path"] or "").lstrip(".") if m else ""
        named = _FIELD.search(msg)
        if named:  # "Object missing required field `model`": the field is the subject
            path = f"{path}.{named['name']}" if path else named["name"]
        path = path or "data"
        raise BadRequest(f"{where}: {path}: {msg}", field=path, where=where) from None


class ArtifactPushed(EventData, frozen=True, kw_only=True):
    """A complete model artifact is available at an immutable reference."""

    TYPE = "dev.modelhooks.artifact.pushed"
    model: Name
    version: VersionName
    uri: Annotated[str, _doc("gs://b/prefix/, s3://b/prefix/, file://…, oci://host/repo@sha256:…")]
    digest: Annotated[
        str,
        Meta(
            min_length=1,
            description="immutable identity: sha256:<hex> (OCI), gcs-generation:<n>, "
            "s3-version:<id> or s3-etag:<etag> of the ready marker, local-generation:<…>",
        ),
    ]
    store: StoreKind
    namespace: Annotated[
        Namespace | None,
        _doc("the tenant the event belongs to; unset: the tenant that owns the location"),
    ] = None
    tag: Annotated[str | None, _doc("the tag pushed, for OCI")] = None
    size: int | None = None
    labels: dict[str, str] = field(default_factory=dict)


class ArtifactDeleted(EventData, frozen=True, kw_only=True):
    """An artifact or tag disappeared upstream."""

    TYPE = "dev.modelhooks.artifact.deleted"
    uri: str
    store: StoreKind
    digest: str | None = None
    model: Name | None = None
    version: VersionName | None = None
    tag: str | None = None
    namespace: Namespace | None = None


class _ModelLifecycle(EventData, frozen=True, kw_only=True):
    name: Name
    namespace: Namespace = "default"
    version: VersionName | None = None
    uid: str | None = None
    resource_version: str | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)


class ModelCreated(_ModelLifecycle, frozen=True, kw_only=True):
    TYPE = "dev.modelhooks.model.created"


class ModelUpdated(_ModelLifecycle, frozen=True, kw_only=True):
    TYPE = "dev.modelhooks.model.updated"


class ModelDeleted(_ModelLifecycle, frozen=True, kw_only=True):
    TYPE = "dev.modelhooks.model.deleted"


class ModelRegistered(EventData, frozen=True, kw_only=True):
    """Emitted by `register`."""

    TYPE = "dev.modelhooks.model.registered"
    model: str
    version: str
    uri: str
    digest: str
    registry: Annotated[str, _doc("the registry backend: sqlite, kubeflow, crd")]
    registered_model_id: str
    model_version_id: str
    model_artifact_id: str
    namespace: str = "default"
    created: Annotated[bool, _doc("false when everything already existed (a redelivery)")]


class ModelSigned(EventData, frozen=True, kw_only=True):
    """Emitted by `sign`."""

    TYPE = "dev.modelhooks.model.signed"
    model: str
    version: str
    uri: str
    digest: str
    signature_uri: str
    root_digest: str
    signer: str
    namespace: str = "default"


class TagsPruned(EventData, frozen=True, kw_only=True):
    """Emitted by `prune`, with the plan that was applied."""

    TYPE = "dev.modelhooks.tags.pruned"
    repository: str
    deleted: Annotated[list[str], _doc("the tags deleted")] = field(default_factory=list)
    kept: Annotated[list[str], _doc("the tags kept")] = field(default_factory=list)
    manifests: Annotated[
        list[str], _doc("the manifests deleted: referrers first, then untagged ones")
    ] = field(default_factory=list)
    dry_run: bool = False


class PruneRequested(EventData, frozen=True, kw_only=True):
    """Asks `prune` to apply a repository's retention policy now: a schedule sends it
    (Cloud Scheduler through Pub/Sub; a Knative PingSource's ping is translated to it)."""

    TYPE = "dev.modelhooks.prune.requested"
    uri: Annotated[
        str,
        Meta(
            pattern=r"^oci://[a-z0-9][a-z0-9.-]*(:[0-9]+)?/[a-z0-9][a-z0-9._/-]*$",
            max_length=1024,
            description="the repository, oci://host[:port]/repository",
        ),
    ]
    namespace: Annotated[
        Namespace | None,
        _doc("the tenant asking; unset: the tenant that owns the repository"),
    ] = None


class ArtifactPurged(EventData, frozen=True, kw_only=True):
    """Emitted by `cleanup` after deleting per policy."""

    TYPE = "dev.modelhooks.artifact.purged"
    uri: str
    model: Annotated[str | None, _doc("the deleted model (a Model's name) this was for")] = None
    deleted: Annotated[
        list[str], _doc("what went: keys, tags, referrer and manifest digests, in order")
    ] = field(default_factory=list)
    kept: Annotated[list[str], _doc("what stayed (in use, protected, retained)")] = field(
        default_factory=list
    )
    failed: Annotated[dict[str, str], _doc("what could not be deleted, and why")] = field(
        default_factory=dict
    )
    policy: str
    namespace: str = "default"


EVENT_TYPES: dict[str, type[EventData]] = {
    cls.TYPE: cls
    for cls in (
        ArtifactPushed,
        ArtifactDeleted,
        PruneRequested,
        ModelCreated,
        ModelUpdated,
        ModelDeleted,
        ModelRegistered,
        ModelSigned,
        TagsPruned,
        ArtifactPurged,
    )
}


def data_class(event_type: str) -> type[EventData] | None:
    return EVENT_TYPES.get(event_type)


class CanonicalEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A canonical CloudEvent: the envelope attributes plus a typed payload.

    >>> e = CanonicalEvent.new(ArtifactPushed(model="m", version="1", uri="file:///m/1/",
    ...     digest="sha256:00", store="local"), source="/example")
    >>> e.type
    'dev.modelhooks.artifact.pushed'
    """

    id: str
    source: str
    type: str
    data: EventData
    subject: str | None = None
    time: datetime | None = None
    extensions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def new(
        cls,
        data: EventData,
        *,
        source: str,
        subject: str | None = None,
        id: str | None = None,
        extensions: dict[str, str] | None = None,
    ) -> CanonicalEvent:
        return cls(
            id=id or str(uuid.uuid4()),
            source=source,
            type=data.TYPE,
            data=data,
            subject=subject,
            time=datetime.now(UTC),
            extensions=extensions or {},
        )

    @property
    def dataschema(self) -> str:
        return self.data.dataschema()

    def replace(self, **changes: Any) -> CanonicalEvent:
        return msgspec.structs.replace(self, **changes)

    def attributes(self) -> dict[str, str]:
        """CloudEvents context attributes as strings (for headers and routing)."""
        attrs = {
            "specversion": "1.0",
            "id": self.id,
            "source": self.source,
            "type": self.type,
            "datacontenttype": "application/json",
            "dataschema": self.dataschema,
        }
        if self.subject:
            attrs["subject"] = self.subject
        if self.time:
            attrs["time"] = self.time.isoformat().replace("+00:00", "Z")
        attrs.update(self.extensions)
        return attrs
