"""`InMemoryModelRegistry`: the fake for fast tests. It passes the same contract tests as
the real backends (tests/contract), so handler tests over it mean something."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from threading import RLock

import msgspec

from modelhooks.core.errors import Conflict, NotFound
from modelhooks.core.records import ModelArtifact, ModelVersion, RegisteredModel

__all__ = ["InMemoryModelRegistry"]


class InMemoryModelRegistry:
    name = "memory"

    def __init__(self) -> None:
        self.models: dict[str, RegisteredModel] = {}
        self.versions: dict[str, ModelVersion] = {}
        self.artifacts: dict[str, ModelArtifact] = {}
        self._ids = itertools.count(1)
        self._lock = RLock()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            yield

    def _id(self) -> str:
        return str(next(self._ids))

    def get_model(self, name: str) -> RegisteredModel | None:
        return next((m for m in self.models.values() if m.name == name), None)

    def create_model(self, name: str, *, properties: Mapping[str, str]) -> RegisteredModel:
        with self._lock:
            if self.get_model(name):
                raise Conflict(f"registered model {name!r} exists")
            model = RegisteredModel(id=self._id(), name=name, custom_properties=dict(properties))
            self.models[model.id] = model
            return model

    def update_model(self, model: RegisteredModel) -> RegisteredModel:
        if model.id not in self.models:
            raise NotFound(f"no registered model {model.id}")
        self.models[model.id] = model
        return model

    def list_models(self) -> list[RegisteredModel]:
        return sorted(self.models.values(), key=lambda m: m.name)

    def get_version(self, model_id: str, name: str) -> ModelVersion | None:
        return next(
            (v for v in self.versions.values() if v.model_id == model_id and v.name == name), None
        )

    def get_version_by_id(self, version_id: str) -> ModelVersion | None:
        return self.versions.get(version_id)

    def create_version(
        self, model_id: str, name: str, *, properties: Mapping[str, str]
    ) -> ModelVersion:
        with self._lock:
            if model_id not in self.models:
                raise NotFound(f"no registered model {model_id}")
            if self.get_version(model_id, name):
                raise Conflict(f"version {name!r} exists")
            version = ModelVersion(
                id=self._id(), model_id=model_id, name=name, custom_properties=dict(properties)
            )
            self.versions[version.id] = version
            return version

    def update_version(self, version: ModelVersion) -> ModelVersion:
        if version.id not in self.versions:
            raise NotFound(f"no model version {version.id}")
        self.versions[version.id] = version
        return version

    def list_versions(self, model_id: str) -> list[ModelVersion]:
        return [v for v in self.versions.values() if v.model_id == model_id]

    def list_artifacts(self, version_id: str) -> list[ModelArtifact]:
        return [a for a in self.artifacts.values() if a.version_id == version_id]

    def get_artifact(self, artifact_id: str) -> ModelArtifact | None:
        return self.artifacts.get(artifact_id)

    def upsert_artifact(self, artifact: ModelArtifact) -> ModelArtifact:
        with self._lock:
            if artifact.id:
                if artifact.id not in self.artifacts:
                    raise NotFound(f"no model artifact {artifact.id}")
            else:
                if artifact.version_id not in self.versions:
                    raise NotFound(f"no model version {artifact.version_id}")
                if any(a.name == artifact.name for a in self.list_artifacts(artifact.version_id)):
                    raise Conflict(f"artifact {artifact.name!r} exists")
                artifact = msgspec.structs.replace(artifact, id=self._id())
            self.artifacts[artifact.id] = artifact
            return artifact
