"""``./scripts/dev --demo`` as a new user runs it: the demo's tasks run, the coordinator (and
the example worker) stay up afterwards for the dashboard, a signed-out visitor may read a
task's log, and Ctrl-C, sent as a terminal sends it (to the whole process group), stops
everything promptly and without a traceback. Store dispatch, so no Azurite is needed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from devharness.api import API
from devharness.ports import free_port
from devharness.processes import REPO, child_env, log_tail, processes_mentioning
from devharness.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

DONE = "the demo's 14 tasks are done; the dashboard: "
CREATED = re.compile(r"created (\S+) priority=\S+ payload=(.*)")
LOG = "public/logs/live_backing.log"


def _as_from_a_terminal() -> None:
    """Give the script SIGINT as a terminal's shell does: delivered, and at its default. A test
    process may have it ignored or blocked (by what ran before in it), which the child would
    inherit, and bash never traps a signal ignored when it started."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def test_the_demo_leaves_the_coordinator_up_until_ctrl_c(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    root_url = f"http://127.0.0.1:{port}"
    log = tmp_path / "dev.log"
    env = child_env(
        COORDINATOR_PORT=str(port),
        COORDINATOR_DATA_DIR=str(data_dir),
        COORDINATOR_DISPATCH="store",
    )
    with log.open("wb") as out:
        dev = await asyncio.create_subprocess_exec(
            str(REPO / "scripts" / "dev"),
            "--demo",
            cwd=REPO,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            process_group=0,
            preexec_fn=_as_from_a_terminal,
        )
    try:
        await wait_until(
            lambda: DONE in log.read_text() or dev.returncode is not None,
            within=240,
            what="the demo's tasks to be done",
        )
        output = log.read_text()
        assert dev.returncode is None, output[-5000:]
        assert f"{DONE}{root_url}/ui/#/tasks?queue=examples%2Fhello-" in output

        created = dict(CREATED.findall(output))
        assert len(created) == 14, output[-5000:]
        (failing,) = [task_id for task_id, payload in created.items() if "'fail': True" in payload]
        async with aiohttp.ClientSession() as session:
            states = Counter[str]()
            for task_id in created:
                async with session.get(f"{root_url}{API}/task/{task_id}/status") as answer:
                    states[(await answer.json())["status"]["state"]] += 1
            assert states == {"completed": 12, "failed": 1, "exception": 1}

            # Still serving after the demo is done: the dashboard, and the failed task's log
            # for a visitor who has not signed in (the dev clients file's anonymousScopes).
            async with session.get(f"{root_url}/ui/") as answer:
                assert answer.status == 200
            artifacts = f"{root_url}{API}/task/{failing}/runs/0/artifacts"
            async with session.get(artifacts) as answer:
                assert answer.status == 200, await answer.text()
                names = [a["name"] for a in (await answer.json())["artifacts"]]
            assert LOG in names
            async with session.get(f"{artifacts}/{LOG}") as answer:
                assert answer.status == 200, await answer.text()
                assert "the payload asked this run to fail" in await answer.text()
        assert dev.returncode is None, log_tail(log)

        os.killpg(dev.pid, signal.SIGINT)
        # Bounded: "promptly" is well within the worker's and coordinator's own shutdowns.
        status = await asyncio.wait_for(dev.wait(), 30)
    finally:
        if dev.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(dev.pid, signal.SIGKILL)
            await dev.wait()

    output = log.read_text()
    after = output[output.index(DONE) :]
    assert status == 130, after
    assert "worker stopped with status 0" in after, after
    assert "Traceback" not in after, after
    # Every process it started (coordinator, demo, worker) has the data dir in its environment.
    assert processes_mentioning(str(data_dir)) == {}, after
