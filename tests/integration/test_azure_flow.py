"""The whole hint flow against a real Azurite and a real coordinator over HTTP (docs/protocol.md).

Workers are played by plain aiohttp: they get signed URLs from ``pollTaskUrls``, GET and
DELETE messages on Azurite directly, and claim through the API. Other checks read the queues
with the Azure SDK and the account key (``peek`` never changes what workers see), so a hint
"appearing" is observed in Azure itself, not through the coordinator.

Covered: priority order and the poll/claim/delete cycle; what the SAS allows and its expiry;
duplicate, stale, unknown, undecodable and canceled hints being harmless; claimWork under
concurrency, when idle and when the client goes away; a hint for every transition that makes
a run pending; the retry delay; pendingTasks against the exact counts. Azurite going away and
coming back: tests/e2e/test_azurite_outages.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
import slugid

from coordinator.azure.hint_codec import decode_hint, encode_hint
from coordinator.domain.task_queues import PRIORITIES
from devharness.waiting import wait_until
from tests.fixtures.coordinator import WORKER, FakeClock, RunningCoordinator, runs
from tests.fixtures.flow import WT, Flow


def hint_text(task_id: str, run_id: int) -> str:
    return encode_hint(task_id=task_id, run_id=run_id, hint_id=slugid.nice())


async def stored(coord: RunningCoordinator, task_id: str) -> Any:
    """The task's status, or ``None`` if it does not exist."""
    response = await coord.call("GET", f"/task/{task_id}/status")
    assert response.status in (200, 404), response.body
    return response.body["status"] if response.status == 200 else None


# --- pollTaskUrls, the worker's cycle -------------------------------------------------------


async def test_workers_poll_highest_priority_first_claim_and_delete(flow: Flow) -> None:
    coord = await flow.coordinator()
    # Created lowest first: insertion order cannot explain what workers see.
    by_priority = {p: await flow.create(coord, priority=p) for p in reversed(PRIORITIES)}

    queues = await flow.poll_urls(coord)
    assert len(queues) == len(PRIORITIES)

    seen = []
    for signed in queues:
        messages = await flow.get(signed["signedPollUrl"])
        assert len(messages) == 1
        decoded = decode_hint(messages[0]["MessageText"])
        assert decoded is not None
        task_id, run_id = decoded
        seen.append(task_id)
        await coord.claim(task_id, run_id)
        assert await flow.delete(signed["signedDeleteUrl"], messages[0]) == 204
        assert (await coord.status(task_id))["state"] == "running"
    assert seen == [by_priority[p] for p in PRIORITIES]

    # Deleted, not merely invisible for the poll's 300 s.
    for priority in PRIORITIES:
        assert await flow.count(priority) == 0


async def test_signed_urls_get_and_delete_but_cannot_add(flow: Flow) -> None:
    coord = await flow.coordinator()
    await flow.create(coord)
    signed = (await flow.poll_urls(coord))[-1]  # lowest
    poll_url = signed["signedPollUrl"]
    queue_url, query = poll_url.split("/messages?", 1)
    sas = query.split("&", 1)[1]  # drop visibilitytimeout=300
    add = "<QueueMessage><MessageText>Zm9v</MessageText></QueueMessage>"

    async with flow.http.post(f"{queue_url}/messages?{sas}", data=add) as response:
        assert response.status == 403
    assert await flow.count() == 1  # nothing was added

    messages = await flow.get(poll_url)
    assert len(messages) == 1
    assert await flow.delete(signed["signedDeleteUrl"], messages[0]) == 204
    assert await flow.count() == 0


async def test_expired_signed_urls_are_refused(flow: Flow) -> None:
    coord = await flow.coordinator()
    task_id = await flow.create(coord)
    # The same queues, through a coordinator whose clock is two hours behind: the SAS it
    # signs expired 90 minutes ago.
    stale_coord = await flow.coordinator(clock=FakeClock(int(time.time() * 1000) - 7_200_000))
    response = await stale_coord.call("GET", f"/poll-task-url/{flow.prov}/{WT}")
    assert response.status == 200, response.body
    stale = response.body["queues"][-1]
    fresh = (await flow.poll_urls(coord))[-1]
    assert stale["signedPollUrl"] != fresh["signedPollUrl"]

    async with flow.http.get(stale["signedPollUrl"]) as refused:
        assert refused.status == 403
    messages = await flow.get(fresh["signedPollUrl"])
    assert [decode_hint(m["MessageText"]) for m in messages] == [(task_id, 0)]
    # An expired SAS cannot delete either (the message is still there for the fresh one);
    # the fresh one can, and then the message is gone. Not counted by the queue length: the
    # hint keeper may put a hint whose confirmation it has not seen yet again meanwhile.
    assert await flow.delete(stale["signedDeleteUrl"], messages[0]) == 403
    assert await flow.delete(fresh["signedDeleteUrl"], messages[0]) == 204
    assert await flow.delete(fresh["signedDeleteUrl"], messages[0]) == 404


# --- junk hints are harmless ----------------------------------------------------------------


async def test_duplicate_stale_unknown_and_undecodable_hints_are_harmless_to_claimTask(
    flow: Flow,
) -> None:
    coord = await flow.coordinator(run_resolvers=False)
    duplicated = await flow.create(coord)
    await flow.send(hint_text(duplicated, 0))
    completed = await flow.create(coord)  # its run-0 hint becomes stale
    await coord.claim(completed, 0)
    await coord.report(completed, 0, "completed")
    retried = await flow.create(coord)  # run 0 stale, run 1 pending
    await coord.claim(retried, 0)
    await coord.report(retried, 0, "exception", "worker-shutdown")
    unknown = slugid.nice()
    await flow.send(hint_text(unknown, 0))
    await flow.send("not a hint at all")
    await flow.send(hint_text(completed, 7))  # a run that never existed

    signed = (await flow.poll_urls(coord))[-1]
    messages = await flow.get(signed["signedPollUrl"])
    assert len(messages) == 8

    answers: list[tuple[tuple[str, int] | None, int]] = []
    for number, message in enumerate(messages):
        decoded = decode_hint(message["MessageText"])
        if decoded is not None:
            task_id, run_id = decoded
            before = await stored(coord, task_id)
            answer = (await coord.try_claim(task_id, run_id, worker_id=f"w{number}")).status
            after = await stored(coord, task_id)
            answers.append((decoded, answer))
            if answer != 200:
                assert 400 <= answer < 500
                assert after == before, f"a refused claim changed {task_id}"
        else:
            answers.append((None, 0))
        assert await flow.delete(signed["signedDeleteUrl"], message) == 204

    assert sorted(answers, key=repr) == sorted(
        [
            ((duplicated, 0), 200),
            ((duplicated, 0), 409),  # the duplicate, by another worker
            ((completed, 0), 409),
            ((completed, 7), 404),
            ((retried, 0), 409),
            ((retried, 1), 200),
            ((unknown, 0), 404),
            (None, 0),
        ],
        key=repr,
    )
    assert await flow.count() == 0
    assert (await coord.call("GET", f"/task/{unknown}/status")).status == 404
    assert runs(await coord.status(completed)) == [("completed", "scheduled", "completed")]


async def test_junk_hints_are_deleted_by_claimWork_without_touching_the_store(
    flow: Flow,
) -> None:
    coord = await flow.coordinator(run_resolvers=False)
    completed = await flow.create(coord, priority="highest")
    await coord.claim(completed, 0)
    await coord.report(completed, 0, "completed")
    canceled = await flow.create(coord, priority="high")
    assert (await coord.call("POST", f"/task/{canceled}/cancel")).status == 200
    running = await flow.create(coord, priority="high")
    await coord.claim(running, 0, worker_id="other")
    await flow.poll_urls(coord)  # creates every priority's queue
    for text in (hint_text(slugid.nice(), 0), "%%% garbage", hint_text(running, 0)):
        await flow.send(text, priority="very-high")
    wanted = await flow.create(coord)  # lowest: every junk hint comes first
    junk = [completed, canceled, running]
    before = {task_id: await coord.status(task_id) for task_id in junk}

    claims = await flow.claim_work(coord)

    assert [(c["status"]["taskId"], c["runId"]) for c in claims] == [(wanted, 0)]
    assert {task_id: await coord.status(task_id) for task_id in junk} == before
    for priority in PRIORITIES:
        assert await flow.count(priority) == 0, f"junk left in the {priority} queue"


async def test_a_canceled_tasks_hint_never_becomes_a_claim(flow: Flow) -> None:
    coord = await flow.coordinator(run_resolvers=False, claim_work_timeout_ms=500)
    task_id = await flow.create(coord)
    await flow.wait_for_hint(task_id, 0)
    canceled = await coord.call("POST", f"/task/{task_id}/cancel")
    assert canceled.status == 200
    before = canceled.body["status"]
    assert runs(before) == [("exception", "scheduled", "canceled")]

    assert await flow.claim_work(coord) == []
    assert await flow.count() == 0  # the stale hint was deleted, not left to come back
    assert (await coord.try_claim(task_id, 0)).status == 409
    assert await coord.status(task_id) == before


# --- claimWork ------------------------------------------------------------------------------


async def test_concurrent_claimWork_callers_get_distinct_runs(flow: Flow) -> None:
    coord = await flow.coordinator(claim_work_timeout_ms=10_000)
    task_ids = {await flow.create(coord) for _ in range(10)}

    results = await asyncio.gather(
        *(flow.claim_work(coord, tasks=1, worker_id=f"w{i}") for i in range(10))
    )

    assert [len(claims) for claims in results] == [1] * 10
    claimed = [(c["status"]["taskId"], c["runId"], c["workerId"]) for r in results for c in r]
    assert {(task_id, run_id) for task_id, run_id, _ in claimed} == {(t, 0) for t in task_ids}
    for task_id, _, worker_id in claimed:
        task_runs = (await coord.status(task_id))["runs"]
        assert [(r["state"], r["workerId"]) for r in task_runs] == [("running", worker_id)]
    assert await flow.count() == 0


async def test_claimWork_hands_out_the_highest_priority_first(flow: Flow) -> None:
    coord = await flow.coordinator()
    order = ["low", "highest", "lowest", "medium"]
    by_priority = {p: await flow.create(coord, priority=p) for p in order}

    claims = await flow.claim_work(coord, tasks=3)

    assert [c["status"]["taskId"] for c in claims] == [
        by_priority[p] for p in ("highest", "medium", "low")
    ]
    assert (await coord.status(by_priority["lowest"]))["state"] == "pending"


async def test_claimWork_without_work_answers_empty_after_the_long_poll(flow: Flow) -> None:
    coord = await flow.coordinator(claim_work_timeout_ms=700)
    started = time.monotonic()
    response = await coord.call("POST", f"/claim-work/{flow.prov}/{WT}", {**WORKER, "tasks": 4})
    elapsed = time.monotonic() - started
    assert response.status == 200
    assert response.body == {"tasks": []}
    assert 0.7 <= elapsed < 5.0


def claim_work_polls(*, idle: bool = False) -> int:
    """How many ``ClaimWork.claim`` calls are in progress in this event loop (the in-process
    coordinator's request handlers run here); with ``idle``, only those waiting between two
    polls of Azure."""
    polls = 0
    for task in asyncio.all_tasks():
        names = []
        awaited: Any = task.get_coro()
        while awaited is not None:
            code = getattr(awaited, "cr_code", None)
            if code is not None:
                names.append(code.co_qualname)
            awaited = getattr(awaited, "cr_await", None)
        if "ClaimWork.claim" in names and (not idle or "_Wakeup.wait" in names):
            polls += 1
    return polls


async def test_claimWork_stops_when_the_client_goes_away(flow: Flow) -> None:
    coord = await flow.coordinator(claim_work_timeout_ms=60_000)
    assert claim_work_polls() == 0
    async with aiohttp.ClientSession() as impatient:
        request = asyncio.ensure_future(
            impatient.post(f"{coord.api}/claim-work/{flow.prov}/{WT}", json={**WORKER, "tasks": 1})
        )

        async def idle() -> bool:
            return claim_work_polls(idle=True) == 1

        await wait_until(idle, within=5, what="the claimWork long poll to wait for work")
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
    # Work that arrives now must not be claimed for a worker that is gone.
    task_id = await flow.create(coord)

    async def stopped() -> bool:
        return claim_work_polls() == 0

    # Well before the 60 s long poll would end by itself.
    await wait_until(stopped, within=5, what="the abandoned claimWork to stop")
    assert runs(await coord.status(task_id)) == [("pending", "scheduled", None)], (
        await coord.status(task_id)
    )
    claims = await flow.claim_work(coord, worker_id="w2")
    assert [(c["status"]["taskId"], c["workerId"]) for c in claims] == [(task_id, "w2")]


# --- every transition to pending puts a hint ------------------------------------------------


async def test_createTask_and_scheduleTask_put_hints(flow: Flow) -> None:
    coord = await flow.coordinator()
    created = await flow.create(coord, priority="high")
    await flow.wait_for_hint(created, 0, "high")

    blocker = await flow.create(coord)
    waiting = await flow.create(coord, dependencies=[blocker])
    assert (await coord.status(waiting))["state"] == "unscheduled"
    assert (waiting, 0) not in await flow.peek()
    response = await coord.call("POST", f"/task/{waiting}/schedule")
    assert response.status == 200
    assert runs(response.body["status"]) == [("pending", "scheduled", None)]
    await flow.wait_for_hint(waiting, 0)


async def test_dependency_resolution_puts_a_hint(flow: Flow) -> None:
    coord = await flow.coordinator()
    dependency = await flow.create(coord)
    dependent = await flow.create(coord, dependencies=[dependency])
    assert (await coord.status(dependent))["state"] == "unscheduled"
    await coord.claim(dependency, 0)
    assert (dependent, 0) not in await flow.peek()

    await coord.report(dependency, 0, "completed")

    await flow.wait_for_hint(dependent, 0)
    assert runs(await coord.status(dependent)) == [("pending", "scheduled", None)]


@pytest.mark.parametrize(
    ("reason", "reason_created"),
    [("worker-shutdown", "retry"), ("intermittent-task", "task-retry")],
)
async def test_retrying_exceptions_put_a_hint_for_the_new_run(
    flow: Flow, reason: str, reason_created: str
) -> None:
    coord = await flow.coordinator()
    task_id = await flow.create(coord, priority="very-low")
    await coord.claim(task_id, 0)

    status = await coord.report(task_id, 0, "exception", reason)

    assert runs(status) == [
        ("exception", "scheduled", reason),
        ("pending", reason_created, None),
    ]
    await flow.wait_for_hint(task_id, 1, "very-low")
    # The new run is claimable through its hint.
    claims = await flow.claim_work(coord)
    assert [(c["status"]["taskId"], c["runId"]) for c in claims] == [(task_id, 1)]


async def test_claim_expiry_puts_a_hint_for_the_retry(flow: Flow) -> None:
    clock = FakeClock()
    coord = await flow.coordinator(clock=clock, claim_timeout_ms=60_000)
    task_id = await flow.create(coord, now=clock.now)
    await coord.claim(task_id, 0)
    assert (task_id, 1) not in await flow.peek()

    clock.advance(61)

    await flow.wait_for_hint(task_id, 1)
    assert runs(await coord.status(task_id)) == [
        ("exception", "scheduled", "claim-expired"),
        ("pending", "retry", None),
    ]


async def test_rerunTask_puts_a_hint(flow: Flow) -> None:
    coord = await flow.coordinator()
    task_id = await flow.create(coord)
    await coord.claim(task_id, 0)
    await coord.report(task_id, 0, "failed")
    assert (task_id, 1) not in await flow.peek()

    response = await coord.call("POST", f"/task/{task_id}/rerun")

    assert response.status == 200
    assert runs(response.body["status"])[-1] == ("pending", "rerun", None)
    await flow.wait_for_hint(task_id, 1)


async def test_retry_delay_hides_the_retry_hint_for_a_while(flow: Flow) -> None:
    coord = await flow.coordinator(retry_delay_base_ms=2_000)
    task_id = await flow.create(coord)
    claims = await flow.claim_work(coord)
    assert [c["status"]["taskId"] for c in claims] == [task_id]  # run 0's hint is gone

    reported = time.monotonic()
    await coord.report(task_id, 0, "exception", "worker-shutdown")

    # Put (Azure counts it) but invisible: no worker can see it yet.
    assert await flow.count() == 1
    assert await flow.peek() == []
    await flow.wait_for_hint(task_id, 1)
    assert time.monotonic() - reported >= 1.0


# --- pendingTasks ---------------------------------------------------------------------------


async def test_pendingTasks_agrees_with_the_exact_counts_once_hints_are_consumed(
    flow: Flow,
) -> None:
    # Counts are compared exactly: a put slowed past the fixture's short grace by a loaded
    # machine must not be put a second time by the hint keeper.
    coord = await flow.coordinator(claim_work_timeout_ms=500, hint_grace_ms=60_000)
    for priority in ("highest", "high", "high", "lowest", "lowest", "lowest"):
        await flow.create(coord, priority=priority)
    # Two taken the worker's way (claim, then delete the hint).
    taken = 0
    for signed in await flow.poll_urls(coord):
        if taken == 2:
            break
        for message in await flow.get(signed["signedPollUrl"], count=2 - taken):
            decoded = decode_hint(message["MessageText"])
            assert decoded is not None
            await coord.claim(*decoded)
            assert await flow.delete(signed["signedDeleteUrl"], message) == 204
            taken += 1
    assert taken == 2

    async def both(coordinator: RunningCoordinator) -> tuple[int, dict[str, Any]]:
        pending = await coordinator.call("GET", f"/pending/{flow.prov}/{WT}")
        counts = await coordinator.call("GET", f"/task-queues/{flow.prov}%2F{WT}/counts")
        assert pending.status == 200 and counts.status == 200
        return pending.body["pendingTasks"], counts.body

    approximate, exact = await both(coord)
    assert approximate == exact["pending"] == 4
    assert exact["running"] == 2

    claims = await flow.claim_work(coord)
    assert len(claims) == 4
    # This coordinator's pendingTasks may serve its cached 4 for up to 20 s; a fresh one on
    # the same store and queues asks Azure.
    fresh = await flow.coordinator(hint_grace_ms=60_000)
    approximate, exact = await both(fresh)
    assert approximate == exact["pending"] == 0
    assert exact["running"] == 6
