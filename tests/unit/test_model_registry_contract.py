from __future__ import annotations

from pathlib import Path

import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from tests.contract.model_registry import ModelRegistryContract
from tests.fakes.memory_registry import InMemoryModelRegistry


class TestInMemory(ModelRegistryContract):
    @pytest.fixture
    def registry(self) -> InMemoryModelRegistry:
        return InMemoryModelRegistry()


class TestSqlite(ModelRegistryContract):
    @pytest.fixture
    def registry(self, tmp_path: Path) -> SqliteModelRegistry:
        return SqliteModelRegistry(tmp_path / "registry.db")


def test_sqlite_rolls_back_a_failed_transaction(tmp_path: Path) -> None:
    registry = SqliteModelRegistry(tmp_path / "registry.db")
    with pytest.raises(RuntimeError), registry.transaction():
        registry.create_model("half-done", properties={})
        raise RuntimeError("the handler failed midway")
    assert registry.get_model("half-done") is None
    registry.create_model("after", properties={})  # the connection is usable again
    assert registry.get_model("after") is not None
    registry.close()
