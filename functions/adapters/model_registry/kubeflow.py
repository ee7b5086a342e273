"""`KubeflowModelRegistry`: the Kubeflow Model Registry REST API (v1alpha3) through a
pool of kept-alive connections (`endpoints.endpoint_pool`, imported when the adapter is built).

Mapping: RegisteredModel, ModelVersion and ModelArtifact (artifactType "model-artifact")
map one to one; ids are the server's string ids; an artifact's digest is its custom
property "digest". Kubeflow's first-class fields that the domain records lack are custom
properties under `kubeflow.` in the domain (`FIELDS`: a model's owner, a version's author, an
artifact's description, model format name/version, storage key/path), written back as the
fields, so `registry show` prints them and an export keeps them on any backend.

Typed custom properties, both ways: string values are read as text, int, double, bool and
struct (a JSON object or array) values as `Typed` (a str of their JSON text that keeps the
value); a write sends a `Typed` as its type (as upstream's client writes 0.95: a double),
text with the type the server holds for that key (an unchanged value verbatim), new text as
a string. v0.3.0 answers a struct it was sent base64-encoded as the JSON text. A failed
upload is an artifact in state ABANDONED with the reason in `FAILURE_REASON` (upstream's
job leaves it PENDING).

Flat in registry size: every read and write of register and sign is exact, by name or by
id, never a listing. A version is created with externalId `modelhooks:<model id>:<name>`
and an artifact with `modelhooks:<version id>:<name>`, both found by that id (an exact,
unique query on every server version), so the hot path costs the same at 10 versions and
at 10,000. Server versions (PostgreSQL, the harness):
- v0.3.0: unquoted mixed-case table names in hand-written SQL. Parent-scoped queries
  (`model_version?name&parentResourceId`, `registered_models/{id}/versions`,
  `model_versions/{id}/artifacts`), any `filterQuery` and any `nextPageToken` answer 500
  SQLSTATE 42P01. `externalId` lookups, lookups by id, `registered_model?name` and the
  first page of a listing work. So: versions and artifacts by externalId; a version another
  client wrote (no such externalId) is found by name once, when creating it conflicts, by
  one scan of the version listing, and given its externalId ("adopted"): exact from then
  on. A version's artifacts: the one named `ARTIFACT` ("model", what register and transfer
  write) and those its custom property `ARTIFACTS` names (written when an artifact of
  another name is created), each by externalId. Listings (list, export, archive, cleanup,
  prune) fall back to the global listing in one page, filtered here.
- later tags, each asked of the module proxy once: v0.3.1-v0.3.9, v0.3.11, v0.3.13,
  v0.3.15-v0.3.18 and v0.4.0 are refused; v0.3.10, v0.3.12 and v0.3.14 are served but name
  their module github.com/kubeflow/hub and need a catalog module the proxy refuses, so they
  cannot be built here. Their SQL quotes table references: scoped queries and page tokens
  are tried first and used wherever they answer (README, "The registry on Kubeflow").
- a taken name is 409 (400/422 "already exists" on other versions): both are Conflict;
  creating under a parent that does not exist succeeds there, so the parent is checked.

Concurrency: a transaction (one handler's reads and writes) holds the lock of the first
model it names, so transactions of one model run one at a time in this process and those
of different models in parallel. Across processes (N pods) the Model Registry has no
conditional write; every update re-reads the record first and refuses (`StaleWrite`, a
Transient error: the delivery is redelivered and derives again) when it changed since the
transaction read it, and as the transaction ends it re-reads what it wrote and the models
it read, and refuses the same way when another writer changed them. What is left is a race
in the one round trip between the check and the write; delivery keyed by model (Pub/Sub
ordering keys, a Kafka broker's partition key) closes it.

Requests in flight: at most `connections` (`registry.connections`, 2) per process, the rest
wait their turn, first come first served (`_Turns`), for a kept-alive connection. The
server (v0.3.0; v0.3.10's code alike) opens PostgreSQL through Go's database/sql with its
defaults: 2 idle connections kept, any more closed after use, so a request beyond them
makes PostgreSQL fork a backend. With 8 in flight PostgreSQL spent 11.8-13.8 ms of CPU per
delivery (twice the server's own), with 2 3.7-3.9 ms (tests/bench/bench_kubeflow.py
--connections N). Turns matter: urllib3's blocking pool let a thread that had just given
a connection back take it again ahead of those waiting, and with 2 connections p99 was
337 ms; in turn, 94-99 ms at 125-127 deliveries/s (8 clients; 4 connections: 101-133/s,
p99 113-144 ms).

What that costs a push of a new version of a live model: 3 requests (the version, the
artifact, the model as the transaction ends: it starts from the model as this process last
saw it, by name, and reads it by name only the first time); it writes no model. Another
writer's change of the model since then ends that transaction in StaleWrite, once.
An update is a re-read, the PATCH and a re-read as the transaction ends. The first
re-read stays: a PATCH replaces the whole set of custom properties (v0.3.0's server drops
those not sent), so its answer shows what it wrote, never what it overwrote.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from modelhooks.core.errors import (
    BadRequest,
    Conflict,
    CredentialsRefused,
    Forbidden,
    ModelhooksError,
    NotFound,
    Throttled,
    Transient,
    Unavailable,
)
from modelhooks.core.records import (
    ArtifactState,
    ModelArtifact,
    ModelState,
    ModelVersion,
    RegisteredModel,
    Typed,
)

if TYPE_CHECKING:
    from modelhooks.adapters.endpoints import EndpointPool, Response

__all__ = [
    "ARTIFACT",
    "ARTIFACTS",
    "FAILURE_REASON",
    "FIELDS",
    "KubeflowModelRegistry",
    "StaleWrite",
    "external_id",
]

API_PATH = "/api/model_registry/v1alpha3"
ARTIFACT_TYPE = "model-artifact"
PAGE_SIZE = 1000
FIRST_PAGE = 100  # `walk`'s first page: its rows on screen at once
DIGEST = "digest"
ARTIFACT = "model"  # the artifact register and transfer write: found without a listing
ARTIFACTS = "modelhooks.artifacts"  # a version's other artifact names (comma-separated)
FAILURE_REASON = "modelhooks.failure_reason"  # why an ABANDONED artifact failed
LEGACY_VERSION_ID = "modelhooks.model_version_id"  # written before externalIds
_HIDDEN = frozenset({ARTIFACTS, LEGACY_VERSION_ID})  # this adapter's own: not the domain's
MODELS, VERSIONS, ARTIFACTS_PATH = "/registered_models", "/model_versions", "/model_artifacts"
# Kubeflow's own fields, as the domain's custom properties (key -> REST field), per kind.
FIELDS: dict[str, dict[str, str]] = {
    MODELS: {"kubeflow.owner": "owner"},
    VERSIONS: {"kubeflow.author": "author"},
    ARTIFACTS_PATH: {
        "kubeflow.description": "description",
        "kubeflow.model_format_name": "modelFormatName",
        "kubeflow.model_format_version": "modelFormatVersion",
        "kubeflow.storage_key": "storageKey",
        "kubeflow.storage_path": "storagePath",
    },
}
_TYPES = {
    "MetadataStringValue": "string_value",
    "MetadataIntValue": "int_value",
    "MetadataDoubleValue": "double_value",
    "MetadataBoolValue": "bool_value",
    "MetadataStructValue": "struct_value",
}
Json = dict[str, Any]
_dumps, _loads = json.dumps, json.loads  # `json` is also _call's parameter


class _BrokenQuery(Unavailable):
    """The server cannot run this query at all (SQLSTATE 42P01)."""


class StaleWrite(Transient):
    """Another writer changed a record this delivery read or wrote (another process: this
    one serializes each model's transactions). A redelivery reads it again."""

    code = "stale_write"


def external_id(parent_id: str, name: str) -> str:
    """The externalId of the version (artifact) `name` under model (version) `parent_id`.

    >>> external_id("12", "v1")
    'modelhooks:12:v1'
    """
    return f"modelhooks:{parent_id}:{name}"


def registry_error(status: int, message: str, where: str, **details: Any) -> ModelhooksError:
    """The modelhooks error for an HTTP error answer of the Model Registry."""
    text = f"model registry: {where} answered {status}: {message}"
    if status == 409 or (status in (400, 422) and "already exists" in message):
        return Conflict(text, **details)
    if status == 401:
        return CredentialsRefused(text, **details)
    if status == 403:
        return Forbidden(text, **details)
    if status == 404:
        return NotFound(text, **details)
    if status == 429:
        return Throttled(text, **details)
    if status >= 500 and "SQLSTATE 42P01" in message:
        return _BrokenQuery(text, **details)
    if status >= 500 and re.search(r"SQLSTATE (54000|22001)", message):
        # PostgreSQL's program_limit_exceeded, string_data_right_truncation: a value longer
        # than its indexes or columns hold (a string property past 2,704 bytes), every time
        text += " (a value is longer than the registry's database takes)"
        return BadRequest(text, **details)
    if 400 <= status < 500 and status != 408:
        return BadRequest(text, **details)
    return Unavailable(text, **details)  # 5xx, 408


class _Transaction(threading.local):
    """Per thread: how deep in `transaction()` it is, the model lock it holds, and the
    records it read and wrote ((collection, id) -> JSON as the server answered)."""

    def __init__(self) -> None:
        self.depth = 0
        self.model: str | None = None
        self.conflict: tuple[str, str] | None = None  # the version whose creation conflicted
        self.read: dict[tuple[str, str], Json] = {}
        self.written: dict[tuple[str, str], Json] = {}


class _Locks:
    """One lock per model name, kept while some thread holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    def acquire(self, name: str) -> None:
        with self._guard:
            lock, users = self._locks.get(name, (threading.Lock(), 0))
            self._locks[name] = (lock, users + 1)
        lock.acquire()

    def release(self, name: str) -> None:
        with self._guard:
            lock, users = self._locks[name]
            lock.release()
            if users == 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)


class _Turns:
    """At most `n` holders at once, served first come first served: a thread that has just
    given its turn back cannot take it again ahead of those waiting (urllib3's blocking
    pool lets it, and with 2 connections some requests waited many turns: p99 337 ms)."""

    def __init__(self, n: int) -> None:
        self._guard = threading.Lock()
        self._free = n
        self._waiting: deque[threading.Lock] = deque()

    def acquire(self, timeout: float) -> bool:
        with self._guard:
            if self._free and not self._waiting:
                self._free -= 1
                return True
            turn = threading.Lock()
            turn.acquire()
            self._waiting.append(turn)
        if turn.acquire(timeout=timeout):
            return True  # handed over by `release`
        with self._guard:
            if turn in self._waiting:  # still waiting: gives up its place
                self._waiting.remove(turn)
                return False
        return True  # handed over as it timed out

    def release(self) -> None:
        with self._guard:
            if self._waiting:
                self._waiting.popleft().release()  # the turn passes on, never freed
            else:
                self._free += 1


class _Models:
    """The models last seen, by name (at most `size`, the least recently used dropped): a
    transaction starts from its model as last seen, which its closing check verifies."""

    def __init__(self, size: int = 10_000) -> None:
        self._guard = threading.Lock()
        self._size = size
        self._by_name: OrderedDict[str, Json] = OrderedDict()

    def get(self, name: str) -> Json | None:
        with self._guard:
            found = self._by_name.get(name)
            if found is not None:
                self._by_name.move_to_end(name)
            return found

    def seen(self, item: Json) -> None:
        name = item.get("name")
        if not isinstance(name, str):
            return
        with self._guard:
            self._by_name[name] = item
            self._by_name.move_to_end(name)
            while len(self._by_name) > self._size:
                self._by_name.popitem(last=False)

    def forget(self, record_id: str) -> None:
        with self._guard:
            for name in [n for n, item in self._by_name.items() if item.get("id") == record_id]:
                del self._by_name[name]


class KubeflowModelRegistry:
    """A Kubeflow Model Registry, by its server URL (the REST base is appended); `token` a
    bearer token, `ca` the PEM certificate(s) its TLS is verified with (else the bundle of
    REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE, else certifi's); the proxy of the environment.

    >>> registry = KubeflowModelRegistry("https://model-registry:8443", token="...")  # doctest: +SKIP
    >>> registry.get_model("bert")  # doctest: +SKIP
    RegisteredModel(id='1', name='bert', ...)
    """

    name = "kubeflow"

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        ca: str | None = None,
        timeout: float = 30,
        connections: int = 2,
    ) -> None:
        """`connections`: the most requests in flight (`registry.connections`; see the
        module); a request waits up to `timeout` for its turn, then is Unavailable."""
        from modelhooks.adapters.endpoints import endpoint_pool  # http.client: not at import

        base = base_url.rstrip("/")
        self.api_url = base if base.endswith(API_PATH) else base + API_PATH
        self._timeout = timeout
        self._http: EndpointPool = endpoint_pool(self.api_url, ca=ca, maxsize=connections)
        self._turns = _Turns(connections)
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._txn = _Transaction()
        self._locks = _Locks()
        self._models = _Models()
        self._scoped: bool | None = None  # can the server answer parent-scoped queries?
        self._paged: bool | None = None  # can it follow a nextPageToken?

    def close(self) -> None:
        """Close the kept-alive connections."""
        self._http.clear()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Each write stands alone over REST (handlers are idempotent: a redelivery completes
        what a failure interrupted). A transaction serializes on the first model it names
        (in this process) and checks, before each update and as it ends, that no other
        writer changed what it read or wrote (`StaleWrite` otherwise; see the module)."""
        txn = self._txn
        txn.depth += 1
        try:
            yield
            if txn.depth == 1:
                self._check_written()
        finally:
            txn.depth -= 1
            if txn.depth == 0:
                txn.read.clear()
                txn.written.clear()
                txn.conflict = None
                if txn.model is not None:
                    self._locks.release(txn.model)
                    txn.model = None

    def _lock_model(self, name: str) -> None:
        txn = self._txn
        if txn.depth and txn.model is None:
            self._locks.acquire(name)
            txn.model = name

    def _check_written(self) -> None:
        """What it wrote, and the models it read (what its decisions stand on: a push of a
        live model reads its deletion time and writes no model), are still as it left them."""
        txn = self._txn
        models = {key: seen for key, seen in txn.read.items() if key[0] == MODELS}
        for (collection, record_id), left in {**models, **txn.written}.items():
            now = self._call("GET", f"{collection}/{record_id}", missing_ok=True)
            if collection == MODELS and now:
                self._models.seen(now)
            elif collection == MODELS:  # gone
                self._models.forget(record_id)
            if _essence(now) != _essence(left):
                raise StaleWrite(
                    f"model registry: {collection}/{record_id} was changed by another "
                    "writer as this delivery acted on it",
                    url=self.api_url,
                )

    # registered models
    def get_model(self, name: str) -> RegisteredModel | None:
        """In a transaction, the model as this process last saw it, when it has (a push of
        a known model reads nothing first); the transaction's closing check re-reads it,
        and a model changed since ends it in StaleWrite, its redelivery reading it anew."""
        self._lock_model(name)
        if self._txn.depth and (seen := self._models.get(name)) is not None:
            return _model(self._remember(MODELS, seen))
        found = self._call("GET", "/registered_model", params={"name": name}, missing_ok=True)
        if not found or found.get("name") != name:  # the server matches names with LIKE
            return None
        self._models.seen(found)
        return _model(self._remember(MODELS, found))

    def create_model(self, name: str, *, properties: Mapping[str, str]) -> RegisteredModel:
        self._lock_model(name)
        body = {"name": name, **_body(MODELS, properties, {})}
        created = self._call("POST", MODELS, json=body)
        self._models.seen(created)
        return _model(self._remember(MODELS, created))

    def update_model(self, model: RegisteredModel) -> RegisteredModel:
        return _model(self._update(MODELS, model.id, model.state, model.description, model))

    def list_models(self) -> list[RegisteredModel]:
        return [_model(item) for item in self._listing(MODELS)]

    # versions
    def get_version(self, model_id: str, name: str) -> ModelVersion | None:
        if not _numeric(model_id):
            return None
        params = {"externalId": external_id(model_id, name)}
        found = self._call("GET", "/model_version", params=params, missing_ok=True)
        if not found and self._scoped is not False:  # a version another client wrote
            found = self._scoped_query(
                "/model_version", {"name": name, "parentResourceId": model_id}
            )
        conflicted, self._txn.conflict = self._txn.conflict, None
        if not found and self._scoped is False and conflicted == (model_id, name):
            found = self._adopt(model_id, name)  # taken, yet not ours: another client's
        return _version(self._remember(VERSIONS, found)) if found else None

    def get_version_by_id(self, version_id: str) -> ModelVersion | None:
        if not _numeric(version_id):
            return None
        found = self._call("GET", f"{VERSIONS}/{version_id}", missing_ok=True)
        return _version(self._remember(VERSIONS, found)) if found else None

    def create_version(
        self, model_id: str, name: str, *, properties: Mapping[str, str]
    ) -> ModelVersion:
        self._parent(MODELS, model_id)  # NotFound: the server won't check
        body = {
            "name": name,
            "registeredModelId": model_id,
            "externalId": external_id(model_id, name),
            **_body(VERSIONS, properties, {}),
        }
        try:
            created = self._call("POST", VERSIONS, json=body)
        except Conflict:  # the name or our externalId is taken (v0.3.0 says "name" for both)
            self._txn.conflict = (model_id, name)  # get_version adopts it if not ours
            raise
        return _version(self._remember(VERSIONS, created))

    def update_version(self, version: ModelVersion) -> ModelVersion:
        return _version(
            self._update(VERSIONS, version.id, version.state, version.description, version)
        )

    def list_versions(self, model_id: str) -> list[ModelVersion]:
        if not _numeric(model_id):
            return []
        items = self._listing(
            f"{MODELS}/{model_id}/versions",
            fallback=VERSIONS,
            keep=lambda v: v.get("registeredModelId") == model_id,
        )
        # remembered as read: an update of one checks it against what was listed
        return [_version(self._remember(VERSIONS, item)) for item in items]

    def _adopt(self, model_id: str, name: str) -> Json:
        """The version `name` of `model_id` that another client created without an
        externalId, given ours (one scan of the version listing, once per such version);
        {} when there is none (or it has an externalId of its own: not ours to change)."""
        for item in self._items(VERSIONS, None):
            if item.get("registeredModelId") == model_id and item.get("name") == name:
                if item.get("externalId"):
                    return {}
                ext = {"externalId": external_id(model_id, name)}
                return self._call("PATCH", f"{VERSIONS}/{item['id']}", json=ext)
        return {}

    # artifacts
    def list_artifacts(self, version_id: str) -> list[ModelArtifact]:
        if not _numeric(version_id):
            return []
        return self._artifacts_of(self._txn.read.get((VERSIONS, version_id), {"id": version_id}))

    def _artifacts_of(self, version: Json) -> list[ModelArtifact]:
        """The version's model artifacts: its scoped listing where the server can run it,
        else each of its names (`ARTIFACT`, those `ARTIFACTS` holds) by externalId."""
        version_id = str(version.get("id", ""))
        if self._scoped is not False:
            try:
                path = f"{VERSIONS}/{version_id}/artifacts"
                items = list(self._items(path, PAGE_SIZE, artifactType=ARTIFACT_TYPE))
                self._scoped = True
                return [_artifact(a, version_id) for a in items if _is_model_artifact(a)]
            except _BrokenQuery:
                self._scoped = False
        if "customProperties" not in version and _numeric(version_id):  # for its names
            version = self._call("GET", f"{VERSIONS}/{version_id}", missing_ok=True) or version
        found = []
        for name in [ARTIFACT, *(n for n in _artifact_names(version) if n != ARTIFACT)]:
            params = {"externalId": external_id(version_id, name)}
            item = self._call("GET", "/model_artifact", params=params, missing_ok=True)
            if item and _is_model_artifact(item):
                found.append(_artifact(self._remember(ARTIFACTS_PATH, item), version_id))
        return found

    def walk(self) -> Iterator[tuple[RegisteredModel, ModelVersion | None, list[ModelArtifact]]]:
        """Every model, each version with its artifacts, streamed a page of versions at a
        time in id order (`registry list`, `export`), then the models without versions.
        The first, small page's artifacts are looked up (8 at a time), so rows come at
        once; the later pages' are joined from one pass over the global artifact listing
        (by externalId), or listed per version where the server can."""
        from concurrent.futures import ThreadPoolExecutor

        models = {m.id: m for m in self.list_models()}
        index: dict[str, list[ModelArtifact]] | None = None
        seen: set[str] = set()
        for n, page in enumerate(self.pages(VERSIONS, first=FIRST_PAGE)):
            if n == 0 or self._scoped:
                with ThreadPoolExecutor(8) as pool:
                    found = list(pool.map(self._artifacts_of, page))
            else:
                index = self._artifact_index() if index is None else index
                found = [index.get(str(v["id"]), []) for v in page]
            for item, artifacts in zip(page, found, strict=True):
                version = _version(item)
                model = models.get(version.model_id)
                if model is not None:  # else created after the model listing: next time
                    seen.add(model.id)
                    yield model, version, artifacts
        for model in models.values():
            if model.id not in seen:
                yield model, None, []

    def _artifact_index(self) -> dict[str, list[ModelArtifact]]:
        """Every model artifact this adapter wrote, by its version's id (its externalId
        names it; the global listing does not)."""
        index: dict[str, list[ModelArtifact]] = {}
        for page in self.pages(ARTIFACTS_PATH):
            for item in page:
                ext = str(item.get("externalId") or "")
                if _is_model_artifact(item) and ext.startswith("modelhooks:"):
                    version_id = ext.split(":", 2)[1]
                    index.setdefault(version_id, []).append(_artifact(item, version_id))
        return index

    def get_artifact(self, artifact_id: str) -> ModelArtifact | None:
        """An artifact by its id (transfer's update_artifact intent names one); its
        version_id is "" (an artifact read alone does not name its version)."""
        if not _numeric(artifact_id):
            return None
        found = self._call("GET", f"{ARTIFACTS_PATH}/{artifact_id}", missing_ok=True)
        return _artifact(self._remember(ARTIFACTS_PATH, found), "") if found else None

    def upsert_artifact(self, artifact: ModelArtifact) -> ModelArtifact:
        props = {**artifact.custom_properties, DIGEST: artifact.digest}
        if artifact.id:
            stored = self._update(
                ARTIFACTS_PATH,
                artifact.id,
                artifact.state,
                None,
                artifact,
                extra={"uri": artifact.uri, "artifactType": ARTIFACT_TYPE},
                props=props,
            )
            return _artifact(stored, artifact.version_id)
        version = self._parent(VERSIONS, artifact.version_id)  # NotFound: the server won't
        body = {
            "artifactType": ARTIFACT_TYPE,
            "name": artifact.name,
            "uri": artifact.uri,
            "state": str(artifact.state),
            "externalId": external_id(artifact.version_id, artifact.name),
            **_body(ARTIFACTS_PATH, props, {}),
        }
        path = f"{VERSIONS}/{artifact.version_id}/artifacts"
        stored = self._call("POST", path, json=body)  # a taken name or externalId: 409
        if artifact.name != ARTIFACT:
            self._record_name(version, artifact.name)
        return _artifact(self._remember(ARTIFACTS_PATH, stored), artifact.version_id)

    def _record_name(self, version: Json, name: str) -> None:
        """Name a non-default artifact on its version, so servers that cannot list a
        version's artifacts find it by externalId."""
        if not version:
            return
        names = _artifact_names(version)
        if name in names:
            return
        record = _version(version)
        props = {**record.custom_properties, ARTIFACTS: ",".join([*names, name])}
        self._update(VERSIONS, record.id, record.state, record.description, record, props=props)

    # reads and writes
    def _parent(self, collection: str, record_id: str) -> Json:
        """The parent record (a NotFound names it), from this transaction when it read it."""
        known = self._txn.read.get((collection, record_id))
        if known is not None:
            return known
        if not _numeric(record_id):
            raise NotFound(f"model registry: no {collection.strip('/')} {record_id!r}")
        return self._remember(collection, self._call("GET", f"{collection}/{record_id}"))

    def _remember(self, collection: str, item: Json) -> Json:
        if self._txn.depth and item.get("id") is not None:
            self._txn.read[(collection, str(item["id"]))] = item
        return item

    def _update(
        self,
        collection: str,
        record_id: str,
        state: ModelState | ArtifactState,
        description: str | None,
        record: RegisteredModel | ModelVersion | ModelArtifact,
        *,
        extra: Json | None = None,
        props: Mapping[str, str] | None = None,
    ) -> Json:
        """PATCH the record, its custom properties typed as the server holds them now, after
        checking that nobody changed it since this transaction read it."""
        if not _numeric(record_id):
            raise NotFound(f"model registry: no {collection.strip('/')} {record_id!r}")
        path = f"{collection}/{record_id}"
        current = self._call("GET", path)
        if collection == MODELS:
            self._models.seen(current)
        txn = self._txn
        seen = txn.read.get((collection, record_id))
        if seen is not None and _essence(seen) != _essence(current):
            raise StaleWrite(
                f"model registry: {path} changed since this delivery read it", url=self.api_url
            )
        given = record.custom_properties if props is None else props
        body = {**(extra or {}), "state": str(state), **_body(collection, given, current)}
        if description is not None:
            body["description"] = description
        stored = self._call("PATCH", path, json=body)
        if collection == MODELS:
            self._models.seen(stored)
        if txn.depth:
            txn.read[(collection, record_id)] = stored
            txn.written[(collection, record_id)] = stored
        return stored

    def _scoped_query(self, path: str, params: Mapping[str, str]) -> Json:
        try:
            found = self._call("GET", path, params=params, missing_ok=True)
        except _BrokenQuery:
            self._scoped = False
            return {}
        self._scoped = True
        return found

    # HTTP
    def _call(
        self,
        method: str,
        path: str,
        *,
        missing_ok: bool = False,
        params: Mapping[str, str] | None = None,
        json: Json | None = None,
    ) -> Json:
        """One request; its JSON object answer ({} for a 404 when `missing_ok`)."""
        where = f"{method} {path}"
        url = self.api_url + path + (f"?{urlencode(params)}" if params else "")
        headers, body = self._headers, None
        if json is not None:
            headers = {**headers, "Content-Type": "application/json"}
            body = _dumps(json).encode()
        if not self._turns.acquire(self._timeout):
            raise Unavailable(
                f"model registry: {where}: no connection free for {self._timeout:g}s",
                url=self.api_url,
            )
        try:
            response = self._http.urlopen(  # no retry (the platform redelivers), as requests
                method,
                url,
                body=body,
                headers=headers,
                timeout=self._timeout,
            )
        except OSError as exc:  # endpoints.HttpFailed: no answer
            reason = getattr(exc, "reason", None) or exc
            if getattr(exc, "tls", False):  # our CA does not trust it
                raise CredentialsRefused(
                    f"model registry: {where}: TLS verification failed ({reason}); is "
                    "MODELHOOKS_REGISTRY_CA the CA that signed its certificate?",
                    url=self.api_url,
                ) from None
            # refused, reset, timed out
            raise Unavailable(
                f"model registry: {where} failed: {reason}", url=self.api_url
            ) from None
        finally:
            self._turns.release()  # the answer is read whole: its connection is back
        if response.status == 404 and missing_ok:
            return {}
        if response.status >= 400:
            details = {"url": self.api_url, "retry_after": response.headers.get("Retry-After")}
            details = {k: v for k, v in details.items() if v}
            raise registry_error(response.status, _message(response), where, **details)
        try:
            answer = _loads(response.data)
        except ValueError:
            raise Unavailable(f"model registry: {where} answered with no JSON") from None
        return answer if isinstance(answer, dict) else {}

    def _items(self, path: str, page_size: int | None, **params: str) -> Iterator[Json]:
        """Every item of a listing, page after page (`page_size` None: one page)."""
        if page_size:
            params["pageSize"] = str(page_size)
        while True:
            page = self._call("GET", path, params=params)
            yield from page.get("items") or ()
            token = page.get("nextPageToken")
            if not token or not page_size:
                return
            params["nextPageToken"] = token

    def pages(
        self, path: str, page_size: int = PAGE_SIZE, *, first: int | None = None
    ) -> Iterator[list[Json]]:
        """A global listing (`/registered_models`, `/model_versions`, `/model_artifacts`)
        page by page in id order (the first page `first` items); on a server that cannot
        follow a page token, the rest in one page (without what the first page gave)."""
        params = {"orderBy": "ID", "sortOrder": "ASC"}
        seen: set[str] = set()
        if self._paged is not False or first:
            try:
                params["pageSize"] = str(first or page_size)
                while True:
                    page = self._call("GET", path, params=params)
                    items = page.get("items") or []
                    seen.update(str(i.get("id")) for i in items)
                    yield items
                    token = page.get("nextPageToken")
                    if not token:
                        return
                    if self._paged is False:  # known: it cannot follow the token
                        break
                    params.update(nextPageToken=token, pageSize=str(page_size))
            except _BrokenQuery:
                self._paged = False
        rest = self._call("GET", path, params={"orderBy": "ID", "sortOrder": "ASC"})
        yield [i for i in rest.get("items") or () if str(i.get("id")) not in seen]

    def _listing(
        self, path: str, fallback: str | None = None, keep: Callable[[Json], bool] = bool
    ) -> list[Json]:
        """A listing: scoped (`path`) where the server answers it, else the global listing
        `fallback` filtered by `keep`."""
        if fallback is None or self._scoped is not False:
            try:
                if fallback is None:
                    return [item for page in self.pages(path) for item in page]
                items = list(self._items(path, PAGE_SIZE))
                self._scoped = True
                return items
            except _BrokenQuery:
                if fallback is None:
                    raise
                self._scoped = False
        return [item for page in self.pages(fallback) for item in page if keep(item)]


def _numeric(id: str) -> bool:
    """Whether `id` can be a server id ("²" and "٣" are digits to str.isdigit)."""
    return id.isascii() and id.isdigit()


def _message(response: Response) -> str:
    text = response.data.decode(errors="replace").strip()[:300]
    try:
        body = _loads(response.data)
    except ValueError:
        return text or response.reason or ""
    message = body.get("message") if isinstance(body, dict) else None
    return str(message) if message else text


def _artifact_names(version: Json) -> list[str]:
    """The names of a version's artifacts other than `ARTIFACT`, as `ARTIFACTS` holds them."""
    held = (version.get("customProperties") or {}).get(ARTIFACTS) or {}
    return [n for n in str(held.get("string_value", "")).split(",") if n]


def _is_model_artifact(item: Json) -> bool:
    return item.get("artifactType") == ARTIFACT_TYPE


def _essence(item: Json) -> Json:
    """What a writer sets: the record without its server-kept times."""
    return {k: v for k, v in item.items() if not k.endswith("TimeSinceEpoch")}


def _text(value: Json) -> str | None:
    """A typed custom property value as the domain's: a string as text, an int, double,
    bool or struct (base64 of JSON) as `Typed` (None: a type it cannot hold)."""
    if "string_value" in value:
        return str(value["string_value"])
    try:
        if "int_value" in value:
            return Typed(int(value["int_value"]))
        if "double_value" in value:
            return Typed(float(value["double_value"]))
        if "bool_value" in value:
            return Typed(bool(value["bool_value"]))
        if "struct_value" in value:
            return _struct(str(value["struct_value"]))
    except (TypeError, ValueError):  # a value that is not of its type: its text
        return str(next(v for k, v in value.items() if k.endswith("_value")))
    return None


def _struct(raw: str) -> str:
    """A struct value: written base64 (the API's), answered by v0.3.0 as the JSON text it
    decoded, so either; text that is neither stays text."""
    try:
        decoded = base64.b64decode(raw, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        decoded = ""
    for text in (raw, decoded):
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict | list):
            return Typed(value)
    return raw


def _typed(key: str, text: str, current: Json) -> Json:
    """`text` as the value of `key`: a `Typed` of its JSON type (int, double, bool, struct
    for an object or array); text of the type the server holds for it (verbatim when
    unchanged; a string when the key is new or the text does not fit the type)."""
    if isinstance(text, Typed):
        return _metadata(text.value, str(text))
    old = current.get(key)
    if isinstance(old, dict) and _text(old) == text:
        return old
    kind = old.get("metadataType") if isinstance(old, dict) else None
    try:
        if kind == "MetadataIntValue":
            return {"metadataType": kind, "int_value": str(int(text))}
        if kind == "MetadataDoubleValue":
            return {"metadataType": kind, "double_value": float(text)}
        if kind == "MetadataBoolValue" and text in ("true", "false"):
            return {"metadataType": kind, "bool_value": text == "true"}
        if kind == "MetadataStructValue":  # read as JSON text, written base64
            encoded = base64.b64encode(text.encode()).decode()
            return {"metadataType": kind, "struct_value": encoded}
    except ValueError:
        pass
    return {"metadataType": "MetadataStringValue", "string_value": text}


def _metadata(value: Any, text: str) -> Json:
    """A JSON value as a MetadataValue of its type (what upstream's client writes)."""
    if isinstance(value, bool):
        return {"metadataType": "MetadataBoolValue", "bool_value": value}
    if isinstance(value, int):
        return {"metadataType": "MetadataIntValue", "int_value": str(value)}
    if isinstance(value, float):
        return {"metadataType": "MetadataDoubleValue", "double_value": value}
    if isinstance(value, dict | list):
        encoded = base64.b64encode(text.encode()).decode()
        return {"metadataType": "MetadataStructValue", "struct_value": encoded}
    return {"metadataType": "MetadataStringValue", "string_value": text}


def _body(collection: str, properties: Mapping[str, str], current: Json) -> Json:
    """The REST fields and typed customProperties of the domain's `properties`."""
    fields = FIELDS.get(collection, {})
    held = current.get("customProperties") or {}
    custom = {k: _typed(k, v, held) for k, v in properties.items() if k not in fields}
    if ARTIFACTS in held and ARTIFACTS not in properties:  # kept: the domain never sees it
        custom[ARTIFACTS] = held[ARTIFACTS]
    custom.pop(LEGACY_VERSION_ID, None)
    body: Json = {"customProperties": custom}
    for key, field in fields.items():
        if key in properties:
            body[field] = properties[key]
        elif current.get(field):
            body[field] = ""  # removed in the domain: cleared
    return body


def _props(item: Json, collection: str | None = None) -> dict[str, str]:
    """Custom properties as text, Kubeflow's own fields among them under `kubeflow.`."""
    props: dict[str, str] = {}
    for key, value in (item.get("customProperties") or {}).items():
        text = _text(value) if isinstance(value, dict) else None
        if text is not None and key not in _HIDDEN:
            props[key] = text
    for key, field in FIELDS.get(collection or "", {}).items():
        if item.get(field):
            props[key] = str(item[field])
    return props


def _model(item: Json) -> RegisteredModel:
    return RegisteredModel(
        id=str(item["id"]),
        name=item["name"],
        state=ModelState(item.get("state", ModelState.LIVE)),
        description=item.get("description", ""),
        custom_properties=_props(item, MODELS),
    )


def _version(item: Json) -> ModelVersion:
    return ModelVersion(
        id=str(item["id"]),
        model_id=str(item.get("registeredModelId", "")),
        name=item["name"],
        state=ModelState(item.get("state", ModelState.LIVE)),
        description=item.get("description", ""),
        custom_properties=_props(item, VERSIONS),
    )


def _artifact(item: Json, version_id: str) -> ModelArtifact:
    props = _props(item, ARTIFACTS_PATH)
    digest = props.pop(DIGEST, "")
    return ModelArtifact(
        id=str(item["id"]),
        version_id=version_id,
        name=item.get("name", ""),
        uri=item.get("uri", ""),
        digest=digest,
        state=ArtifactState(item.get("state", ArtifactState.UNKNOWN)),
        custom_properties=props,
    )
