"""claimWork's weights per priority under Azure dispatch (coordinator.service.azure_work), on
a real Azurite and store: the weighted draw decides how many hints to receive from each
priority's queue, a drawn queue that is empty gives its share to the others highest first, and
without weights the claims are strictly by priority, as before.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from coordinator.domain.claim_weights import ClaimWeights
from coordinator.domain.task_queues import PRIORITIES, TaskQueue
from coordinator.service.azure_work import AzureWork
from tests.fixtures.coordinator import WORKER
from tests.fixtures.flow import WT, Flow

PER_PRIORITY = 60
CLAIMS = 150


async def test_weights_give_the_lowest_priority_its_share_and_none_gives_strict_order(
    flow: Flow,
) -> None:
    coord = await flow.coordinator(run_resolvers=False)
    assert coord.parts.azure_queues is not None
    layout = [("weighted", PER_PRIORITY), ("strict", 10)]
    created = await asyncio.gather(
        *(
            coord.create_many(count, provisionerId=flow.prov, workerType=worker_type, priority=p)
            for worker_type, count in layout
            for p in PRIORITIES
        )
    )
    priority_of = {
        task_id: priority
        for task_ids, priority in zip(created, PRIORITIES * len(layout), strict=True)
        for task_id in task_ids
    }
    work = AzureWork(
        service=coord.parts.service, azure_queues=coord.parts.azure_queues, rng=random.Random(7)
    )

    async def shares(
        worker_type: str, weights: ClaimWeights | None, claims: int, count: int = 1
    ) -> Counter[str]:
        claimed: list[str] = []
        while len(claimed) < claims:
            wanted = min(count, claims - len(claimed))
            taken = await work.take(
                TaskQueue(flow.prov, worker_type),
                worker_group="wg",
                worker_id="w1",
                count=wanted,
                weights=weights,
            )
            assert len(taken) == wanted  # never short while hints wait
            claimed += [record.task_id for record in taken]
        assert len(set(claimed)) == claims
        return Counter(priority_of[task_id] for task_id in claimed)

    weighted = await shares("weighted", ClaimWeights.parse({"lowest": 20}), CLAIMS)
    # lowest 20 of the weights 64+32+16+8+4+2+20: about 150 * 20/146 = 20.5 of the claims;
    # highest's share (about 66) is more than its 60, and what it cannot give goes to very-high
    assert 12 <= weighted["lowest"] <= 30, weighted
    assert 50 <= weighted["highest"] <= 60, weighted
    assert weighted["very-high"] > weighted["high"], weighted

    # as before weights: 25 claims of 10 tasks at each priority take highest's, very-high's
    # and half of high's
    strict = await shares("strict", None, 25, count=4)
    assert strict == {"highest": 10, "very-high": 10, "high": 5}


async def test_claim_work_takes_the_weights_and_an_empty_drawn_queue_gives_way(
    flow: Flow,
) -> None:
    """Through the API: a weight of 1e9 draws lowest (another priority about once in 1e7
    draws); once lowest is empty the claim comes from the highest queue with hints."""
    coord = await flow.coordinator(run_resolvers=False, claim_work_timeout_ms=300)
    high = await flow.create(coord, priority="high")
    low = await flow.create(coord, priority="lowest")
    body = {**WORKER, "tasks": 1, "weights": {"lowest": 1e9}}
    claimed = []
    for _ in range(3):
        answer = await coord.ok("POST", f"/claim-work/{flow.prov}/{WT}", body)
        claimed.append([claim["status"]["taskId"] for claim in answer["tasks"]])
    assert claimed == [[low], [high], []]
