"""The publisher process's pieces that need no process (coordinator/cli/publish_events.py):
its counts relayed line by line into the API process's metrics, and the setting that keeps
the publisher in process."""

from __future__ import annotations

import io

import pytest
from prometheus_client import CollectorRegistry

from coordinator.cli.publish_events import CountsRelay, apply_counts
from coordinator.config import Config, ConfigurationError
from coordinator.service.metrics import ServiceMetrics


def test_the_childs_counts_reach_the_parents_metrics() -> None:
    out = io.BytesIO()
    relay = CountsRelay(out)
    relay.passed("event-publisher", 0)  # an idle pass writes nothing
    assert out.getvalue() == b""
    relay.event_published("task-pending", 2)
    relay.event_published("task-pending")
    relay.event_parked("task-running")
    relay.set_outbox_depth(7)
    relay.passed("event-publisher", 3)
    relay.set_outbox_depth(0)
    relay.passed("event-publisher", 0)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2

    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry)
    for line in lines:
        apply_counts(line, metrics)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("queue_events_published_total", exchange="task-pending") == 3
    assert value("queue_events_parked_total", exchange="task-running") == 1
    assert value("queue_event_outbox_depth") == 0
    assert value("queue_resolver_actions_total", resolver="event-publisher") == 3


@pytest.mark.parametrize(("raw", "in_process"), [(None, False), ("true", True), ("false", False)])
def test_the_in_process_setting(raw: str | None, in_process: bool) -> None:
    env = {} if raw is None else {"COORDINATOR_PULSE_IN_PROCESS": raw}
    assert Config.from_env(env).pulse_in_process is in_process


def test_a_bad_in_process_setting_names_itself() -> None:
    with pytest.raises(ConfigurationError, match="COORDINATOR_PULSE_IN_PROCESS='maybe'"):
        Config.from_env({"COORDINATOR_PULSE_IN_PROCESS": "maybe"})
