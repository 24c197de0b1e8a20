"""Shared pytest configuration: each kind of real backing service has its own fixture module.

The suite has three slices, one folder each: ``tests/unit`` (no I/O beyond temporary files),
``tests/integration`` (real SQLite, PostgreSQL and Azurite, coordinators in this process) and
``tests/e2e`` (processes, browsers and chaos). Each test is marked with its slice.

What more than one test module uses lives in ``tests/fixtures`` (the fixtures registered
below, and the helpers beside them; task definitions come from ``devharness.tasks``): a test
module never imports another.
"""

from pathlib import Path

import pytest

TESTS = Path(__file__).parent
SLICES = ("unit", "integration", "e2e")

pytest_plugins = [
    "tests.fixtures.azurite",
    "tests.fixtures.stores",
    "tests.fixtures.coordinator",
    "tests.fixtures.flow",
    "tests.fixtures.sdk",
    "tests.fixtures.workers",
    "tests.fixtures.replicas",
    "tests.fixtures.browser",
    # inline_app, as a project testing its own worker_sdk app would register it
    "worker_sdk.testing",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the slice its folder under ``tests`` names (``-m unit``,
    ``-m "not e2e"``), subfolders included."""
    for item in items:
        if not item.path.is_relative_to(TESTS):
            continue
        slice_name = item.path.relative_to(TESTS).parts[0]
        if slice_name in SLICES:
            item.add_marker(slice_name)
