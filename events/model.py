"""The canonical events: one vocabulary, whatever the upstream.

Each `data` payload is a frozen, versioned model; its JSON Schema lives in
`events/schemas/<type>.v<N>.json` and is named by the CloudEvent's `dataschema`.
An artifact is always named by an immutable reference (OCI digest, GCS generation,
S3 versionId/ETag): floating references are resolved once, at ingress.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

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
    "TagsPruned",
    "data_class",
]

SCHEMA_BASE = "https://modelhooks.dev/schemas"
StoreKind = Literal["local", "gcs", "s3", "oci"]
Name = Field(min_length=1, max_length=253)


class EventData(BaseModel):
    """Base of every canonical payload."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    TYPE: ClassVar[str]
    VERSION: ClassVar[int] = 1

    @classmethod
    def dataschema(cls) -> str:
        return f"{SCHEMA_BASE}/{cls.TYPE}.v{cls.VERSION}.json"


class ArtifactPushed(EventData):
    """A complete model artifact is available at an immutable reference."""

    TYPE = "dev.modelhooks.artifact.pushed"
    model: str = Name
    version: str = Name
    uri: str = Field(
        description="gs://b/prefix/, s3://b/prefix/, file://…, oci://host/repo@sha256:…"
    )
    digest: str = Field(
        min_length=1,
        description="immutable identity: sha256:<hex> (OCI), gcs-generation:<n>, "
        "s3-version:<id> or s3-etag:<etag> of the ready marker, sha256:<hex> locally",
    )
    store: StoreKind
    namespace: str = Field(default="default", description="the tenant the event belongs to")
    tag: str | None = Field(default=None, description="the tag pushed, for OCI")
    size: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class ArtifactDeleted(EventData):
    """An artifact or tag disappeared upstream."""

    TYPE = "dev.modelhooks.artifact.deleted"
    uri: str
    store: StoreKind
    digest: str | None = None
    model: str | None = None
    version: str | None = None
    tag: str | None = None
    namespace: str = "default"


class _ModelLifecycle(EventData):
    name: str = Name
    namespace: str = "default"
    version: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    spec: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] = Field(default_factory=dict)


class ModelCreated(_ModelLifecycle):
    TYPE = "dev.modelhooks.model.created"


class ModelUpdated(_ModelLifecycle):
    TYPE = "dev.modelhooks.model.updated"


class ModelDeleted(_ModelLifecycle):
    TYPE = "dev.modelhooks.model.deleted"


class ModelRegistered(EventData):
    """Emitted by `register`."""

    TYPE = "dev.modelhooks.model.registered"
    model: str
    version: str
    uri: str
    digest: str
    registry: str = Field(description="the registry backend: sqlite, kubeflow, crd")
    registered_model_id: str
    model_version_id: str
    model_artifact_id: str
    namespace: str = "default"
    created: bool = Field(description="false when everything already existed (a redelivery)")


class ModelSigned(EventData):
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


class TagsPruned(EventData):
    """Emitted by `prune`, with the plan that was applied."""

    TYPE = "dev.modelhooks.tags.pruned"
    repository: str
    deleted: list[str] = Field(default_factory=list)
    kept: list[str] = Field(default_factory=list)
    dry_run: bool = False


class ArtifactPurged(EventData):
    """Emitted by `cleanup` after deleting per policy."""

    TYPE = "dev.modelhooks.artifact.purged"
    uri: str
    deleted: list[str] = Field(default_factory=list)
    policy: str
    namespace: str = "default"


EVENT_TYPES: dict[str, type[EventData]] = {
    cls.TYPE: cls
    for cls in (
        ArtifactPushed,
        ArtifactDeleted,
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


class CanonicalEvent(BaseModel):
    """A canonical CloudEvent: the envelope attributes plus a typed payload.

    >>> e = CanonicalEvent.new(ArtifactPushed(model="m", version="1", uri="file:///m/1/",
    ...     digest="sha256:00", store="local"), source="/example")
    >>> e.type
    'dev.modelhooks.artifact.pushed'
    """

    model_config = ConfigDict(frozen=True)

    id: str
    source: str
    type: str
    data: EventData
    subject: str | None = None
    time: datetime | None = None
    extensions: dict[str, str] = Field(default_factory=dict)

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
