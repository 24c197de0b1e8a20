"""Shared pytest configuration: each kind of real backing service has its own fixture module."""

pytest_plugins = [
    "tests.fixtures.azurite",
    "tests.fixtures.stores",
    "tests.fixtures.coordinator",
    "tests.fixtures.flow",
]
