"""The canonical events: one vocabulary, whatever the upstream.

Each `data` payload is a frozen, versioned model; its JSON Schema lives in
`events/schemas/<type>.v<N>.json` and is named by the CloudEvent's `dataschema`.
An artifact is always named by an immutable reference (OCI digest, GCS generation,
S3 versionId/ETag): floating references are resolved once, at ingress.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import msgspec
from msgspec import Meta, field

from modelhooks.events.errors import BadRequest
from modelhooks.events.ingress import MAX_NAME_BYTES

__all__ = [
    "BUCKET_NAME",
    "END",
    "EVENT_TYPES",
    "MAX_BUCKET",
    "MAX_UID",
    "ArtifactDeleted",
    "ArtifactPurged",
    "ArtifactPushed",
    "CanonicalEvent",
    "EventData",
    "ModelCreated",
    "ModelDeleted",
    "ModelRefused",
    "ModelRegistered",
    "ModelSigned",
    "ModelUpdated",
    "PruneRequested",
    "TagsPruned",
    "TransferRequested",
    "data_class",
    "destination_refusal",
    "fit_id",
    "is_digest",
    "is_pullable_digest",
    "parse",
]

SCHEMA_BASE = "https://modelhooks.dev/schemas"
# A Model's uid, as register keeps it (a fact per uid: kept small): Kubernetes' are UUIDs, 36
MAX_UID = 64
StoreKind = Literal["local", "gcs", "s3", "oci", "http"]
# One grammar for model and version names, whatever the upstream: path segments (an OCI
# repository has several) of letters, digits, '.', '_', '-' and inner spaces, each starting
# with a letter, digit or '_' (so never '.' or '..'); no control characters, no empty
# segments, no leading or trailing space.
_SEGMENT = r"[A-Za-z0-9_](?:[A-Za-z0-9._ -]*[A-Za-z0-9._-])?"
# msgspec searches with Python's re, whose '$' also matches before a final '\n' ('v1\n' was
# a version); JSON Schema's (ECMA-262) '$' does not (the schemas say '$': events.schemas)
END = r"$(?!\n)"
NAME_PATTERN = rf"^{_SEGMENT}(?:/{_SEGMENT})*{END}"
VERSION_PATTERN = rf"^[A-Za-z0-9_][A-Za-z0-9._+-]*{END}"
Name = Annotated[
    str,
    Meta(min_length=1, max_length=253, pattern=NAME_PATTERN, description="a model name"),
]
VersionName = Annotated[
    str,
    Meta(min_length=1, max_length=128, pattern=VERSION_PATTERN, description="a version name"),
]
# An OCI digest, `algorithm:encoded` (image-spec descriptor.md); the registered algorithms'
# encodings are the lower-case hex of their size. Patterns, not compiled here: `re` compiles
# them on first use (a function's start compiles nothing it may never read).
_DIGEST = r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+"
_ENCODED = {"sha256": r"[a-f0-9]{64}", "sha512": r"[a-f0-9]{128}"}


def is_digest(reference: str) -> bool:
    """`algorithm:encoded`; for sha256 and sha512, the lower-case hex of their size."""
    if not re.fullmatch(_DIGEST, reference):  # fullmatch: '$' takes a final '\n' too
        return False
    algorithm, _, encoded = reference.partition(":")
    encoding = _ENCODED.get(algorithm)
    return encoding is None or bool(re.fullmatch(encoding, encoded))


def is_pullable_digest(reference: str) -> bool:
    """Is this reference a digest: one the registries take in a URL, sha256 or sha512 (the
    algorithms image-spec and distribution register), in the lower-case hex of its size.
    What every function asks of an OCI reference's tag-or-digest (a tag has no ':'), of a
    status's resolvedDigest or an artifact's digest (`gcs-generation:…` is none): sha512
    alike, never `startswith("sha256:")`. Any other (`md5:abc`, `sha512:` of 64 digits,
    upper-case hex) was sent as written and answered 400, or taken for a tag (distribution
    2.8 looked for `tags/md5:abc` on its disk), read as the registry failing.

    >>> is_pullable_digest("sha256:" + "a" * 64), is_pullable_digest("sha512:" + "a" * 128)
    (True, True)
    >>> is_pullable_digest("blake3:" + "a" * 64), is_pullable_digest("v1")
    (False, False)
    """
    return is_digest(reference) and reference.partition(":")[0] in _ENCODED


# A Kubernetes namespace (DNS label): the tenant.
Namespace = Annotated[
    str, Meta(min_length=1, max_length=63, pattern=rf"^[a-z0-9]([-a-z0-9]*[a-z0-9])?{END}")
]
# A bucket (GCS's and S3's names, legacy ones included; modelhooks.core.stores reads a
# gs:// or s3:// URI's so): never a path. A transfer's bucket `mine/../theirs` passed tenancy
# as `mine` while the GCS client put it in the request path unquoted, resolved to
# `/b/theirs`. At most 222 characters (GCS's longest, dotted): botocore refuses a longer one
# itself, which was taken as the store failing (503, for ever).
BUCKET_NAME = r"[A-Za-z0-9_-][A-Za-z0-9._-]*"
MAX_BUCKET = 222
Bucket = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_BUCKET,
        pattern=rf"^{BUCKET_NAME}{END}",
        description="a bucket name",
    ),
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


# A validation error's parts: patterns compiled when an error first needs them (re's own
# cache), not at every start
_AT = r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$"
_FIELD = r"field `(?P<name>[^`]+)`"
_CHECK = r"^(?P<name>[a-z_]+(?:\.[a-z_]+)*): (?P<msg>.+)$"  # a __post_init__'s


def parse(cls: type[D], raw: Any, where: str = "data") -> D:
    """Validate a decoded JSON value as `cls`; BadRequest names the offending field."""
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        m = re.match(_AT, str(exc))
        msg = m["msg"] if m else str(exc)
        path = (m["path"] or "").lstrip(".") if m else ""
        named = re.search(_FIELD, msg) or re.match(_CHECK, msg)
        if named:  # "Object missing required field `model`": the field is the subject
            path = f"{path}.{named['name']}" if path else named["name"]
            msg = named["msg"] if "msg" in named.groupdict() else msg
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
    size: Annotated[int, Meta(ge=0, description="the artifact's size in bytes")] | None = None
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
    uid: (
        Annotated[
            str,
            Meta(
                max_length=MAX_UID,
                description="the Model's metadata.uid (Kubernetes': 36 characters): register"
                " keeps it on the version the Model registers, and a deletion naming it archives"
                " only what that uid registered (none: every registration older than the"
                " deletion)",
            ),
        ]
        | None
    ) = None
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
    created: Annotated[
        bool, _doc("false when everything already existed (registered by another event)")
    ]


class ModelRefused(EventData, frozen=True, kw_only=True):
    """Emitted by `register` when it refuses a Model's version for good (the version is
    registered from another source, the namespace's tenancy forbids the source, the source
    is malformed), and by `sign` when it refuses a push for good (its content written again
    since, another signature in its place, the version registered with another digest, a
    source the tenancy forbids): why, for notify to say it on that Model (condition
    Registered, or Signed for sign's, False, its reason naming the cause: VersionConflict,
    SourceForbidden, InvalidSpec, else RegistrationRefused; ContentChanged,
    SignatureExists, VersionConflict, SourceForbidden, InvalidSource, else
    SigningRefused)."""

    TYPE = "dev.modelhooks.model.refused"
    model: Annotated[str, _doc("the Model's name")]
    version: str = ""
    uri: Annotated[
        str, _doc("the Model's spec.source as register read it; sign's: the push's location")
    ] = ""
    namespace: str = "default"
    refused: Annotated[str, _doc("why, as the refusal's 4xx said it (`<code>: <message>`)")]
    model_uid: Annotated[
        str,
        _doc(
            "the refused Model's metadata.uid, when its event carried it: notify tells that"
            " Model only, never a Model created since under the same name"
        ),
    ] = ""
    # absent for register's (UNSET: not written), so register's refusal is the payload it
    # was before sign's were told, which a notify of that time still reads (it takes no
    # field it does not know: a sign refusal is refused by it, never told as register's)
    function: Annotated[
        Literal["register", "sign"] | msgspec.UnsetType,
        _doc(
            "the function that refused: register (absent: notify sets Registered) or sign"
            " (Signed: told to the Model of the push's name, version and location)"
        ),
    ] = msgspec.UNSET


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
            pattern=rf"^oci://[a-z0-9][a-z0-9.-]*(:[0-9]+)?/[a-z0-9][a-z0-9._/-]*{END}",
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
    refused: Annotated[
        str,
        _doc(
            "set when cleanup refused a Model's deletion for good and stopped: why (tenancy,"
            " the Model's source, Secret or policy, checked before anything is deleted; or a"
            " store refusing a delete); the Model keeps its finalizer"
        ),
    ] = ""
    model_uid: Annotated[
        str,
        _doc(
            "the deleted Model's metadata.uid, when its deletion carried it: notify tells that"
            " Model only, never a Model created since under the same name"
        ),
    ] = ""


# What a transfer request may carry: never credentials (those are the function's own
# configuration, the MODEL_SYNC_* settings and credential files `modelhooks transfer` reads).
_REF = Annotated[str, Meta(min_length=1, max_length=1024)]
# custom properties keep their JSON type where the registry can (Kubeflow: int, double, bool,
# struct for an object or array)
Properties = dict[str, str | int | float | bool | dict[str, Any] | list[Any]]


class _Part(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class TransferSource(_Part, frozen=True, kw_only=True):
    """Where the model is: s3/gcs `bucket` + `key` (a prefix), oci `uri`
    (host/repository:tag or @digest), uri `uri` (an http(s) file or zip/tar archive)."""

    type: Annotated[Literal["s3", "gcs", "oci", "uri"], _doc("the source's kind")]
    bucket: Annotated[Bucket | None, _doc("s3, gcs: the bucket")] = None
    key: Annotated[str | None, _doc("s3, gcs: the key prefix of the model's files")] = None
    region: Annotated[str | None, _doc("s3: the bucket's region")] = None
    uri: Annotated[_REF | None, _doc("oci: host/repository:tag|@digest; uri: http(s)://…")] = None
    sha256: Annotated[
        Annotated[str, Meta(pattern=rf"^(sha256:)?[0-9a-fA-F]{{64}}{END}")] | None,
        _doc("uri: the sha256 of what it serves (checked before anything is registered)"),
    ] = None

    @property
    def location(self) -> str:
        return _location(self)

    def __post_init__(self) -> None:
        _needs(self, {"s3": ("bucket", "key"), "gcs": ("bucket",), "oci": ("uri",)})
        if self.type == "uri" and not (self.uri or "").startswith(("https://", "http://")):
            raise ValueError("uri: a uri source is an http:// or https:// URL")


class TransferDestination(_Part, frozen=True, kw_only=True):
    """Where the model goes: s3/gcs `bucket` + `key`, or oci `uri` (host/repository:tag)."""

    type: Annotated[Literal["s3", "gcs", "oci"], _doc("the destination's kind")]
    bucket: Annotated[Bucket | None, _doc("s3, gcs: the bucket")] = None
    key: Annotated[str | None, _doc("s3, gcs: the key prefix to write under")] = None
    region: Annotated[str | None, _doc("s3: the bucket's region")] = None
    uri: Annotated[_REF | None, _doc("oci: host/repository:tag")] = None
    format: Annotated[
        Literal["image", "artifact"] | None,
        _doc("oci: image (on the base image) or artifact (a plain layer per file)"),
    ] = None
    base_image: Annotated[str | None, _doc("oci, format image: the base image")] = None

    @property
    def location(self) -> str:
        return _location(self)

    def __post_init__(self) -> None:
        _needs(self, {"s3": ("bucket", "key"), "gcs": ("bucket",), "oci": ("uri",)})
        refused = destination_refusal(self.uri or "") if self.type == "oci" else None
        if refused:
            raise ValueError(f"uri: {refused}")


def destination_refusal(uri: str) -> str | None:
    """Why an OCI reference cannot be a transfer's destination, or None: one naming a digest
    (`repo@sha256:…`, `repo:v1@sha256:…`) cannot be pushed (a manifest's digest is what its
    bytes hash to, known once the model is copied; the registry refuses the push), so it is
    refused before anything is registered or copied. The one rule for the event's
    destination.uri and the Job's MODEL_SYNC_DESTINATION_OCI_URI.

    >>> destination_refusal("r.io/m:v1") is None, destination_refusal("r.io/m@sha256:ab")[:26]
    (True, "'r.io/m@sha256:ab' names a")
    """
    if "@" in uri.removeprefix("oci://").partition("/")[2]:
        return (
            f"{uri!r} names a digest; a destination is the tag to push the model under "
            "(host/repository:tag): the digest is the copy's, told in the result's uri "
            "(model.registered's)"
        )
    return None


def _location(part: TransferSource | TransferDestination) -> str:
    """The location as a URI (what tenancy rules and logs name): s3://bucket/key,
    gs://bucket/key, oci://host/repository:tag, or the http(s) URL."""
    if part.type in ("s3", "gcs"):
        return f"{'gs' if part.type == 'gcs' else 's3'}://{part.bucket}/{part.key or ''}"
    if part.type == "oci":
        return "oci://" + (part.uri or "").removeprefix("oci://")
    return part.uri or ""


def _needs(part: Any, required: dict[str, tuple[str, ...]]) -> None:
    for name in required.get(part.type, ()):
        if not getattr(part, name):
            raise ValueError(f"{name}: required for type {part.type}")
    if part.type != "oci" and part.type != "uri" and part.uri is not None:
        raise ValueError(f"uri: not for type {part.type} (bucket and key name it)")


class TransferModel(_Part, frozen=True, kw_only=True):
    """The RegisteredModel: `name` (create_model, or to find it for create_version) or `id`."""

    name: Name | None = None
    id: Annotated[str | None, _doc("an existing model's id (create_version)")] = None
    description: str | None = None
    owner: str | None = None
    custom_properties: Properties = field(default_factory=dict)


class TransferVersion(_Part, frozen=True, kw_only=True):
    name: Annotated[VersionName | None, _doc("create_model, create_version")] = None
    id: Annotated[str | None, _doc("the version's id (update_artifact)")] = None
    description: str | None = None
    author: str | None = None
    custom_properties: Properties = field(default_factory=dict)


class TransferArtifact(_Part, frozen=True, kw_only=True):
    id: Annotated[str | None, _doc("the ModelArtifact to update (update_artifact)")] = None
    name: Annotated[str, Meta(max_length=253)] | None = None
    model_format_name: str | None = None
    model_format_version: str | None = None
    storage_key: str | None = None
    custom_properties: Properties = field(default_factory=dict)


class TransferRequested(EventData, frozen=True, kw_only=True):
    """Asks `transfer` to copy a model from `source` to `destination` (streaming,
    resumable), register it per `intent` and sign it: `modelhooks transfer` as a function.
    Carries no credentials: they are the function's configuration."""

    TYPE = "dev.modelhooks.transfer.requested"
    source: TransferSource
    destination: TransferDestination
    intent: Annotated[
        Literal["create_model", "create_version", "update_artifact"],
        _doc("Kubeflow's upload intent: what is created, what is updated"),
    ]
    model: TransferModel = field(default_factory=TransferModel)
    version: TransferVersion = field(default_factory=TransferVersion)
    artifact: TransferArtifact = field(default_factory=TransferArtifact)
    sign: Annotated[
        bool | None, _doc("sign the copy; unset: as the function's configuration says")
    ] = None
    namespace: Annotated[
        Namespace | None,
        _doc("the tenant asking; unset: the tenant that owns the source"),
    ] = None

    def __post_init__(self) -> None:
        if self.intent == "create_model" and not self.model.name:
            raise ValueError("model.name: required for intent create_model")
        if self.intent == "create_version" and not (self.model.name or self.model.id):
            raise ValueError("model.name: (or model.id) required for intent create_version")
        if self.intent != "update_artifact" and not self.version.name:
            raise ValueError(f"version.name: required for intent {self.intent}")
        if self.intent == "update_artifact" and not self.artifact.id:
            raise ValueError("artifact.id: required for intent update_artifact")


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
        ModelRefused,
        ModelSigned,
        TagsPruned,
        ArtifactPurged,
        TransferRequested,
    )
}


def data_class(event_type: str) -> type[EventData] | None:
    return EVENT_TYPES.get(event_type)


def fit_id(id: str, tail: str = "") -> str:
    """`id + tail` as an event id, at most MAX_NAME_BYTES of UTF-8 as ingress takes one:
    past it, `id` is cut short and a digest of it whole (24 hex) put before `tail`, so two
    long ids sharing a beginning stay apart and the same id fits alike every time. An id a
    translator builds from a payload (`s3://bucket/key#…`, a key of up to 1,024 bytes) would
    otherwise be refused by the next function's ingress on its way back from the Broker.

    >>> fit_id("a" * 2000) == fit_id("a" * 1999 + "b"), len(fit_id("é" * 600).encode()) <= 1024
    (False, True)
    """
    whole = id + tail
    if len(whole.encode(errors="surrogatepass")) <= MAX_NAME_BYTES:
        return whole
    head = id.encode(errors="surrogatepass")
    tail = f"~{hashlib.sha256(head).hexdigest()[:24]}{tail}"
    room = MAX_NAME_BYTES - len(tail.encode(errors="surrogatepass"))
    return head[: max(room, 0)].decode(errors="ignore") + tail


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

    def derived_id(self, name: str) -> str:
        """The id of what this event leads to under `name` (a reply, the deletion register
        says again): `<id>/<name>/<digest>`, the digest (24 hex) over this event's source, id
        and `name`; at most MAX_NAME_BYTES of UTF-8, as ingress takes an id (the event's id
        cut short: a reply to an event of a 1,024-byte id was refused by the next function's
        ingress). CloudEvents ids are unique within their source alone: two upstream
        events of one id (two buckets' notifications, a GCS and a MinIO one) named their
        replies alike under the function's one source, and the next function took the
        second for the first delivered again with other content (409, never retried).
        Deterministic: a redelivery derives the same id.

        >>> a = CanonicalEvent.new(ModelDeleted(name="m"), source="/a", id="7")
        >>> a.derived_id("registered") == a.replace(source="/b").derived_id("registered")
        False
        """
        key = msgspec.json.encode([self.source, self.id, name])
        return fit_id(self.id, f"/{name}/{hashlib.sha256(key).hexdigest()[:24]}")

    def reply(self, data: EventData, *, source: str, name: str) -> CanonicalEvent:
        """The event a function answers this one with: named after it (`derived_id`), of
        its subject and its time. A function of the event and the state it leaves, so a
        redelivery the delivery log does not remember (a crash before its record was
        written, another instance) answers what the first delivery was answered."""
        return CanonicalEvent(
            id=self.derived_id(name),
            source=source,
            type=data.TYPE,
            data=data,
            subject=self.subject,
            time=self.time,
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
