"""The dispatch part of the store contract
(:class:`~coordinator.store.contract.dispatch.DispatchStore`), run against SQLite and
PostgreSQL alike: store dispatch's claims of claimable runs, and the hints of pending runs.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import asyncpg
import pytest

from coordinator.domain import lifecycle
from coordinator.domain.claim_weights import ClaimWeights
from coordinator.domain.events import QueueEvent
from coordinator.domain.records import TaskRecord, record_from_definition, to_iso
from coordinator.domain.task_queues import PRIORITIES, TaskQueue
from coordinator.store.base import Store
from coordinator.store.claim_floors import LEVELS, RESCAN_MS, SETTLE_MS
from coordinator.store.contract.dispatch import PendingAnnouncement, PickLevels
from coordinator.store.factory import store_from_url
from coordinator.store.postgres import PostgresStore, filtered_statement
from coordinator.store.worker_rows import task_queue_columns
from devharness.waiting import wait_until
from tests.fixtures.records import (
    CLAIM,
    HOUR,
    MINUTE,
    NOW,
    TIMING,
    apply,
    claim,
    claimed,
    create,
    definition,
    get,
    new_record,
)

# --- hints --------------------------------------------------------------------------------


async def test_confirm_hint_clears_the_hint_without_bumping_the_version(store: Store) -> None:
    created = await create(store, "T")
    assert await store.hints_due(NOW + 1, 10) == ["T"]

    await store.confirm_hints([("T", 1)])  # no such run
    assert await store.get("T") == created

    await store.confirm_hints([("T", 0)])
    assert await store.get("T") == created.replace(hint_needed=False)
    assert await store.hints_due(NOW + 1, 10) == []
    # a writer that read version 1 before the confirmation still wins its compare-and-set
    assert (await claim(store, "T")).version == 2

    await store.confirm_hints([("missing", 0)])
    assert await store.get("missing") is None


async def test_confirm_hint_ignores_a_run_that_is_no_longer_the_last(store: Store) -> None:
    await create(store, "T")
    claimed = await claim(store, "T")
    expired = await apply(
        store,
        lifecycle.expire_claim(claimed, taken_until=NOW + CLAIM, now=NOW + CLAIM, timing=TIMING),
    )
    assert [run.state for run in expired.runs] == ["exception", "pending"]
    assert expired.hint_needed

    await store.confirm_hints([("T", 0)])
    assert await store.get("T") == expired

    await store.confirm_hints([("T", 1)])
    assert await store.get("T") == expired.replace(hint_needed=False)


async def test_confirm_hints_confirms_a_batch_in_one_call(store: Store) -> None:
    for task_id in ("a", "b", "c"):
        await create(store, task_id)
    await store.confirm_hints([])
    assert sorted(await store.hints_due(NOW + 1, 10)) == ["a", "b", "c"]

    await store.confirm_hints([("a", 0), ("missing", 0), ("c", 0), ("b", 5)])
    assert await store.hints_due(NOW + 1, 10) == ["b"]


async def test_hints_due_lists_unconfirmed_hints_asked_for_before_the_time(store: Store) -> None:
    await create(store, "a", now=NOW)
    await create(store, "b", now=NOW + 5)
    waiting = await create(store, "waiting", dependencies=("a",))
    await create(store, "claimed", now=NOW)
    await claim(store, "claimed")

    assert await store.hints_due(NOW, 10) == []
    assert await store.hints_due(NOW + 1, 10) == ["a"]
    assert await store.hints_due(NOW + 6, 10) == ["a", "b"]
    assert await store.hints_due(NOW + 6, 1) == ["a"]

    await store.confirm_hints([("a", 0)])
    assert await store.hints_due(NOW + 6, 10) == ["b"]
    await claim(store, "b", now=NOW + 6)
    assert await store.hints_due(NOW + 6, 10) == []

    await apply(store, lifecycle.schedule(waiting, now=NOW + 7))
    assert await store.hints_due(NOW + 7, 10) == []
    assert await store.hints_due(NOW + 8, 10) == ["waiting"]


# --- store dispatch -----------------------------------------------------------------------


QUEUE = TaskQueue("prov", "wt")


def prioritised(task_id: str, priority: str, *, now: int = NOW, **fields: Any) -> TaskRecord:
    """A new pending record of ``priority`` (and any other definition ``fields``)."""
    body = {**definition(), "priority": priority, **fields}
    return lifecycle.create(record_from_definition(task_id, body), now=now).record


def claiming(
    seen: list[str], *, take: int = 32, now: int = NOW
) -> Callable[[Sequence[TaskRecord]], list[tuple[TaskRecord, Sequence[QueueEvent]]]]:
    """A ``claim`` for :meth:`Store.claim_pending` that notes the ids handed over, in order,
    and claims the first ``take`` of them."""

    def claim(records: Sequence[TaskRecord]) -> list[tuple[TaskRecord, Sequence[QueueEvent]]]:
        seen.extend(record.task_id for record in records)
        return [(claimed(record, now=now).record, ()) for record in records[:take]]

    return claim


async def test_claim_pending_hands_out_the_highest_priority_then_the_earliest_visible(
    store: Store,
) -> None:
    for record in [
        prioritised("low-early", "lowest", now=NOW - 3),
        prioritised("high-late", "high", now=NOW - 1),
        prioritised("high-early", "high", now=NOW - 2),
        prioritised("delayed", "highest", notBefore=to_iso(NOW + MINUTE)),
        prioritised("elsewhere", "highest", workerType="other", taskQueueId="prov/other"),
    ]:
        assert await store.insert(record) is not None
    seen: list[str] = []

    claimed = await store.claim_pending(QUEUE, now=NOW, limit=10, claim=claiming(seen, take=2))

    assert seen == ["high-early", "high-late", "low-early"]
    assert [record.task_id for record in claimed] == ["high-early", "high-late"]
    for record in claimed:
        assert (record.state, record.version) == ("running", 2)
        assert await store.get(record.task_id) == record
    assert (await get(store, "low-early")).state == "pending"
    # the delayed run once visible; the claimed ones never again
    seen.clear()
    await store.claim_pending(QUEUE, now=NOW + MINUTE, limit=10, claim=claiming(seen, take=0))
    assert seen == ["delayed", "low-early"]


async def test_claim_pending_hands_over_and_keeps_the_tasks_traceparent(store: Store) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert await store.insert(new_record("traced").replace(traceparent=traceparent)) is not None
    handed: list[str | None] = []

    def claim(records: Sequence[TaskRecord]) -> list[tuple[TaskRecord, Sequence[QueueEvent]]]:
        handed.extend(record.traceparent for record in records)
        return [(claimed(record).record, ()) for record in records]

    [running] = await store.claim_pending(QUEUE, now=NOW, limit=1, claim=claim)
    assert handed == [traceparent]
    assert running.traceparent == traceparent


async def test_claim_pending_writes_only_what_claim_returns_and_up_to_the_limit(
    store: Store,
) -> None:
    for index in range(5):
        await create(store, f"t{index}", now=NOW - 10 + index)
    seen: list[str] = []

    assert await store.claim_pending(QUEUE, now=NOW, limit=3, claim=claiming(seen, take=0)) == []
    assert seen == ["t0", "t1", "t2"]
    assert {(await get(store, f"t{i}")).version for i in range(5)} == {1}
    assert await store.claim_pending(QUEUE, now=NOW, limit=0, claim=claiming(seen)) == []
    # nothing claimable (an empty queue, a run past its deadline): claim is not called
    seen.clear()
    assert await store.claim_pending(TaskQueue("prov", "none"), now=NOW, limit=3,
                                     claim=claiming(seen)) == []  # fmt: skip
    await store.claim_pending(QUEUE, now=NOW + HOUR, limit=5, claim=claiming(seen))
    assert seen == []


async def test_claim_pending_follows_the_retry_priority_of_automatic_retries(store: Store) -> None:
    retried = prioritised("retried", "lowest", retryPriority="highest", now=NOW - 5)
    assert await store.insert(retried) is not None
    await store.insert(prioritised("medium", "medium", now=NOW - 4))
    seen: list[str] = []
    await store.claim_pending(QUEUE, now=NOW, limit=1, claim=claiming(seen))
    assert seen == ["medium"]  # run 0 of "retried" has the task's lowest priority

    running = await claim(store, "retried")
    expired = lifecycle.expire_claim(
        running, taken_until=NOW + CLAIM, now=NOW + CLAIM, timing=TIMING
    )
    await apply(store, expired)
    await store.insert(prioritised("medium-2", "medium", now=NOW - 3))
    seen.clear()
    await store.claim_pending(QUEUE, now=NOW + CLAIM, limit=5, claim=claiming(seen, take=0))
    assert seen == ["retried", "medium-2"]


async def test_claim_pending_writes_the_events_with_the_claims(store: Store) -> None:
    await create(store, "t")
    event = QueueEvent(exchange="task-running", key="t", routing_key="r", cc=(), body={})

    def claim(records: Sequence[TaskRecord]) -> list[tuple[TaskRecord, Sequence[QueueEvent]]]:
        return [(record, [event]) for record, _ in claiming([])(records)]

    assert len(await store.claim_pending(QUEUE, now=NOW, limit=1, claim=claim)) == 1
    assert await store.outbox_depth() == 1


async def test_fifty_concurrent_claim_pending_calls_each_get_their_own_run(store: Store) -> None:
    records = [new_record(f"t{index:02d}", now=NOW - 100 + index) for index in range(50)]
    assert len(await store.insert_many(records)) == 50

    answers = await asyncio.gather(
        *(store.claim_pending(QUEUE, now=NOW, limit=1, claim=claiming([])) for _ in range(50))
    )

    # PostgreSQL: each caller skips the rows the others hold (SKIP LOCKED), so none comes back
    # empty-handed while runs are left; SQLite: one caller at a time
    assert [len(answer) for answer in answers] == [1] * 50
    assert sorted(answer[0].task_id for answer in answers) == sorted(r.task_id for r in records)
    assert {(await get(store, r.task_id)).state for r in records} == {"running"}


async def test_a_run_made_pending_behind_the_claims_is_claimed_within_the_rescan_interval(
    store: Store,
) -> None:
    await create(store, "early", now=NOW)
    first = NOW + 5_000
    assert [
        r.task_id for r in await store.claim_pending(QUEUE, now=first, limit=10, claim=claiming([]))
    ] == ["early"]
    # visible since before that claim, as a transaction that began before it and committed
    # after it makes a run
    await create(store, "late", now=NOW + 1_000)

    claimed_at = None
    for now in range(first, first + RESCAN_MS + 1, RESCAN_MS // 4):
        if await store.claim_pending(QUEUE, now=now, limit=10, claim=claiming([])):
            claimed_at = now
            break

    assert claimed_at is not None


async def _claim_buffers(conn: asyncpg.Connection, floors: Mapping[int, int]) -> int:
    """The buffers PostgreSQL's claim statement touches reading QUEUE in priority order from
    ``floors``."""
    statement = filtered_statement("claimable_runs", filters="")  # it has none
    params = {
        **task_queue_columns(QUEUE),
        "now": NOW,
        "limit": 20,
        "levels": LEVELS,
        "quotas": [20] * len(LEVELS),
        "floors": [floors.get(level, 0) for level in LEVELS],
    }
    explained = await conn.fetchval(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement.sql, *statement.args(params)
    )
    plan = json.loads(explained)[0]["Plan"]
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


async def test_claims_seek_past_the_runs_claimed_while_a_transaction_holds_vacuum_back(
    store: Store, store_url: str
) -> None:
    if not isinstance(store, PostgresStore):
        pytest.skip("SQLite keeps no dead row versions for a claim to walk")
    # made visible one a millisecond, the last of them before a claim's settling time
    backlog = NOW - SETTLE_MS - 2_100
    records = [new_record(f"t{index:04d}", now=backlog + index) for index in range(2_100)]
    assert len(await store.insert_many(records)) == 2_100
    holder = await asyncpg.connect(store_url)
    try:
        async with holder.transaction():
            await holder.fetchval("SELECT txid_current()")  # every row version since is kept
            for limit in [100] * 20 + [20]:
                claimed = await store.claim_pending(
                    QUEUE, now=NOW, limit=limit, claim=claiming([], take=limit)
                )
                assert len(claimed) == limit
            # the 2,020 claimed runs' index entries point at row versions nobody may remove
            floored = await _claim_buffers(holder, store._floors.reading(QUEUE, NOW))
            whole = await _claim_buffers(holder, {})
    finally:
        await holder.close()

    assert floored * 5 < whole, (floored, whole)


async def test_an_announcement_reaches_the_other_coordinators_not_its_own(
    store: Store, store_url: str
) -> None:
    if not isinstance(store, PostgresStore):
        pytest.skip("SQLite: the one process on the file announces to nobody")
    other = store_from_url(store_url)
    await other.open()
    try:
        heard_here: list[PendingAnnouncement] = []
        heard_there: list[PendingAnnouncement] = []
        await store.listen_pending(heard_here.append)
        await other.listen_pending(heard_there.append)

        await store.announce_pending([(QUEUE, NOW)])
        await wait_until(lambda: heard_there == [(QUEUE, NOW)], within=10, what="the other hears")
        await other.announce_pending([(QUEUE, NOW + 1)])
        await wait_until(lambda: bool(heard_here), within=10, what="the first hears the other")

        # notifications arrive in the order they were sent: the first store's own came first,
        # and was not handed on
        assert heard_here == [(QUEUE, NOW + 1)]
        assert heard_there == [(QUEUE, NOW)]
    finally:
        await other.close()


# --- store dispatch by a worker's weights -------------------------------------------------

LEVEL_OF = {priority: 7 - index for index, priority in enumerate(PRIORITIES)}


def drawing(
    weights: dict[str, float], *, limit: int, seed: int, offered: list[dict[int, int]] | None = None
) -> PickLevels:
    """A ``pick`` for :meth:`Store.claim_pending` drawing by ``weights`` from a seeded random
    source, noting in ``offered`` the claimable runs of each level it was offered."""
    rng = random.Random(seed)
    parsed = ClaimWeights.parse(weights)

    def pick(claimable: Mapping[int, int]) -> Mapping[int, int]:
        if offered is not None:
            offered.append(dict(claimable))
        return parsed.quotas(claimable, limit, rng)

    return pick


async def every_priority(store: Store, per_priority: int) -> None:
    """``per_priority`` pending runs at each priority, ``<priority>-<nn>``, the lower ``nn``
    the earlier visible."""
    records = [
        prioritised(f"{priority}-{index:02d}", priority, now=NOW - 1000 + index)
        for priority in PRIORITIES
        for index in range(per_priority)
    ]
    assert len(await store.insert_many(records)) == len(records)


def priority_of(task_id: str) -> str:
    return task_id.rsplit("-", 1)[0]


async def test_without_weights_a_busy_high_priority_starves_the_lowest(store: Store) -> None:
    await every_priority(store, 60)
    claimed_ids: list[str] = []
    for _ in range(150):
        taken = await store.claim_pending(QUEUE, now=NOW, limit=1, claim=claiming([]))
        claimed_ids.extend(record.task_id for record in taken)

    counts = Counter(priority_of(task_id) for task_id in claimed_ids)
    assert counts == {"highest": 60, "very-high": 60, "high": 30}


async def test_weighted_claims_share_the_runs_out_by_weight_and_the_lowest_gets_its_share(
    store: Store,
) -> None:
    await every_priority(store, 60)
    pick = drawing({"lowest": 20}, limit=1, seed=1)
    claimed_ids: list[str] = []
    for _ in range(150):
        taken = await store.claim_pending(QUEUE, now=NOW, limit=1, claim=claiming([]), pick=pick)
        claimed_ids.extend(record.task_id for record in taken)

    assert len(claimed_ids) == len(set(claimed_ids)) == 150
    counts = Counter(priority_of(task_id) for task_id in claimed_ids)
    # lowest 20 of the weights 64+32+16+8+4+2+20: about 150 * 20/146 = 20.5 of the runs
    assert 12 <= counts["lowest"] <= 30, counts
    assert 50 <= counts["highest"] <= 60, counts
    assert counts["very-high"] > counts["high"] > counts["medium"], counts
    # each priority's earliest visible first
    for priority, count in counts.items():
        assert sorted(t for t in claimed_ids if priority_of(t) == priority) == [
            f"{priority}-{index:02d}" for index in range(count)
        ]


async def test_a_weighted_claim_draws_only_among_the_levels_with_claimable_runs(
    store: Store,
) -> None:
    await store.insert(prioritised("low-1", "low", now=NOW - 3))
    await store.insert(prioritised("low-2", "low", now=NOW - 2))
    await store.insert(prioritised("high", "high", now=NOW - 1))
    await store.insert(prioritised("delayed", "highest", notBefore=to_iso(NOW + MINUTE)))
    offered: list[dict[int, int]] = []
    seen: list[str] = []
    # "low" outweighs everything: the batch of three takes both its runs and then "high"
    pick = drawing({"low": 1e9}, limit=3, seed=0, offered=offered)

    claimed = await store.claim_pending(QUEUE, now=NOW, limit=3, claim=claiming(seen), pick=pick)

    assert offered == [{LEVEL_OF["low"]: 2, LEVEL_OF["high"]: 1}]
    assert sorted(record.task_id for record in claimed) == ["high", "low-1", "low-2"]
    assert await store.claim_pending(QUEUE, now=NOW, limit=3, claim=claiming([]), pick=pick) == []
    assert offered[1:] == [{}]


async def test_a_weighted_claim_offers_each_level_at_most_the_limit(store: Store) -> None:
    await every_priority(store, 3)
    offered: list[dict[int, int]] = []
    pick = drawing({}, limit=2, seed=0, offered=offered)

    claimed = await store.claim_pending(QUEUE, now=NOW, limit=2, claim=claiming([]), pick=pick)

    assert offered == [{level: 2 for level in LEVEL_OF.values()}]
    assert len(claimed) == 2


async def test_fifty_concurrent_weighted_claims_each_get_their_own_run(store: Store) -> None:
    # Two levels: a caller whose drawn level's runs are all held by the others takes the
    # runs in priority order instead of coming back empty-handed.
    records = [
        prioritised(f"t{index:02d}", "highest" if index % 2 else "lowest", now=NOW - 100 + index)
        for index in range(50)
    ]
    assert len(await store.insert_many(records)) == 50

    answers = await asyncio.gather(
        *(
            store.claim_pending(
                QUEUE, now=NOW, limit=1, claim=claiming([]), pick=drawing({}, limit=1, seed=seed)
            )
            for seed in range(50)
        )
    )

    assert [len(answer) for answer in answers] == [1] * 50
    assert sorted(answer[0].task_id for answer in answers) == sorted(r.task_id for r in records)
