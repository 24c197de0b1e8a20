"""Shared pytest configuration: each kind of real backing service has its own fixture module.

The suite has three slices, one folder each: ``tests/unit`` (no I/O beyond temporary files),
``tests/integration`` (real SQLite, PostgreSQL and Azurite, coordinators in this process) and
``tests/e2e`` (processes, browsers and chaos). Each test is marked with its slice.

What more than one test module uses lives in ``tests/fixtures`` (the fixtures registered
below, and the helpers beside them; task definitions come from ``devharness.tasks``): a test
module never imports another.
"""

import os
from pathlib import Path

import pytest

from coordinator.api import validation

# Every response of the suite's in-process coordinators is checked against its schema, also
# those the service leaves unchecked on the hot paths (Endpoint.built_output).
validation.CHECK_BUILT_OUTPUT = True

TESTS = Path(__file__).parent
SLICES = ("unit", "integration", "e2e")

pytest_plugins = [
    "tests.fixtures.azurite",
    "tests.fixtures.stores",
    "tests.fixtures.coordinator",
    "tests.fixtures.log_scan",
    "tests.fixtures.flow",
    "tests.fixtures.sdk",
    "tests.fixtures.workers",
    "tests.fixtures.replicas",
    "tests.fixtures.browser",
    "tests.fixtures.tls",
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
    # Collected in each pytest-xdist worker, which knows the count from its environment.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = _slow_first(items, workers)


def _slow_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The tests in an order where the ``slow`` ones open each worker's share of the list,
    shared out so that every share holds about as many seconds of them (the marker's
    ``seconds``): pytest-xdist's work stealing hands each worker an equal slice of the list in
    order, and each works from its front, so the long tests overlap each other and the short
    ones fill in around them, instead of one starting last and running on alone.

    Half the shares start with their waiting tests (``waits=True``: soaks and outages, whose
    length is the clock's, not the CPU's), the other half end their slow tests with them: with
    every share starting with its CPU-bound ones, the soaks all ran together afterwards and
    left the two cores a third idle for over a minute."""
    slow = [item for item in items if item.get_closest_marker("slow")]
    rest = iter([item for item in items if not item.get_closest_marker("slow")])
    lanes: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for long_one in sorted(slow, key=_seconds, reverse=True):
        emptiest = loads.index(min(loads))
        lanes[emptiest].append(long_one)
        loads[emptiest] += _seconds(long_one)
    ordered: list[pytest.Item] = []
    for index, lane in enumerate(lanes):
        waiting_first = index % 2 == 0
        ordered += sorted(lane, key=lambda item: _waits(item) != waiting_first)
        share_end = (index + 1) * len(items) // workers
        while len(ordered) < share_end and (filler := next(rest, None)) is not None:
            ordered.append(filler)
    return ordered + list(rest)


def _waits(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("slow")
    return bool(marker is not None and marker.kwargs.get("waits", False))


def _seconds(item: pytest.Item) -> float:
    marker = item.get_closest_marker("slow")
    return float(marker.kwargs.get("seconds", 20)) if marker is not None else 0.0
