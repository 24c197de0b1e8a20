"""The soak's worker processes: a fleet of ``queue-worker`` processes whose every start is a
new incarnation with its own workerId, journal and log. The coordinator is a
:class:`devharness.processes.ServeProcess`, Azurite a :class:`devharness.azurite.AzuriteProcess`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from devharness.processes import end_processes, spawn

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
    """One worker process: ``worker_id`` is unique to it. ``ended`` is the epoch time its exit
    was observed; ``end`` how it ended (``sigkill``, ``sigterm``, ``stopped`` at the end of
    the soak, or ``exited <code>`` when nobody asked it to)."""

    slot: int
    worker_id: str
    started: float
    journal: Path
    log: Path
    ended: float | None = None
    end: str = ""


@dataclass(kw_only=True)
class Fleet:
    """K worker slots, each running one incarnation at a time."""

    root_url: str
    workdir: Path
    capacity: int
    env: dict[str, str]
    incarnations: list[Incarnation] = field(default_factory=list)
    _processes: dict[int, tuple[Incarnation, asyncio.subprocess.Process]] = field(
        default_factory=dict
    )
    _watchers: set[asyncio.Task[None]] = field(default_factory=set)

    def command(self, worker_id: str) -> list[str]:
        executable = Path(sys.executable).parent / "queue-worker"
        prefix = (
            [str(executable)] if executable.exists() else [sys.executable, "-m", "worker_sdk.cli"]
        )
        return [
            *prefix,
            "--root-url",
            self.root_url,
            "--provisioner-id",
            PROVISIONER_ID,
            "--worker-type",
            WORKER_TYPE,
            "--worker-group",
            WORKER_GROUP,
            "--worker-id",
            worker_id,
            "--capacity",
            str(self.capacity),
            "--grace-period",
            str(GRACE_PERIOD),
            "soaklib.handler:handle",
        ]

    async def start(self, slot: int) -> Incarnation:
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
        self._processes[slot] = (incarnation, process)
        watcher = asyncio.create_task(self._watch(incarnation, process))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        return incarnation

    async def _watch(self, incarnation: Incarnation, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        incarnation.ended = time.time()
        if not incarnation.end:
            incarnation.end = f"exited {code}"

    def alive_slots(self) -> list[int]:
        return [
            slot for slot, (_, process) in self._processes.items() if process.returncode is None
        ]

    def busy_slots(self) -> list[int]:
        """Live slots whose journal shows a handler running right now."""
        busy = []
        for slot in self.alive_slots():
            incarnation, _ = self._processes[slot]
            with contextlib.suppress(OSError):
                text = incarnation.journal.read_text(errors="replace")
                if text.count('"e": "start"') > text.count('"e": "end"'):
                    busy.append(slot)
        return busy

    def dead_unasked(self) -> list[int]:
        """Slots whose process exited without being told to."""
        return [
            slot
            for slot, (incarnation, process) in self._processes.items()
            if process.returncode is not None and incarnation.end.startswith("exited")
        ]

    async def kill(self, slot: int, signum: int, *, end: str) -> Incarnation:
        incarnation, process = self._processes[slot]
        incarnation.end = end
        await end_processes([process], signum=signum, wait=STOP_WAIT)
        await asyncio.sleep(0)  # let the watcher record the exit time
        if incarnation.ended is None:
            incarnation.ended = time.time()
        return incarnation

    async def stop_all(self) -> None:
        await asyncio.gather(
            *(
                self.kill(slot, signal.SIGTERM, end="stopped")
                for slot, (_, process) in list(self._processes.items())
                if process.returncode is None
            )
        )
        if self._watchers:
            await asyncio.wait(set(self._watchers))
