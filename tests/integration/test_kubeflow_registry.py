"""`KubeflowModelRegistry` against the real Kubeflow Model Registry REST server (PostgreSQL):
the same contract as every backend, plus what only this backend can get wrong."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import requests

from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry, external_id
from modelhooks.core.errors import NotFound
from modelhooks.core.records import ArtifactState, ModelArtifact
from tests.contract.model_registry import ModelRegistryContract, unique
from tests.servers.model_registry import ModelRegistry as ModelRegistryServer

pytestmark = pytest.mark.integration


@pytest.fixture
def kubeflow(model_registry: ModelRegistryServer) -> Iterator[KubeflowModelRegistry]:
    registry = KubeflowModelRegistry(model_registry.url, timeout=10)
    yield registry
    registry.close()


class TestKubeflow(ModelRegistryContract):
    @pytest.fixture
    def registry(self, kubeflow: KubeflowModelRegistry) -> KubeflowModelRegistry:
        return kubeflow


def test_properties_are_typed_string_values(
    kubeflow: KubeflowModelRegistry, model_registry: ModelRegistryServer
) -> None:
    model = kubeflow.create_model(unique("m"), properties={"team": "a"})
    raw = requests.get(f"{model_registry.api_url}/registered_models/{model.id}", timeout=10)
    assert raw.json()["customProperties"]["team"] == {
        "metadataType": "MetadataStringValue",
        "string_value": "a",
    }


def test_artifact_is_a_model_artifact_with_its_digest(
    kubeflow: KubeflowModelRegistry, model_registry: ModelRegistryServer
) -> None:
    model = kubeflow.create_model(unique("m"), properties={})
    version = kubeflow.create_version(model.id, "1", properties={})
    artifact = kubeflow.upsert_artifact(
        ModelArtifact(
            id="",
            version_id=version.id,
            name="model",
            uri="s3://b/m/1/",
            digest="etag:abc",
            state=ArtifactState.PENDING,
            custom_properties={"source_event": "e1"},
        )
    )
    raw = requests.get(f"{model_registry.api_url}/model_artifacts/{artifact.id}", timeout=10)
    body = raw.json()
    assert body["artifactType"] == "model-artifact"
    assert body["state"] == "PENDING"
    assert body["customProperties"]["digest"]["string_value"] == "etag:abc"
    assert body["externalId"] == external_id(version.id, "model")  # found by it, exactly
    (listed,) = kubeflow.list_artifacts(version.id)
    assert listed == dataclasses.replace(artifact, state=ArtifactState.PENDING)
    assert listed.custom_properties == {"source_event": "e1"}


def test_update_replaces_properties_and_description(kubeflow: KubeflowModelRegistry) -> None:
    model = kubeflow.create_model(unique("m"), properties={"a": "1", "b": "2"})
    updated = kubeflow.update_model(
        dataclasses.replace(model, description="d", custom_properties={"a": "3"})
    )
    assert updated.custom_properties == {"a": "3"}
    assert kubeflow.get_model(model.name) == updated


def test_missing_parents_are_not_found(kubeflow: KubeflowModelRegistry) -> None:
    model = kubeflow.create_model(unique("m"), properties={})
    with pytest.raises(NotFound):
        kubeflow.create_version(model.id + "0000", "1", properties={})
    with pytest.raises(NotFound):
        kubeflow.upsert_artifact(
            ModelArtifact(id="", version_id="999999", name="model", uri="u", digest="d")
        )
    with pytest.raises(NotFound):
        kubeflow.upsert_artifact(
            ModelArtifact(id="999999", version_id="1", name="model", uri="u", digest="d")
        )


def test_versions_and_artifacts_stay_with_their_parent(kubeflow: KubeflowModelRegistry) -> None:
    a = kubeflow.create_model(unique("a"), properties={})
    b = kubeflow.create_model(unique("b"), properties={})
    for model in (a, b):
        for name in ("1", "2"):
            version = kubeflow.create_version(model.id, name, properties={"of": model.name})
            kubeflow.upsert_artifact(
                ModelArtifact(id="", version_id=version.id, name="model", uri=name, digest="d")
            )
    versions = kubeflow.list_versions(a.id)
    assert sorted(v.name for v in versions) == ["1", "2"]
    assert {v.custom_properties["of"] for v in versions} == {a.name}
    for version in versions:
        (artifact,) = kubeflow.list_artifacts(version.id)
        assert artifact.uri == version.name and artifact.version_id == version.id
