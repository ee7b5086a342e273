"""Shared pytest wiring: the real-server fixtures live in tests/servers/fixtures.py."""

pytest_plugins = ["tests.servers.fixtures"]
