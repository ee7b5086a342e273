"""Shared pytest wiring: the real-server fixtures live in tests/servers/fixtures.py."""

import gc
import os
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.servers.fixtures"]


@pytest.fixture(autouse=True)
def _function_target() -> Iterator[None]:
    """functions_framework.create_app sets os.environ["FUNCTION_TARGET"] for good, and a
    process with a target builds only that function's dependencies (bootstrap.hosted): the
    next test starts with the environment this one had."""
    before = os.environ.get("FUNCTION_TARGET")
    yield
    if before is None:
        os.environ.pop("FUNCTION_TARGET", None)
    else:
        os.environ["FUNCTION_TARGET"] = before
    # the targets' module (modelhooks.main) freezes what the process holds, as a server
    # should at start; in the test process that was every earlier test's uncollected
    # garbage, their sockets with it, kept open for good (past 1,024 files in a full run)
    if gc.get_freeze_count():
        gc.unfreeze()
