"""The peers' side of the no-op job: the Celery app, the Dramatiq broker and actor, and the
procrastinate app that their worker processes load (``celery -A
benchlib.peer_apps:celery_app``, ``dramatiq benchlib.peer_apps:dramatiq_broker``,
``procrastinate --app benchlib.peer_apps.procrastinate_app``), each set up as its
documentation recommends for throughput (docs/performance.md says which settings). Only the
peer a process runs is built: the others' libraries are not even imported.

Environment of a worker process: ``BENCH_PEER`` (celery, dramatiq or procrastinate),
``BENCH_QUEUE`` (the queue's name), ``BENCH_REDIS_URL`` (Celery's and Dramatiq's broker),
``BENCH_POSTGRES_DSN`` (procrastinate's database).
"""

from __future__ import annotations

import os
from typing import Any

from benchlib.noop import job


def celery(redis_url: str, queue: str) -> tuple[Any, Any]:
    """The Celery app and its no-op task."""
    from celery import Celery

    app = Celery("bench", broker=redis_url)
    app.conf.update(
        # Celery's optimizing guide: no result backend for results nobody reads, a higher
        # prefetch for many short tasks, acknowledgement on receipt (the default).
        task_ignore_result=True,
        worker_prefetch_multiplier=16,
        task_acks_late=False,
        task_default_queue=queue,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return app, app.task(name="bench.noop")(job)


def dramatiq(redis_url: str, queue: str) -> tuple[Any, Any]:
    """The Dramatiq broker and its no-op actor."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker
    from dramatiq.middleware import (
        AgeLimit,
        Callbacks,
        Pipelines,
        Retries,
        ShutdownNotifications,
        TimeLimit,
    )

    # The default middleware less Prometheus (an HTTP exporter per worker process).
    broker = RedisBroker(  # type: ignore[no-untyped-call]
        url=redis_url,
        middleware=[
            *(AgeLimit(), TimeLimit(), ShutdownNotifications(), Callbacks(), Pipelines()),
            Retries(max_retries=0),
        ],
    )
    dramatiq.set_broker(broker)
    return broker, dramatiq.actor(actor_name="noop", queue_name=queue, broker=broker)(job)


def procrastinate(dsn: str, queue: str) -> tuple[Any, Any]:
    """The procrastinate app and its no-op task (an ``async def``: the worker runs it on its
    event loop)."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    async def noop(sent_at: float | None = None) -> None:
        job(sent_at)

    return app, app.task(name="noop", queue=queue)(noop)


# In a peer's worker process: its app, for its command line to load.
celery_app: Any = None
dramatiq_broker: Any = None
procrastinate_app: Any = None
_PEER, _QUEUE = os.environ.get("BENCH_PEER", ""), os.environ.get("BENCH_QUEUE", "bench")
if _PEER == "celery":
    celery_app, _ = celery(os.environ["BENCH_REDIS_URL"], _QUEUE)
elif _PEER == "dramatiq":
    dramatiq_broker, _ = dramatiq(os.environ["BENCH_REDIS_URL"], _QUEUE)
elif _PEER == "procrastinate":
    procrastinate_app, _ = procrastinate(os.environ["BENCH_POSTGRES_DSN"], _QUEUE)
