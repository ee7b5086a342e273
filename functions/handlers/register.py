"""`register`: record pushed artifacts in the model registry; archive deleted models.

Find-or-create RegisteredModel → ModelVersion → ModelArtifact, keyed by the natural
identity (model name, version name, artifact digest). The same event twice yields one
version; the same version name with another digest is a Conflict, never an overwrite.

The registry's state is a function of the SET of events, not of their order: deliveries
are duplicated, reordered and concurrent. Each write keeps the facts that decide the state
and derives the state from them, inside one registry transaction:

- a version keeps the time of the latest push that made it (`modelhooks.pushed_at`) and,
  registered by a Model, that Model's uid (`modelhooks.registered_by`);
- a model keeps the time of its latest deletion (`modelhooks.deleted_at`) and, of a deletion
  naming its Model's uid, that uid (`modelhooks.deleted_uids`);
- a version is LIVE iff its push is newer than the model's deletion, or a Model that
  registered it is not deleted; a model is LIVE iff one of its versions is.

A deletion's time is its sender's clock: the deletion of a Model deleted and created again
under its name (a new uid), sent again late (a watch re-sent, a relist), is stamped after
the new Model's creation. Naming its uid, it archives only what that uid registered; the new
Model's version stays, whatever the order. A deletion naming no uid (a hand replay, an event
from before uids were kept) ends every registration older than it
(`modelhooks.uidless_deleted_at`), as before.

These facts stay bounded (a registry bounds a string property: Kubeflow's PostgreSQL indexes
it, 2,704 bytes at most), however often a Model of a name is deleted and created again: a version keeps
its KEPT_UIDS latest registering uids, a model its KEPT_UIDS latest deleted uids. Past them,
the deletion whose Model registered earliest (else, its registration unknown, was first sent
earliest) is forgotten as a deletion naming no uid at that time: every registration as old
ends, as that Model's did (Models of one name in one namespace live one after the other, so
the Models after it registered later).

So a push of a new version of a live model writes no model: it reads the model (whose
deletion time its decision stands on; a registry's transaction refuses it when that read
changed before it ended), creates the version and its artifact. A deletion writes the
model first and then lists its versions, so a push it does not list saw its write.

So a deletion older than a push never archives it, whenever it arrives, and a push older
than a deletion is recorded ARCHIVED. An event without a time counts as newer than any
time (never silently dropped). One exception to order independence is inherent: two pushes
of one version with different digests. The first registered wins and the other is a
Conflict (a stale one, older than the model's deletion, is moot and ignored).

A `Model` (model.created / .updated) registers its spec.version exactly as an artifact.pushed
of that version would (model = the Model's name, in its namespace), its source resolved ONCE
into a digest: status.resolvedDigest when set (never fetched again), else an OCI
digest reference (@sha256 or @sha512) as written, else the OCI tag's digest now, or the object-store prefix's
content digest (the identity ingress gives bucket notifications). The reply keeps the
Model's subject, so notify finds it. A paused Model never gets here (the delivery skips it),
and a Model being deleted arrives as model.deleted (the ApiServerSource translation).

A Model's version refused for good (registered from another source, its namespace's tenancy
refusing its source, a source register cannot read as one) is told, not only dead-lettered:
`refused` answers it with a `model.refused` that says why, so notify sets Registered False
(reason VersionConflict, SourceForbidden or InvalidSpec) on that Model and records a Warning
Event. A push's refusal
(no Model waits on it) stays a 4xx.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import msgspec

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.core.content import ContentResolver
from modelhooks.core.errors import (
    NAMESPACE_TERMINATING,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    Permanent,
)
from modelhooks.core.function import Function, Skip
from modelhooks.core.records import (
    DELETED_AT,
    DELETED_UIDS,
    DELETION_POLICY,
    PUSHED_AT,
    REGISTERED_BY,
    SIGNATURE,
    UIDLESS_DELETED_AT,
    ArtifactState,
    ModelArtifact,
    ModelState,
    ModelVersion,
    RegisteredModel,
    owner_of,
    stamp,
)
from modelhooks.core.sources import model_source
from modelhooks.core.stores import Stores
from modelhooks.events.model import (
    MAX_UID,
    ArtifactPushed,
    CanonicalEvent,
    ModelCreated,
    ModelDeleted,
    ModelRefused,
    ModelRegistered,
    ModelUpdated,
    is_pullable_digest,
)

if TYPE_CHECKING:
    from modelhooks.core.ports import ModelRegistry

__all__ = ["DELETED_AT", "FUNCTION", "PUSHED_AT", "archive_model", "register_model"]

T = TypeVar("T")
REGISTERED = "registered"  # the name of the reply, model.registered
# the uids a version keeps of its registering Models, and a model of its deleted ones (the
# latest): at most 9 of 64 characters with a time each, ~900 bytes (module docstring)
KEPT_UIDS = 8
_TIME = len("2026-11-28T11:32:15.123456Z")  # a time as register keeps it (records.stamp)


def handle(
    event: CanonicalEvent,
    *,
    registry: ModelRegistry,
    stores: Stores,
    content: ContentResolver,
    oci: OciClients,
    check_namespace: bool,
) -> list[CanonicalEvent]:
    """`check_namespace`: tenancy is on, so only the registering namespace may archive."""
    if isinstance(event.data, ArtifactPushed):
        stores.check_location(event.data.uri)  # record only locations a function may act on
        return register_model(event, event.data, registry=registry)
    if isinstance(event.data, ModelCreated | ModelUpdated):
        try:
            pushed = pushed_of(event.data, stores=stores, content=content, oci=oci)
        except NotFound as exc:  # the push's own event, or the Model's next update, registers it
            raise Skip(f"the Model's source is not there yet: {exc}") from None
        return register_model(event, pushed, registry=registry)
    if isinstance(event.data, ModelDeleted):
        archive_model(event, event.data, registry=registry, check_namespace=check_namespace)
    return []


def register_model(
    event: CanonicalEvent, pushed: ArtifactPushed, *, registry: ModelRegistry
) -> list[CanonicalEvent]:
    """Registered; a Skip in a namespace being deleted (no record can be made there, and
    what it would make would go with it), not a 403 dead-lettered."""
    try:
        with registry.transaction():
            return _register(event, pushed, registry)
    except Forbidden as exc:
        _unless_terminating(exc, pushed.namespace)
        raise


def _register(
    event: CanonicalEvent, pushed: ArtifactPushed, registry: ModelRegistry
) -> list[CanonicalEvent]:
    at, uid = stamp(event), _uid_of(event)
    namespace = pushed.namespace or "default"
    model, created = _find_or_create(
        lambda: registry.create_model(
            pushed.model,
            properties={"namespace": namespace, DELETED_AT: ""},
        ),
        lambda: registry.get_model(pushed.model),
    )
    ended = _deletions(model.custom_properties)
    this = {uid: at} if uid else {}  # this registration, by its Model
    props = {"digest": pushed.digest, "uri": pushed.uri, "store": pushed.store, PUSHED_AT: at}
    if this:
        props[REGISTERED_BY] = _encode(this)
    version, new_version = _create_or_find(  # a push is mostly of a new version
        lambda: registry.create_version(model.id, pushed.version, properties=props),
        lambda: registry.get_version(model.id, pushed.version),
    )
    if version.custom_properties.get("digest") != pushed.digest:
        if not _live(at, this, ended):
            return []  # another digest, but ended by the model's deletion: moot
        raise Conflict(
            f"model {pushed.model!r} version {pushed.version!r} is already registered with "
            "another digest",
            registered=version.custom_properties.get("digest"),
            received=pushed.digest,
        )
    version_at = max(version.custom_properties.get(PUSHED_AT, ""), at)
    facts = {PUSHED_AT: version_at}
    registered_by = _registered_by(version.custom_properties)
    if uid:
        registered_by[uid] = max(registered_by.get(uid, ""), at)
        registered_by = _latest(registered_by)
        facts[REGISTERED_BY] = _encode(registered_by)
    live = _live(version_at, registered_by, ended)
    created = created or new_version or (live and version.state != ModelState.LIVE)
    version = _update(registry.update_version, version, facts, live)
    if live:  # a live version makes its model live; an archived one changes no model
        model = _update(registry.update_model, model, {}, live=True)

    # A version this delivery created has no artifact yet: skip the lookup on the hot path.
    artifacts = [] if new_version else registry.list_artifacts(version.id)
    artifact = next((a for a in artifacts if a.name == "model"), None)
    if artifact is None or artifact.state != ArtifactState.LIVE:
        artifact = registry.upsert_artifact(
            ModelArtifact(
                id=artifact.id if artifact else "",
                version_id=version.id,
                name="model",
                uri=pushed.uri,
                digest=pushed.digest,
                state=ArtifactState.LIVE,
                # the push that registered it, as its source and id name it: the id of the
                # reply it is answered with (an upstream id is unique within its source alone)
                custom_properties={"source_event": event.derived_id(REGISTERED)},
            )
        )
        created = True
    # the event that registered it, delivered again after its answer was forgotten (a crash
    # before the delivery log's record, another instance), answers as the first time
    created = created or artifact.custom_properties.get("source_event") == event.derived_id(
        REGISTERED
    )
    if not live:  # a push older than the model's deletion: recorded, archived, and …
        return [_deleted_before(event, pushed, namespace, model.custom_properties)]
    reply = ModelRegistered(
        model=pushed.model,
        version=pushed.version,
        uri=pushed.uri,
        digest=pushed.digest,
        registry=getattr(registry, "name", type(registry).__name__),
        registered_model_id=model.id,
        model_version_id=version.id,
        model_artifact_id=artifact.id,
        namespace=namespace,
        created=created,
    )
    return [event.reply(reply, source="modelhooks/register", name=REGISTERED)]


def pushed_of(
    model: ModelCreated | ModelUpdated, *, stores: Stores, content: ContentResolver, oci: OciClients
) -> ArtifactPushed:
    """The push a Model asks for: its spec.version at the digest its source resolves to."""
    if not model.spec:  # an ApiServerSource in Reference mode: nothing to register from
        raise Skip("the event carries no Model spec (ApiServerSource mode Reference)")
    if isinstance(model, ModelUpdated) and model.status.get("modelVersionId"):
        # registered already, and source and version are immutable: an update (notify's own
        # status write among them) has nothing more to register
        raise Skip("the Model's version is registered already (status.modelVersionId)")
    source, resolved = model.spec.get("source"), model.status.get("resolvedDigest")
    if not isinstance(source, dict) or not model.version:
        raise BadRequest(
            f"Model {model.namespace}/{model.name}: spec.source and spec.version are required "
            "(an ApiServerSource in Reference mode sends neither: use mode Resource)",
            field="spec",
        )
    resolved = resolved if isinstance(resolved, str) and resolved else None
    found, tag = model_source(source), None
    if found.store == "oci":
        uri, digest, tag = _oci_source(found.uri, resolved, stores=stores, oci=oci)
    elif found.store == "http":  # named by the sha256 its spec gives: nothing is fetched
        uri, digest = found.uri, found.digest
    else:
        uri = found.uri
        stores.check_location(uri)
        digest = resolved or content.digest_of(uri)
    return ArtifactPushed(
        model=model.name,
        version=model.version,
        uri=uri,
        digest=digest,
        store=found.store,
        namespace=model.namespace,
        tag=tag,
    )


def _oci_source(
    uri: str, resolved: str | None, *, stores: Stores, oci: OciClients
) -> tuple[str, str, str | None]:
    """(oci://host/repo@digest, digest, tag): a digest reference as written, a tag
    resolved now, unless the Model resolved it already."""
    stores.check_location(uri)
    client, repo, ref = oci.registry_for(uri)
    tag = None if is_pullable_digest(ref) else ref
    digest = resolved or (client.resolve(repo, tag) if tag else ref)
    if digest is None:
        raise NotFound(f"{uri}: no such tag", uri=uri)
    host = uri.removeprefix("oci://").partition("/")[0]
    return f"oci://{host}/{repo}@{digest}", digest, tag


def archive_model(
    event: CanonicalEvent,
    deleted: ModelDeleted,
    *,
    registry: ModelRegistry,
    check_namespace: bool = False,
) -> None:
    """Record the deletion and archive what it is newer than. With tenancy on, only the
    namespace that registered the model may archive it. A namespace being deleted takes no
    new record (Kubernetes' registry: the model of a Model it never registered), and the
    ones it holds go with it: nothing to record, a Skip (it was a 403, dead-lettered)."""
    try:
        with registry.transaction():
            _archive(event, deleted, registry, check_namespace)
    except Forbidden as exc:
        _unless_terminating(exc, deleted.namespace)
        raise


def _unless_terminating(exc: Forbidden, namespace: str | None) -> None:
    """Skip for a registry's refusal to create in a namespace being deleted."""
    if exc.details.get("reason") == NAMESPACE_TERMINATING:
        raise Skip(f"namespace {namespace!r} is being deleted, its records with it") from None


def _archive(
    event: CanonicalEvent, deleted: ModelDeleted, registry: ModelRegistry, check_namespace: bool
) -> None:
    at, uid = stamp(event), deleted.uid or ""
    model, _ = _find_or_create(
        lambda: registry.create_model(
            deleted.name,
            properties={"namespace": deleted.namespace, **_deletion_facts({}, at, uid)},
        ),
        lambda: registry.get_model(deleted.name),
    )
    owner = owner_of(model)
    if check_namespace and owner != deleted.namespace:
        raise Forbidden(
            f"namespace {deleted.namespace!r} may not archive model {deleted.name!r}",
            namespace=deleted.namespace,
            owner=owner,
        )
    facts = _deletion_facts(model.custom_properties, at, uid)
    policy = deleted.spec.get("deletionPolicy")
    if facts[DELETED_AT] == at and isinstance(policy, str):  # the latest deletion's policy
        facts[DELETION_POLICY] = policy
    # The deletion is written before the versions are listed (the state follows them): a
    # push this listing misses read the model before this write, so its transaction,
    # re-reading the model as it ends, is redone.
    model = _update(registry.update_model, model, facts, live=model.state == ModelState.LIVE)
    versions = registry.list_versions(model.id)
    ended, facts = _forgetting(model.custom_properties, versions)
    live_versions = False
    for version in versions:
        props = version.custom_properties
        live = _live(props.get(PUSHED_AT, ""), _registered_by(props), ended)
        live_versions |= live
        _update(registry.update_version, version, {}, live)
    _update(registry.update_model, model, facts, live=live_versions)


def _deleted_before(
    event: CanonicalEvent, pushed: ArtifactPushed, namespace: str, facts: Mapping[str, str]
) -> CanonicalEvent:
    """… the deletion said again for this version, as of the deletion's time and with its
    policy: cleanup, which may have run before this push was known, cleans it up too (the
    same whatever the order of the push and the deletion)."""
    policy = facts.get(DELETION_POLICY)
    deleted = ModelDeleted(
        name=pushed.model,
        namespace=namespace,
        version=pushed.version,
        spec={"deletionPolicy": policy} if policy else {},
    )
    at = facts.get(DELETED_AT, "")
    return CanonicalEvent(
        id=event.derived_id("deleted-before"),
        source="modelhooks/register",
        type=deleted.TYPE,
        data=deleted,
        subject=event.subject,
        time=datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC),
    )


class _Deletions(NamedTuple):
    """What a model's deletions end: `at` (the latest's time) every push older than it,
    `uidless_at` (the latest naming no uid, or a forgotten uid's) every registration as old,
    and each of `uids` (its deleted Models, each with the earliest time its deletion was sent
    at) what that uid registered, whatever the times."""

    at: str
    uidless_at: str
    uids: Mapping[str, str]


def _deletions(props: Mapping[str, str]) -> _Deletions:
    """A model's deletions. A model recorded before uids were kept has no uidless time: its
    latest deletion's, each deletion then ending what is older than it."""
    at = props.get(DELETED_AT, "")
    return _Deletions(at, props.get(UIDLESS_DELETED_AT, at), _uid_times(props.get(DELETED_UIDS)))


def _deletion_facts(props: Mapping[str, str], at: str, uid: str) -> dict[str, str]:
    """A model's deletion facts with a deletion at `at` of the Model of `uid` ("" none).
    The uidless time is written once it differs from the latest deletion's (before, absent
    means the same), so a model no uid was ever deleted from keeps the facts it had."""
    before = _deletions(props)
    uidless_at = before.uidless_at if uid else max(before.uidless_at, at)
    facts = {DELETED_AT: max(before.at, at)}
    if UIDLESS_DELETED_AT in props or uidless_at != facts[DELETED_AT]:
        facts[UIDLESS_DELETED_AT] = uidless_at
    if uid:
        uids = {**before.uids, uid: min(before.uids.get(uid, at), at)}
        facts[DELETED_UIDS] = _encode(uids)
    return facts


def _forgetting(
    props: Mapping[str, str], versions: list[ModelVersion]
) -> tuple[_Deletions, dict[str, str]]:
    """A model's deletions and their facts keeping its KEPT_UIDS latest deleted uids: past
    them, the uid whose Model registered earliest (its latest registration a version keeps),
    else (none kept) was first deleted earliest, is forgotten as a deletion naming no uid at
    that time. Its Model's registrations end all the same, the later Models' do not (a Model
    of a name registers after the Model before it was deleted)."""
    ended = _deletions(props)
    if len(ended.uids) <= KEPT_UIDS:
        return ended, {}
    registered: dict[str, str] = {}
    for version in versions:
        for uid, at in _registered_by(version.custom_properties).items():
            if uid in ended.uids:
                registered[uid] = max(registered.get(uid, ""), at)
    known = {uid: min(registered.get(uid, first), first) for uid, first in ended.uids.items()}
    oldest = sorted(known, key=lambda uid: (known[uid], uid))[: len(known) - KEPT_UIDS]
    uidless_at = max([ended.uidless_at, *(known[uid] for uid in oldest)])
    uids = {uid: at for uid, at in ended.uids.items() if uid not in oldest}
    facts = {DELETED_UIDS: _encode(uids), UIDLESS_DELETED_AT: uidless_at}
    return _Deletions(ended.at, uidless_at, uids), facts


def _live(pushed_at: str, registered_by: Mapping[str, str], ended: _Deletions) -> bool:
    """Live while one of its registrations is: a push newer than the model's latest deletion,
    or a Model's that is not deleted, newer than the latest deletion naming no uid."""
    return pushed_at > ended.at or any(
        uid not in ended.uids and at > ended.uidless_at for uid, at in registered_by.items()
    )


def _uid_of(event: CanonicalEvent) -> str:
    """The uid of the Model registering (a Model's event that carries it), else ""."""
    data = event.data
    return (data.uid or "") if isinstance(data, ModelCreated | ModelUpdated) else ""


def _registered_by(props: Mapping[str, str]) -> dict[str, str]:
    """A version's registering Models: {uid: time of its latest registration}."""
    return _uid_times(props.get(REGISTERED_BY))


def _uid_times(text: str | None) -> dict[str, str]:
    """A fact {uid: time}: what is not one (a record edited by hand), none; an entry longer
    than a uid and a time are, left out (what is written again stays bounded)."""
    found = _decoded(text, dict)
    return {
        k: v
        for k, v in found.items()
        if isinstance(v, str) and len(k) <= MAX_UID and len(v) <= _TIME
    }


def _latest(uid_times: Mapping[str, str]) -> dict[str, str]:
    """The KEPT_UIDS latest of {uid: time}."""
    latest = sorted(uid_times, key=lambda uid: (uid_times[uid], uid))[-KEPT_UIDS:]
    return {uid: uid_times[uid] for uid in latest}


def _decoded(text: str | None, kind: type[Any]) -> Any:
    """A fact's JSON value, `kind()` when absent or not one (a record edited by hand or
    imported: not JSON, another type, nested past the parser's depth)."""
    try:
        found = json.loads(text) if text else kind()
    except (ValueError, RecursionError):
        return kind()
    return found if isinstance(found, kind) else kind()


def _encode(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


R = TypeVar("R", RegisteredModel, ModelVersion)


def _update(write: Callable[[R], R], record: R, facts: Mapping[str, str], live: bool) -> R:
    """Write `record` with these facts and the state they imply, unless nothing changes. An
    archived version keeps no signature record: `sign` records one on a live version only,
    and its deletion may take the signature with the files (cleanup); kept, an archived
    version would say signed or not by the order its push, signing and deletion came in."""
    props = {**record.custom_properties, **facts}
    state = ModelState.LIVE if live else ModelState.ARCHIVED
    if not live:
        props = {k: v for k, v in props.items() if not k.startswith(SIGNATURE)}
    if props == record.custom_properties and state == record.state:
        return record
    return write(msgspec.structs.replace(record, custom_properties=props, state=state))


def _find_or_create(create: Callable[[], T], find: Callable[[], T | None]) -> tuple[T, bool]:
    """(the thing, created by this call): found first; when a concurrent delivery won the
    race to create it, what that delivery created."""
    found = find()
    if found is not None:
        return found, False
    return _create_or_find(create, find)


def _create_or_find(create: Callable[[], T], find: Callable[[], T | None]) -> tuple[T, bool]:
    """(the thing, created by this call): created first (what is usually new: one write
    instead of a lookup and a write), found when it exists already, in a namespace being
    deleted too (the API server refuses every create there, 403, before it looks: a push
    again of a version there went unrecorded, and sign waited for it until dead-lettered)."""
    try:
        return create(), True
    except (Conflict, Forbidden) as exc:
        if isinstance(exc, Forbidden) and exc.details.get("reason") != NAMESPACE_TERMINATING:
            raise
        found = find()
        if found is None:
            raise
        return found, False


def refused(event: CanonicalEvent, error: Permanent) -> list[CanonicalEvent]:
    """A Model's version refused for good, told to the Model: one `model.refused` saying why,
    named after the event and the reason (a redelivery refused alike answers the same; one
    refused for another reason another). [] for anything but a Model's created/updated
    event: a push's refusal has no Model waiting on it, and stays a 4xx."""
    data = event.data
    if not isinstance(data, ModelCreated | ModelUpdated):
        return []
    reason = f"{error.code}: {error.message}"
    try:
        uri = model_source(data.spec.get("source")).uri
    except BadRequest:  # the source is what was refused
        uri = ""
    reply = ModelRefused(
        model=data.name,
        version=data.version or "",
        uri=uri,
        namespace=data.namespace,
        refused=reason,
        model_uid=data.uid or "",
    )
    name = "refused/" + hashlib.sha256(reason.encode()).hexdigest()[:16]
    return [event.reply(reply, source="modelhooks/register", name=name)]


FUNCTION = Function(
    name="register",
    accepts=frozenset(
        {ArtifactPushed.TYPE, ModelCreated.TYPE, ModelUpdated.TYPE, ModelDeleted.TYPE}
    ),
    handle=handle,
    refused=refused,
)
