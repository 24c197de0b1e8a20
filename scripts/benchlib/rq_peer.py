"""Row 4, a peer: RQ on the local Redis, the same number of no-op jobs and worker processes.

``workers`` ``rq worker`` processes on a queue of their own: RQ's default ``Worker`` (forks a
work horse per job) or its ``SimpleWorker`` (runs jobs in the worker process). The harness
enqueues ``jobs`` calls of :func:`benchlib.noop.job`, keeping the Redis list ``depth`` long,
and waits until all have finished or ``warmup + duration + drain`` has passed. Rate =
finished jobs / (last end - first enqueue); latency = ``enqueued_at`` -> ``ended_at``. Every
key the row made is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path

from redis import Redis
from rq import Queue, Worker
from rq.job import Job
from rq.registry import FinishedJobRegistry

from benchlib.common import (
    PYTHON,
    CpuMeter,
    Row,
    Settings,
    latency_fields,
    own_process,
    pids,
    processes_named,
)
from devharness.processes import child_env, end_processes, spawn
from devharness.waiting import WaitTimeout, wait_until


async def run(settings: Settings, jobs: int, *, simple: bool = False) -> Row:
    """:param simple: RQ's ``SimpleWorker`` (jobs run in the worker process) instead of its
    default ``Worker`` (a forked work horse per job)."""
    worker_class = "rq.worker.SimpleWorker" if simple else "rq.worker.Worker"
    row = Row(
        key="rq-simple" if simple else "rq",
        title=f"peer: RQ {worker_class.rsplit('.', 1)[-1]} on Redis, no-op jobs",
        unit="jobs/s",
    )
    workdir = settings.workdir / row.key
    name = f"bench-{uuid.uuid4().hex[:8]}"
    redis = Redis.from_url(settings.redis_url)
    queue = Queue(name, connection=redis)
    rq_command = str(Path(PYTHON).parent / "rq")
    workers = [
        await spawn(
            [
                rq_command,
                "worker",
                f"--url={settings.redis_url}",
                f"--worker-class={worker_class}",
                f"--name={name}-{i}",
                "--logging_level=WARNING",
                "--disable-job-desc-logging",
                name,
            ],
            env=child_env(),
            log=workdir / f"rq-worker-{i}.log",
        )
        for i in range(settings.workers)
    ]
    ids: list[str] = []

    def registered() -> bool:
        if any(w.returncode is not None for w in workers):
            raise RuntimeError("an RQ worker exited before it registered")
        return len(Worker.all(queue=queue)) >= settings.workers

    try:
        await wait_until(registered, within=30, what="the RQ workers to register", interval=0.1)
        meter = CpuMeter(
            {
                "rq workers": pids(*workers),
                "redis": lambda: processes_named("redis-server"),
                "producer": own_process,
            }
        )
        finished = FinishedJobRegistry(queue=queue)
        depths: list[int] = []
        limit = time.monotonic() + settings.warmup + settings.duration + settings.drain
        meter.start()
        begin = time.monotonic()
        while len(ids) < jobs and time.monotonic() < limit:
            depth = int(redis.llen(queue.key))
            depths.append(depth)
            room = min(settings.depth - depth, jobs - len(ids), settings.producers * 8)
            if room <= 0:
                await asyncio.sleep(0.005)
                continue
            for _ in range(room):
                ids.append(queue.enqueue("benchlib.noop.job", result_ttl=900).id)
        with contextlib.suppress(WaitTimeout):
            await wait_until(
                lambda: finished.count >= len(ids),
                within=limit - time.monotonic(),
                what="the jobs to finish",
                interval=0.02,
            )
        meter.stop()
        elapsed = time.monotonic() - begin
        done = [
            (job.enqueued_at, job.ended_at)
            for job in Job.fetch_many(ids, connection=redis)
            if job is not None and job.ended_at is not None and job.enqueued_at is not None
        ]
        row.count = len(done)
        if done:
            first = min(enqueued for enqueued, _ in done)
            last = max(ended for _, ended in done)
            row.window = (last - first).total_seconds()
            row.rate = row.count / row.window if row.window > 0 else None
            latency_fields(row, [(ended - enqueued).total_seconds() for enqueued, ended in done])
        else:
            row.window = elapsed
        if depths:
            row.depth_mean, row.depth_max = sum(depths) / len(depths), max(depths)
        meter.fill(row)
        row.notes.append(f"{row.count} of {jobs} jobs finished within the time bound")
    finally:
        await end_processes(workers)
        _clean(redis, name, ids)
        redis.close()
    return row


def _clean(redis: Redis, name: str, ids: list[str]) -> None:
    """Delete the jobs, their results and every key of the queue."""
    with contextlib.suppress(Exception):
        pipe = redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.delete(f"rq:job:{job_id}", f"rq:results:{job_id}")
        pipe.execute()
        keys = list(redis.scan_iter(match=f"*{name}*", count=1000))
        if keys:
            redis.delete(*keys)
        redis.srem("rq:queues", f"rq:queue:{name}")
