"""`register` over the in-memory registry (which passes the same contract as SQLite)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from modelhooks.core.errors import Conflict
from modelhooks.core.records import ArtifactState, ModelArtifact, ModelState, RegisteredModel
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted, ModelRegistered
from modelhooks.handlers.register import archive_model, register_model
from tests.fakes.memory_registry import InMemoryModelRegistry

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def pushed(
    version: str = "1", digest: str = "gcs-generation:1", at: datetime = T0, id: str = "e1"
) -> CanonicalEvent:
    data = ArtifactPushed(
        model="bert",
        version=version,
        uri=f"gs://models/models/bert/{version}/",
        digest=digest,
        store="gcs",
    )
    return CanonicalEvent(id=id, source="test", type=data.TYPE, data=data, time=at)


def deleted(at: datetime, id: str = "d1") -> CanonicalEvent:
    data = ModelDeleted(name="bert")
    return CanonicalEvent(id=id, source="test", type=data.TYPE, data=data, time=at)


def register(event: CanonicalEvent, registry: InMemoryModelRegistry) -> list[CanonicalEvent]:
    assert isinstance(event.data, ArtifactPushed)
    return register_model(event, event.data, registry=registry)


def archive(event: CanonicalEvent, registry: InMemoryModelRegistry) -> None:
    assert isinstance(event.data, ModelDeleted)
    archive_model(event, event.data, registry=registry)


def test_push_registers_model_version_and_artifact() -> None:
    reg = InMemoryModelRegistry()
    (reply,) = register(pushed(), reg)
    assert reply.type == "dev.modelhooks.model.registered"
    data = reply.data
    assert isinstance(data, ModelRegistered)
    assert data.created is True
    model = reg.get_model("bert")
    assert model is not None and data.registered_model_id == model.id
    version = reg.get_version(model.id, "1")
    assert version is not None and version.custom_properties["digest"] == "gcs-generation:1"
    (artifact,) = reg.list_artifacts(version.id)
    assert artifact.uri == "gs://models/models/bert/1/"
    assert artifact.state == ArtifactState.LIVE


def test_same_event_twice_yields_one_version() -> None:
    reg = InMemoryModelRegistry()
    first = register(pushed(), reg)[0].data
    second = register(pushed(), reg)[0].data
    assert isinstance(first, ModelRegistered) and isinstance(second, ModelRegistered)
    assert second == first  # answered as the first time (created by this event)
    other = register(pushed(id="other"), reg)[0].data
    assert isinstance(other, ModelRegistered) and other.created is False
    assert second.model_version_id == first.model_version_id
    assert len(reg.versions) == 1 and len(reg.artifacts) == 1


def test_same_version_with_another_digest_conflicts_and_changes_nothing() -> None:
    reg = InMemoryModelRegistry()
    register(pushed(digest="gcs-generation:1"), reg)
    with pytest.raises(Conflict) as err:
        register(pushed(digest="gcs-generation:2", id="e2"), reg)
    assert err.value.details == {"registered": "gcs-generation:1", "received": "gcs-generation:2"}
    (artifact,) = reg.artifacts.values()
    assert artifact.digest == "gcs-generation:1"


def test_half_done_registration_is_resumed() -> None:
    reg = InMemoryModelRegistry()
    model = reg.create_model("bert", properties={})
    reg.create_version(model.id, "1", properties={"digest": "gcs-generation:1"})
    (reply,) = register(pushed(), reg)
    assert isinstance(reply.data, ModelRegistered) and reply.data.created is True
    assert len(reg.artifacts) == 1


def test_pending_artifact_becomes_live() -> None:
    reg = InMemoryModelRegistry()
    model = reg.create_model("bert", properties={})
    version = reg.create_version(model.id, "1", properties={"digest": "gcs-generation:1"})
    reg.upsert_artifact(
        ModelArtifact(
            id="",
            version_id=version.id,
            name="model",
            uri="u",
            digest="gcs-generation:1",
            state=ArtifactState.PENDING,
        )
    )
    register(pushed(), reg)
    (artifact,) = reg.list_artifacts(version.id)
    assert artifact.state == ArtifactState.LIVE


def test_lost_race_on_create_uses_the_winner() -> None:
    class Racy(InMemoryModelRegistry):
        """The first lookup misses; a concurrent delivery creates the model right after."""

        def get_model(self, name: str):  # type: ignore[no-untyped-def]
            if not self.models:
                winner = RegisteredModel(id="1", name=name, custom_properties={"winner": "other"})
                self.models[winner.id] = winner
                return None
            return super().get_model(name)

    reg = Racy()
    (reply,) = register(pushed(), reg)
    assert len(reg.models) == 1
    assert reg.models["1"].custom_properties["winner"] == "other"
    assert isinstance(reply.data, ModelRegistered) and reply.data.registered_model_id == "1"


def test_delete_archives_model_and_versions() -> None:
    reg = InMemoryModelRegistry()
    register(pushed("1"), reg)
    register(pushed("2", id="e2"), reg)
    archive(deleted(T0 + timedelta(hours=1)), reg)
    model = reg.get_model("bert")
    assert model is not None and model.state == ModelState.ARCHIVED
    assert {v.state for v in reg.list_versions(model.id)} == {ModelState.ARCHIVED}


def test_delete_before_create_leaves_a_tombstone_that_stale_pushes_respect() -> None:
    reg = InMemoryModelRegistry()
    archive(deleted(T0 + timedelta(minutes=5)), reg)  # arrives first, happened later
    (again,) = register(pushed(at=T0), reg)  # the older push is stale: recorded, archived,
    assert isinstance(again.data, ModelDeleted)  # and the deletion is said again for it
    assert (again.data.name, again.data.version) == ("bert", "1")
    assert again.time == T0 + timedelta(minutes=5)  # as of the deletion (cleanup's horizon)
    model = reg.get_model("bert")
    assert model is not None and model.state == ModelState.ARCHIVED
    assert [(v.name, v.state) for v in reg.list_versions(model.id)] == [("1", ModelState.ARCHIVED)]
    # a push after the deletion brings the model back
    (reply,) = register(pushed(at=T0 + timedelta(minutes=10), id="e3"), reg)
    model = reg.get_model("bert")
    assert model is not None and model.state == ModelState.LIVE
    assert isinstance(reply.data, ModelRegistered)


def test_repeated_delete_is_idempotent() -> None:
    reg = InMemoryModelRegistry()
    register(pushed(), reg)
    archive(deleted(T0 + timedelta(hours=1)), reg)
    before = msgspec.structs.replace(reg.get_model("bert"))  # type: ignore[type-var]
    archive(deleted(T0 + timedelta(hours=1)), reg)
    assert reg.get_model("bert") == before


def test_a_push_after_the_deletion_revives_model_and_version() -> None:
    reg = InMemoryModelRegistry()
    register(pushed(at=T0), reg)
    archive(deleted(T0 + timedelta(minutes=1)), reg)
    (reply,) = register(pushed(at=T0 + timedelta(minutes=2), id="e2"), reg)
    model = reg.get_model("bert")
    assert model is not None and model.state == ModelState.LIVE
    version = reg.get_version(model.id, "1")
    assert version is not None and version.state == ModelState.LIVE
    assert isinstance(reply.data, ModelRegistered) and reply.data.created is True
