from __future__ import annotations

from pathlib import Path

import pytest

from functions.adapters.model_registry.memory import InMemoryModelRegistry
from functions.adapters.model_registry.sqlite import SqliteModelRegistry
from tests.contract.model_registry import ModelRegistryContract


class TestInMemory(ModelRegistryContract):
    @pytest.fixture
    def registry(self) -> InMemoryModelRegistry:
        return InMemoryModelRegistry()


class TestSqlite(ModelRegistryContract):
    @pytest.fixture
    def registry(self, tmp_path: Path) -> SqliteModelRegistry:
        return SqliteModelRegistry(tmp_path / "registry.db")
