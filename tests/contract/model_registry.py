"""The ModelRegistry contract: every backend (and the in-memory fake) must pass it.

Use: subclass `ModelRegistryContract` and provide a `registry` fixture.
"""

from __future__ import annotations

import uuid

import msgspec
import pytest

from modelhooks.core.errors import Conflict, NotFound
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.records import ArtifactState, ModelArtifact, ModelState, Typed

# JSON-typed custom properties (a transfer's metadata) next to a handler's text
TYPED = {
    "accuracy": Typed(0.95),
    "epochs": Typed(3),
    "tuned": Typed(True),
    "layers": Typed({"sizes": [768, 12], "kind": "bert"}),
    "stage": "dev",
    "pi": "3.14",  # text that looks like a number stays text
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class ModelRegistryContract:
    keeps_types = True  # False: a backend of text only (Kubernetes' string map) keeps the text

    def test_is_a_model_registry(self, registry: ModelRegistry) -> None:
        assert isinstance(registry, ModelRegistry)

    def test_create_then_get_model(self, registry: ModelRegistry) -> None:
        name = unique("m")
        created = registry.create_model(name, properties={"team": "a"})
        found = registry.get_model(name)
        assert found is not None
        assert found.id == created.id
        assert found.state == ModelState.LIVE
        assert found.custom_properties["team"] == "a"
        assert registry.get_model(unique("absent")) is None

    def test_duplicate_model_name_conflicts(self, registry: ModelRegistry) -> None:
        name = unique("m")
        registry.create_model(name, properties={})
        with pytest.raises(Conflict):
            registry.create_model(name, properties={})

    def test_versions_are_unique_per_model(self, registry: ModelRegistry) -> None:
        a = registry.create_model(unique("a"), properties={})
        b = registry.create_model(unique("b"), properties={})
        va = registry.create_version(a.id, "1", properties={"digest": "sha256:aa"})
        vb = registry.create_version(b.id, "1", properties={"digest": "sha256:bb"})
        assert va.id != vb.id
        with pytest.raises(Conflict):
            registry.create_version(a.id, "1", properties={})
        got = registry.get_version(a.id, "1")
        assert got is not None and got.custom_properties["digest"] == "sha256:aa"
        assert registry.get_version(a.id, "2") is None
        assert [v.name for v in registry.list_versions(a.id)] == ["1"]

    def test_version_of_missing_model_is_not_found(self, registry: ModelRegistry) -> None:
        with pytest.raises(NotFound):
            registry.create_version("999999", "1", properties={})

    def test_archive_model_and_version(self, registry: ModelRegistry) -> None:
        model = registry.create_model(unique("m"), properties={})
        version = registry.create_version(model.id, "1", properties={})
        registry.update_model(msgspec.structs.replace(model, state=ModelState.ARCHIVED))
        registry.update_version(msgspec.structs.replace(version, state=ModelState.ARCHIVED))
        got_model = registry.get_model(model.name)
        got_version = registry.get_version(model.id, "1")
        assert got_model is not None and got_model.state == ModelState.ARCHIVED
        assert got_version is not None and got_version.state == ModelState.ARCHIVED

    def test_artifact_create_and_update(self, registry: ModelRegistry) -> None:
        model = registry.create_model(unique("m"), properties={})
        version = registry.create_version(model.id, "1", properties={})
        artifact = registry.upsert_artifact(
            ModelArtifact(
                id="",
                version_id=version.id,
                name="model",
                uri="gs://b/models/m/1/",
                digest="gcs-generation:1",
                state=ArtifactState.PENDING,
            )
        )
        assert artifact.id
        registry.upsert_artifact(msgspec.structs.replace(artifact, state=ArtifactState.LIVE))
        (stored,) = registry.list_artifacts(version.id)
        assert stored.id == artifact.id
        assert stored.state == ArtifactState.LIVE
        assert stored.uri == "gs://b/models/m/1/"
        assert stored.digest == "gcs-generation:1"

    def test_an_artifact_is_read_back_by_its_id(self, registry: ModelRegistry) -> None:
        model = registry.create_model(unique("m"), properties={})
        version = registry.create_version(model.id, "1", properties={})
        new = ModelArtifact(id="", version_id=version.id, name="model", uri="s3://b/m/", digest="")
        artifact = registry.upsert_artifact(new)
        got = registry.get_artifact(artifact.id)
        assert got is not None and (got.id, got.name, got.uri) == (artifact.id, "model", new.uri)
        assert got.version_id in (version.id, "")  # "" where an artifact is read alone
        assert registry.get_artifact("nope") is None

    def test_a_version_is_read_back_by_its_id(self, registry: ModelRegistry) -> None:
        model = registry.create_model(unique("m"), properties={})
        version = registry.create_version(model.id, "1", properties={"k": "v"})
        registry.create_version(model.id, "2", properties={})
        got = registry.get_version_by_id(version.id)
        assert got is not None
        assert (got.id, got.model_id, got.name) == (version.id, model.id, "1")
        assert got.custom_properties["k"] == "v"
        assert registry.get_version_by_id("nope") is None
        assert registry.get_version_by_id("987654321") is None

    @pytest.mark.parametrize("id", ["²", "٣", "-1", "1e3", " 1", "nope"])
    def test_an_id_that_is_no_id_finds_nothing(self, registry: ModelRegistry, id: str) -> None:
        """Ids come from requests too (a transfer names a model): text that is no id is no
        row ("²" and "٣" are digits to str.isdigit, and int reads "٣"), never an error."""
        assert registry.get_version_by_id(id) is None
        assert registry.get_artifact(id) is None
        assert registry.get_version(id, "1") is None
        assert registry.list_versions(id) == []
        assert registry.list_artifacts(id) == []
        with pytest.raises(NotFound):
            registry.create_version(id, "1", properties={})

    def test_duplicate_artifact_name_conflicts(self, registry: ModelRegistry) -> None:
        model = registry.create_model(unique("m"), properties={})
        version = registry.create_version(model.id, "1", properties={})
        new = ModelArtifact(id="", version_id=version.id, name="model", uri="u", digest="d")
        registry.upsert_artifact(new)
        with pytest.raises(Conflict):
            registry.upsert_artifact(new)

    def test_list_models_includes_created(self, registry: ModelRegistry) -> None:
        name = unique("m")
        registry.create_model(name, properties={})
        assert name in [m.name for m in registry.list_models()]

    def test_writes_in_a_transaction_are_visible_after_it(self, registry: ModelRegistry) -> None:
        name = unique("m")
        with registry.transaction():
            model = registry.create_model(name, properties={})
            with registry.transaction():  # nested: joins the outer one
                registry.create_version(model.id, "1", properties={})
        found = registry.get_model(name)
        assert found is not None and registry.get_version(found.id, "1") is not None

    def test_typed_properties_round_trip(self, registry: ModelRegistry) -> None:
        model = registry.create_model(unique("m"), properties=TYPED)
        version = registry.create_version(model.id, "1", properties=TYPED)
        artifact = registry.upsert_artifact(
            ModelArtifact("", version.id, "model", "s3://b/m/1/", "d", custom_properties=TYPED)
        )
        registry.update_version(  # an update keeps what it does not change
            msgspec.structs.replace(version, custom_properties={**TYPED, "stage": "prod"})
        )
        got_version = registry.get_version(model.id, "1")
        got_model = registry.get_model(model.name)
        got_artifact = registry.get_artifact(artifact.id)
        assert got_model is not None and got_version is not None and got_artifact is not None
        want = {**TYPED, "stage": "prod"}
        for props, expected in (
            (got_model.custom_properties, TYPED),
            (got_version.custom_properties, want),
            (got_artifact.custom_properties, TYPED),
        ):
            seen = {k: props[k] for k in expected}
            assert seen == expected  # the same text everywhere
            if self.keeps_types:
                values = {k: (type(v), getattr(v, "value", v)) for k, v in seen.items()}
                assert values == {k: (type(v), getattr(v, "value", v)) for k, v in expected.items()}
                assert type(props["epochs"].value) is int  # type: ignore[attr-defined]
