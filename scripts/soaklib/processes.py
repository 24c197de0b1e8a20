"""The soak's worker processes: a fleet of ``queue-worker`` processes whose every start is a
new incarnation with its own workerId, journal and log. The coordinator is a
:class:`devharness.processes.ServeProcess`, Azurite a :class:`devharness.azurite.AzuriteProcess`.

A slot never has two live incarnations: every restart of a slot (the chaos's kill and restart,
the restart of a slot whose worker died unasked, the stop at the end) holds the slot's lock,
ends the incarnation it replaces and sees it reaped before it starts the next one. Every wait
on a process is bounded (:func:`devharness.processes.end_processes`); an incarnation records
when it was started and reaped, whether it had to be SIGKILLed, and so whether it outlived
everything (``ended`` still ``None``), for :func:`soaklib.checks.check_workers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devharness.processes import KILL_WAIT, end_processes, spawn

PROVISIONER_ID = "soak-prov"
WORKER_TYPE = "soak-wt"
WORKER_GROUP = "soak"
GRACE_PERIOD = 2.0
"""``queue-worker --grace-period``: how long a SIGTERMed worker lets handlers finish."""
STOP_WAIT = 45.0
"""How long a SIGTERMed process may take to exit before it is SIGKILLed (the worker's grace
period plus its 30 s report timeout, with room)."""


@dataclass(kw_only=True)
class Incarnation:
    """One worker process: ``worker_id`` is unique to it. ``started`` is the epoch time just
    before it was spawned, ``ended`` the epoch time it was seen reaped (``None``: it never
    was, it outlived even SIGKILL); ``end`` how it ended (``sigkill``, ``sigterm``,
    ``stopped`` at the end of the soak, or ``exited <code>`` when nobody asked it to);
    ``forced`` that it outlived its SIGTERM's wait and was SIGKILLed."""

    slot: int
    worker_id: str
    started: float
    journal: Path
    log: Path
    ended: float | None = None
    end: str = ""
    forced: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Restart:
    """What :meth:`Fleet.kill_and_restart` did: ``ended`` was ended and ``started`` replaced
    it (``None`` when the fleet is stopping, or ``ended`` outlived SIGKILL and a second
    incarnation beside it would be two workers in one slot)."""

    ended: Incarnation
    started: Incarnation | None


def worker_command(
    *, root_urls: Sequence[str], capacity: int, isolation: str = "none"
) -> Callable[[str], list[str]]:
    """The ``queue-worker`` command line of the incarnation with a given workerId.

    :param root_urls: the coordinator's (its replicas').
    :param capacity: runs each worker holds at once.
    :param isolation: ``--isolation``.
    """
    executable = Path(sys.executable).parent / "queue-worker"
    prefix = [str(executable)] if executable.exists() else [sys.executable, "-m", "worker_sdk.cli"]

    def command(worker_id: str) -> list[str]:
        return [
            *prefix,
            *(part for root_url in root_urls for part in ("--root-url", root_url)),
            *("--provisioner-id", PROVISIONER_ID),
            *("--worker-type", WORKER_TYPE, "--worker-group", WORKER_GROUP),
            *("--worker-id", worker_id, "--capacity", str(capacity)),
            *("--grace-period", str(GRACE_PERIOD), "--isolation", isolation),
            "soaklib.handler:handle",
        ]

    return command


@dataclass(kw_only=True)
class Fleet:
    """Worker slots, each running one incarnation at a time.

    :param command: the command line of the incarnation with a given workerId
        (:func:`worker_command`).
    :param workdir: journals go to ``journals/``, logs to ``workers/`` under it.
    :param env: the processes' environment (each also gets ``SOAK_JOURNAL`` and
        ``SOAK_WORKER_ID``).
    :param stop_wait: how long a signalled incarnation may take to exit before it is
        SIGKILLed.
    """

    command: Callable[[str], Sequence[str]]
    workdir: Path
    env: dict[str, str]
    stop_wait: float = STOP_WAIT
    incarnations: list[Incarnation] = field(default_factory=list)
    _current: dict[int, tuple[Incarnation, asyncio.subprocess.Process]] = field(
        default_factory=dict
    )
    _spawned: list[tuple[Incarnation, asyncio.subprocess.Process]] = field(default_factory=list)
    _locks: defaultdict[int, asyncio.Lock] = field(
        default_factory=lambda: defaultdict(asyncio.Lock)
    )
    _watchers: set[asyncio.Task[None]] = field(default_factory=set)
    _stopping: bool = False

    async def start(self, slot: int) -> Incarnation:
        """Start ``slot``'s next incarnation; ``RuntimeError`` if its current one still runs
        or the fleet is stopping."""
        async with self._locks[slot]:
            return await self._start(slot)

    async def _start(self, slot: int) -> Incarnation:
        # The caller holds the slot's lock.
        if self._stopping:
            raise RuntimeError(f"the fleet is stopping: slot {slot} is not started again")
        if slot in self._current:
            previous, process = self._current[slot]
            if process.returncode is None:
                raise RuntimeError(f"slot {slot}: {previous.worker_id} is still running")
        number = sum(1 for known in self.incarnations if known.slot == slot)
        worker_id = f"soak-w{slot}-{number}"
        incarnation = Incarnation(
            slot=slot,
            worker_id=worker_id,
            started=time.time(),
            journal=self.workdir / "journals" / f"{worker_id}.jsonl",
            log=self.workdir / "workers" / f"{worker_id}.log",
        )
        env = {**self.env, "SOAK_JOURNAL": str(incarnation.journal), "SOAK_WORKER_ID": worker_id}
        process = await spawn(self.command(worker_id), env=env, log=incarnation.log)
        self.incarnations.append(incarnation)
        self._spawned.append((incarnation, process))
        self._current[slot] = (incarnation, process)
        watcher = asyncio.create_task(self._watch(incarnation, process))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        return incarnation

    async def _watch(self, incarnation: Incarnation, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        _reaped(incarnation, process)
        if not incarnation.end:
            incarnation.end = f"exited {code}"

    async def _end(
        self,
        incarnation: Incarnation,
        process: asyncio.subprocess.Process,
        signum: int,
        *,
        end: str,
    ) -> None:
        incarnation.end = end
        forced = await end_processes([process], signum=signum, wait=self.stop_wait)
        incarnation.forced = incarnation.forced or bool(forced)
        _reaped(incarnation, process)

    def _free(self, slot: int) -> bool:
        """Nobody is restarting or stopping ``slot`` right now."""
        return not self._locks[slot].locked()

    def alive_slots(self) -> list[int]:
        """Slots whose incarnation runs and that nobody is restarting."""
        return [
            slot
            for slot, (_, process) in self._current.items()
            if process.returncode is None and self._free(slot)
        ]

    def live(self) -> dict[str, int]:
        """workerId -> pid of every incarnation still running."""
        return {
            incarnation.worker_id: process.pid
            for incarnation, process in self._current.values()
            if process.returncode is None
        }

    def busy_slots(self) -> list[int]:
        """Alive slots whose journal shows a handler running right now."""
        busy = []
        for slot in self.alive_slots():
            incarnation, _ = self._current[slot]
            with contextlib.suppress(OSError):
                text = incarnation.journal.read_text(errors="replace")
                if text.count('"e": "start"') > text.count('"e": "end"'):
                    busy.append(slot)
        return busy

    def dead_unasked(self) -> list[int]:
        """Slots whose process exited without being told to and that nobody is restarting."""
        return [slot for slot in self._current if self._exited_unasked(slot) and self._free(slot)]

    def _exited_unasked(self, slot: int) -> bool:
        incarnation, process = self._current[slot]
        return process.returncode is not None and incarnation.end.startswith("exited")

    async def kill_and_restart(
        self, slot: int, signum: int, *, end: str, down: float
    ) -> Restart | None:
        """End ``slot``'s incarnation with ``signum``, leave the slot empty for ``down``
        seconds, start its next incarnation. Nothing (``None``) if the incarnation is no
        longer running once the slot's lock is held: another restart came first, or it died
        unasked (:meth:`restart_dead`'s).

        :param end: what the ended incarnation's ``end`` says (``sigkill``, ``sigterm``).
        """
        async with self._locks[slot]:
            incarnation, process = self._current[slot]
            if process.returncode is not None:
                return None
            await self._end(incarnation, process, signum, end=end)
            if process.returncode is not None:
                await asyncio.sleep(down)
            reaped = process.returncode is not None
            started = await self._start(slot) if reaped and not self._stopping else None
            return Restart(ended=incarnation, started=started)

    async def restart_dead(self, slot: int) -> Incarnation | None:
        """Start ``slot``'s next incarnation if its current one exited unasked (checked once
        the slot's lock is held); else, or if the fleet is stopping, nothing."""
        async with self._locks[slot]:
            if self._stopping or not self._exited_unasked(slot):
                return None
            return await self._start(slot)

    async def stop_all(self) -> None:
        """SIGTERM every incarnation still running (SIGKILL after ``stop_wait``), each slot
        under its lock once any restart of it is over, then any process this fleet ever
        started that still runs; no slot is started again afterwards. Bounded: whatever
        outlives SIGKILL is left with ``ended`` ``None``."""
        self._stopping = True

        async def stop(slot: int) -> None:
            async with self._locks[slot]:
                incarnation, process = self._current[slot]
                if process.returncode is None:
                    await self._end(incarnation, process, signal.SIGTERM, end="stopped")

        # A restart holding a lock ends within stop_wait + KILL_WAIT and its down time.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2 * (self.stop_wait + KILL_WAIT)):
                await asyncio.gather(*(stop(slot) for slot in list(self._current)))
        # Only an orphan (no longer its slot's current incarnation, never signalled) or a
        # process whose stop above timed out is still running here.
        await asyncio.gather(
            *(
                self._end(incarnation, process, signal.SIGTERM, end=incarnation.end or "orphan")
                for incarnation, process in self._spawned
                if process.returncode is None
            )
        )
        if self._watchers:
            _, stuck = await asyncio.wait(set(self._watchers), timeout=KILL_WAIT)
            for watcher in stuck:
                watcher.cancel()


def _reaped(incarnation: Incarnation, process: asyncio.subprocess.Process) -> None:
    """Record when ``incarnation``'s exit was first seen, once its process is reaped."""
    if process.returncode is not None and incarnation.ended is None:
        incarnation.ended = time.time()
