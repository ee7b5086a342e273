"""`KubernetesModelRegistry`: the model registry as Kubernetes resources
(registry.backend=kubernetes), so `kubectl get registeredmodels,modelversions` shows it and
namespaces and RBAC are its tenancy.

Mapping (infra/k8s/crds/registeredmodel.yaml, modelversion.yaml; group modelhooks.dev):
- a RegisteredModel is a `RegisteredModel` resource; its id is the resource's name,
  `object_name(model name)`: a DNS slug of the name plus a short hash of it (model names may
  hold "/", ":" and capitals), the real name kept in spec.name;
- a ModelVersion is a `ModelVersion` resource named `object_name(model id, version name)`,
  labelled `modelhooks.dev/registered-model=<model id>` (how a model's versions are listed);
- its ModelArtifacts are entries of the version's spec.artifacts (a list keyed by name);
  an artifact's id is `<version id>/<artifact name>`.

Tenancy is Kubernetes': a model's records live in its owning namespace, the `namespace`
custom property it is created with (register writes the tenant's), its versions with it;
a model with none, or `default` (register's word for "no tenant"), lives in the shared
namespace `registry.namespace`. So a team's Role in its namespace is its access, and
`kubectl get -n team-a registeredmodels` is its part of the registry. Ids stay names of
the identity alone, so they are found again by name across namespaces: every record is
labelled with its own id (`modelhooks.dev/registered-model` on a model, its model's on a
version; `modelhooks.dev/model-version` on a version) and with the registry it belongs to
(`modelhooks.dev/registry=<shared namespace>`, so two registries can share a cluster), and
a read is a cluster-wide list with that label selector (a transaction's closing check reads
each object again by name, where it was read).

Uniqueness: in one namespace the API server's (a second create of the same derived name is
409 AlreadyExists, i.e. Conflict, and the caller's find-or-create reads what the winner
created; in a transaction, whose model is created as it ends, StaleWrite). Across
namespaces a model name is still one model: a create first looks for the name
cluster-wide and finds it taken (Conflict); a look its transaction made already (a
find-or-create's find) counts, and is not repeated. Only two creates of one name in two
namespaces racing past that look (which reads the watch cache: a holder created a moment
before may not show yet) leave two holders, as only two tenants claiming one name can,
whose outcome depends on their order anyway; readers then all take the first created
(its versions, listed by label, are the model's wherever they are). Nothing deletes a
record, so the functions need no delete verb to undo that race.

Every write is conditional: an update PUTs the object as this thread last read it, with
that resourceVersion, so a write based on a stale read is refused (409) instead of
overwriting what another delivery wrote; it surfaces as `StaleWrite`, a Transient error,
and the redelivery reads again. A transaction also checks, as it ends, that what it read
and did not write is unchanged (optimistic concurrency: see `transaction`). That is what
keeps the registry's state a function of the set of events across processes and threads
(tests/contract/register_order.py), with no lock anywhere. RBAC: infra/k8s/rbac/registry.yaml.

>>> registry = KubernetesModelRegistry(namespace="modelhooks", kubeconfig="~/.kube/config")  # doctest: +SKIP
>>> registry.get_model("bert")  # doctest: +SKIP
RegisteredModel(id='bert-3f1c2a9b0d', name='bert', ...)
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from modelhooks.adapters.kube_client import connect, path, request
from modelhooks.core.errors import (
    NAMESPACE_TERMINATING,
    BadRequest,
    Conflict,
    Forbidden,
    ModelhooksError,
    NotFound,
    Throttled,
    Transient,
    Unavailable,
)
from modelhooks.core.extras import require
from modelhooks.core.records import (
    ArtifactState,
    ModelArtifact,
    ModelState,
    ModelVersion,
    RegisteredModel,
)

__all__ = [
    "GROUP",
    "MODEL_LABEL",
    "REGISTRY_LABEL",
    "VERSION",
    "VERSION_LABEL",
    "KubernetesModelRegistry",
    "StaleWrite",
    "object_name",
]

GROUP, VERSION = "modelhooks.dev", "v1alpha1"
MODELS, VERSIONS = "registeredmodels", "modelversions"
KINDS = {MODELS: "RegisteredModel", VERSIONS: "ModelVersion"}
MODEL_LABEL = "modelhooks.dev/registered-model"
VERSION_LABEL = "modelhooks.dev/model-version"
REGISTRY_LABEL = "modelhooks.dev/registry"
ID_LABELS = {MODELS: MODEL_LABEL, VERSIONS: VERSION_LABEL}  # the label a record's id is in
NO_TENANT = ("", "default")  # a model's namespace property that means the shared namespace
VARIABLE = "MODELHOOKS_REGISTRY_KUBECONFIG"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_REMEMBERED = 512  # objects a thread remembers outside a transaction (what its writes base on)
_FRESH_AFTER_WRITE = 5.0  # s after this process wrote a record during which it reads it fresh
_WRITTEN = 4096  # records whose last write time the process keeps
Json = dict[str, Any]


class StaleWrite(Transient):
    """A conditional write lost: the object changed since this delivery read it. A
    redelivery reads it again (the platform retries: 503)."""

    code = "stale_write"


def object_name(*parts: str) -> str:
    """A DNS label (≤ 63 characters, valid as a label value too) for the identity `parts`:
    readable slug + 10 hex digits of their SHA-256.

    >>> object_name("team/BERT:base")
    'team-bert-base-f839db38b0'
    """
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]
    slug = re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")[:52].rstrip("-")
    return f"{slug}-{digest}" if slug else f"r-{digest}"


class _Seen(threading.local):
    """Per thread: the objects it last read or wrote (their resourceVersion is what its next
    write of them is conditional on), which of them it only read in the current transaction
    (checked as it ends), the ids the current transaction looked for and found none of
    (`unsure`: those the watch cache did not show, checked as it ends; `looked`: every id it
    looked for or tried to create, whose next look is fresh), the ones it created,
    the creates it holds back (`create_model`, `create_version`), and how deep in
    `transaction()` it is."""

    def __init__(self) -> None:
        self.objects: OrderedDict[tuple[str, str], Json] = OrderedDict()
        self.read: set[tuple[str, str]] = set()
        self.absent: set[tuple[str, str]] = set()
        self.unsure: set[tuple[str, str]] = set()
        self.looked: set[tuple[str, str]] = set()
        self.created: set[tuple[str, str]] = set()
        self.pending: dict[tuple[str, str], Json] = {}
        self.depth = 0

    def clear(self) -> None:
        self.objects.clear()
        self.read.clear()
        self.absent.clear()
        self.unsure.clear()
        self.looked.clear()
        self.created.clear()
        self.pending.clear()


class KubernetesModelRegistry:
    """The registry whose shared namespace is `namespace` (each model's records in its owning
    namespace, see the module), through `kubeconfig` (else the pod's in-cluster
    configuration) or an injected `api_client`. `timeout` bounds each request (seconds)."""

    name = "kubernetes"

    def __init__(
        self,
        *,
        namespace: str = "modelhooks",
        kubeconfig: str = "",
        api_client: Any = None,
        timeout: float = 10.0,
    ) -> None:
        if api_client is None:  # its library is imported on first use: checked here, at build
            require("k8s", "registry.backend=kubernetes")
        self.namespace = namespace
        self._kubeconfig = kubeconfig
        self._api_client = api_client
        self._owns_client = api_client is None
        self._timeout = timeout
        self._lock = threading.Lock()
        self._seen = _Seen()
        self._written: OrderedDict[tuple[str, str], float] = OrderedDict()  # key → when

    def close(self) -> None:
        with self._lock:
            if self._api_client is not None and self._owns_client:
                self._api_client.close()
                self._api_client = None

    def _request(
        self, method: str, url_path: str, query: Mapping[str, Any] | None, body: Json | None
    ) -> Json:
        """One request (`kube_client.request`: the client's pool and credentials, not its
        generated methods)."""
        with self._lock:
            if self._api_client is None:  # ConfigError when the client is not installed
                self._api_client = connect(
                    self._kubeconfig, variable=VARIABLE, needs="registry.backend=kubernetes"
                )
            api_client = self._api_client
        answer = request(
            api_client, method, url_path, query=query, body=body, timeout=self._timeout
        )
        return dict(answer)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Optimistic, not atomic. Inside it, each write is conditional on the object as this
        transaction read it (resourceVersion), and as it ends it checks that every object it
        read and did not write is still as read; either failing raises StaleWrite (the
        platform redelivers, the handler reads again). So a handler's decision never stands
        on a read another delivery changed meanwhile: of two deliveries that each read what
        the other writes (a push reading its model while a deletion archives the model's
        versions), at least one is redone. What a redone delivery wrote first stays until
        its redelivery rewrites it: handlers derive every state they write from facts they
        re-read, so the redelivery corrects it. Nested calls join the outer one.

        A model this transaction creates, and a version of it, are created as it ends (or
        before its next request), with what the transaction wrote to them meanwhile: a new
        model's first version and its artifact are one write, not a create and an update.
        The version goes first and the model last, so whoever finds the model finds its
        version, and the model's create, succeeding, is the check that nobody else created
        or changed it meanwhile (no read of it to check again). Only a delivery racing this
        one past the model's absence can create either first: then a create is refused (409)
        and the transaction ends in StaleWrite; its redelivery finds the model, so creates
        the version at once (its Conflict is the find-or-create's), and a version created
        before the model's create lost is found there, as any version is.

        A transaction's first look for a record reads the API server's watch cache
        (resourceVersion=0: no wait for the cache to be known fresh, which is most of a new
        Model's time), unless this process wrote that record in the last seconds, and so
        may be stale: what it found is checked as it ends (by a GET
        from etcd, as every read is), and what it did not find and did not create is looked
        for again, fresh (a create that succeeds shows the name was free). A look again in
        the same transaction, and every listing of many (a model's versions), is fresh. The
        same checks run when the transaction ends in an error other than a Transient one: a
        decision taken on a stale read ends in StaleWrite (redone), not in its answer.

        Without a transaction, every read is fresh and writes are still conditional on this
        thread's last read."""
        seen = self._seen
        if seen.depth == 0:
            seen.clear()
        seen.depth += 1
        try:
            yield
            if seen.depth == 1:
                self._flush()
                self._validate(seen.read)
        except Transient:
            raise
        except Exception as exc:  # a decision on a stale read is redone, not answered
            if seen.depth == 1:
                seen.pending.clear()  # what it held back is not created
                try:
                    self._validate(seen.read)
                except StaleWrite as stale:
                    raise stale from exc
            raise
        finally:
            seen.depth -= 1
            if seen.depth == 0:
                seen.clear()

    def _validate(self, read: set[tuple[str, str]]) -> None:
        """StaleWrite when an object read (and not written since) has changed or gone: a GET
        where it was read (a read from etcd; a list waits for the watch cache to be known
        fresh, up to its 100 ms progress tick), or one the watch cache did not show (and
        that was not created since) exists."""
        for plural, name in sorted(self._seen.unsure):
            if self._list(plural, name, remember=False):
                raise StaleWrite(
                    f"registry: {KINDS[plural]} {name!r} was created while a delivery acted on "
                    "its absence; a redelivery reads it",
                    namespace=self.namespace,
                )
        for plural, name in sorted(read):
            namespace = _namespace(self._seen.objects[(plural, name)])
            try:
                now: Json | None = self._call(
                    "GET", f"GET {name}", plural, name, namespace=namespace
                )
            except NotFound:
                now = None
            if now is None or _rv(now) != _rv(self._seen.objects[(plural, name)]):
                raise StaleWrite(
                    f"registry: {KINDS[plural]} {name!r} changed while a delivery acted on "
                    "what it read; a redelivery reads it again",
                    namespace=_namespace(self._seen.objects[(plural, name)]),
                )

    # registered models
    def get_model(self, name: str) -> RegisteredModel | None:
        found = self._get(MODELS, object_name(name))
        if found is None:
            return None
        _check_identity(found, name=name)
        return _model(found)

    def create_model(self, name: str, *, properties: Mapping[str, str]) -> RegisteredModel:
        model_id = object_name(name)
        owner = properties.get("namespace", "")
        namespace = self.namespace if owner in NO_TENANT else owner
        # a find-or-create looked for it a moment ago, in this transaction: not again
        taken = None if (MODELS, model_id) in self._seen.absent else self._get(MODELS, model_id)
        if taken is not None:
            raise Conflict(
                f"registry: a model named {name!r} exists in {_namespace(taken)!r}: model "
                "names are unique across the registry's namespaces",
                namespace=_namespace(taken),
            )
        spec = {"name": name, "state": str(ModelState.LIVE), "customProperties": dict(properties)}
        if self._seen.depth:  # created as the transaction ends (or before its next request)
            body = self._body(MODELS, model_id, namespace, {MODEL_LABEL: model_id}, spec)
            self._seen.pending[(MODELS, model_id)] = body
            self._seen.created.add((MODELS, model_id))
            return _model(self._remember(MODELS, body, read=False))
        return _model(self._create(MODELS, model_id, namespace, {MODEL_LABEL: model_id}, spec))

    def update_model(self, model: RegisteredModel) -> RegisteredModel:
        obj = self._base(MODELS, model.id)
        obj["spec"].update(_writable(model.state, model.description, model.custom_properties))
        return _model(self._replace(MODELS, obj))

    def list_models(self) -> list[RegisteredModel]:
        return sorted((_model(o) for o in self._list(MODELS)), key=lambda m: m.name)

    # versions
    def get_version(self, model_id: str, name: str) -> ModelVersion | None:
        if not _DNS_LABEL.match(model_id):
            return None
        found = self._get(VERSIONS, object_name(model_id, name))
        if found is None:
            return None
        _check_identity(found, name=name, model_id=model_id)
        return _version(found)

    def get_version_by_id(self, version_id: str) -> ModelVersion | None:
        found = self._get(VERSIONS, version_id) if _DNS_LABEL.match(version_id) else None
        return _version(found) if found else None

    def create_version(
        self, model_id: str, name: str, *, properties: Mapping[str, str]
    ) -> ModelVersion:
        model = self._held(MODELS, model_id) if _DNS_LABEL.match(model_id) else None
        if model is None:
            raise NotFound(f"registry: no registered model {model_id!r}")
        spec = {
            "registeredModelRef": {"name": model_id},
            "modelName": model["spec"]["name"],
            "name": name,
            "state": str(ModelState.LIVE),
            "customProperties": dict(properties),
            "artifacts": [],
        }
        version_id = object_name(model_id, name)
        labels = {MODEL_LABEL: model_id, VERSION_LABEL: version_id}
        if (MODELS, model_id) in self._seen.created:  # created as the transaction ends
            body = self._body(VERSIONS, version_id, _namespace(model), labels, spec)
            self._seen.pending[(VERSIONS, version_id)] = body
            return _version(self._remember(VERSIONS, body, read=False))
        return _version(self._create(VERSIONS, version_id, _namespace(model), labels, spec))

    def update_version(self, version: ModelVersion) -> ModelVersion:
        obj = self._base(VERSIONS, version.id)
        obj["spec"].update(_writable(version.state, version.description, version.custom_properties))
        return _version(self._replace(VERSIONS, obj))

    def list_versions(self, model_id: str) -> list[ModelVersion]:
        if not _DNS_LABEL.match(model_id):
            return []
        items = self._list(VERSIONS, label=f"{MODEL_LABEL}={model_id}")
        items.sort(key=lambda o: (o["metadata"].get("creationTimestamp", ""), o["spec"]["name"]))
        return [_version(o) for o in items]

    # artifacts
    def list_artifacts(self, version_id: str) -> list[ModelArtifact]:
        found = self._get(VERSIONS, version_id) if _DNS_LABEL.match(version_id) else None
        return _artifacts(found) if found else []

    def get_artifact(self, artifact_id: str) -> ModelArtifact | None:
        version_id, _, name = artifact_id.partition("/")  # ids are <version>/<name>
        found = (a for a in self.list_artifacts(version_id) if a.name == name)
        return next(found, None)

    def upsert_artifact(self, artifact: ModelArtifact) -> ModelArtifact:
        version_id, name = artifact.version_id, artifact.name
        if artifact.id:
            version_id, _, name = artifact.id.partition("/")
        if not _DNS_LABEL.match(version_id):
            raise NotFound(f"registry: no model version {version_id!r}")
        obj = self._base(VERSIONS, version_id)
        entries: list[Json] = obj["spec"].setdefault("artifacts", [])
        entry = {
            "name": name,
            "uri": artifact.uri,
            "digest": artifact.digest,
            "state": str(artifact.state),
            "customProperties": dict(artifact.custom_properties),
        }
        index = next((i for i, e in enumerate(entries) if e.get("name") == name), None)
        if artifact.id and index is None:
            raise NotFound(f"registry: no artifact {artifact.id!r}")
        if not artifact.id and index is not None:
            raise Conflict(f"registry: model version {version_id!r} has an artifact {name!r}")
        if index is None:
            entries.append(entry)
        else:
            entries[index] = entry
        stored = self._replace(VERSIONS, obj)
        return next(a for a in _artifacts(stored) if a.name == name)

    # the API
    def _remember(self, plural: str, obj: Json, *, read: bool) -> Json:
        seen = self._seen
        key = (plural, obj["metadata"]["name"])
        before = seen.objects.get(key)
        if read and seen.depth and before is not None and _rv(before) != _rv(obj):
            # read again, changed: what the transaction decided on the first read is stale
            raise StaleWrite(
                f"registry: {KINDS[plural]} {key[1]!r} changed while a delivery acted on it; "
                "a redelivery reads it again",
                namespace=_namespace(obj),
            )
        seen.objects[key] = obj
        seen.objects.move_to_end(key)
        seen.absent.discard(key)
        seen.unsure.discard(key)
        if seen.depth == 0:
            while len(seen.objects) > _REMEMBERED:
                seen.objects.popitem(last=False)
        elif read:
            seen.read.add(key)
        else:  # written: the conditional write checked the read already
            seen.read.discard(key)
        return obj

    def _held(self, plural: str, name: str) -> Json | None:
        """The object as this transaction read or wrote it, without asking again (it counts
        as read: the end of the transaction checks it is unchanged); else as it is now."""
        seen = self._seen
        key = (plural, name)
        if not seen.depth or key not in seen.objects:
            return self._get(plural, name)
        if key not in seen.pending:  # one still to create is not on the server to change
            seen.read.add(key)
        return seen.objects[key]

    def _base(self, plural: str, name: str) -> Json:
        """A copy of the object as this thread last saw it (a write is conditional on that),
        else as it is now; NotFound when it does not exist."""
        seen = self._seen.objects.get((plural, name))
        obj = seen if seen is not None else self._get(plural, name)
        if obj is None:
            raise NotFound(f"registry: no {KINDS[plural]} {name!r}")
        return copy.deepcopy(obj)

    def _selector(self, plural: str, name: str = "") -> str:
        mine = f"{REGISTRY_LABEL}={self.namespace}"
        return f"{mine},{ID_LABELS[plural]}={name}" if name else mine

    def _get(self, plural: str, name: str, *, remember: bool = True) -> Json | None:
        """The record named `name` in whichever namespace holds it: a cluster-wide list by
        its id label (ids name the identity, not the namespace)."""
        seen, key = self._seen, (plural, name)
        # a transaction's first look reads the watch cache (checked as it ends); again: fresh
        cached = (
            remember
            and seen.depth > 0
            and key not in seen.looked
            and key not in seen.objects
            and not self._wrote_lately(key)
        )
        seen.looked.add(key)
        found = self._list(plural, name, remember=False, cached=cached)
        if not found:
            if remember and seen.depth:
                seen.absent.add(key)
                if cached:
                    seen.unsure.add(key)
                else:
                    seen.unsure.discard(key)
            return None
        # Two namespaces hold it only when two creates raced (each looked first and found
        # none): every reader takes the same one, the first created.
        obj = min(found, key=lambda o: (o["metadata"].get("creationTimestamp", ""), _namespace(o)))
        return self._remember(plural, obj, read=True) if remember else obj

    def _wrote(self, plural: str, obj: Json) -> Json:
        """`obj` as this process just wrote it: read fresh for a while (its own next delivery
        of the model, a redelivery, must not meet the watch cache not showing it yet)."""
        with self._lock:
            key = (plural, obj["metadata"]["name"])
            self._written[key] = time.monotonic()
            self._written.move_to_end(key)
            while len(self._written) > _WRITTEN:
                self._written.popitem(last=False)
        return obj

    def _wrote_lately(self, key: tuple[str, str]) -> bool:
        with self._lock:
            at = self._written.get(key)
        return at is not None and time.monotonic() - at < _FRESH_AFTER_WRITE

    def _list(
        self,
        plural: str,
        name: str = "",
        *,
        remember: bool = True,
        label: str = "",
        cached: bool = False,
    ) -> list[Json]:
        """This registry's `plural` in all namespaces: the one with id `name`, those
        labelled `label`, or all; `cached`: as the watch cache has them (resourceVersion=0,
        one page), which may be stale."""
        selector = self._selector(plural, name) + (f",{label}" if label else "")
        items: list[Json] = []
        token = ""
        while True:
            query = {"labelSelector": selector, "limit": 500, "continue": token or None}
            if cached:
                query = {"labelSelector": selector, "resourceVersion": "0"}
            page = self._call("GET", f"LIST {plural}", plural, namespace="", query=query)
            for obj in page.get("items") or ():
                items.append(self._remember(plural, obj, read=True) if remember else obj)
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def _body(
        self, plural: str, name: str, namespace: str, labels: Mapping[str, str], spec: Json
    ) -> Json:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KINDS[plural],
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    "app.kubernetes.io/managed-by": "modelhooks",
                    REGISTRY_LABEL: self.namespace,
                    **labels,
                },
            },
            "spec": spec,
        }

    def _create(
        self, plural: str, name: str, namespace: str, labels: Mapping[str, str], spec: Json
    ) -> Json:
        body = self._body(plural, name, namespace, labels, spec)
        self._seen.looked.add((plural, name))  # a Conflict's find reads fresh
        obj = self._wrote(
            plural, self._call("POST", f"CREATE {name}", plural, namespace=namespace, body=body)
        )
        if self._seen.depth:
            self._seen.created.add((plural, name))
        return self._remember(plural, obj, read=False)

    def _flush(self) -> None:
        """The creates held back (`create_model`, `create_version`), as they stand now: the
        versions first, so that whoever finds the model finds its versions too."""
        pending = sorted(self._seen.pending.items(), key=lambda item: item[0][0] != VERSIONS)
        self._seen.pending.clear()
        lost: tuple[str, str, str, Conflict] | None = None
        for (plural, name), body in pending:
            namespace = _namespace(body)
            try:
                obj = self._call("POST", f"CREATE {name}", plural, namespace=namespace, body=body)
                self._wrote(plural, obj)
            except Conflict as exc:
                # A version taken already is one a racing delivery created, or one a crash
                # left before its model's create: the model is still created (the version
                # exists), so the redelivery finds both rather than meeting it again.
                if lost is None:
                    lost = (KINDS[plural], name, namespace, exc)
                continue
            self._remember(plural, obj, read=False)
        if lost is not None:
            kind, name, namespace, refused = lost
            raise StaleWrite(
                f"registry: {kind} {name!r} was created by another delivery while this one "
                "created it; a redelivery reads it",
                namespace=namespace,
            ) from refused

    def _replace(self, plural: str, obj: Json) -> Json:
        name, namespace = obj["metadata"]["name"], _namespace(obj)
        if (plural, name) in self._seen.pending:  # not created yet: created so
            self._seen.pending[(plural, name)] = obj
            return self._remember(plural, obj, read=False)
        try:
            stored = self._call(
                "PUT", f"UPDATE {name}", plural, name, namespace=namespace, body=obj
            )
        except Conflict as exc:
            self._seen.objects.pop((plural, name), None)
            self._seen.read.discard((plural, name))
            raise StaleWrite(
                f"registry: {KINDS[plural]} {name!r} changed since it was read; "
                "a redelivery reads it again",
                namespace=namespace,
            ) from exc
        return self._remember(plural, self._wrote(plural, stored), read=False)

    def _call(
        self,
        method: str,
        where: str,
        plural: str,
        name: str = "",
        *,
        namespace: str,
        query: Mapping[str, Any] | None = None,
        body: Json | None = None,
    ) -> Json:
        """`method` (HTTP) on `plural` in `namespace` ("": cluster-wide), or on its object
        `name`."""
        from kubernetes.client.exceptions import ApiException

        if self._seen.pending:  # what a transaction holds back goes before any other request
            self._flush()
        url_path = _path(plural, name, namespace)
        try:
            answer = self._request(method, url_path, query, body)
        except ApiException as exc:
            raise self._error(exc, where, plural, namespace) from None
        except ModelhooksError:
            raise
        except Exception as exc:  # urllib3 connection errors, timeouts
            raise Unavailable(
                f"registry: the Kubernetes API failed ({where}): {exc}",
                namespace=namespace or self.namespace,
            ) from None
        return answer

    def _error(self, exc: Any, where: str, plural: str, namespace: str = "") -> ModelhooksError:
        """`namespace` "": a cluster-wide request."""
        status = getattr(exc, "status", None)
        body = _body(exc)
        message = str(body.get("message") or exc.reason or exc)
        scope = f"in {namespace!r}" if namespace else "across namespaces"
        text = f"registry: the Kubernetes API answered {status} to {where} {scope}: {message}"
        details = {"namespace": namespace or self.namespace}
        if (
            status == 404
            and "name" in (body.get("details") or {})
            and body["details"].get("kind") in (plural, KINDS[plural])
        ):
            return NotFound(text, **details)
        if status == 404:  # no such resource type or namespace: not the object
            return Unavailable(
                f"{text} (install infra/k8s/crds/registeredmodel.yaml and modelversion.yaml "
                f"and create the namespace: registry.namespace, or the model's owning one)",
                **details,
            )
        if status == 409:
            return Conflict(text, **details)
        if status == 403 and NAMESPACE_TERMINATING in str(getattr(exc, "body", "") or ""):
            return Forbidden(text, reason=NAMESPACE_TERMINATING, **details)  # not our RBAC
        if status == 403:
            where_ = f"in {namespace!r}" if namespace else "cluster-wide (list)"
            return Forbidden(
                f"{text} (grant this identity what infra/k8s/rbac/registry.yaml grants: "
                f"get and list of {MODELS} and {VERSIONS}.{GROUP} cluster-wide, create and update "
                f"in the namespaces it writes to; missing here: {where_})",
                **details,
            )
        if status == 429:
            return Throttled(text, **details)
        if status in (400, 422):
            return BadRequest(text, **details)
        # 401 (an expired or rotated token: the client reloads it), 5xx
        return Unavailable(text, **details)


def _path(plural: str, name: str, namespace: str) -> str:
    return path(GROUP, VERSION, plural, name, namespace=namespace)


def _body(exc: Any) -> Json:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _namespace(obj: Json) -> str:
    return str(obj["metadata"].get("namespace", ""))


def _rv(obj: Json) -> str:
    return str(obj["metadata"].get("resourceVersion", ""))


def _check_identity(obj: Json, *, name: str, model_id: str = "") -> None:
    """A derived name found: it must be this record (a hash collision is a Conflict)."""
    spec = obj.get("spec") or {}
    ref = (spec.get("registeredModelRef") or {}).get("name", "")
    if spec.get("name") != name or (model_id and ref != model_id):
        raise Conflict(
            f"registry: {obj['metadata']['name']!r} holds {spec.get('name')!r}, not {name!r}",
            object=obj["metadata"]["name"],
        )


def _writable(state: ModelState, description: str, properties: Mapping[str, str]) -> Json:
    return {
        "state": str(state),
        "description": description,
        "customProperties": dict(properties),
    }


def _model(obj: Json) -> RegisteredModel:
    spec = obj["spec"]
    return RegisteredModel(
        id=obj["metadata"]["name"],
        name=spec["name"],
        state=ModelState(spec.get("state", ModelState.LIVE)),
        description=spec.get("description", ""),
        custom_properties=dict(spec.get("customProperties") or {}),
    )


def _version(obj: Json) -> ModelVersion:
    spec = obj["spec"]
    return ModelVersion(
        id=obj["metadata"]["name"],
        model_id=spec["registeredModelRef"]["name"],
        name=spec["name"],
        state=ModelState(spec.get("state", ModelState.LIVE)),
        description=spec.get("description", ""),
        custom_properties=dict(spec.get("customProperties") or {}),
    )


def _artifacts(obj: Json) -> list[ModelArtifact]:
    version_id = obj["metadata"]["name"]
    return [
        ModelArtifact(
            id=f"{version_id}/{a['name']}",
            version_id=version_id,
            name=a["name"],
            uri=a.get("uri", ""),
            digest=a.get("digest", ""),
            state=ArtifactState(a.get("state", ArtifactState.UNKNOWN)),
            custom_properties=dict(a.get("customProperties") or {}),
        )
        for a in obj["spec"].get("artifacts") or ()
    ]
