"""Two ``queue-coordinator serve`` processes sharing one PostgreSQL schema, one Azurite queue
prefix and one clients file (the ``cluster`` fixture, tests/fixtures/replicas.py): the
deployment docs/replicas.md promises works (replicas behind a load balancer, resolvers running
in every replica).

Workers are plain aiohttp and deliberately spread every step over both replicas: poll URLs
from one, claim on the other, delete the hint on Azurite, report on the first with the
temporary credentials the other one issued (Hawk authentication is on, so that crossing is
checked too). A request that meets a dead replica is sent to the other, as a load balancer
would. Some first claims are abandoned (never reclaimed nor reported) under a short claim
timeout, so the claim resolvers of both processes race over them.

Every test ends by reading every task's runs back and comparing them with exactly what the
workers did: one completed run per task, one ``claim-expired`` run per abandoned claim, each
followed by one ``retry`` run. A run resolved twice, or a task lost, shows up there.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Coroutine
from typing import Any

from devharness.waiting import wait_until
from tests.fixtures.coordinator import CoordinatorProcess
from tests.fixtures.replicas import HTTP_TIMEOUT, N_TASKS, WORKER_TYPE, Cluster, Work, create_tasks

WORKERS = 4


async def handle(
    cluster: Cluster,
    work: Work,
    worker_id: str,
    message: dict[str, str],
    signed_delete_url: str,
    *,
    claim_on: int,
    report_on: int,
) -> None:
    """One hint: claim, delete the message, then report completed (or abandon the claim)."""
    hint = json.loads(base64.b64decode(message["MessageText"]))
    task_id, run_id = hint["taskId"], hint["runId"]
    claim_body = {"workerGroup": "wg", "workerId": worker_id}
    status, claim = await cluster.call(
        claim_on, "POST", f"/task/{task_id}/runs/{run_id}/claim", claim_body
    )
    # the worker protocol: delete after a successful claim or a 4xx (call() fails on a 5xx)
    delete_url = signed_delete_url.replace(
        "{{messageId}}", urllib.parse.quote(message["MessageId"], safe="")
    ).replace("{{popReceipt}}", urllib.parse.quote(message["PopReceipt"], safe=""))
    async with cluster.http.delete(delete_url, timeout=HTTP_TIMEOUT) as deleted:
        assert deleted.status == 204, await deleted.text()
    if status != 200:
        assert status == 409, claim  # a duplicate or stale hint
        return
    key = (task_id, run_id)
    if task_id in work.to_abandon and run_id == 0:
        work.abandoned[key] = worker_id  # never reclaimed, never reported
        return
    status, body = await cluster.call(
        report_on,
        "POST",
        f"/task/{task_id}/runs/{run_id}/completed",
        credentials=claim["credentials"],  # issued by claim_on, used on report_on
    )
    assert status == 200, body
    assert body["status"]["runs"][run_id]["state"] == "completed"
    work.reported[key] = worker_id
    work.check_done()


async def poll_worker(cluster: Cluster, work: Work, number: int) -> None:
    """pollTaskUrls on one replica, GET the signed poll URL on Azurite, claim on the other
    replica, report on the first; the replicas swap roles every cycle."""
    worker_id = f"w{number}"
    cycle = number
    while not work.done.is_set():
        home, other = cycle % 2, (cycle + 1) % 2
        cycle += 1
        status, body = await cluster.call(
            home, "GET", f"/poll-task-url/{cluster.provisioner_id}/{WORKER_TYPE}"
        )
        assert status == 200, body
        for queue in body["queues"]:
            url = queue["signedPollUrl"] + "&numofmessages=4"
            async with cluster.http.get(url, timeout=HTTP_TIMEOUT) as response:
                text = await response.text()
                assert response.status == 200, text
            messages = [{f.tag: f.text or "" for f in m} for m in ET.fromstring(text)]
            if messages:
                await asyncio.gather(
                    *(
                        handle(
                            cluster,
                            work,
                            worker_id,
                            message,
                            queue["signedDeleteUrl"],
                            claim_on=other,
                            report_on=home,
                        )
                        for message in messages
                    )
                )
                break  # start again from the highest priority
        else:
            # every queue empty: a worker's idle pause before polling again
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(work.done.wait(), 0.1)


async def claim_work_round(cluster: Cluster, work: Work, worker_id: str, home: int) -> int:
    """The second worker mode: claimWork on replica ``home``, report on the other; returns
    how many runs it claimed."""
    status, body = await cluster.call(
        home,
        "POST",
        f"/claim-work/{cluster.provisioner_id}/{WORKER_TYPE}",
        {"workerGroup": "wg", "workerId": worker_id, "tasks": 2},
    )
    assert status == 200, body
    for claim in body["tasks"]:
        task_id, run_id = claim["status"]["taskId"], claim["runId"]
        if task_id in work.to_abandon and run_id == 0:
            work.abandoned[(task_id, run_id)] = worker_id
            continue
        status, report = await cluster.call(
            1 - home,
            "POST",
            f"/task/{task_id}/runs/{run_id}/completed",
            credentials=claim["credentials"],
        )
        assert status == 200, report
        work.reported[(task_id, run_id)] = worker_id
        work.check_done()
    return len(body["tasks"])


async def claim_work_worker(cluster: Cluster, work: Work, number: int) -> None:
    cycle = number
    while not work.done.is_set():
        await claim_work_round(cluster, work, f"cw{number}", cycle % 2)
        cycle += 1


async def until_done(work: Work, jobs: list[Coroutine[Any, Any, None]], *, within: float) -> None:
    """Run ``jobs`` until every task was reported completed; a failing job fails the test at
    once, and so does the deadline."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    finished = asyncio.ensure_future(work.done.wait())
    try:
        pending: set[asyncio.Future[Any]] = {*tasks, finished}
        give_up = time.monotonic() + within
        while not work.done.is_set():
            remaining = give_up - time.monotonic()
            if remaining <= 0:
                missing = set(work.bodies) - {key[0] for key in work.reported}
                raise AssertionError(
                    f"not done after {within}s: {len(missing)} tasks never completed, "
                    f"created {len(work.created)}, abandoned {len(work.abandoned)}"
                )
            done, pending = await asyncio.wait(
                pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                if task is not finished:
                    task.result()  # raises what the job raised
    finally:
        for task in [*tasks, finished]:
            task.cancel()
        await asyncio.gather(*tasks, finished, return_exceptions=True)


async def check_runs(
    cluster: Cluster, work: Work, *, read_from: list[int], lost: frozenset[str] = frozenset()
) -> None:
    """Every task's runs are exactly what the workers did (see the module docstring).

    :param lost: workers whose claimWork call met a replica's death: a run that replica
        claimed for them is claim-expired too (nobody heard of the claim), then retried.
    """
    assert set(work.created) == set(work.bodies)
    meant = {(task_id, 0) for task_id in work.to_abandon}
    # the workers abandoned only runs meant to be; one a dying replica claimed for a lost
    # worker never reached it and is counted by the loop below instead
    assert set(work.abandoned) <= meant
    for position, task_id in enumerate(work.bodies):
        status, body = await cluster.call(
            read_from[position % len(read_from)], "GET", f"/task/{task_id}/status"
        )
        assert status == 200, body
        runs = body["status"]["runs"]
        for run in runs[:-1]:
            if (task_id, run["runId"]) not in work.abandoned and run["workerId"] in lost:
                work.abandoned[(task_id, run["runId"])] = run["workerId"]
        expired = [run_id for (t, run_id) in work.abandoned if t == task_id]
        assert len(runs) == 1 + len(expired), runs
        assert body["status"]["state"] == "completed", runs
        assert body["status"]["retriesLeft"] == 5 - len(expired)
        for run_id, run in enumerate(runs):
            assert run["runId"] == run_id
            assert run["reasonCreated"] == ("scheduled" if run_id == 0 else "retry"), runs
            if run_id in expired:
                assert (run["state"], run["reasonResolved"]) == ("exception", "claim-expired")
                assert run["workerId"] == work.abandoned[(task_id, run_id)]
            else:
                assert run_id == len(runs) - 1, runs
                assert (run["state"], run["reasonResolved"]) == ("completed", "completed")
                assert run["workerId"] == work.reported[(task_id, run_id)]
    assert meant <= set(work.abandoned)
    # and the group holds all of them, no more
    status, listing = await cluster.call(read_from[0], "GET", f"/task-group/{work.group}/list")
    assert status == 200, listing
    assert {entry["status"]["taskId"] for entry in listing["tasks"]} == set(work.bodies)
    assert "continuationToken" not in listing


def resolver_actions(process: CoordinatorProcess) -> int:
    """How many claims this process's claim resolver expired, from its log."""
    log = process.log_path.read_text(errors="replace")
    return sum(int(n) for n in re.findall(r"background pass actor=claim-resolver acted=(\d+)", log))


async def test_two_replicas_share_the_work_and_resolve_each_expired_claim_once(
    cluster: Cluster,
) -> None:
    work = Work.make(cluster.provisioner_id)
    await create_tasks(cluster, work, list(work.bodies))
    # one claimWork round before the other workers start, so that mode surely gets work
    assert await claim_work_round(cluster, work, "cw0", 1) >= 1
    jobs = [poll_worker(cluster, work, n) for n in range(WORKERS)]
    jobs.append(claim_work_worker(cluster, work, 0))
    await until_done(work, jobs, within=25)

    await check_runs(cluster, work, read_from=[0, 1])
    assert cluster.failovers == 0
    assert min(cluster.served[0], cluster.served[1]) > N_TASKS  # both replicas did real work
    claimants = {*work.reported.values(), *work.abandoned.values()}
    assert {worker[:2] for worker in claimants} == {"w0", "w1", "w2", "w3", "cw"}

    # Both processes' claim resolvers scan the same rows; compare-and-set lets one act on
    # each expired claim. Their logs, added up, count each expiry exactly once.
    async def all_logged() -> bool:
        return sum(map(resolver_actions, cluster.processes)) >= len(work.abandoned)

    await wait_until(all_logged, within=10, what="the resolver passes to be logged")
    per_process = [resolver_actions(process) for process in cluster.processes]
    assert sum(per_process) == len(work.abandoned), per_process


async def kill_mid_load(
    cluster: Cluster, work: Work, workers: list[Coroutine[Any, Any, None]]
) -> None:
    """Run ``workers`` while tasks are created, SIGKILL replica 1 once work is under way on
    both replicas, and go on until every task completed; the kill must have happened and
    requests must have met the dead replica."""
    ids = list(work.bodies)
    victim = cluster.processes[1]
    killed = asyncio.Event()

    async def producer() -> None:
        # the first 45 tasks race the kill; the last 15 are created after it, every other
        # one sent to the dead replica first
        await create_tasks(cluster, work, ids[:45], concurrency=2)
        await killed.wait()
        await create_tasks(cluster, work, ids[45:], concurrency=2)

    async def killer() -> None:
        async def busy() -> bool:
            return len(work.reported) >= 15 and len(work.abandoned) >= 2

        await wait_until(busy, within=20, what="work to be under way on both replicas")
        await victim.kill()  # SIGKILL: no clean-up, requests and resolver passes cut mid-way
        killed.set()

    await until_done(work, [producer(), killer(), *workers], within=25)
    assert victim.process is not None and victim.process.returncode == -9
    assert killed.is_set()
    assert cluster.failovers > 0


async def test_killing_a_replica_mid_load_loses_nothing(cluster: Cluster) -> None:
    work = Work.make(cluster.provisioner_id)
    # pollTaskUrls workers only: hints that a dying replica had received for a claimWork
    # call come back only after that call's visibility timeout (60 s), beyond this test
    await kill_mid_load(cluster, work, [poll_worker(cluster, work, n) for n in range(WORKERS)])
    await check_runs(cluster, work, read_from=[0])


async def test_killing_a_replica_mid_load_loses_nothing_under_store_dispatch(
    store_cluster: Cluster,
) -> None:
    """claimWork workers only, each alternating between the replicas: a claimWork call that
    meets the SIGKILL goes to the other replica, and a run the dead one had claimed for it
    expires and is retried; no run is claimed twice."""
    cluster = store_cluster
    work = Work.make(cluster.provisioner_id)
    workers = [claim_work_worker(cluster, work, n) for n in range(WORKERS)]
    await kill_mid_load(cluster, work, workers)
    await check_runs(cluster, work, read_from=[0], lost=frozenset(f"cw{n}" for n in range(WORKERS)))
