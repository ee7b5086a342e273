"""Ports: the only way handlers reach the world. One real adapter per backend lives in
`functions/adapters/<port>/`; in-memory fakes for unit tests pass the same contract tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from modelhooks.core.records import (
    Manifest,
    ModelArtifact,
    ModelVersion,
    ObjectInfo,
    RegisteredModel,
    Tag,
)

if TYPE_CHECKING:  # the Cluster port's alone: a function without one does not import it
    from modelhooks.core.conditions import ModelEvent

__all__ = [
    "Cluster",
    "DeliveryLog",
    "ModelRegistry",
    "ObjectReader",
    "ObjectStore",
    "OciRegistry",
    "Secrets",
    "Signer",
    "Verifier",
]


@runtime_checkable
class ObjectReader(Protocol):
    """What reading a model needs (hashing for signing reads an OCI model through it too)."""

    def stat(self, bucket: str, key: str) -> ObjectInfo | None:
        """The object's info, or None when it does not exist."""
        ...

    def list(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under `prefix` (recursively), in key order."""
        ...

    def read_range(self, bucket: str, key: str, start: int, length: int) -> bytes:
        """`length` bytes from `start` (fewer at the end of the object). NotFound if absent."""
        ...

    def read_chunks(
        self, bucket: str, key: str, start: int, length: int, chunk_size: int
    ) -> Iterator[bytes | memoryview]:
        """The same bytes as `read_range`, streamed in order as they arrive (ONE request
        where the backend can stream), in pieces of at most `chunk_size` bytes. A piece
        may be a view of a buffer reused for the next one: use it before taking the next.
        Closing the iterator early ends the request. NotFound if absent."""
        ...


@runtime_checkable
class ObjectStore(ObjectReader, Protocol):
    """Buckets of objects: a local directory, GCS or S3.

    >>> store.put("models", "m/1/_SUCCESS", b"", if_absent=True)  # doctest: +SKIP
    ObjectInfo(bucket='models', key='m/1/_SUCCESS', size=0, generation='...')
    """

    def put(self, bucket: str, key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
        """Write an object. With `if_absent`, Conflict when it already exists."""
        ...

    def delete(self, bucket: str, key: str) -> None:
        """Delete an object; deleting what is gone succeeds."""
        ...

    def list_versions(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every stored revision under `prefix`, the noncurrent ones of a versioned bucket
        too (`ObjectInfo.current` says which), in key order; where the backend keeps no old
        revisions, the same as `list`."""
        ...

    def delete_many(
        self, bucket: str, objects: Sequence[ObjectInfo], *, versions: bool = False
    ) -> dict[str, str]:
        """Delete many objects in as few requests as the backend allows (S3: DeleteObjects,
        at most 1000 keys a request; GCS: bounded concurrency), each only while it is still
        the revision listed where the backend can check (GCS: if-generation-match; local:
        the generation): a changed object stays. With `versions`, the listed revisions
        themselves go (old versions of a versioned bucket), not the current object.
        Deleting what is gone succeeds. Returns {key: why} for what it did not delete
        (changed, refused); a transient failure raises Unavailable or Throttled after the
        rest was attempted: a redelivery finishes the job."""
        ...


@runtime_checkable
class ModelRegistry(Protocol):
    """Kubeflow Model Registry vocabulary over any backend (MR REST, CRDs, SQLite).

    `create_*` raise Conflict when the name is taken (a concurrent delivery won the race);
    callers then `get_*` again. Nothing here deletes: models and versions are archived.
    """

    def transaction(self) -> AbstractContextManager[None]:
        """Group the writes of one handler: all or nothing where the backend can (SQLite);
        elsewhere each write stands alone and handlers stay correct by being idempotent."""
        ...

    def get_model(self, name: str) -> RegisteredModel | None: ...

    def create_model(self, name: str, *, properties: Mapping[str, str]) -> RegisteredModel: ...

    def update_model(self, model: RegisteredModel) -> RegisteredModel: ...

    def list_models(self) -> list[RegisteredModel]: ...

    def get_version(self, model_id: str, name: str) -> ModelVersion | None: ...

    def get_version_by_id(self, version_id: str) -> ModelVersion | None:
        """A version by its id (one exact read, never a listing), None when there is none."""
        ...

    def create_version(
        self, model_id: str, name: str, *, properties: Mapping[str, str]
    ) -> ModelVersion: ...

    def update_version(self, version: ModelVersion) -> ModelVersion: ...

    def list_versions(self, model_id: str) -> list[ModelVersion]: ...

    def list_artifacts(self, version_id: str) -> list[ModelArtifact]: ...

    def get_artifact(self, artifact_id: str) -> ModelArtifact | None:
        """An artifact by its id (transfer's update_artifact names one), None when there is
        none; its `version_id` may be "" where the backend reads an artifact alone."""
        ...

    def upsert_artifact(self, artifact: ModelArtifact) -> ModelArtifact:
        """Create the artifact (empty id) or update it (by id); returns it with its id."""
        ...


@runtime_checkable
class Signer(Protocol):
    """Signs a model's in-toto Statement into a model-signing bundle (Sigstore bundle v0.3
    JSON with a DSSE envelope). Implementations: EC key, certificate, Sigstore keyless
    (`functions.signing`).

    >>> bundle = signer.sign(manifest.statement())  # doctest: +SKIP
    """

    def identity(self) -> str:
        """Who signs, for people and the registry (key fingerprint, subject, identity)."""
        ...

    def sign(self, statement: bytes) -> bytes:
        """The bundle (JSON bytes) over exactly these Statement bytes. ConfigError for bad
        key material, Unavailable when a signing service (Fulcio, Rekor) fails."""
        ...

    def signed(self, bundle: bytes) -> bool:
        """Whether `bundle` carries this signer's signature (so a redelivery can keep an
        existing signature instead of signing again)."""
        ...


@runtime_checkable
class Verifier(Protocol):
    """Checks a model-signing bundle against trusted keys, chains or identities.

    >>> statement = verifier.verify(bundle)  # doctest: +SKIP
    """

    def identity(self) -> str:
        """What is trusted, for messages."""
        ...

    def verify(self, bundle: bytes) -> bytes:
        """The signed Statement bytes, once the signature and its trust are checked;
        VerificationFailed (with details) otherwise. Does not look at the model."""
        ...


@runtime_checkable
class DeliveryLog(Protocol):
    """Deliveries already handled, by (function, event source, event id): the payload
    digest and the replies (structured CloudEvents, JSON), so dedupe survives a restart.

    >>> log.put(("register", "s", "e1"), "ab12…", b"[]")  # doctest: +SKIP
    """

    def get(self, key: tuple[str, str, str]) -> tuple[str, bytes] | None: ...

    def put(self, key: tuple[str, str, str], digest: str, replies: bytes) -> None:
        """Record a delivery; a key recorded already keeps its first record."""
        ...


@runtime_checkable
class OciRegistry(Protocol):
    """An OCI registry: tags, manifests and referrers of repositories on one host.
    Implementations: `DistributionRegistry` (any OCI distribution API) and
    `ArtifactRegistry` (Google Artifact Registry's API; manifests by its Docker path).

    >>> registry.resolve("models/bert", "v1")  # doctest: +SKIP
    'sha256:…'
    """

    def tags(self, repo: str, page: int = 1000) -> Iterator[str]:
        """Every tag of `repo` (paginated underneath); none for a missing repository."""
        ...

    def resolve(self, repo: str, tag: str) -> str | None:
        """The digest `tag` names now, or None."""
        ...

    def history(self, repo: str) -> tuple[list[Tag], list[Manifest]]:
        """Every tag with its digest and push time, and the manifests no tag names where
        the registry can list them (else none): what retention plans over."""
        ...

    def manifest(self, repo: str, ref: str) -> tuple[dict[str, Any], str, int]:
        """(manifest JSON, digest, size) of a tag or digest; NotFound when absent."""
        ...

    def push_manifest(self, repo: str, ref: str, manifest: dict[str, Any]) -> str:
        """Put a manifest under a tag or its digest (its blobs pushed already); its digest."""
        ...

    def delete_manifests(self, repo: str, digests: Sequence[str]) -> None:
        """Delete manifests by digest (their tags first: some registries keep them
        dangling); deleting what is gone succeeds."""
        ...

    def delete_tag(self, repo: str, tag: str) -> bool:
        """Remove a tag, keeping its manifest (capability detection underneath); a tag that
        is gone succeeds. Whether this call removed it (False: gone already, another
        delivery's doing), so two runs at once tell one deletion once."""
        ...

    def referrers(self, repo: str, digest: str) -> list[dict[str, Any]]:
        """Descriptors of the manifests that refer to `digest` (signatures, SBOMs)."""
        ...


@runtime_checkable
class Secrets(Protocol):
    """Kubernetes Secrets, read by namespace and name: the credentials a namespace lends
    cleanup for its own Models (`spec.source.secretRef`). Implementation:
    `KubernetesSecrets`; tests use a dict.

    >>> secrets.get("ml", "s3-credentials")["AWS_ACCESS_KEY_ID"]  # doctest: +SKIP
    b'AKIA…'
    """

    def get(self, namespace: str, name: str) -> dict[str, bytes]:
        """The Secret's data, decoded. NotFound when it does not exist, Forbidden when RBAC
        refuses (both naming the namespace and the Secret), Unavailable when the API server
        does not answer."""
        ...


@runtime_checkable
class Cluster(Protocol):
    """The `Model` resources (modelhooks.dev/v1alpha1) of a cluster, as notify sees them: read
    them, write their status, hold and release their finalizer, record Events on them and
    roll out the workloads that serve them. Implementation: `KubernetesCluster`; tests use
    `InMemoryCluster`. Models are plain dicts, as the API server returns them.

    >>> cluster.get_model("ml", "bert")["metadata"]["generation"]  # doctest: +SKIP
    1

    Every method raises NotFound / Forbidden (naming what and where), Throttled or
    Unavailable (the API server did not answer) as the API server answers.
    """

    def get_model(
        self, namespace: str, name: str, *, cached: bool = False
    ) -> dict[str, Any] | None:
        """The Model, or None when it does not exist; `cached`: as the API server's watch
        cache has it, maybe a moment old (for a write conditional on its resourceVersion)."""
        ...

    def list_models(self, namespace: str) -> list[dict[str, Any]]:
        """Every Model of the namespace."""
        ...

    def apply_status(
        self, namespace: str, name: str, status: Mapping[str, Any], *, resource_version: str
    ) -> dict[str, Any]:
        """Server-side apply of `status` on the status subresource (field manager
        `modelhooks-notify`, forced), only while the Model is still at `resource_version`:
        Conflict when it changed since it was read (read it again, apply again). The fields
        notify applied before and leaves out are removed. Returns the Model."""
        ...

    def add_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        """Add `finalizer` unless present, never losing another writer's finalizers; False
        when it was there already, or the Model is gone or being deleted (the API server
        adds no finalizer to an object being deleted)."""
        ...

    def remove_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        """Remove `finalizer` if present, never another; False when it was not there or the
        Model is gone."""
        ...

    def record(self, event: ModelEvent) -> bool:
        """Create the Event (events.k8s.io/v1) named `event.name`; False when it exists
        already (a redelivery)."""
        ...

    def roll_out(self, namespace: str, model: str, version: str) -> list[str]:
        """Set the annotation `modelhooks.dev/model-version: <version>` on the pod template of
        every Deployment, and on every KServe InferenceService (its predictor's pods), of
        `namespace` annotated `modelhooks.dev/model: <model>`; those already there are left
        alone. Returns `Kind/name` of each workload changed."""
        ...
