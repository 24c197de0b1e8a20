"""``serve`` with ``COORDINATOR_PROCESSES=2``: two serve processes on one port of a real
PostgreSQL store, supervised by the process that was started (real processes, real sockets).

Both listen on the port and serve as replicas (tasks created through one connection are
claimed through others, each exactly once); one killed is started again while the other
serves; SIGTERM stops them all and leaves none behind; on SQLite the setting is refused with
one line and exit status 2.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import psutil

from devharness.processes import child_env
from devharness.waiting import wait_until
from tests.fixtures.coordinator import WORKER, CoordinatorProcess, RunningCoordinator


def listeners(supervisor: psutil.Process, port: int) -> set[int]:
    """The pids of the supervisor's children listening on ``port``."""
    pids = set()
    for child in supervisor.children():
        try:
            sockets = child.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        if any(s.status == psutil.CONN_LISTEN and s.laddr.port == port for s in sockets):
            pids.add(child.pid)
    return pids


async def answers_on_new_connections(c: RunningCoordinator, times: int) -> None:
    """``ping`` on a new connection each time, each answered 200."""
    for _ in range(times):
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as s, s.get(f"{c.api}/ping") as r:
            assert r.status == 200


async def test_two_processes_serve_one_port_restart_and_stop_together(
    postgres_schema_url: str, coordinator_process: Callable[..., CoordinatorProcess]
) -> None:
    process = coordinator_process(store_url=postgres_schema_url, processes=2)
    c = await process.start()
    assert process.process is not None
    supervisor = psutil.Process(process.process.pid)
    port = c.config.port

    async def both_listen() -> bool:
        return len(listeners(supervisor, port)) == 2

    await wait_until(both_listen, within=30, what="both serve processes listening")
    assert not [s for s in supervisor.net_connections("tcp") if s.status == psutil.CONN_LISTEN]

    # replicas of one store: what one connection creates, others claim, each run once
    task_ids = await c.create_many(20)
    claimed: list[str] = []
    while len(claimed) < len(task_ids):
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            fresh = RunningCoordinator(url=c.url, config=c.config, session=s)
            answer = await fresh.call(
                "POST",
                "/claim-work/test-prov/test-wt",
                {**WORKER, "tasks": 3},
            )
            assert answer.status == 200, answer.body
            claimed += [claim["status"]["taskId"] for claim in answer.body["tasks"]]
    assert sorted(claimed) == sorted(task_ids)

    before = listeners(supervisor, port)
    killed = min(before)
    psutil.Process(killed).send_signal(signal.SIGKILL)
    await answers_on_new_connections(c, 10)  # the other one serves meanwhile

    async def restarted() -> bool:
        now = listeners(supervisor, port)
        return len(now) == 2 and killed not in now

    await wait_until(restarted, within=30, what="the killed process started again")
    children = supervisor.children(recursive=True)
    await process.terminate()
    assert process.process.returncode == 0
    _, alive = psutil.wait_procs(children, timeout=10)
    assert alive == [], f"left running: {alive}"
    log = process.log_path.read_text()
    assert f"serve process 1 exited pid={killed} exitCode=-9" in log or (
        f"serve process 0 exited pid={killed} exitCode=-9" in log
    )
    assert "Traceback" not in log


def test_several_processes_need_postgresql(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "serve", "--processes", "2"],
        env=child_env(
            COORDINATOR_DATA_DIR=str(tmp_path),
            COORDINATOR_STORE_URL=f"sqlite:///{tmp_path / 'db.sqlite'}",
            COORDINATOR_AUTH="false",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "COORDINATOR_PROCESSES=2 needs a PostgreSQL store" in done.stderr
