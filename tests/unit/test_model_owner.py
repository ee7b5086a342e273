"""A registered model's owner is one rule (records.owner_of), read alike by register (who
may archive it) and cleanup (whose model of the name a deletion is): the namespace that
registered it, "default" for a model registered without one."""

from __future__ import annotations

from modelhooks.core.records import ModelArtifact, RegisteredModel, owner_of
from modelhooks.handlers import cleanup
from tests.fakes.memory_registry import InMemoryModelRegistry


def test_the_owner_is_the_registering_namespace_else_default() -> None:
    assert owner_of(RegisteredModel("1", "bert")) == "default"
    named = RegisteredModel("1", "bert", custom_properties={"namespace": "team-a"})
    assert owner_of(named) == "team-a"


def test_cleanup_takes_a_model_registered_without_a_namespace_as_defaults() -> None:
    registry = InMemoryModelRegistry()
    model = registry.create_model("bert", properties={})  # registered before namespaces
    version = registry.create_version(
        model.id, "1", properties={"modelhooks.pushed_at": "2026-01-01T00:00:00.000000Z"}
    )
    registry.upsert_artifact(ModelArtifact("", version.id, "w", "s3://b/bert/1", ""))
    since = "2026-02-01T00:00:00.000000Z"
    assert cleanup.in_use(registry, "bert", since=since, namespace="default") == frozenset()
    assert "s3://b/bert/1" in cleanup.in_use(registry, "bert", since=since, namespace="team-a")
