"""Registration per intent, around the copy: the artifact is PENDING while its bytes move,
LIVE with its URI and digest once they are there, ABANDONED with the reason
(`FAILURE_REASON`) when the copy or the signing failed. Every step is find-or-create by
name (model, version) or by the version's own artifact, so a re-run of a half-finished
create resumes the same model and version instead of failing on "already exists", and two
concurrent runs end with one of each.

Requests for one artifact, each with its time (`at`), end as the newest says, whatever
their order and overlap: `begin` records the newest request time that began on the
artifact (`TRANSFER_CLAIM`), and `begin`, `finish` and `fail` each read the artifact again
and write it in one registry transaction (a conditional write: StaleWrite when it changed in
between; the transaction is then done again on what changed, and after RACED_TRIES
redelivered), doing nothing for a request older than one begun or made LIVE
since (Skip: moot). So an older copy that ends after a newer one never becomes LIVE over
it, nor marks it ABANDONED. A request without a time neither is moot nor makes one.

Tenancy (the function's, `owner` the request's namespace): a run registers only into a
model its tenant owns (`records.owner_of`, as register checks an archiving): `check`, before
the destination is claimed, refuses (Forbidden naming the field) an `update_artifact` of
another tenant's artifact, a `create_version` under another tenant's model and a
`create_model` naming another tenant's model; a model `create_model` makes records its
tenant (`namespace`), as register's do.

>>> check(registry, config, owner="team-a")  # doctest: +SKIP
>>> target = begin(registry, config, uri)  # doctest: +SKIP
>>> finish(registry, target, uri, digest)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from msgspec.structs import replace

from modelhooks.adapters.transfer.config import TransferConfig
from modelhooks.core.errors import BadRequest, Conflict, Forbidden, NotFound, Transient
from modelhooks.core.function import Skip
from modelhooks.core.records import (
    ArtifactState,
    ModelArtifact,
    ModelVersion,
    RegisteredModel,
    owner_of,
    typed,
)

__all__ = [
    "FAILURE_REASON",
    "TRANSFER_AT",
    "TRANSFER_CLAIM",
    "TRANSFER_CREATED",
    "TRANSFER_EVENT",
    "Target",
    "begin",
    "check",
    "fail",
    "finish",
    "live_artifact",
    "record_signature",
]

FAILURE_REASON = "modelhooks.failure_reason"
# on the artifact a transfer made LIVE: the delivery that did (its source and id), whether
# it changed the digest (the reply's `created`) and the request's time: that delivery, again,
# is answered as it was, and an older request, delivered late, moves nothing
TRANSFER_EVENT = "modelhooks.transfer_event"
TRANSFER_CREATED = "modelhooks.transfer_created"
TRANSFER_AT = "modelhooks.transfer_at"
# the newest request time that began on the artifact (begin): an older one is moot
TRANSFER_CLAIM = "modelhooks.transfer_claim"
ARTIFACT = "model"


@dataclass(frozen=True)
class Target:
    model_id: str
    version_id: str
    artifact: ModelArtifact
    version_name: str = ""  # known for create_model and create_version

    def ids(self) -> dict[str, str]:
        return {
            "model_id": self.model_id,
            "model_version_id": self.version_id,
            "model_artifact_id": self.artifact.id,
        }


def _props(custom: Mapping[str, Any], **fields: str) -> dict[str, str]:
    """The metadata's JSON custom properties, each keeping its type (`typed`: Kubeflow
    writes 0.95 as a double, as upstream's job does), and Kubeflow's fields; a null is
    left out, as upstream's client leaves it."""
    props = {}
    for key, value in custom.items():
        if value is None:
            continue
        try:
            props[key] = typed(value)
        except ValueError as exc:
            raise BadRequest(f"custom_properties: {key}: {exc}", field=key) from None
    props.update({f"kubeflow.{k}": v for k, v in fields.items() if v})
    return props


def newer(artifact: ModelArtifact, at: str) -> str:
    """The time of a request newer than `at` that began on `artifact` or made it LIVE, else
    "" (also for a request without a time, `at` "")."""
    props = artifact.custom_properties
    newest = max(props.get(TRANSFER_CLAIM, ""), props.get(TRANSFER_AT, ""))
    return newest if at and newest > at else ""


def _moot(artifact: ModelArtifact, at: str, what: str) -> Skip:
    return Skip(
        f"a newer request (sent {newer(artifact, at)}) began on the artifact since this one"
        f" (sent {at}) was: it is moot, {what}"
    )


def _claimed(props: Mapping[str, str], at: str) -> dict[str, str]:
    claim = max(props.get(TRANSFER_CLAIM, ""), at)
    return {**props, TRANSFER_CLAIM: claim} if claim else dict(props)


def _in_named(registry: Any, config: TransferConfig, artifact: ModelArtifact) -> None:
    """NotFound unless the artifact is in the version and model the run names (when it
    names them): an artifact of another model would be copied over and made LIVE while
    the signature and the result named the version given."""
    ids = config.model
    version_id = artifact.version_id  # '' where the backend does not say (Kubeflow's GET)
    if ids.version_id:
        if version_id:
            inside = version_id == ids.version_id
        else:
            inside = any(a.id == artifact.id for a in registry.list_artifacts(ids.version_id))
        if not inside:
            raise NotFound(
                f"model registry: no ModelArtifact {artifact.id!r} in ModelVersion "
                f"{ids.version_id!r} (MODEL_SYNC_MODEL_VERSION_ID)"
            )
        version_id = ids.version_id
    if ids.model_id:
        if version_id:
            version = registry.get_version_by_id(version_id)
            inside = version is not None and version.model_id == ids.model_id
        else:  # the model's versions' artifacts
            inside = any(
                a.id == artifact.id
                for v in registry.list_versions(ids.model_id)
                for a in registry.list_artifacts(v.id)
            )
        if not inside:
            raise NotFound(
                f"model registry: no ModelArtifact {artifact.id!r} in RegisteredModel "
                f"{ids.model_id!r} (MODEL_SYNC_MODEL_ID)"
            )


def _refuse_unless_owned(model: RegisteredModel, owner: str | None, field: str) -> None:
    """Forbidden naming `field` unless `owner` (None: no tenancy) owns `model`."""
    if owner is not None and owner_of(model) != owner:
        raise Forbidden(
            f"namespace {owner!r} may not transfer into model {model.name!r} (id {model.id}):"
            f" it is namespace {owner_of(model)!r}'s ({field})",
            namespace=owner,
            owner=owner_of(model),
            field=field,
        )


def _owned_model(registry: Any, model_id: str, owner: str | None, field: str) -> None:
    """`model_id`'s model is `owner`'s (Forbidden naming `field`), or there is none (the
    registry's NotFound comes from the write that needs it)."""
    if owner is None or not model_id:
        return
    model = next((m for m in registry.list_models() if m.id == model_id), None)
    if model is not None:
        _refuse_unless_owned(model, owner, field)


def _owned_artifact(
    registry: Any, config: TransferConfig, artifact: ModelArtifact, owner: str | None
) -> None:
    """The artifact (in the version and model the run names: `_in_named`) is in a model
    `owner` owns; where the registry does not say its version and the run names neither,
    whose it is cannot be told: refused as well."""
    if owner is None:
        return
    version_id = artifact.version_id or config.model.version_id
    version = registry.get_version_by_id(version_id) if version_id else None
    model_id = version.model_id if version is not None else config.model.model_id
    if not model_id:
        raise Forbidden(
            f"namespace {owner!r} may not update ModelArtifact {artifact.id!r}: the registry"
            " does not say which model it is in; name its version (version.id) or model "
            "(model.id)",
            namespace=owner,
            field="artifact.id",
        )
    _owned_model(registry, model_id, owner, "artifact.id")


def check(registry: Any, config: TransferConfig, *, at: str = "", owner: str | None = None) -> None:
    """What `begin` would refuse, read only: before a destination is claimed for the run
    (no destination is claimed by a request the registry refuses). The artifact to update
    exists in the version and model named, and, with `owner` (tenancy on), every model the
    run names is `owner`'s (Forbidden naming the field); a request older than one begun
    on the artifact is moot (Skip)."""
    if config.intent == "update_artifact":
        artifact = registry.get_artifact(config.model.artifact_id)
        if artifact is None:
            raise NotFound(f"model registry: no ModelArtifact {config.model.artifact_id!r}")
        _in_named(registry, config, artifact)
        _owned_artifact(registry, config, artifact, owner)
        if newer(artifact, at):
            raise _moot(artifact, at, "nothing is copied")
    elif config.intent == "create_version":
        _owned_model(registry, config.model.model_id, owner, "model.id")
    elif owner is not None and (model := registry.get_model(_model_name(config))) is not None:
        _refuse_unless_owned(model, owner, "model.name")


P = ParamSpec("P")
R = TypeVar("R")
RACED_TRIES = 3  # a transaction that lost to a concurrent run's write, read and decided again


def _read_again_when_raced(step: Callable[P, R]) -> Callable[P, R]:
    """`step`'s transaction done again when another run wrote what it read in between (the
    registry's StaleWrite): each reads first, so the next try decides on the winner's record
    (two runs of one request both end LIVE; an older one finds itself moot). A StaleWrite
    left after RACED_TRIES stays transient (exit 3, 503: redelivered)."""

    @functools.wraps(step)
    def again(*args: P.args, **kwargs: P.kwargs) -> R:
        for _ in range(RACED_TRIES - 1):
            try:
                return step(*args, **kwargs)
            except Transient as exc:
                if exc.code != "stale_write":
                    raise
        return step(*args, **kwargs)

    return again


@_read_again_when_raced
def begin(
    registry: Any, config: TransferConfig, uri: str, *, at: str = "", owner: str | None = None
) -> Target:
    """The model, version and artifact of the intent, found or created; the artifact PENDING
    and claimed by a request sent at `at` (Skip when a newer one claimed it: moot). `owner`:
    the tenant (`check` refused what is not its own); a model created is recorded as its,
    one found by name (another's, made since `check`) refused."""
    meta = config.metadata
    if config.intent == "update_artifact":
        with registry.transaction():
            artifact = registry.get_artifact(config.model.artifact_id)
            if artifact is None:
                raise NotFound(f"model registry: no ModelArtifact {config.model.artifact_id!r}")
            _in_named(registry, config, artifact)
            if newer(artifact, at):
                raise _moot(artifact, at, "nothing is copied")
            props = _claimed(artifact.custom_properties, at)
            pending = replace(artifact, state=ArtifactState.PENDING, custom_properties=props)
            pending = registry.upsert_artifact(pending)
        return Target(config.model.model_id, config.model.version_id, pending)
    with registry.transaction():
        if config.intent == "create_model":
            m = meta.of("RegisteredModel")
            model_name = _model_name(config)
            model_props = _props(m.get("custom_properties", {}), owner=str(m.get("owner", "")))
            if owner is not None:  # the tenant's, as register records it (never the request's)
                model_props["namespace"] = owner
            model: RegisteredModel = _ensure(
                lambda: registry.get_model(model_name),
                lambda: registry.create_model(model_name, properties=model_props),
                registry.update_model,
                str(m.get("description", "")),
                lambda found: _refuse_unless_owned(found, owner, "model.name"),
            )
            model_id = model.id
        else:
            model_id = config.model.model_id
        v = meta.of("ModelVersion")
        author = str(v.get("author") or config.get("registry_author"))
        version_name = _version_name(config)
        version_props = _props(v.get("custom_properties", {}), author=author)
        version: ModelVersion = _ensure(
            lambda: registry.get_version(model_id, version_name),
            lambda: registry.create_version(model_id, version_name, properties=version_props),
            registry.update_version,
            str(v.get("description", "")),
        )
        a = meta.of("ModelArtifact")
        props = _props(
            a.get("custom_properties", {}),
            model_format_name=str(a.get("model_format_name", "")),
            model_format_version=str(a.get("model_format_version", "")),
            storage_key=str(a.get("storage_key", "")),
        )
        name = _artifact_name(config)
        existing = next((x for x in registry.list_artifacts(version.id) if x.name == name), None)
        if existing is not None and newer(existing, at):
            raise _moot(existing, at, "nothing is copied")
        artifact = ModelArtifact(
            id=existing.id if existing else "",
            version_id=version.id,
            name=name,
            uri=uri,
            digest=existing.digest if existing else "",
            state=ArtifactState.PENDING,
            custom_properties=_claimed(
                {**(existing.custom_properties if existing else {}), **props}, at
            ),
        )
        try:
            artifact = registry.upsert_artifact(artifact)
        except Conflict:  # a concurrent run created it first: the same artifact, claimed
            found = next(x for x in registry.list_artifacts(version.id) if x.name == name)
            if newer(found, at):
                raise _moot(found, at, "nothing is copied") from None
            claimed = replace(found, custom_properties=_claimed(found.custom_properties, at))
            artifact = registry.upsert_artifact(claimed) if claimed != found else found
    return Target(model_id, version.id, artifact, version.name)


def live_artifact(registry: Any, config: TransferConfig) -> Target | None:
    """The intent's artifact if it is LIVE (found, never created): the facts a delivery is
    answered by before anything moves (`TRANSFER_EVENT`, `TRANSFER_AT`)."""
    if config.intent == "update_artifact":
        model_id, version_id, version_name = config.model.model_id, config.model.version_id, ""
        artifact = registry.get_artifact(config.model.artifact_id)
    else:
        model_id = config.model.model_id
        if config.intent == "create_model":
            model = registry.get_model(_model_name(config))
            if model is None:
                return None
            model_id = model.id
        version = registry.get_version(model_id, _version_name(config))
        if version is None:
            return None
        version_id, version_name, name = version.id, version.name, _artifact_name(config)
        found = registry.list_artifacts(version.id)
        artifact = next((x for x in found if x.name == name), None)
    if artifact is None or artifact.state != ArtifactState.LIVE:
        return None
    return Target(model_id, version_id, artifact, version_name)


def _model_name(config: TransferConfig) -> str:
    return str(config.metadata.of("RegisteredModel").get("name") or config.get("model_name"))


def _version_name(config: TransferConfig) -> str:
    return str(config.metadata.of("ModelVersion").get("name") or config.get("model_version_name"))


def _artifact_name(config: TransferConfig) -> str:
    return str(config.metadata.of("ModelArtifact").get("name") or ARTIFACT)


def _ensure(
    find: Callable[[], Any],
    create: Callable[[], Any],
    update: Callable[[Any], Any],
    description: str,
    check: Callable[[Any], None] = lambda _record: None,
) -> Any:
    """A model or version found by name, or created (one created concurrently is found
    again), `check`ed (before anything is written to one found); its description brought
    to `description` when one is given."""
    record = find()
    if record is None:
        try:
            record = create()
        except Conflict:
            record = find()
            if record is None:
                raise
    check(record)
    if description and record.description != description:
        record = update(replace(record, description=description))
    return record


@_read_again_when_raced
def finish(
    registry: Any,
    target: Target,
    uri: str,
    digest: str,
    extra: Mapping[str, str] = {},
    *,
    event: str = "",
    at: str = "",
) -> ModelArtifact:
    """The artifact LIVE at `uri` with `digest`; `event`: the delivery that made it so (and
    whether it changed the digest), `at` its request's time, for `live_artifact`'s readers.
    Read again first, in the write's transaction: Skip (moot) when a newer request began on
    it or made it LIVE since this one began."""
    with registry.transaction():
        now = _again(registry, target)
        if newer(now, at):
            raise _moot(now, at, "its copy is not made LIVE")
        props = {k: v for k, v in now.custom_properties.items() if k != FAILURE_REASON}
        if event:
            created = "true" if target.artifact.digest != digest else "false"
            props |= {TRANSFER_EVENT: event, TRANSFER_CREATED: created, TRANSFER_AT: at}
        done = replace(
            target.artifact,
            uri=uri,
            digest=digest,
            state=ArtifactState.LIVE,
            custom_properties={**props, **extra},
        )
        return registry.upsert_artifact(done)  # type: ignore[no-any-return]


def _again(registry: Any, target: Target) -> ModelArtifact:
    """The target's artifact as the registry holds it now (by id; else as begun)."""
    now = registry.get_artifact(target.artifact.id)
    return target.artifact if now is None else now


def record_signature(registry: Any, target: Target, signature: Mapping[str, str]) -> bool:
    """The signature's `signature.*` properties on the version, as `sign` writes them (so
    `registry list` names the signer, and `sign` does not sign the same digest again), onto
    the version as it is now. False when the version is not known (update_artifact naming
    no MODEL_SYNC_MODEL_ID and MODEL_SYNC_MODEL_VERSION_ID): the caller keeps them on the
    artifact."""
    with registry.transaction():
        version: ModelVersion | None = None
        if target.version_name:
            version = registry.get_version(target.model_id, target.version_name)
        elif target.model_id and target.version_id:
            version = registry.get_version_by_id(target.version_id)
        if version is None or version.model_id != target.model_id:
            return False
        props = {**version.custom_properties, **signature}
        registry.update_version(replace(version, custom_properties=props))
    return True


@_read_again_when_raced
def fail(registry: Any, target: Target, reason: str, *, at: str = "") -> ModelArtifact | None:
    """The artifact ABANDONED with `reason`, unless a newer request than `at` began on it
    since (its outcome is the artifact's), or one as new made it LIVE (a delivery of this
    request at the same time): None, nothing written."""
    with registry.transaction():
        now = _again(registry, target)
        props = now.custom_properties
        done = now.state == ArtifactState.LIVE and props.get(TRANSFER_AT, "") >= at
        if newer(now, at) or (at and done):
            return None
        props = {**now.custom_properties, FAILURE_REASON: reason[:1000]}
        failed = replace(target.artifact, state=ArtifactState.ABANDONED, custom_properties=props)
        return registry.upsert_artifact(failed)  # type: ignore[no-any-return]
