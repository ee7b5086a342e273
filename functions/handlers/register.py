"""`register`: record pushed artifacts in the model registry; archive deleted models.

Find-or-create RegisteredModel → ModelVersion → ModelArtifact, keyed by the natural
identity (model name, version name, artifact digest). The same event twice yields one
version; the same version name with another digest is a Conflict, never an overwrite.
A delete that arrives before the push it follows leaves an archived tombstone, so the late
push is recognised as stale instead of resurrecting the model.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from typing import TypeVar

from modelhooks.core.errors import Conflict, Forbidden
from modelhooks.core.function import Function
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.records import ArtifactState, ModelArtifact, ModelState
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted, ModelRegistered

__all__ = ["FUNCTION", "archive_model", "register_model"]

T = TypeVar("T")
ARCHIVED_AT = "modelhooks.archived_at"


def handle(
    event: CanonicalEvent, *, registry: ModelRegistry, check_namespace: bool
) -> list[CanonicalEvent]:
    """`check_namespace`: tenancy is on, so only the registering namespace may archive."""
    if isinstance(event.data, ArtifactPushed):
        return register_model(event, event.data, registry=registry)
    if isinstance(event.data, ModelDeleted):
        archive_model(event, event.data, registry=registry, check_namespace=check_namespace)
    return []


def register_model(
    event: CanonicalEvent, pushed: ArtifactPushed, *, registry: ModelRegistry
) -> list[CanonicalEvent]:
    with registry.transaction():
        return _register(event, pushed, registry)


def _register(
    event: CanonicalEvent, pushed: ArtifactPushed, registry: ModelRegistry
) -> list[CanonicalEvent]:
    created = False
    model = registry.get_model(pushed.model)
    if model is None:
        new_model, created = _find_or_create(
            lambda: registry.create_model(
                pushed.model, properties={"namespace": pushed.namespace or "default"}
            ),
            lambda: registry.get_model(pushed.model),
        )
        model = new_model
    elif model.state == ModelState.ARCHIVED:
        archived_at = model.custom_properties.get(ARCHIVED_AT, "")
        stamp = _stamp(event)
        if archived_at and stamp and stamp <= archived_at:
            return []  # a push older than the deletion that archived the model: stale
        model = registry.update_model(_replace(model, state=ModelState.LIVE))

    new_version, model_id = False, model.id
    version = registry.get_version(model_id, pushed.version)
    if version is None:
        props = {"digest": pushed.digest, "uri": pushed.uri, "store": pushed.store}
        made, new_version = _find_or_create(
            lambda: registry.create_version(model_id, pushed.version, properties=props),
            lambda: registry.get_version(model_id, pushed.version),
        )
        version = made
        created = created or new_version
    if version.custom_properties.get("digest") != pushed.digest:
        raise Conflict(
            f"model {pushed.model!r} version {pushed.version!r} is already registered with "
            "another digest",
            registered=version.custom_properties.get("digest"),
            received=pushed.digest,
        )
    if version.state == ModelState.ARCHIVED:  # pushed again after the model's deletion
        version = registry.update_version(_replace(version, state=ModelState.LIVE))
        created = True

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
                custom_properties={"source_event": event.id},
            )
        )
        created = True

    reply = ModelRegistered(
        model=pushed.model,
        version=pushed.version,
        uri=pushed.uri,
        digest=pushed.digest,
        registry=getattr(registry, "name", type(registry).__name__),
        registered_model_id=model.id,
        model_version_id=version.id,
        model_artifact_id=artifact.id,
        namespace=pushed.namespace or "default",
        created=created,
    )
    return [
        CanonicalEvent.new(
            reply, source="modelhooks/register", subject=event.subject, id=f"{event.id}/registered"
        )
    ]


def archive_model(
    event: CanonicalEvent,
    deleted: ModelDeleted,
    *,
    registry: ModelRegistry,
    check_namespace: bool = False,
) -> None:
    """Archive the model and its versions. With tenancy on, only the namespace that
    registered the model may archive it."""
    with registry.transaction():
        _archive(event, deleted, registry, check_namespace)


def _archive(
    event: CanonicalEvent, deleted: ModelDeleted, registry: ModelRegistry, check_namespace: bool
) -> None:
    stamp = _stamp(event)
    model = registry.get_model(deleted.name)
    if model is None:
        model = _find_or_create(
            lambda: registry.create_model(
                deleted.name, properties={"namespace": deleted.namespace}
            ),
            lambda: registry.get_model(deleted.name),
        )[0]
    owner = model.custom_properties.get("namespace", "default")
    if check_namespace and owner != deleted.namespace:
        raise Forbidden(
            f"namespace {deleted.namespace!r} may not archive model {deleted.name!r}",
            namespace=deleted.namespace,
            owner=owner,
        )
    if model.state == ModelState.ARCHIVED and model.custom_properties.get(ARCHIVED_AT, "") >= stamp:
        return
    props = {**model.custom_properties, ARCHIVED_AT: stamp}
    registry.update_model(_replace(model, state=ModelState.ARCHIVED, custom_properties=props))
    for version in registry.list_versions(model.id):
        if version.state != ModelState.ARCHIVED:
            registry.update_version(_replace(version, state=ModelState.ARCHIVED))


def _stamp(event: CanonicalEvent) -> str:
    """The event's time as a sortable UTC string ("" when the upstream gave no time: such
    a push is taken as newer than any deletion, so it is never silently dropped)."""
    return event.time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if event.time else ""


def _find_or_create(create: Callable[[], T], find: Callable[[], T | None]) -> tuple[T, bool]:
    """(the thing, created by this call); when a concurrent delivery won the race to
    create it, what that delivery created."""
    try:
        return create(), True
    except Conflict:
        found = find()
        if found is None:
            raise
        return found, False


def _replace(obj: T, **changes: object) -> T:
    import dataclasses

    return dataclasses.replace(obj, **changes)  # type: ignore[type-var]


FUNCTION = Function(
    name="register",
    accepts=frozenset({ArtifactPushed.TYPE, ModelDeleted.TYPE}),
    handle=handle,
)
