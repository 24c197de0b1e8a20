"""Pending time under load, for every path alike: how long a job waits from the producer's
enqueue call to its handler's start, at 50 % and 80 % of the rate the path reached at full
load in the same run.

The producer sends open loop at the load's rate (every :data:`TICK` the jobs then due,
stamped with their send time) for ``Settings.warmup`` seconds, not measured (an SDK worker
that went idle while the queue drained has backed off: the first passes that find work end
that), then ``Settings.latency_duration`` seconds; the handlers note
their starts (:mod:`benchlib.noop`); once every job sent has started, or the drain time has
passed, the pending times of the jobs sent give p50/p95/p99. A job that had not started when
the drain time ran out counts as pending until then: a load the path cannot keep up with
gives lower bounds (printed with ``≥``) rather than the figures of the jobs that got through.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

from benchlib.common import LoadLatency, Row, Settings
from devharness.waiting import WaitTimeout, wait_until

LOADS = (50, 80)
"""The loads, in percent of a path's measured maximum rate."""
TICK = 0.01
"""How often the open-loop producer sends the jobs due."""

Send = Callable[[float, int], Awaitable[object]]
"""Send ``count`` jobs stamped with the send time ``sent_at`` (epoch seconds)."""


def read_starts(directory: Path) -> list[tuple[float, float]]:
    """Every ``(sent at, started at)`` the handlers noted in ``directory``."""
    starts = []
    for path in directory.glob("starts-*"):
        for line in path.read_text().splitlines():
            sent, _, started = line.partition(" ")
            if started:
                starts.append((float(sent), float(started)))
    return starts


def started_between(starts: list[tuple[float, float]], begin: float, end: float) -> int:
    """How many jobs started in ``[begin, end)`` (epoch seconds)."""
    return sum(1 for _, started in starts if begin <= started < end)


def pending_between(starts: list[tuple[float, float]], begin: float, end: float) -> list[float]:
    """The pending seconds of the jobs sent in ``[begin, end]``."""
    return [started - sent for sent, started in starts if begin <= sent <= end]


def _stamp(sent_at: float) -> str:
    """A send time as the handlers write it (:func:`benchlib.noop.note_start`)."""
    return f"{sent_at:.6f}"


async def open_loop(send: Send, rate: float, duration: float) -> tuple[float, float, Counter[str]]:
    """Send at ``rate`` jobs a second for ``duration`` seconds; the first and last send time
    (epoch seconds) and how many jobs were sent with each send time (:func:`_stamp`). Sends
    overlap when one takes longer than a tick."""
    begin = time.monotonic()
    first = time.time()
    sent: Counter[str] = Counter()
    total = 0
    sending: set[asyncio.Future[object]] = set()
    while (elapsed := time.monotonic() - begin) < duration:
        due = int(rate * elapsed) - total
        if due > 0:
            total += due
            sent_at = time.time()
            sent[_stamp(sent_at)] += due
            task = asyncio.ensure_future(send(sent_at, due))
            sending.add(task)
            task.add_done_callback(sending.discard)
        await asyncio.sleep(TICK)
    last = time.time()
    if sending:
        await asyncio.wait(sending)
    return first, last, sent


def pending_until(
    starts: list[tuple[float, float]], sent: Counter[str], begin: float, end: float
) -> tuple[list[float], int]:
    """The pending seconds of the jobs ``sent`` (counts by send time) in ``[begin, end]``,
    those that have not started counted as pending until ``end``; and how many had not."""
    started: Counter[str] = Counter(_stamp(sent_at) for sent_at, _ in starts)
    pending = pending_between(starts, begin, end)
    unstarted = 0
    for stamp, count in sent.items():
        sent_at = float(stamp)
        missing = count - started[stamp]
        if missing > 0 and sent_at >= begin:
            unstarted += missing
            pending += [end - sent_at] * missing
    return pending, unstarted


async def under_load(settings: Settings, row: Row, send: Send, starts_dir: Path) -> None:
    """Add the row's pending time at each of :data:`LOADS` of its measured rate (the row's
    workers still running, the queue drained)."""
    if not row.rate:
        return
    for load in LOADS:
        rate = row.rate * load / 100
        first, last, sent = await open_loop(send, rate, settings.warmup + settings.latency_duration)

        def all_started(
            begin: float = first, end: float = last, expected: int = sent.total()
        ) -> bool:
            return len(pending_between(read_starts(starts_dir), begin, end)) >= expected

        with contextlib.suppress(WaitTimeout):  # what has not started counts as pending
            await wait_until(all_started, within=settings.drain, what="the jobs", interval=0.2)
        values, unstarted = pending_until(
            read_starts(starts_dir), sent, first + settings.warmup, time.time()
        )
        if unstarted:
            row.notes.append(
                f"at {load}%: {unstarted} of the {len(values)} jobs sent after the warm-up had "
                "not started when the drain time ran out; counted as pending until then, so "
                "the figures are lower bounds"
            )
        row.latency.append(LoadLatency.of(load, rate, values, unstarted=unstarted))
