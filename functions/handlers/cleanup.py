"""`cleanup`: on `model.deleted`, apply the deletion policy to the model's artifacts.

The policy is the Model's `spec.deletionPolicy` when the deletion carries one, otherwise
the first `cleanup.policy_file` entry whose glob matches the model name, otherwise Retain
(modelhooks.core.cleanup says what each deletes). What goes is the Model's own source
(`spec.source` and `status.resolvedDigest`), or, for a deletion that names none (a
registry's webhook), every version the registry holds of the model that was pushed before
the deletion — one registered later, its push older than the deletion, gets the deletion
said again by `register`, so the effect does not depend on the order. Never deleted: anything a live version of another model, or a version of
this one pushed after the deletion, uses; anything outside the locations the Model's
namespace may act on (tenancy: 403 naming it); anything another Model of the namespace, live
in the cluster now (`models`: read through cleanup.kubeconfig or in a cluster), names in its
spec.source (`live_sources`), so a Model deleted and created again under its name keeps its
source whether cleanup runs before or after register heard of the new one. One `artifact.purged` reply per location,
listing what went, what stayed and what failed; a transient failure answers 5xx so a
redelivery finishes the job, and a second delivery deletes nothing. A delivery deletes at
most MAX_DELETES objects a location (its listing read no further): a version of more
answers Throttled (429) until the redeliveries have deleted the rest.

A Model whose `spec.source.secretRef` names a Secret is cleaned up with that Secret's
credentials (modelhooks.adapters.credentials_from_secret says which keys), read in the
Model's own namespace: only the name comes from the spec. A missing Secret answers 404, one
RBAC refuses 403 (a namespace opts in by binding `modelhooks-cleanup-secrets`), and no
cluster access configured answers 503 (retried, dead-lettered, replayed once fixed).
Retain deletes nothing and reads no Secret.

A Model's deletion refused for good (its namespace may not act on its source, a source,
Secret or policy cleanup refuses: a 4xx) is told, not only dead-lettered: `refused` answers
it with an `artifact.purged` that says why (`refused`), so notify sets CleanupFailed
on the Model, which keeps its finalizer (and its artifacts) until a cleanup succeeds. A
deletion no Model waits on (a registry's webhook) keeps its 4xx.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

import modelhooks.core.cleanup as deletion
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.core.cleanup import (
    Cleanup,
    Policy,
    Progress,
    Purge,
    apply_objects,
    apply_oci,
    check_prefix,
    plan_objects,
    plan_oci,
)
from modelhooks.core.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    Permanent,
    Throttled,
    Unavailable,
)
from modelhooks.core.function import Function
from modelhooks.core.records import PUSHED_AT, ModelState, owner_of, stamp
from modelhooks.core.sources import model_source
from modelhooks.core.stores import Stores
from modelhooks.core.tenancy import Tenancy
from modelhooks.events.model import (
    ArtifactPurged,
    CanonicalEvent,
    ModelDeleted,
    is_pullable_digest,
)

if TYPE_CHECKING:
    from modelhooks.core.ports import Cluster, ModelRegistry, Secrets

__all__ = [
    "FUNCTION",
    "Target",
    "in_use",
    "live_sources",
    "plan",
    "policy_of",
    "refused",
    "secret_name",
    "targets",
]

_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # a DNS subdomain


class Target(msgspec.Struct, frozen=True):  # a Struct: cheaper to make than a dataclass
    uri: str  # gs://b/prefix/, s3://b/prefix/, file://…/, oci://host/repo[:tag|@digest]
    digest: str = ""  # OCI: the manifest digest, when known


def handle(
    event: CanonicalEvent,
    *,
    stores: Stores,
    oci: OciClients,
    registry: ModelRegistry,
    tenancy: Tenancy,
    cleanup: Cleanup,
    secrets: Secrets | None,
    models: Cluster | None = None,
) -> list[CanonicalEvent]:
    data = event.data
    if not isinstance(data, ModelDeleted):
        return []
    policy = policy_of(data, cleanup)
    found = targets(data, registry, since=stamp(event))  # none known yet: nothing to do (a
    # push older than the deletion, registered later, brings its own deletion: register)
    if policy.name == "Retain":  # nothing is deleted, so no store or registry is reached
        kept = [(t, Purge(t.uri, kept=((t.uri, "deletionPolicy Retain"),))) for t in found]
        return [_purged(event, data, policy, *done, n) for n, done in enumerate(kept)]
    spared = live_sources(data, found, models) if found and models is not None else {}
    if spared:  # another Model, live in the cluster now, names it: its own deletion decides
        found = [t for t in found if t.uri not in spared]
    for target in found:  # every location is checked before anything is deleted
        if _external(target):
            continue
        if tenancy.rules and not tenancy.allows(data.namespace, target.uri):
            raise Forbidden(
                f"namespace {data.namespace!r} may not delete {target.uri}",
                namespace=data.namespace,
                location=target.uri,
            )
        stores.check_location(target.uri)
    if found and policy.name != "Retain":
        stores, oci = _acting_as(data, found, stores=stores, oci=oci, secrets=secrets)
    owner = data.namespace if tenancy.rules else None  # tenancy: a model is its namespace's
    used = in_use(registry, data.name, since=stamp(event), namespace=owner)
    limit = deletion.MAX_DELETES  # a delivery's share of a huge version: the rest comes again
    planned = [
        (target, *plan(target, policy, stores=stores, oci=oci, marker=cleanup.marker, in_use=used,
                       limit=limit))
        for target in found
    ]  # fmt: skip
    done = [(target, apply(purge, lambda _: None)) for target, purge, apply in planned]
    done += [(Target(uri), Purge(uri, kept=((uri, why),))) for uri, why in spared.items()]
    if unfinished := [target.uri for target, purge in done if purge.more]:
        gone = sum(len(purge.deletions) for _, purge in done)
        raise Throttled(
            f"{gone} objects deleted, more remain under {', '.join(unfinished)}: a delivery "
            f"deletes at most {limit} a location, the redelivery goes on",
            locations=unfinished,
        )
    return [_purged(event, data, policy, *each, n) for n, each in enumerate(done)]


def _purged(
    event: CanonicalEvent, data: ModelDeleted, policy: Policy, target: Target, done: Purge, n: int
) -> CanonicalEvent:
    """The `artifact.purged` reply for one location: what went, what stayed, what failed."""
    reply = ArtifactPurged(
        uri=target.uri,
        model=data.name,
        deleted=[d.name for d in done.deletions if d.name not in done.failed],
        kept=[name for name, _ in done.kept],
        failed=done.failed,
        policy=policy.name,
        namespace=data.namespace,
        model_uid=data.uid or "",
    )
    return event.reply(reply, source="modelhooks/cleanup", name=f"purged/{n}")


def refused(event: CanonicalEvent, error: Permanent) -> list[CanonicalEvent]:
    """A Model's deletion refused for good, told to the Model: one `artifact.purged` naming
    its source and why (`refused`), its `deleted` empty, named after the event and the
    reason (a redelivery refused alike answers the same; one refused for another reason, or
    a later success, another). [] when no Model is named (a registry's webhook)."""
    data = event.data
    if not isinstance(data, ModelDeleted):
        return []
    from modelhooks.core.conditions import model_of_subject  # notify's: not at start

    source = data.spec.get("source")
    if not source and model_of_subject(event.subject) is None:
        return []
    reason = f"{error.code}: {error.message}"
    try:
        uri = model_source(source).uri
    except BadRequest:  # the source is what was refused: the location the error names, if any
        uri = str(error.details.get("location", ""))
    reply = ArtifactPurged(
        uri=uri,
        model=data.name,
        policy=str(data.spec.get("deletionPolicy", "")),  # "": the policy file's
        namespace=data.namespace,
        refused=reason,
        model_uid=data.uid or "",
    )
    name = "refused/" + hashlib.sha256(reason.encode()).hexdigest()[:16]
    return [event.reply(reply, source="modelhooks/cleanup", name=name)]


def plan(
    target: Target,
    policy: Policy,
    *,
    stores: Stores,
    oci: OciClients,
    marker: str,
    in_use: frozenset[str],
    limit: int | None = None,
) -> tuple[Purge, Callable[[Purge, Progress], Purge]]:
    """The plan for one location, and what applies it (exactly that plan); an object
    store's no further than `limit` deletions (`more`: the rest is another run's)."""
    if _external(target):
        kept = ((target.uri, "an http source is its publisher's: nothing is deleted"),)
        return Purge(target.uri, kept=kept), lambda planned, _: planned
    stores.check_location(target.uri)
    if target.uri.startswith("oci://"):
        registry, repo, ref = oci.registry_for(target.uri)
        digest = target.digest or (ref if is_pullable_digest(ref) else registry.resolve(repo, ref))
        if digest is None:  # the tag is gone and nothing else names the digest: done
            return Purge(target.uri), lambda planned, _: planned
        history = registry.history(repo)[0]
        tags = [t.name for t in history if t.digest == digest]
        listed_by = sorted(t.name for t in history if t.digest != digest and digest in t.children)
        planned = plan_oci(
            registry, repo, digest, policy, tags=tags, in_use=in_use, listed_by=listed_by,
            tagged={t.digest for t in history},
        )  # fmt: skip
        return planned, lambda p, progress: apply_oci(registry, repo, p, progress=progress)
    store, bucket, key = stores.resolve(target.uri)
    prefix = check_prefix(key, target.uri)
    used = [
        found[2]
        for uri in in_use
        if (found := _location(stores, uri)) and found[:2] == (store, bucket)
    ]
    planned = plan_objects(store, bucket, prefix, policy, marker=marker, in_use=used, limit=limit)
    return planned, lambda p, progress: apply_objects(store, bucket, p, progress=progress)


def _acting_as(
    data: ModelDeleted,
    found: list[Target],
    *,
    stores: Stores,
    oci: OciClients,
    secrets: Secrets | None,
) -> tuple[Stores, OciClients]:
    """The clients to delete with: the Model's own Secret's when its source names one, read
    in the Model's namespace (never another's); the process's otherwise."""
    name = secret_name(data.spec)
    if name is None:
        return stores, oci
    where = f"Secret {name!r} in namespace {data.namespace!r}"
    if secrets is None:  # a deployment gap, not bad input: 503, retried, then dead-lettered
        raise Unavailable(  # for a replay once it is fixed
            f"Model {data.namespace}/{data.name} names {where} (spec.source.secretRef), but "
            "cleanup has no cluster access: run it in the cluster or set "
            "MODELHOOKS_CLEANUP_KUBECONFIG"
        )
    # imported here: only a Model naming a Secret needs clients of its own (and every store's)
    from modelhooks.adapters.credentials_from_secret import clients_for

    secret = secrets.get(data.namespace, name)
    (target,) = found  # a secretRef comes with the Model's own source: one location
    return clients_for(secret, target.uri, stores=stores, oci=oci, where=where)


def secret_name(spec: dict[str, Any]) -> str | None:
    """`spec.source.secretRef.name`, or None; BadRequest when it is not a Secret's name."""
    source = spec.get("source")
    ref = source.get("secretRef") if isinstance(source, dict) else None
    if ref is None:
        return None
    name = ref.get("name") if isinstance(ref, dict) else None
    if not isinstance(name, str) or not _SECRET_NAME.fullmatch(name):
        raise BadRequest(
            f"spec.source.secretRef.name: {name!r} is not a Secret's name",
            field="spec.source.secretRef.name",
        )
    return name


def _external(target: Target) -> bool:
    """An http(s) source: the publisher's to keep or delete, never ours."""
    return target.uri.startswith(("https://", "http://"))


def _location(stores: Stores, uri: str) -> tuple[Any, str, str] | None:
    """(store, bucket, key) of an object location the registry holds; None for others."""
    if uri.startswith("oci://") or not uri.partition("://")[1]:
        return None
    try:
        return stores.resolve(uri)
    except (BadRequest, Forbidden):
        return None  # not a location this process can reach: it cannot overlap a target


def targets(data: ModelDeleted, registry: ModelRegistry, *, since: str) -> list[Target]:
    """What the deletion is about: the Model's own source, else the registered versions of
    the model pushed before the deletion (`since`), of the named version if there is one."""
    source = data.spec.get("source")
    if isinstance(source, dict) and source:
        return [_from_source(source, data.status)]
    model = registry.get_model(data.name)
    if model is None:
        return []
    found = []
    for version in registry.list_versions(model.id):
        if data.version is not None and version.name != data.version:
            continue
        if version.custom_properties.get(PUSHED_AT, "") > since:
            continue  # pushed after the deletion: alive again, not this deletion's
        for artifact in registry.list_artifacts(version.id):
            found.append(
                Target(artifact.uri, artifact.digest if artifact.uri.startswith("oci://") else "")
            )
    return found


def _from_source(source: dict[str, Any], status: dict[str, Any]) -> Target:
    found = model_source(source)
    resolved = status.get("resolvedDigest")
    if found.store == "oci":  # the OCI client's module only then (cold start)
        from modelhooks.adapters.oci.distribution import parse_uri

        parse_uri(found.uri)  # BadRequest for a malformed reference
        if found.digest:  # pinned by the spec (immutable): never a digest a status names
            return Target(found.uri, found.digest)
        if isinstance(resolved, str) and is_pullable_digest(resolved):
            return Target(found.uri, resolved)
    return Target(found.uri, found.digest if found.store == "oci" else "")


def live_sources(data: ModelDeleted, found: list[Target], models: Cluster) -> dict[str, str]:
    """The targets another Model of the namespace, live in the cluster now, names (its
    source overlaps), each with why it is kept. Another Model: one of another uid (the
    deletion's `uid`; without one, any Model not being deleted, the deleted one itself being
    gone or Terminating), not being deleted itself. So a Model deleted and created again
    under its name with the same source keeps it, whether cleanup runs before or after
    register has heard of the new one: the cluster, not the order of deliveries, says it."""
    spared: dict[str, str] = {}
    try:
        listed = models.list_models(data.namespace)
    except NotFound:  # no Model resource in this cluster: no Model names anything
        return spared
    except Forbidden as exc:  # nothing is deleted unknowing what else names it
        raise Forbidden(
            f"cleanup may not list the Models of namespace {data.namespace!r}, so it deletes "
            "nothing: its ServiceAccount needs the ClusterRole modelhooks-cleanup "
            "(infra/k8s/rbac/cleanup.yaml)",
            namespace=data.namespace,
        ) from exc
    for model in listed:
        meta = model.get("metadata") or {}
        if meta.get("deletionTimestamp") or (data.uid and meta.get("uid") == data.uid):
            continue
        spec = model.get("spec")
        named = spec.get("source") if isinstance(spec, dict) else None
        try:
            source = _from_source(named if isinstance(named, dict) else {}, {})
        except Permanent:
            continue  # a source no one can act on names nothing
        for target in found:
            if target.uri not in spared and _overlaps(target, source):
                spared[target.uri] = (
                    f"in use by Model {data.namespace}/{meta.get('name')} "
                    f"(uid {meta.get('uid')}), live in the cluster"
                )
    return spared


def _overlaps(target: Target, source: Target) -> bool:
    """`source` names what `target` would delete: an OCI repository's same tag or digest,
    an object-store prefix inside or around the other."""
    if target.uri.startswith("oci://") or source.uri.startswith("oci://"):
        (repo, tag, digest), (other, other_tag, other_digest) = map(_oci_ref, (target, source))
        if repo != other:
            return False
        return bool(tag and tag == other_tag) or bool(digest and digest == other_digest)
    a, b = (u if u.endswith("/") else f"{u}/" for u in (target.uri, source.uri))
    return a.startswith(b) or b.startswith(a)


def _oci_ref(target: Target) -> tuple[str, str, str]:
    """(oci://host/repo, tag, digest) of an OCI reference, its digest the target's when the
    reference names none: `repo:tag@digest` is the repository `repo`, not `repo:tag`."""
    name, _, digest = target.uri.partition("@")
    head, _, last = name.rpartition("/")
    repo, _, tag = last.partition(":")
    return f"{head}/{repo}", tag, digest or target.digest


def policy_of(data: ModelDeleted, cleanup: Cleanup) -> Policy:
    """The Model's spec.deletionPolicy (with the policy file's options), else the file's."""
    base, name = cleanup.policy_for(data.name), data.spec.get("deletionPolicy")
    if name is None:
        return base
    return Policy.parse(name, protect=base.protect, old_versions=base.old_versions)


def in_use(
    registry: ModelRegistry, model_name: str, *, since: str, namespace: str | None = None
) -> frozenset[str]:
    """The locations and digests live versions use: every live version of other models,
    and the versions of this model pushed after the deletion. `namespace` (tenancy): the
    deleting one; a model of this name another namespace owns (registered it: its
    `namespace`) is another's, its live versions in use (as register refuses to archive
    it)."""
    used: set[str] = set()
    for model in registry.list_models():
        this = model.name == model_name and (namespace is None or owner_of(model) == namespace)
        if model.state != ModelState.LIVE and not this:
            continue
        for version in registry.list_versions(model.id):
            if this:
                if version.custom_properties.get(PUSHED_AT, "") <= since:
                    continue
            elif version.state != ModelState.LIVE:
                continue
            for artifact in registry.list_artifacts(version.id):
                used.add(artifact.uri)
                if is_pullable_digest(artifact.digest):
                    used.add(artifact.digest)
    return frozenset(used)


FUNCTION = Function(
    name="cleanup",
    accepts=frozenset({ModelDeleted.TYPE}),
    handle=handle,
    extras=("gcp", "aws", "k8s"),  # GCS and S3 deletes; Artifact Registry's API; Secrets
    refused=refused,
)
