"""run.progress's coalescing (worker_sdk.progress.RunProgressReporter) with a recording send:
the first value goes at once, later ones at most one an interval with the last value winning,
a flush sends what is left before the run is reported, values recorded from a thread off the
loop arrive too, and bad values are refused at the call."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from devharness.waiting import wait_until
from worker_sdk.progress import RunProgressReporter

INTERVAL = 0.1


class Sent:
    """The reports a reporter sent, each with the monotonic time it was sent."""

    def __init__(self) -> None:
        self.reports: list[tuple[float, str | None]] = []
        self.times: list[float] = []

    async def __call__(self, fraction: float, message: str | None) -> None:
        self.times.append(time.monotonic())
        self.reports.append((fraction, message))


async def test_reports_are_coalesced_to_one_an_interval_and_the_last_is_flushed() -> None:
    sent = Sent()
    reporter = RunProgressReporter(sent, loop=asyncio.get_running_loop(), interval=INTERVAL)
    reporter.record(0.0, "start")
    await wait_until(lambda: sent.reports == [(0.0, "start")], within=5, what="the first")
    started = time.monotonic()
    for step in range(1, 101):
        reporter.record(step / 100, f"step {step}")
        await asyncio.sleep(INTERVAL / 25)
    await reporter.flush()
    elapsed = time.monotonic() - started

    assert sent.reports[-1] == (1.0, "step 100")
    # 100 calls, but one report an interval at most (besides the first and the flush).
    assert len(sent.reports) <= 2 + math.ceil(elapsed / INTERVAL), (elapsed, sent.reports)
    assert len(sent.reports) < 50
    gaps = [b - a for a, b in zip(sent.times, sent.times[1:-1], strict=False)]
    assert all(gap >= INTERVAL * 0.9 for gap in gaps), gaps
    # Values only ever move on: each sent one is a later call's than the one before.
    fractions = [fraction for fraction, _ in sent.reports]
    assert fractions == sorted(fractions)
    count = len(sent.reports)
    await reporter.flush()
    assert len(sent.reports) == count  # nothing left to send


async def test_a_value_recorded_from_a_thread_is_sent_on_the_loop() -> None:
    sent = Sent()
    reporter = RunProgressReporter(sent, loop=asyncio.get_running_loop(), interval=INTERVAL)
    await asyncio.to_thread(reporter.record, 0.5, None)
    await asyncio.to_thread(reporter.record, 0.75, "from a thread")
    await reporter.flush()
    assert sent.reports[0] == (0.5, None)
    assert sent.reports[-1] == (0.75, "from a thread")


async def test_without_a_loop_the_reporter_sends_on_its_own_until_closed() -> None:
    sent = Sent()
    reporter = RunProgressReporter(sent, interval=60)
    reporter.record(0.25, "first")
    await wait_until(lambda: sent.reports == [(0.25, "first")], within=5, what="the first")
    reporter.record(0.5, "held for a minute")
    await asyncio.to_thread(reporter.close_sync)
    assert sent.reports == [(0.25, "first"), (0.5, "held for a minute")]


@pytest.mark.parametrize(
    ("fraction", "message", "named"),
    [
        (1.5, None, "fraction"),
        (-0.01, None, "fraction"),
        (math.nan, None, "fraction"),
        ("half", None, "fraction"),
        (True, None, "fraction"),
        (0.5, "x" * 1001, "message"),
        (0.5, 42, "message"),
    ],
)
def test_bad_values_are_refused_at_the_call(fraction: object, message: object, named: str) -> None:
    sent = Sent()
    reporter = RunProgressReporter(sent)
    with pytest.raises(ValueError, match=named):
        reporter.record(fraction, message)  # type: ignore[arg-type]
    assert sent.reports == []
