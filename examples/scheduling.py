"""Scheduling beyond Taskcluster, from a producer's side: one createTasks request that holds a
task delayed by ``notBefore``, a task with its own ``retryDelay``, ``retryPriority`` and a short
``claimTimeout``, and a task that depends on another one of the same batch.

    export TASKCLUSTER_ROOT_URL=http://127.0.0.1:8080   # ./scripts/dev prints these three
    export TASKCLUSTER_CLIENT_ID=... TASKCLUSTER_ACCESS_TOKEN=...
    .venv/bin/python -m examples.scheduling
    .venv/bin/queue-worker --task-queue examples/scheduling examples.flaky:handle

The official ``taskcluster`` clients have no createTasks, so this uses ``worker_sdk``'s
:class:`~worker_sdk.client.CoordinatorClient`, which signs with the same credentials.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
from typing import Any

import aiohttp
import slugid

from worker_sdk import Credentials
from worker_sdk.client import CoordinatorClient

TASK_QUEUE = "examples/scheduling"


def _iso(moment: datetime.datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def definition(name: str, **fields: Any) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC)
    return {
        "taskQueueId": TASK_QUEUE,
        "created": _iso(now),
        "deadline": _iso(now + datetime.timedelta(hours=1)),
        "payload": {"name": name},
        "metadata": {
            "name": name,
            "description": "examples/scheduling.py",
            "owner": "examples@example.com",
            "source": "https://example.com/examples/scheduling",
        },
        **fields,
    }


async def main() -> None:
    now = datetime.datetime.now(datetime.UTC)
    first, delayed, careful, after = (slugid.nice() for _ in range(4))
    tasks = {
        first: definition("first"),
        # not claimable for a minute: counted as delayed, its hint invisible until then
        delayed: definition("delayed", notBefore=_iso(now + datetime.timedelta(minutes=1))),
        # retries wait 5 s, 10 s, 20 s ... at most a minute, queued at low priority; a dead
        # worker's claim expires after 30 s instead of the coordinator's 20 minutes
        careful: definition(
            "careful",
            payload={"name": "careful", "fail_runs": 2},  # examples.flaky: RetryTask twice
            priority="high",
            retries=3,
            retryDelay={"base": 5, "factor": 2, "max": 60},
            retryPriority="low",
            claimTimeout=30,
        ),
        # scheduled once `first` completes, though both arrive in the same request
        after: definition("after", dependencies=[first]),
    }
    credentials = Credentials(
        client_id=os.environ["TASKCLUSTER_CLIENT_ID"],
        access_token=os.environ["TASKCLUSTER_ACCESS_TOKEN"],
    )
    async with aiohttp.ClientSession() as session:
        client = CoordinatorClient(
            session=session, root_url=os.environ["TASKCLUSTER_ROOT_URL"], credentials=credentials
        )
        for result in await client.create_tasks(tasks):
            state = result["status"]["state"] if "status" in result else result["error"]
            print(result["taskId"], json.dumps(state))


if __name__ == "__main__":
    asyncio.run(main())
