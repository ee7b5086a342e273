"""`notify`: what the other functions did, told on the `Model` it was for.

- `model.registered` / `model.signed`: the status conditions Registered, Signed and Ready
  (metav1.Condition, observedGeneration = the Model's metadata.generation) and
  status.registeredModelId / modelVersionId / resolvedDigest / signatureRef, by server-side
  apply on the status subresource; Ready = Registered and (Signed, or spec.signing.enabled
  false). With `notify.rollout` on, a Model that is Ready rolls out the Deployments and
  InferenceServices of its namespace annotated `modelhooks.dev/model: <its name>`
  (annotation `modelhooks.dev/model-version: <version>@<digest>`); nothing else rolls.
- `model.created` / `.updated`: a Model whose spec.deletionPolicy is not Retain, and that
  is not being deleted, gets the finalizer `modelhooks.dev/cleanup` (an event whose Model
  says Retain reads nothing: a later change of policy is an update event of its own); and
  a Model whose Ready no longer says what its spec asks (spec.signing.enabled changed after
  its registration) gets Ready computed again (an Event SpecChanged, a rollout when Ready).
- `artifact.purged`: nothing failed → the finalizer goes (the deletion completes), then a
  CleanupFailed an earlier purge set goes too; something failed, or
  the deletion was refused for good (`refused`: tenancy, source, Secret, policy) → it stays,
  with the condition CleanupFailed (reason CleanupFailed or CleanupRefused) saying what and
  what to do, and a Warning Event. A failure or refusal is told only to a Model whose
  deletion waits on the finalizer: once it is gone (a cleanup succeeded; a deleting object
  takes no new finalizer) a late one changes nothing, so the end does not depend on order.
- `model.refused` (register refused the Model's version for good: registered from another
  source, a source its namespace's tenancy refuses or that register cannot read): Registered
  False, its reason naming the cause (VersionConflict, SourceForbidden, InvalidSpec, else
  RegistrationRefused), saying why and what to do, and a Warning Event — unless
  the Model's Registered already says something else (a registration, a digest mismatch):
  a late refusal never undoes one, so the end does not depend on order; a later
  registration replaces it. Told only to the Model of the event's uid and version.
  sign's `model.refused` (`function: sign`: a push's content written again since, another
  signature in its place, the version registered with another digest, a source the tenancy
  refuses…) alike on Signed (ContentChanged, SignatureExists, VersionConflict,
  SourceForbidden, InvalidSource, else SigningRefused; Ready False while
  spec.signing.enabled asks for it): never over a signature or a digest mismatch, replaced
  by a later signature; told only to the Model of the push's name, version and location.
  A refusal no Model can be told of (sign's with no Model of its name, version and
  location: a push-only deployment; any, without cluster access) fails with the refusal's
  own 4xx, saying why and carrying it (dead-lettered, as before it was told); one whose
  Model was deleted or created again since, is paused or says better already is skipped.
- `tags.pruned`: an Event on the Model (when the event names one).

Which Model: the one the CloudEvent's subject names (`/apis/modelhooks.dev/…/namespaces/
<ns>/models/<name>`, as the ApiServerSource sets it and the functions keep it); otherwise,
for registered and signed, the Model named like the registered model in the event's
namespace (the registry's model name is not tied to a Model otherwise: a model without a
Model of that name gets no status); a registration or signature is told only to a Model
whose spec.version is the event's version and, named by the subject, whose spec.source is
the event's location (one deleted and created again under its name with another version or
source is not told the first's news); for
purged, the Model cleanup names (`model`) when its spec.source is the purged location, else
the Model of the event's namespace being deleted whose spec.source is that location.

Every delivery records one Event on the Model, named after the CloudEvent's identity (a
failure's or refusal's Warning after the report it tells: one per distinct report), and
computes the status from the Model's current one plus this event: a redelivery records and
changes nothing, and the result does not depend on the order of the events. The Model a
status is computed from is read from the API server's watch cache (no read of etcd): the
apply is conditional on its resourceVersion, so one a moment old is refused and read again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

from modelhooks.core.conditions import (
    FINALIZER,
    ModelEvent,
    event_name,
    is_resource_name,
    model_of_subject,
)
from modelhooks.core.errors import (
    BadRequest,
    Conflict,
    ContentChanged,
    Forbidden,
    NotFound,
    Permanent,
    SignatureExists,
    Unavailable,
)
from modelhooks.core.function import Function, Skip
from modelhooks.core.model_status import (
    REFUSALS,
    SIGNING_REFUSALS,
    cleaned_up,
    cleanup_failed,
    cleanup_report,
    progress,
    ready_stale,
    refreshed,
    registration_refused,
    rollout_version,
    signing_refused,
)
from modelhooks.core.sources import model_source
from modelhooks.events.model import (
    ArtifactPurged,
    CanonicalEvent,
    ModelCreated,
    ModelRefused,
    ModelRegistered,
    ModelSigned,
    ModelUpdated,
    TagsPruned,
)

if TYPE_CHECKING:
    from modelhooks.core.ports import Cluster

__all__ = ["FUNCTION"]

_ATTEMPTS = 5


def handle(
    event: CanonicalEvent, *, cluster: Cluster | None, rollout: bool
) -> list[CanonicalEvent]:
    data = event.data
    if cluster is None:
        access = "no cluster access: run notify in the cluster or set MODELHOOKS_NOTIFY_KUBECONFIG"
        if isinstance(data, ModelRefused):  # told to nobody: it fails, as it did untold
            _untold(data, access)
        raise Skip(access)
    if isinstance(data, ModelCreated | ModelUpdated) and _retained(data) and not _news(data):
        return []  # nothing to hold or tell, and no Model to read for it (see _retained)
    model = _model_for(event, cluster)
    if model is None and isinstance(data, ModelRefused) and data.function == "sign":
        _untold(data, f"none of that name, version and location {_location(data.uri)!r}")
    if model is None or model["spec"].get("paused"):
        raise Skip("no Model to notify (or it is paused)")
    if isinstance(data, ModelCreated | ModelUpdated):
        _hold(event, cluster, model)
        if ready_stale(model):  # its spec changed what Ready is
            read: list[dict[str, Any]] = []  # the status each attempt computed from

            def again(found: dict[str, Any]) -> dict[str, Any]:
                read.append(found.get("status") or {})
                return refreshed(found, _now(event))

            model = _apply(cluster, model, again)
            ready = _condition(model, "Ready")
            if (model.get("status") or {}) != read[-1]:
                _record(event, cluster, model, "SpecChanged", "UpdateStatus",
                        ready.get("message", "Ready computed again"))  # fmt: skip
            _roll_out(event, cluster, model, rollout)
    elif isinstance(data, ModelRegistered | ModelSigned):
        bases: list[dict[str, Any]] = []  # the status each attempt computed from: the last
        # one's, not the cache's first (a moment old, it lacks what a delivery of the same
        # news wrote meanwhile: a Conflict, read again, writing nothing new)

        def desired(found: dict[str, Any]) -> dict[str, Any]:
            bases.append(found.get("status") or {})
            return progress(found, data, _now(event))

        model = _apply(cluster, model, desired)
        reason = "Registered" if isinstance(data, ModelRegistered) else "Signed"
        ready = _condition(model, "Ready")
        if (model.get("status") or {}) != bases[-1]:  # an Event for what changed, not an echo
            _record(event, cluster, model, reason, "UpdateStatus", ready.get("message", reason))
        _roll_out(event, cluster, model, rollout)
    elif isinstance(data, ModelRefused):
        _refused(event, data, cluster, model)
    elif isinstance(data, ArtifactPurged):
        _purged(event, data, cluster, model)
    elif isinstance(data, TagsPruned):
        note = f"pruned {len(data.deleted)} tag(s) of {data.repository}, kept {len(data.kept)}"
        _record(event, cluster, model, "TagsPruned", "Record", note)
    return []


def _roll_out(event: CanonicalEvent, cluster: Cluster, model: dict[str, Any], on: bool) -> None:
    """With notify.rollout on, a Ready Model's version rolled out to its workloads."""
    version = rollout_version(model)
    if on and version:
        ns, name = model["metadata"]["namespace"], model["metadata"]["name"]
        changed = cluster.roll_out(ns, name, version)
        if changed:
            _record(event, cluster, model, "RolledOut", "RollOut",
                    f"{version} rolled out to {', '.join(changed)}")  # fmt: skip


def _news(model: ModelCreated | ModelUpdated) -> bool:
    """The Model this event carries tells a Ready its spec no longer says (or is not one a
    status can be computed from: the Model is read to tell)."""
    try:
        return ready_stale({"metadata": {}, "spec": model.spec, "status": model.status})
    except (AttributeError, KeyError, TypeError, ValueError):
        return True


def _hold(event: CanonicalEvent, cluster: Cluster, model: dict[str, Any]) -> None:
    """The finalizer on a Model whose deletion has something to clean up."""
    policy = model["spec"].get("deletionPolicy", "Retain")
    if policy == "Retain" or _deleting(model):
        return
    meta = model["metadata"]
    if cluster.add_finalizer(meta["namespace"], meta["name"], FINALIZER):
        note = f"cleanup will apply deletionPolicy {policy} before this Model goes"
        _record(event, cluster, model, "FinalizerAdded", "AddFinalizer", note)


def _retained(model: ModelCreated | ModelUpdated) -> bool:
    """The Model this event carries (ApiServerSource mode Resource) is Retain: it needs no
    finalizer, whatever it is by now. A policy changed since comes with an update event of
    its own, whose handling reads the Model as it is then: the finalizer does not depend on
    the order (a Model burst's status writes, each echoed as an update, read nothing)."""
    return bool(model.spec) and model.spec.get("deletionPolicy", "Retain") == "Retain"


def _purged(event: CanonicalEvent, data: ArtifactPurged, cluster: Cluster, model: Any) -> None:
    ns, name = model["metadata"]["namespace"], model["metadata"]["name"]
    _same_model(data, model)
    if data.failed or data.refused:

        def failed(found: dict[str, Any]) -> dict[str, Any]:  # on each read: a cleanup that
            # succeeded meanwhile (a Conflict, read again) took the finalizer away
            _same_model(data, found)
            if not _deleting(found) or FINALIZER not in (found["metadata"].get("finalizers") or []):
                raise Skip(f"Model {ns}/{name} waits on no cleanup (done, or not being deleted)")
            return cleanup_failed(found, data, _now(event))

        model = _apply(cluster, model, failed)
        told = _condition(model, "CleanupFailed")
        mine = cleanup_report(model, data)
        if _said(told) == (
            mine.status,
            mine.reason,
            mine.message,
        ):  # its Event, named after the report, not the delivery:
            # its echo (a status write is an update, and an update of a Model being deleted a
            # cleanup, reporting anew) names the one recorded, and a delivery whose status
            # was written before a crash, its Event not, records it when delivered again
            _record(event, cluster, model, told["reason"], "KeepFinalizer", told["message"],
                    "Warning", report=told["message"])  # fmt: skip
    elif _deleting(model):
        note = f"{data.policy}: {len(data.deleted)} deleted, {len(data.kept)} kept"
        _record(event, cluster, model, "CleanedUp", "RemoveFinalizer", note)
        cluster.remove_finalizer(ns, name, FINALIZER)
        # then CleanupFailed goes, read after the finalizer (one GET a deletion): no failure
        # or refusal is told once the finalizer is gone, so one told meanwhile goes too, and
        # a Model other finalizers keep ends without it, whichever attempt came first (the
        # Model is gone by now unless another finalizer keeps it)
        found = cluster.get_model(ns, name)
        if found is not None and _condition(found, "CleanupFailed"):
            _apply(cluster, found, cleaned_up)


def _refused(event: CanonicalEvent, data: ModelRefused, cluster: Cluster, model: Any) -> None:
    ns, name = model["metadata"]["namespace"], model["metadata"]["name"]
    kind, refusals, status, action = (
        ("Signed", SIGNING_REFUSALS, signing_refused, "Sign")
        if data.function == "sign"
        else ("Registered", REFUSALS, registration_refused, "Register")
    )

    def told(found: dict[str, Any]) -> dict[str, Any]:  # on each read: a registration (a
        # signature) told meanwhile (a Conflict, read again) stands
        _same_model(data, found)
        said = _condition(found, kind)
        if said and said.get("reason") not in refusals:
            raise Skip(f"Model {ns}/{name}'s {kind} says {said.get('reason')}: kept")
        return status(found, data, _now(event))

    model = _apply(cluster, model, told)
    said = _condition(model, kind)
    # its Event named after the report, not the delivery: a redelivery records none
    _record(event, cluster, model, said["reason"], action, said["message"], "Warning",
            report=said["message"])  # fmt: skip


def _untold(data: ModelRefused, why: str) -> NoReturn:
    """A refusal for good no Model can be told of fails as the refusal did before it was
    told: the 4xx of its code (409 content_changed, 403 forbidden, …; else 400), saying why
    and carrying its text, so it is dead-lettered and `serve` answers the push with it (a
    distribution notification's 200 then, as every refusal for good's: one 404 for all it
    would retry for ever). A push no Model waits on (a push-only deployment), notify
    without cluster access. register's refusal of a Model deleted since stays a Skip (its
    Model is gone: nothing to fix)."""
    function = "sign" if data.function == "sign" else "register"
    error = _REFUSED.get(data.refused.partition(":")[0], BadRequest)
    raise error(
        f"no Model to tell {function}'s refusal of {data.namespace}/{data.model} version "
        f"{data.version!r} ({why}): {data.refused}"
    )


# The refusals for good a function tells as a reply, by their code (`refused` starts with
# it): what it answered before it told them
_REFUSED: dict[str, type[Permanent]] = {
    e.code: e for e in (BadRequest, Forbidden, NotFound, Conflict, ContentChanged, SignatureExists)
}


def _same_model(data: ArtifactPurged | ModelRefused, model: dict[str, Any]) -> None:
    """Skip a report on a Model other than the one it was for: one created since under the
    same name (a cleanup report delivered late would have let its finalizer go, its
    artifacts never cleaned up, or said its cleanup failed; a refusal, said the new Model
    was refused)."""
    uid = model["metadata"].get("uid", "")
    if data.model_uid and uid and uid != data.model_uid:
        meta = model["metadata"]
        what = "cleanup" if isinstance(data, ArtifactPurged) else "refusal"
        raise Skip(
            f"Model {meta['namespace']}/{meta['name']} is not the one this {what} was for "
            f"(uid {uid}, not {data.model_uid}): created since"
        )


def _model_for(event: CanonicalEvent, cluster: Cluster) -> dict[str, Any] | None:
    data = event.data
    named = model_of_subject(event.subject)
    if isinstance(data, ModelRefused):  # that Model's version: not one created since
        where = named or ((data.namespace, data.model) if is_resource_name(data.model) else None)
        found = cluster.get_model(*where) if where else None
        if found is None or found["spec"].get("version") != data.version:
            return None
        if data.function == "sign" and _location(data.uri) != _location(
            _source_uri(found["spec"].get("source"))
        ):  # a push of another location under its name and version: not its source's
            return None
        return found
    if isinstance(data, ModelRegistered | ModelSigned):
        # the Model's spec.version (immutable) says whether the news is its own: a subject
        # names a Model by its name alone, which a Model deleted and created again keeps
        where = named or ((data.namespace, data.model) if is_resource_name(data.model) else None)
        if where is None:
            return None
        found = _status_base(cluster, *where, version=data.version)
        if found is None or found["spec"].get("version") != data.version:
            return None
        if named and _location(data.uri) != _location(_source_uri(found["spec"].get("source"))):
            return None  # news of its source's version, not this Model's: created again since
        return found
    if named:
        return cluster.get_model(*named)
    if isinstance(data, ModelCreated | ModelUpdated) and is_resource_name(data.name):
        return cluster.get_model(data.namespace, data.name)
    if isinstance(data, ArtifactPurged):
        if data.model and is_resource_name(data.model):  # cleanup names the deleted Model
            found = cluster.get_model(data.namespace, data.model)
            if found is not None and _source_uri(found["spec"].get("source")) == data.uri:
                return found
        for found in cluster.list_models(data.namespace):
            if _deleting(found) and _source_uri(found["spec"].get("source")) == data.uri:
                return found
    return None


def _status_base(
    cluster: Cluster, namespace: str, name: str, *, version: str = ""
) -> dict[str, Any] | None:
    """The Model a status is computed from: the watch cache's (no read of etcd), as the
    apply is conditional on its resourceVersion (a stale one is a Conflict, read again); read
    fresh when the cache's would decide to write nothing (none, paused, another version)."""
    found = cluster.get_model(namespace, name, cached=True)
    if (
        found is None
        or found["spec"].get("paused")
        or (version and found["spec"].get("version") != version)
    ):
        return cluster.get_model(namespace, name)
    return found


def _apply(cluster: Cluster, model: dict[str, Any], desired: Any) -> dict[str, Any]:
    """Apply the status `desired(model)` computes, reading the Model again while a concurrent
    writer changes it between the read and the write."""
    ns, name = model["metadata"]["namespace"], model["metadata"]["name"]
    for _ in range(_ATTEMPTS):
        try:
            rv = model["metadata"]["resourceVersion"]
            return cluster.apply_status(ns, name, desired(model), resource_version=rv)
        except NotFound:  # deleted since it was read: nothing to tell (a 404 is redelivered)
            _gone_or_unserved(cluster, ns, name)
        except Conflict:
            found = cluster.get_model(ns, name)
            if found is None:
                raise Skip(f"Model {ns}/{name} is gone") from None
            model = found
    raise Unavailable(f"Model {ns}/{name} kept changing; a redelivery will apply its status")


def _gone_or_unserved(cluster: Cluster, namespace: str, name: str) -> NoReturn:
    """The status path answered 404: Skip when the Model is gone, else the CRD serves no
    status subresource (an older one, not upgraded with the functions), a deployment gap
    said as such (503: redelivered, then dead-lettered for a replay once it is applied)
    rather than taken for a Model deleted meanwhile, every status skipped without a word."""
    if cluster.get_model(namespace, name) is None:
        raise Skip(f"Model {namespace}/{name} is gone")
    raise Unavailable(
        f"the API server has no status subresource for Model {namespace}/{name}: the Model "
        "CRD installed is an older one; apply infra/k8s/crds/model.yaml"
    )


def _record(
    event: CanonicalEvent,
    cluster: Cluster,
    model: dict[str, Any],
    reason: str,
    action: str,
    note: str,
    kind: str = "Normal",
    *,
    report: str = "",
) -> None:
    """An Event named after the CloudEvent, or after `report` on this Model when given."""
    meta = model["metadata"]
    source, id_ = (meta.get("uid", ""), report) if report else (event.source, event.id)
    cluster.record(
        ModelEvent(
            namespace=meta["namespace"],
            name=event_name(meta["name"], source, id_, reason),
            model=meta["name"],
            uid=meta.get("uid", ""),
            reason=reason,
            action=action,
            note=note,
            time=event.time or datetime.now(UTC),
            type="Warning" if kind == "Warning" else "Normal",
        )
    )


def _condition(model: dict[str, Any], type_: str) -> dict[str, Any]:
    found = [c for c in (model.get("status") or {}).get("conditions", []) if c["type"] == type_]
    return found[0] if found else {}


def _said(condition: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(condition.get(k) for k in ("status", "reason", "message"))


def _deleting(model: dict[str, Any]) -> bool:
    return bool(model["metadata"].get("deletionTimestamp"))


def _source_uri(source: Any) -> str:
    """The location cleanup purges for a Model's spec.source ("" for none it can name)."""
    try:
        return model_source(source).uri
    except BadRequest:
        return ""


def _location(uri: str) -> str:
    """Where `uri` is, without an OCI reference's tag or digest (register names a tag's
    version by its digest), nor a trailing slash."""
    if uri.startswith("oci://"):
        host, _, rest = uri.removeprefix("oci://").partition("/")
        repo = rest.partition("@")[0]
        if ":" in repo.rsplit("/", 1)[-1]:
            repo = repo.rpartition(":")[0]
        return f"oci://{host}/{repo}"
    return uri.rstrip("/")


def _now(event: CanonicalEvent) -> str:
    return (event.time or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


FUNCTION = Function(
    name="notify",
    accepts=frozenset(
        {
            ModelRegistered.TYPE,
            ModelRefused.TYPE,
            ModelSigned.TYPE,
            TagsPruned.TYPE,
            ArtifactPurged.TYPE,
            ModelCreated.TYPE,
            ModelUpdated.TYPE,
        }
    ),
    handle=handle,
    extras=("k8s",),
)
