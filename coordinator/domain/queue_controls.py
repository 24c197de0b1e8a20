"""An operator's controls of a task queue: a pause, limits (``maxRunning``,
``maxClaimsPerSecond``, ``maxRunningPerKey``: :mod:`coordinator.domain.concurrency_keys`), the
defaults its tasks get (:class:`QueueDefaults`), and the one rule that decides how many of
the runs a claim asks for it may have now (:func:`admit`).

The rate is a generic cell rate algorithm (GCRA): one number, :attr:`QueueControls.claims_tat_us`,
the theoretical arrival time of the next claim, which each admitted claim pushes one interval
(``1 / maxClaimsPerSecond``) further. Up to :func:`burst` claims may arrive at once, so the
rate over any window of ``T`` seconds stays within ``rate * T + burst``. Pure values and
rules; times are epoch milliseconds (the rate's arrival time microseconds, so that high rates
keep their precision).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from coordinator.domain.errors import Throttled
from coordinator.domain.records import to_iso
from coordinator.domain.task_queues import TaskQueue

PAUSED_RETRY_AFTER_MS = 5_000
"""When a claim refused because its queue is paused may try again: a pause lasts as long as
an operator wants, so this only paces the refused (a released hint comes back after it)."""

FULL_RETRY_AFTER_MS = 1_000
"""When a claim refused because ``maxRunning`` runs are running may try again."""

BURST_S = 0.5
"""How many seconds' worth of claims ``maxClaimsPerSecond`` lets through at once (at least
one claim): enough to absorb claims that come a little late, little beside the rate over
seconds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Pause:
    """A pause: since when, and why (the operator's words)."""

    since: int
    reason: str

    def to_api(self) -> dict[str, Any]:
        return {"since": to_iso(self.since), "reason": self.reason}


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """At most ``max_running`` runs running, at most ``max_claims_per_second`` claims a
    second, at most ``max_running_per_key`` runs of one concurrency key running; ``None`` is
    no limit."""

    max_running: int | None = None
    max_claims_per_second: float | None = None
    max_running_per_key: int | None = None

    @property
    def any(self) -> bool:
        return (
            self.max_running is not None
            or self.max_claims_per_second is not None
            or self.max_running_per_key is not None
        )

    @property
    def held_while_claiming(self) -> bool:
        """Whether a claim holds the queue's claim lock until it is written: the limits that
        count running runs do, so that no two claims count the same free room."""
        return self.max_running is not None or self.max_running_per_key is not None

    def to_api(self) -> dict[str, Any]:
        return {
            "maxRunning": self.max_running,
            "maxClaimsPerSecond": self.max_claims_per_second,
            "maxRunningPerKey": self.max_running_per_key,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueDefaults:
    """What the queue's tasks get when they say nothing else; ``None`` is the coordinator's.

    :param claim_timeout_s: how long a claim lasts, for tasks without a ``claimTimeout``.
    :param completed_ttl_s: how long a completed task is kept after it resolved, instead of
        ``COORDINATOR_COMPLETED_TTL``.
    :param failed_ttl_s: the same for failed and exception tasks (``COORDINATOR_FAILED_TTL``).
    """

    claim_timeout_s: int | None = None
    completed_ttl_s: int | None = None
    failed_ttl_s: int | None = None

    @property
    def any(self) -> bool:
        return any(value is not None for value in (*self.ttls_s, self.claim_timeout_s))

    @property
    def ttls_s(self) -> tuple[int | None, int | None]:
        """The completed and the failed TTL."""
        return self.completed_ttl_s, self.failed_ttl_s

    def to_api(self) -> dict[str, Any]:
        return {
            "claimTimeout": self.claim_timeout_s,
            "completedTTL": self.completed_ttl_s,
            "failedTTL": self.failed_ttl_s,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueControls:
    """What an operator set on one task queue; the default is none of it."""

    task_queue: TaskQueue
    pause: Pause | None = None
    limits: Limits = field(default_factory=Limits)
    defaults: QueueDefaults = field(default_factory=QueueDefaults)
    claims_tat_us: int = 0
    """The rate's theoretical arrival time of the next claim (epoch microseconds)."""

    @property
    def restricted(self) -> bool:
        """Whether claims of the queue go through :func:`admit` at all."""
        return self.pause is not None or self.limits.any

    def to_api(self) -> dict[str, Any]:
        """As pauseTaskQueue, resumeTaskQueue, setTaskQueueLimits and setTaskQueueDefaults
        answer: ``paused`` only while paused."""
        body: dict[str, Any] = {"taskQueueId": str(self.task_queue)}
        if self.pause is not None:
            body["paused"] = self.pause.to_api()
        body["limits"] = self.limits.to_api()
        body["defaults"] = self.defaults.to_api()
        return body

    def task_queue_fields(self) -> dict[str, Any]:
        """What getTaskQueue and listTaskQueues add to a task queue: ``paused`` while paused,
        ``limits`` while it has one, ``defaults`` while it has one."""
        body: dict[str, Any] = {}
        if self.pause is not None:
            body["paused"] = self.pause.to_api()
        if self.limits.any:
            body["limits"] = self.limits.to_api()
        if self.defaults.any:
            body["defaults"] = self.defaults.to_api()
        return body


@dataclass(frozen=True, kw_only=True, slots=True)
class Admission:
    """How many of the runs a claim asked for it may have now (``granted``), and the rate's
    new arrival time. When it may not have them all, ``refusal`` says why and
    ``retry_after_ms`` when to ask again for the others."""

    granted: int
    claims_tat_us: int
    retry_after_ms: int = 0
    refusal: str = ""
    by_rate: bool = False
    """The rate held claims back: none can be admitted before ``retry_after_ms`` (only the
    room of a claim that got nothing, given back, comes sooner)."""

    def refused(self) -> Throttled:
        """The error of the runs not let through."""
        return Throttled(self.refusal, retry_after_ms=self.retry_after_ms)


def burst(max_claims_per_second: float) -> int:
    """How many claims may arrive at once under the rate."""
    return max(1, math.ceil(max_claims_per_second * BURST_S))


def _interval_us(max_claims_per_second: float) -> float:
    return 1_000_000 / max_claims_per_second


def admit(controls: QueueControls, *, running: int, wanted: int, now: int) -> Admission:
    """How many of ``wanted`` runs of the queue a claim may have now, with ``running`` of its
    runs running (counted only when ``maxRunning`` is set)."""
    tat = controls.claims_tat_us
    name = controls.task_queue
    if controls.pause is not None:
        return Admission(
            granted=0,
            claims_tat_us=tat,
            retry_after_ms=PAUSED_RETRY_AFTER_MS,
            refusal=f"task queue {name} is paused since {to_iso(controls.pause.since)}: "
            f"{controls.pause.reason}",
        )
    granted, retry_after_ms, refusal, by_rate = wanted, 0, "", False
    limits = controls.limits
    if limits.max_running is not None and running + wanted > limits.max_running:
        granted = max(0, limits.max_running - running)
        retry_after_ms = FULL_RETRY_AFTER_MS
        refusal = (
            f"task queue {name} has {running} runs running, its maxRunning is {limits.max_running}"
        )
    if limits.max_claims_per_second is not None and granted > 0:
        interval = _interval_us(limits.max_claims_per_second)
        now_us = now * 1000
        due = max(tat, now_us)
        allowance = burst(limits.max_claims_per_second) * interval
        room = max(0, math.floor((now_us + allowance - due) / interval))
        if room < granted:
            granted = room
            next_room_us = due + room * interval - (allowance - interval) - now_us
            retry_after_ms = max(1, math.ceil(next_room_us / 1000))
            refusal = f"task queue {name} allows {limits.max_claims_per_second:g} claims a second"
            by_rate = True
        tat = round(due + granted * interval) if granted else tat
    return Admission(
        granted=granted,
        claims_tat_us=tat,
        retry_after_ms=retry_after_ms,
        refusal=refusal,
        by_rate=by_rate,
    )


def room_of(controls: QueueControls, unused: int) -> int:
    """How far (µs) the rate's arrival time moves back when ``unused`` admitted claims claimed
    nothing (a stale hint): they give their room back."""
    rate = controls.limits.max_claims_per_second
    if rate is None or unused <= 0:
        return 0
    return round(unused * _interval_us(rate))
