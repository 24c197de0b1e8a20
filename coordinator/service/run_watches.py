"""RunWatches: watchRuns' long polls, for one coordinator process.

A worker names the runs it is running and waits to hear that one of them is no longer
running (cancelled, resolved by someone else, its claim expired), so that it can stop the
handler within moments instead of at its next reclaim. One registry per process serves every
waiting call: each change this process writes (:class:`~coordinator.service.transitions.
Transitions` tells of every run whose state it changed) wakes the calls watching that run at
once, and while any call waits, one read of all the runs watched, every
:data:`WATCH_POLL_S`, finds what other replicas sharing the store changed. So the cost is a
dictionary look-up per change and one coalesced read per poll interval, however many workers
watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence

from coordinator.domain.records import Run

log = logging.getLogger(__name__)

RunKey = tuple[str, int]
"""A run: ``(taskId, runId)``."""

WATCH_POLL_S = 0.5
"""How often the runs watched are read from the store while any call waits: how late a
change made by another replica may be seen."""


class _Watch:
    """One waiting call: the runs found stopped, and whether its client went away."""

    __slots__ = ("disconnected", "stopped", "woken")

    def __init__(self, disconnected: Callable[[], bool]) -> None:
        self.disconnected = disconnected
        self.stopped: dict[RunKey, Run] = {}
        self.woken = asyncio.Event()

    def stop(self, key: RunKey, run: Run) -> None:
        self.stopped.setdefault(key, run)
        self.woken.set()


class RunWatches:
    """The watches of running runs of one coordinator process; see the module docs.

    :param read: the runs named as stored (the store's :meth:`runs_of
        <coordinator.store.contract.tasks.TaskStore.runs_of>`).
    :param poll_s: how often the watched runs are read while any call waits.
    """

    def __init__(
        self,
        *,
        read: Callable[[Sequence[RunKey]], Awaitable[dict[RunKey, Run]]],
        poll_s: float = WATCH_POLL_S,
    ) -> None:
        self._read = read
        self._poll_s = poll_s
        self._watching: dict[RunKey, set[_Watch]] = {}
        self._poller: asyncio.Task[None] | None = None

    @property
    def watched(self) -> int:
        """How many runs are watched now."""
        return len(self._watching)

    def runs_changed(self, task_id: str, runs: Iterable[Run]) -> None:
        """This process wrote ``runs`` of task ``task_id`` with a new state: wake the calls
        watching any of them that is no longer running."""
        if not self._watching:
            return
        for run in runs:
            if run.state == "running":
                continue
            for watch in self._watching.get((task_id, run.run_id), ()):
                watch.stop((task_id, run.run_id), run)

    @contextlib.asynccontextmanager
    async def watching(
        self, runs: Sequence[RunKey], *, disconnected: Callable[[], bool]
    ) -> AsyncIterator[_WatchHandle]:
        """Watch ``runs`` while inside: registered before the caller's first read of them,
        so that no change between that read and the wait is missed.

        :param disconnected: true once the caller's client went away: the wait then ends.
        """
        watch = _Watch(disconnected)
        for key in runs:
            self._watching.setdefault(key, set()).add(watch)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="run watches poll")
        try:
            yield _WatchHandle(watch)
        finally:
            for key in runs:
                watches = self._watching.get(key)
                if watches is not None:
                    watches.discard(watch)
                    if not watches:
                        del self._watching[key]

    async def _poll(self) -> None:
        """Read every watched run each :attr:`_poll_s` while any call waits, waking the calls
        watching a run that stopped; end the calls whose client went away."""
        while self._watching:
            await asyncio.sleep(self._poll_s)
            keys = list(self._watching)
            if not keys:
                return
            try:
                stored = await self._read(keys)
            except Exception as error:  # the next poll tries again; the waits go on
                log.warning("watched runs not read runs=%d error=%r", len(keys), error)
                continue
            for key, run in stored.items():
                if run.state != "running":
                    for watch in self._watching.get(key, ()):
                        watch.stop(key, run)
            for watches in list(self._watching.values()):
                for watch in watches:
                    if watch.disconnected():
                        watch.woken.set()

    async def aclose(self) -> None:
        """Stop the poll (shutdown; the calls still waiting end at their timeout)."""
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.wait({self._poller})


class _WatchHandle:
    """What :meth:`RunWatches.watching` gives its caller."""

    __slots__ = ("_watch",)

    def __init__(self, watch: _Watch) -> None:
        self._watch = watch

    def stop(self, key: RunKey, run: Run) -> None:
        """``run`` was found no longer running by the caller's own read."""
        self._watch.stop(key, run)

    async def stopped(self, timeout_s: float) -> dict[RunKey, Run]:
        """The runs found no longer running, as soon as there is one, or after ``timeout_s``
        (or when the client went away) the none found."""
        watch = self._watch
        if not watch.stopped and not watch.disconnected():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watch.woken.wait(), timeout_s)
        return dict(watch.stopped)
