"""The soak's worker slots (issue 24): restarts of one slot are exclusive, so a slot never has
two live incarnations, and stopping the fleet is bounded and leaves no process behind.

The soak that never finished had slot 1 running ``soak-w1-1`` and ``soak-w1-2`` at
once: two restarts of the slot raced, the later one replaced the earlier one's process in
the fleet's books, and the orphan ran on, unsignalled, while the fleet waited for it forever.
These tests drive :class:`soaklib.processes.Fleet`'s restart paths directly, concurrently on
one slot, with real short-lived child processes in place of ``queue-worker``, and count the
live processes of each slot from ``/proc``, not from the fleet's books.
"""

from __future__ import annotations

import asyncio
import importlib
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devharness.processes import KILL_WAIT, SCRIPTS, child_env, processes_mentioning
from devharness.waiting import wait_until

CHILD = """
import signal, sys, time
linger, life = float(sys.argv[1]), float(sys.argv[2])
def term(signum, frame):
    print("got SIGTERM", flush=True)
    if linger < 0:
        return  # ignores SIGTERM
    time.sleep(linger)  # a graceful shutdown that takes a while
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("started", flush=True)
deadline = time.monotonic() + life
while time.monotonic() < deadline:  # bounded: exits by itself ("unasked") after ``life``
    time.sleep(0.05)
sys.exit(3)
"""
"""A stand-in worker: ``linger`` seconds from SIGTERM to exit (negative: never), exits with
3 after ``life`` seconds if nobody ends it first."""

LIFE = 60.0


def _soaklib(module: str) -> Any:
    scripts = str(SCRIPTS)
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    return importlib.import_module(f"soaklib.{module}")


def _command(behaviour: dict[str, tuple[float, float]]) -> Callable[[str], list[str]]:
    """Each incarnation runs :data:`CHILD` with ``behaviour[workerId]`` as (linger, life);
    others linger 0.1 s and live :data:`LIFE` seconds."""

    def command(worker_id: str) -> list[str]:
        linger, life = behaviour.get(worker_id, (0.1, LIFE))
        return [sys.executable, "-c", CHILD, str(linger), str(life)]

    return command


def _fleet(tmp_path: Path, behaviour: dict[str, tuple[float, float]], stop_wait: float) -> Any:
    processes = _soaklib("processes")
    return processes.Fleet(
        command=_command(behaviour), workdir=tmp_path, env=child_env(), stop_wait=stop_wait
    )


def _running(tmp_path: Path) -> list[str]:
    """The workerIds of the live processes started for this test (their ``SOAK_JOURNAL``
    lies under ``tmp_path``), read from ``/proc``."""
    names = []
    for pid in processes_mentioning(str(tmp_path / "journals")):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        names += [entry[15:].decode() for entry in environ if entry.startswith(b"SOAK_WORKER_ID=")]
    return sorted(names)


def _slot_zero(tmp_path: Path) -> list[str]:
    return [name for name in _running(tmp_path) if name.startswith("soak-w0-")]


def _kinds(fleet: Any) -> list[str]:
    checks = _soaklib("checks")
    return sorted(
        violation.kind for violation in checks.check_workers(fleet.incarnations).violations
    )


async def _stop_and_check_gone(fleet: Any, tmp_path: Path) -> None:
    began = time.monotonic()
    await fleet.stop_all()
    assert time.monotonic() - began < fleet.stop_wait + KILL_WAIT
    assert _running(tmp_path) == []
    assert all(incarnation.ended is not None for incarnation in fleet.incarnations)


async def test_kill_and_restart_racing_the_dead_slot_restart_leaves_one_worker(
    tmp_path: Path,
) -> None:
    # Slot 0's first worker dies by itself; the monitor restarts the dead slot while a chaos
    # kill-and-restart of it (chosen while it still looked alive) runs.
    fleet = _fleet(tmp_path, {"soak-w0-0": (0.1, 0.3)}, stop_wait=5.0)
    try:
        await fleet.start(0)
        await fleet.start(1)
        await wait_until(lambda: fleet.dead_unasked() == [0], within=30, what="w0-0 to exit")
        dead, chaos = await asyncio.gather(
            fleet.restart_dead(0),
            fleet.kill_and_restart(0, signal.SIGKILL, end="sigkill", down=0.3),
        )
        assert len(_slot_zero(tmp_path)) == 1, _running(tmp_path)
        assert dead is not None and dead.worker_id == "soak-w0-1"
        # The kill came second: it ended the monitor's new worker before starting its own.
        assert chaos is not None and chaos.ended is dead
        assert chaos.started is not None and chaos.started.worker_id == "soak-w0-2"
        assert _running(tmp_path) == ["soak-w0-2", "soak-w1-0"]
        assert fleet.alive_slots() == [0, 1]
    finally:
        await _stop_and_check_gone(fleet, tmp_path)
    assert _kinds(fleet) == ["worker-crash"]  # w0-0's exit 3, and nothing else


async def test_a_second_kill_while_the_first_waits_for_its_worker_leaves_one_worker(
    tmp_path: Path,
) -> None:
    # w0-0 takes a second to exit after SIGTERM; a second kill-and-restart of the slot and a
    # dead-slot restart arrive while the first waits for it.
    fleet = _fleet(tmp_path, {"soak-w0-0": (1.0, LIFE)}, stop_wait=5.0)
    try:
        await fleet.start(0)
        log = tmp_path / "workers" / "soak-w0-0.log"
        await wait_until(lambda: "started" in log.read_text(), within=30, what="w0-0 to start")
        first = asyncio.create_task(
            fleet.kill_and_restart(0, signal.SIGTERM, end="sigterm", down=0.1)
        )
        await wait_until(lambda: "got SIGTERM" in log.read_text(), within=30, what="SIGTERM")
        second, dead = await asyncio.gather(
            fleet.kill_and_restart(0, signal.SIGKILL, end="sigkill", down=0.3),
            fleet.restart_dead(0),
        )
        restart = await first
        assert len(_slot_zero(tmp_path)) == 1, _running(tmp_path)
        assert restart is not None and restart.ended.worker_id == "soak-w0-0"
        assert dead is None
        assert second is not None and second.ended is restart.started
        assert second.started is not None
        assert _running(tmp_path) == [second.started.worker_id]
    finally:
        await _stop_and_check_gone(fleet, tmp_path)
    assert _kinds(fleet) == []


async def test_stop_all_kills_what_outlives_sigterm_and_reports_it(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, {"soak-w0-0": (-1.0, LIFE)}, stop_wait=1.0)
    try:
        await fleet.start(0)
        await fleet.start(1)
        log = tmp_path / "workers" / "soak-w0-0.log"
        await wait_until(lambda: "started" in log.read_text(), within=30, what="w0-0 to start")
    finally:
        await _stop_and_check_gone(fleet, tmp_path)
    assert "got SIGTERM" in log.read_text()
    assert [incarnation.forced for incarnation in fleet.incarnations] == [True, False]
    assert _kinds(fleet) == ["stuck-process"]
