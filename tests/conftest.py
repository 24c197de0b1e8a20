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
    ``-m "not e2e"``), subfolders included; then start the ``slow`` tests first."""
    for item in items:
        if not item.path.is_relative_to(TESTS):
            continue
        slice_name = item.path.relative_to(TESTS).parts[0]
        if slice_name in SLICES:
            item.add_marker(slice_name)
    items[:] = _slow_first(items)


def _slow_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The tests in an order where the ``slow`` ones open both halves of the list, longest
    first, shared out so that both halves hold about as many seconds of them (the marker's
    ``seconds``): pytest-xdist's work stealing hands each of two workers one half, and each
    works from its front, so the long tests overlap each other and the short ones fill in
    around them, instead of one starting last and running on alone."""
    slow = [item for item in items if item.get_closest_marker("slow")]
    if not slow:
        return items
    rest = [item for item in items if not item.get_closest_marker("slow")]
    lanes: tuple[list[pytest.Item], list[pytest.Item]] = ([], [])
    loads = [0.0, 0.0]
    for item in sorted(slow, key=_seconds, reverse=True):
        lane = loads.index(min(loads))
        lanes[lane].append(item)
        loads[lane] += _seconds(item)
    cut = max(0, len(items) // 2 - len(lanes[0]))
    return lanes[0] + rest[:cut] + lanes[1] + rest[cut:]


def _seconds(item: pytest.Item) -> float:
    marker = item.get_closest_marker("slow")
    return float(marker.kwargs.get("seconds", 20)) if marker is not None else 0.0
