"""`prune`: tag retention for an OCI repository, applied when it changes or on a schedule.

- `artifact.pushed` for an `oci://` model, or `prune.requested` (a schedule: Cloud
  Scheduler, a Knative PingSource): the repository's policy from `prune.policy_file`.
- `model.created` / `model.updated` of a `Model` whose `spec.retention` asks for one: that
  policy, on the Model's OCI repository (only one its namespace may act on, with tenancy).

List the repository's history, plan (modelhooks.core.retention: keep the newest per
stream and what is protected, recent, in use by a live registered version or the Model, or
named by a kept tag or index), delete exactly the plan — referrers, tags, manifests — and
reply `tags.pruned` with it. A tag that names another digest than planned, since, is left
alone, and a manifest a tag names since (pushed meanwhile) stays; another event finds
nothing more to delete.

A plan that deletes anything is recorded before anything is deleted, in the model
registry, keyed by the delivery (its tenant, source and id): a version of the archived
registered model `modelhooks:prune` (`PLANS`), in one of SLOTS slots reused once older
than RETENTION (the registry deletes nothing: the records stay bounded). A redelivery (a
run killed after its deletions, before its answer was kept; Pub/Sub's ack deadline passed)
applies the recorded plan again, what is gone being done, and answers it as the first
time: the same tags deleted (a planned tag found gone counts as the recorded run's doing), kept and manifests.
Listing again, it found them gone and answered nothing deleted: the reply (notify's Event
on the Model) was lost, or, where the first answer had reached the broker, refused as the
same id with other content. An id reused for another repository is a Conflict. (Two
events planning one tag still tell it once; a redelivery cannot tell whether another
event's run, racing the recorded one, removed a planned tag, and tells it too.)

A run stopped between its tag deletes and its manifest deletes (a killed process) leaves
those manifests untagged, and the distribution API lists no untagged manifest: its
redelivery deletes them, by the recorded plan; never redelivered (dead-lettered), the
registry's own garbage collection reclaims them (`registry garbage-collect
--delete-untagged`). Finding them by listing would cost a manifest read per version ever
archived in the repository, on every delivery.
"""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import msgspec

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.core.errors import BadRequest, Conflict, Forbidden, NotFound
from modelhooks.core.function import Function, Skip
from modelhooks.core.records import INTERNAL_PREFIX, ModelState, ModelVersion, Tag
from modelhooks.core.retention import (
    Decision,
    Plan,
    Policies,
    Policy,
    apply,
    model_policy,
    plan,
    read_referrers,
    referrers,
    spare_referred,
)
from modelhooks.core.sources import model_source
from modelhooks.core.tenancy import Tenancy
from modelhooks.events.model import (
    ArtifactPushed,
    CanonicalEvent,
    ModelCreated,
    ModelUpdated,
    PruneRequested,
    TagsPruned,
    is_pullable_digest,
)

if TYPE_CHECKING:
    from modelhooks.core.ports import ModelRegistry, OciRegistry

# how long after a push its tag may still be unwritten (distribution writes it just after
# notifying): a push delivered later whose tag the registry does not list was untagged since
PUSH_LAG = timedelta(minutes=10)

__all__ = [
    "EVENT",
    "FUNCTION",
    "MAX_RECORD",
    "PLAN",
    "PLANS",
    "RETENTION",
    "SLOTS",
    "Recorded",
    "in_use",
]

_log = logging.getLogger("modelhooks.prune")

# prune's plans, by delivery: versions of a registered model no event can name (':' is in no
# model name an event carries), archived (no live version uses it: prune's and cleanup's
# listings of live models pass it by; `registry list` and `export` leave it out); each
# version's PLAN.nnn are a `Recorded`'s JSON in PARTS parts, EVENT names the delivery and AT
# when it was recorded
PLANS = INTERNAL_PREFIX + "prune"
# the registry deletes nothing, so the versions are SLOTS slots, reused: a delivery's record
# is in the first of PROBES slots from its hash's that is free, or holds a record older than
# RETENTION (no redelivery brings it again: Pub/Sub keeps an unacked message 7 days at most,
# Knative retries within hours; a dead letter replayed later plans again); none: unrecorded
SLOTS = 4096
PROBES = 8
RETENTION = timedelta(days=8)
# a plan's JSON goes in parts of PART characters (PLAN.000, .001, …): Kubeflow's PostgreSQL
# indexes a string property in a btree (a row of 2,704 bytes at most: a longer value answered
# 500), the Kubernetes CRDs take 256 properties of 65,536 characters at most
PART = 2000
MAX_RECORD = 250 * PART  # ~5,000 tags deleted at once; past it a plan is not recorded
PLAN = "modelhooks.prune_plan"
PARTS = "modelhooks.prune_parts"
EVENT = "modelhooks.prune_event"
AT = "modelhooks.prune_at"


def handle(
    event: CanonicalEvent,
    *,
    oci: OciClients,
    registry: ModelRegistry,
    retention: Policies,
    tenancy: Tenancy,
) -> list[CanonicalEvent]:
    data = event.data
    pinned: set[str] = set()  # digests the triggering Model names
    if isinstance(data, ArtifactPushed | PruneRequested):
        if isinstance(data, ArtifactPushed) and data.store != "oci":
            return []
        host, repo, _ = _parse_uri(data.uri)
        uri, policy = f"oci://{host}/{repo}", retention.for_repository(f"{host}/{repo}")
        if policy is None:
            raise Skip(f"no retention policy covers {host}/{repo} (prune.policy_file)")
    elif isinstance(data, ModelCreated | ModelUpdated):
        found = _model_policy(data)
        if found is None:
            return []
        uri, policy, pinned = found
        if tenancy.rules and not tenancy.allows(data.namespace, uri):
            raise Forbidden(f"namespace {data.namespace!r} may not prune {uri}", location=uri)
    else:
        return []
    client, repo, _ = oci.registry_for(uri)
    delivery = _delivery(event)
    recorded = _recorded(registry, delivery, uri)  # by a delivery of this event before
    mine = None
    if recorded is None:
        tags, untagged = client.history(repo)
        if isinstance(data, ArtifactPushed):
            tags = _with_pushed(client, repo, tags, data, event.time)
        used = in_use(registry) | pinned
        planned = plan(tags, policy, untagged=untagged, in_use=used, now=datetime.now(UTC))
        read = read_referrers(client, repo, planned)  # once each, for both
        planned = spare_referred(client, repo, planned, in_use=used, found=read)
        recorded = mine = Recorded.of(uri, planned, referrers(client, repo, planned, found=read))
        if planned.delete or planned.manifests:
            recorded = _record(registry, delivery, mine)
    else:
        planned = recorded.plan
    done = apply(client, repo, planned, found=recorded.referrers, again=recorded is not mine)
    reply = TagsPruned(
        repository=uri.removeprefix("oci://"),
        deleted=list(done.deleted),
        kept=[d.tag for d in planned.keep],
        manifests=list(done.referrers + done.manifests),
    )
    return [event.reply(reply, source="modelhooks/prune", name="pruned")]


class Recorded(msgspec.Struct, frozen=True):
    """A delivery's plan as the registry keeps it (`PLAN`, JSON): the tags it deletes and
    keeps with their digests, the manifests and referrers it deletes; not the reasons
    (~90 bytes a tag without them, ~150 with)."""

    repository: str
    delete: tuple[tuple[str, str], ...] = ()
    keep: tuple[tuple[str, str], ...] = ()
    manifests: tuple[str, ...] = ()
    referrers: tuple[str, ...] = ()

    @classmethod
    def of(cls, uri: str, planned: Plan, referrers: tuple[str, ...]) -> Recorded:
        delete = tuple((d.tag, d.digest) for d in planned.delete)
        keep = tuple((d.tag, d.digest) for d in planned.keep)
        return cls(uri, delete, keep, tuple(d.digest for d in planned.manifests), referrers)

    @property
    def plan(self) -> Plan:
        return Plan(
            keep=tuple(Decision(t, d, "kept, as recorded") for t, d in self.keep),
            delete=tuple(Decision(t, d, "deleted, as recorded") for t, d in self.delete),
            manifests=tuple(Decision("", d, "deleted, as recorded") for d in self.manifests),
        )


def _delivery(event: CanonicalEvent) -> tuple[str, str]:
    """(version name, what it names): the delivery as the delivery layer's dedupe names it,
    its tenant with it (a route bound to one may claim any source and id): the three as a
    JSON array, so that no two triples name the same (joined by spaces, source "a b" and id
    "c" were source "a" and id "b c")."""
    tenant = getattr(event.data, "namespace", None) or ""
    named = msgspec.json.encode([tenant, event.source, event.id]).decode()
    return hashlib.sha256(named.encode()).hexdigest()[:40], named


def _slots(delivery: tuple[str, str]) -> list[str]:
    """The names of the PROBES slots a delivery's record may be in, in order."""
    first = int(delivery[0], 16) % SLOTS
    return [f"slot-{(first + n) % SLOTS:04d}" for n in range(min(PROBES, SLOTS))]


def _recorded(registry: ModelRegistry, delivery: tuple[str, str], uri: str) -> Recorded | None:
    """The plan recorded for this delivery, if any; Conflict if for another repository. A
    slot never created ends the search: the delivery would have taken it."""
    model = registry.get_model(PLANS)
    if model is None:
        return None
    for slot in _slots(delivery):
        version = registry.get_version(model.id, slot)
        if version is None:
            return None
        if version.custom_properties.get(EVENT) == delivery[1]:
            return _read(version, delivery, uri)
    return None


def _read(version: ModelVersion, delivery: tuple[str, str], uri: str) -> Recorded:
    props = version.custom_properties
    try:  # the first PARTS parts: an overwritten slot may keep a longer plan's tail
        count = int(props.get(PARTS, ""))
        text = "".join(props[f"{PLAN}.{n:03d}"] for n in range(count))
        recorded = msgspec.json.decode(text, type=Recorded)
    except (ValueError, KeyError, msgspec.DecodeError) as exc:
        raise Conflict(
            f"the plan recorded for event {delivery[1]!r} ({PLANS!r}, version {version.name!r}"
            f" in the model registry) cannot be read: {exc}"
        ) from None
    if recorded.repository != uri:
        raise Conflict(
            f"event {delivery[1]!r} was delivered before for {recorded.repository}",
            location=uri,
        )
    return recorded


def _stale(version: ModelVersion, now: datetime) -> bool:
    try:
        at = datetime.fromisoformat(version.custom_properties.get(AT, ""))
    except ValueError:
        return True
    return at.tzinfo is None or now - at > RETENTION


def _record(registry: ModelRegistry, delivery: tuple[str, str], recorded: Recorded) -> Recorded:
    """`recorded` kept for this delivery before anything is deleted: in a slot (`_slots`)
    of the archived model `PLANS` (found or created), the first one free or stale. A
    delivery of it at the same time recorded first: its plan, which this run applies too.
    The JSON goes in PART-sized properties; a plan past MAX_RECORD bytes, or one finding
    every slot taken, is not kept: its redelivery plans again, as before."""
    plan_json = msgspec.json.encode(recorded).decode()
    if len(plan_json) > MAX_RECORD:
        _log.warning(
            "prune: the plan of event %s deletes %d tags and %d manifests: past %d bytes, it"
            " is not recorded (a redelivery plans again)",
            delivery[1],
            len(recorded.delete),
            len(recorded.manifests),
            MAX_RECORD,
        )
        return recorded
    model = registry.get_model(PLANS)
    if model is None:
        try:
            model = registry.create_model(PLANS, properties={})
        except Conflict:
            model = registry.get_model(PLANS)
            if model is None:
                raise
    if model.state != ModelState.ARCHIVED:  # no live version uses it: none is one
        model = registry.update_model(msgspec.structs.replace(model, state=ModelState.ARCHIVED))
    now = datetime.now(UTC)
    props = {
        f"{PLAN}.{n:03d}": plan_json[at : at + PART]
        for n, at in enumerate(range(0, len(plan_json), PART))
    }
    props |= {PARTS: str(len(props)), EVENT: delivery[1], AT: now.isoformat()}
    for slot in _slots(delivery):
        version = registry.get_version(model.id, slot)
        if version is None:
            try:
                registry.create_version(model.id, slot, properties=props)
                return recorded
            except Conflict:  # created meanwhile
                version = registry.get_version(model.id, slot)
                if version is None:
                    raise
        if version.custom_properties.get(EVENT) == delivery[1]:
            return _read(version, delivery, recorded.repository)
        if _stale(version, now):
            with registry.transaction():  # written only as read: a race is a StaleWrite
                version = registry.get_version(model.id, slot)
                if version is not None and _stale(version, now):
                    fresh = msgspec.structs.replace(version, custom_properties=props)
                    registry.update_version(fresh)
                    return recorded
    _log.warning(
        "prune: the plan of event %s is not recorded: its %d slots in %r hold plans of the"
        " last %s (a redelivery plans again)",
        delivery[1],
        min(PROBES, SLOTS),
        PLANS,
        RETENTION,
    )
    return recorded


def _with_pushed(
    client: OciRegistry,
    repo: str,
    tags: list[Tag],
    pushed: ArtifactPushed,
    at: datetime | None,
) -> list[Tag]:
    """The history with the pushed tag in it, when the registry does not list it yet but
    still holds its manifest: distribution sends its notification once the manifest is
    stored, before it writes the tag, so a prune that ran at once planned without the
    newest tag (one older tag too many kept, until the next push). A manifest gone since
    (deleted: by a prune, too) adds nothing, nor a push older than PUSH_LAG: the registry
    wrote its tag long since, so one it does not list was deleted (a duplicate or a replay
    delivered late counted it among the newest, and an older tag went for it)."""
    tag, digest = pushed.tag, pushed.uri.rpartition("@")[2]
    if not tag or not is_pullable_digest(digest) or any(t.name == tag for t in tags):
        return tags
    if at is None or datetime.now(UTC) - at > PUSH_LAG:
        return tags
    try:
        manifest, digest, _ = client.manifest(repo, digest)
    except NotFound:
        return tags
    from modelhooks.adapters.oci.distribution import listed  # a late push's: not at start

    return [*tags, Tag(tag, digest, at, listed(manifest, client, repo, ref=tag))]


def _model_policy(model: ModelCreated | ModelUpdated) -> tuple[str, Policy, set[str]] | None:
    """(repository URI, policy, digests pinned) for a Model asking for retention of an OCI
    source, else None. The Model's own tag is protected; its digest (the reference's, or
    `status.resolvedDigest`) is in use."""
    try:
        policy = model_policy(model.spec)
    except ValueError as exc:
        raise BadRequest(f"Model {exc}", field="spec.retention") from None
    if policy is None:
        return None
    source = model_source(model.spec.get("source"))
    if source.store != "oci":
        return None  # retention is for OCI repositories
    host, repo, ref = _parse_uri(source.uri)
    if not is_pullable_digest(ref):
        policy = msgspec.structs.replace(policy, protect=(*policy.protect, f"^{re.escape(ref)}$"))
    resolved = model.status.get("resolvedDigest")
    pinned = {d for d in (ref, resolved) if isinstance(d, str) and is_pullable_digest(d)}
    return f"oci://{host}/{repo}", policy, pinned


def in_use(registry: ModelRegistry) -> frozenset[str]:
    """The digests live registered versions name: never deleted."""
    return frozenset(
        version.custom_properties.get("digest", "")
        for model in registry.list_models()
        if model.state == ModelState.LIVE
        for version in registry.list_versions(model.id)
        if version.state == ModelState.LIVE
    ) - {""}


FUNCTION = Function(
    name="prune",
    accepts=frozenset(
        {ArtifactPushed.TYPE, PruneRequested.TYPE, ModelCreated.TYPE, ModelUpdated.TYPE}
    ),
    handle=handle,
    extras=("gcp",),  # Artifact Registry's API
    object_pushes=False,  # a gs:// or s3:// push is not its business: not named, not listed
)


def _parse_uri(uri: str) -> tuple[str, str, str]:
    """oci.distribution's parse_uri, imported when an OCI reference first needs it: a
    target's start (and a push it does not act on) imports no OCI client module."""
    from modelhooks.adapters.oci.distribution import parse_uri

    return parse_uri(uri)
