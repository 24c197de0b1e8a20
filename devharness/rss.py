"""The resident memory of the children of a long run, sampled every few seconds: what the soak
reports after warm-up and at the end, and what it holds against ``--max-rss-growth``.

A curve is one process (a name and a pid: a restarted coordinator or a new worker incarnation
starts a new curve) with its descendants (``queue-worker --isolation process``'s fork server
and pool), so the figure is what the operator's machine pays for that process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import psutil

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Growth:
    """A curve's RSS ``warm`` (its first sample at or after the warm-up) and ``end`` (its last
    sample), in bytes."""

    warm: int
    end: int

    @property
    def percent(self) -> float:
        return (self.end - self.warm) * 100 / self.warm if self.warm else 0.0


@dataclass(kw_only=True)
class Curve:
    """One process's RSS samples: ``(seconds since it was first sampled, bytes)``."""

    name: str
    pid: int
    first: float
    samples: list[tuple[float, int]] = field(default_factory=list)

    @property
    def lived(self) -> float:
        return self.samples[-1][0] if self.samples else 0.0

    def growth(self, warm_up: float) -> Growth | None:
        """From the first sample at or after ``warm_up`` seconds to the last one; ``None`` if
        the process was not sampled twice after its warm-up."""
        after = [rss for at, rss in self.samples if at >= warm_up]
        if len(after) < 2:
            return None
        return Growth(warm=after[0], end=after[-1])

    def every(self, seconds: float) -> list[float]:
        """The RSS in MiB about every ``seconds`` (for a curve in a report)."""
        marks: list[float] = []
        due = 0.0
        for at, rss in self.samples:
            if at >= due:
                marks.append(rss / MIB)
                due = at + seconds
        return marks


def tree_rss(pid: int) -> int | None:
    """The RSS of ``pid`` and its descendants, in bytes; ``None`` if it is gone."""
    try:
        process = psutil.Process(pid)
        total: int = process.memory_info().rss
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += child.memory_info().rss
    except psutil.Error:
        return None
    return total


class RssRecorder:
    """Samples the processes ``processes()`` names (name -> pid) every ``interval`` seconds
    while :meth:`run` runs.

    :param read: a pid's RSS in bytes, ``None`` once it is gone (tests inject their own).
    :param clock: monotonic seconds.
    """

    def __init__(
        self,
        processes: Callable[[], Mapping[str, int]],
        *,
        interval: float = 5.0,
        read: Callable[[int], int | None] = tree_rss,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._processes = processes
        self._interval = interval
        self._read = read
        self._clock = clock
        self._curves: dict[tuple[str, int], Curve] = {}

    @property
    def curves(self) -> list[Curve]:
        return list(self._curves.values())

    def sample(self) -> None:
        now = self._clock()
        for name, pid in self._processes().items():
            rss = self._read(pid)
            if rss is None:
                continue
            curve = self._curves.get((name, pid))
            if curve is None:
                curve = self._curves[name, pid] = Curve(name=name, pid=pid, first=now)
            curve.samples.append((now - curve.first, rss))

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self._interval)

    def longest(self, prefix: str) -> Curve | None:
        """The longest-lived curve whose name starts with ``prefix``."""
        named = [curve for curve in self._curves.values() if curve.name.startswith(prefix)]
        return max(named, key=lambda curve: curve.lived, default=None)

    def largest_growth(self, prefix: str, warm_up: float) -> tuple[Curve, Growth] | None:
        """Among the curves named ``prefix...`` that lived past ``warm_up``, the one whose RSS
        grew most (in percent) after it."""
        grown = [
            (curve, growth)
            for curve in self._curves.values()
            if curve.name.startswith(prefix) and (growth := curve.growth(warm_up)) is not None
        ]
        return max(grown, key=lambda pair: pair[1].percent, default=None)
