"""The events rows (docs/events.md): what publishing Taskcluster's Pulse messages costs end to
end, and how fast the outbox drains after a broker outage.

``events-<store>`` runs a ``queue-coordinator serve`` process without Azure and without
authentication twice on a fresh store (a SQLite file, or a throwaway PostgreSQL database):
publishing off, then on (``COORDINATOR_PULSE_URL`` through a local TCP proxy,
devharness/tcp_proxy.py, to the test broker ``COORDINATOR_TEST_AMQP``). Each time
:data:`CLIENTS` concurrent clients drive new tasks through createTask, claimTask and
reportCompleted (four messages a task: task-defined, -pending, -running, -completed) for
``warmup`` + ``duration`` seconds; the rows count the lives finished in the window:

* ``events-<store>-off`` and ``events-<store>-on``: lifecycles/s; their ratio is the cost of
  publishing. With publishing on, a queue of the broker bound to the four exchanges for the
  run's task group collects the messages (nobody consumes them, so the bench's own process
  spends nothing on receiving), and the note says how long after the last change the last
  message arrived.
* ``events-<store>-drain``: the proxy is severed, the clients drive tasks for ``duration``
  seconds while every message waits in the outbox, the proxy is restored and the drain is
  timed until the queue holds every message: messages/s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aio_pika
import aiohttp
import psutil

from benchlib.common import (
    CpuMeter,
    Row,
    Settings,
    latency_fields,
    own_process,
    postgres_backends,
    processes_named,
    serve_group,
)
from benchlib.coordproc import Coordinator, StoreKind, coordinator, new_task_id
from devharness.api import call
from devharness.tasks import task_definition
from devharness.tcp_proxy import TcpProxy

AMQP_URL = os.environ.get("COORDINATOR_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")
EXCHANGE_PREFIX = "exchange/taskcluster-queue/v1/"
EXCHANGES = ("task-defined", "task-pending", "task-running", "task-completed")
"""The four messages of a task's life: created (defined, pending), claimed, completed."""


def broker_processes() -> list[psutil.Process]:
    """The CPU group of the RabbitMQ broker at :data:`AMQP_URL` (the whole ``beam.smp``)."""
    return processes_named("beam.smp")


CLIENTS = 32
"""Concurrent clients, each driving one task at a time through its life."""

DELIVERY_WITHIN = 120.0
"""Seconds the row waits for the last message before it gives up."""


@dataclass
class Drive:
    """What the clients did: lives finished (in the window), their latencies, and how many
    messages the broker should get for everything they did (in the window or not)."""

    lifecycles: int = 0
    messages: int = 0
    latencies: list[float] = field(default_factory=list)
    last_change: float = 0.0


class MessageCount:
    """A queue of the broker bound to :data:`EXCHANGES` for one task group, never consumed:
    how many messages it holds."""

    def __init__(self, channel: aio_pika.abc.AbstractChannel, name: str) -> None:
        self._channel = channel
        self.name = name

    @classmethod
    @contextlib.asynccontextmanager
    async def bound(cls, group: str) -> AsyncIterator[MessageCount]:
        connection = await aio_pika.connect(AMQP_URL)
        try:
            channel = await connection.channel()
            queue = await channel.declare_queue(exclusive=True)
            for name in EXCHANGES:
                exchange = await channel.declare_exchange(
                    EXCHANGE_PREFIX + name, aio_pika.ExchangeType.TOPIC, durable=True
                )
                await queue.bind(exchange, routing_key=f"primary.*.*.*.*.*.*.*.{group}.#")
            yield cls(channel, queue.name)
        finally:
            await connection.close()

    async def count(self) -> int:
        queue = await self._channel.get_queue(self.name, ensure=True)
        result = queue.declaration_result
        return int(result.message_count or 0)

    async def wait_for(self, expected: int, within: float = DELIVERY_WITHIN) -> float:
        """Poll until the queue holds ``expected`` messages; the monotonic time it did.

        :raises TimeoutError: it did not within ``within`` seconds.
        """
        deadline = time.monotonic() + within
        while (count := await self.count()) < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the broker got {count} of {expected} messages")
            await asyncio.sleep(0.02)
        return time.monotonic()


async def drive(
    session: aiohttp.ClientSession,
    running: Coordinator,
    group: str,
    *,
    start: float,
    stop: float,
) -> Drive:
    """:data:`CLIENTS` clients drive tasks of ``group`` through their life until monotonic
    ``stop``; lives finished from ``start`` on are counted."""
    done = Drive()
    api = running.api
    definition = task_definition(taskGroupId=group)
    claim_body = {"workerGroup": "bench", "workerId": "events"}

    async def step(method: str, path: str, body: object = None) -> None:
        answer = await call(session, method, api + path, body)
        if answer.status != 200:
            raise RuntimeError(f"{method} {path} -> {answer.status}: {str(answer.body)[:300]}")

    async def client() -> None:
        while (began := time.monotonic()) < stop:
            task_id = new_task_id()
            await step("PUT", f"/task/{task_id}", definition)
            done.messages += 2
            await step("POST", f"/task/{task_id}/runs/0/claim", claim_body)
            done.messages += 1
            await step("POST", f"/task/{task_id}/runs/0/completed")
            done.messages += 1
            done.last_change = finished = time.monotonic()
            if began >= start:
                done.lifecycles += 1
                done.latencies.append(finished - began)

    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return done


def _meter(running: Coordinator, store: StoreKind, *, broker: bool) -> CpuMeter:
    groups = {
        "coordinator": serve_group(running.process),
        "publisher": serve_group(running.process, publisher=True),
        "client": own_process,
    }
    if broker:
        groups["rabbitmq"] = broker_processes
    if store == "postgres":
        groups["postgres"] = postgres_backends(running.database)
    return CpuMeter(groups)


async def _window(
    settings: Settings,
    running: Coordinator,
    store: StoreKind,
    session: aiohttp.ClientSession,
    group: str,
    row: Row,
    *,
    broker: bool,
) -> Drive:
    """Drive for ``warmup`` + ``duration``, metering and counting the last ``duration``."""
    meter = _meter(running, store, broker=broker)
    start = time.monotonic() + settings.warmup
    stop = start + settings.duration

    async def metered() -> None:
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        meter.start()
        await asyncio.sleep(max(0.0, stop - time.monotonic()))
        meter.stop()

    done, _ = await asyncio.gather(
        drive(session, running, group, start=start, stop=stop), metered()
    )
    row.count = done.lifecycles
    row.window = settings.duration
    row.rate = done.lifecycles / settings.duration
    latency_fields(row, done.latencies)
    meter.fill(row)
    return done


async def run(settings: Settings, store: StoreKind) -> list[Row]:
    label = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[store]
    key = f"events-{store}"
    life = "createTask + claimTask + reportCompleted, no Azure"
    off = Row(
        key=f"{key}-off", title=f"events, {label}: publishing off ({life})", unit="lifecycles/s"
    )
    on = Row(key=f"{key}-on", title=f"events, {label}: publishing on ({life})", unit="lifecycles/s")
    drain = Row(
        key=f"{key}-drain",
        title=f"events, {label}: outbox drain after an outage",
        unit="messages/s",
    )
    for publishing, row in ((False, off), (True, on)):
        workdir = settings.workdir / f"{key}-{'on' if publishing else 'off'}"
        profile = workdir / "coordinator.pyisession" if settings.profile else None
        proxy = TcpProxy.in_front_of(AMQP_URL, default_port=5672)
        await proxy.start()
        pulse = {"COORDINATOR_PULSE_URL": proxy.url_through(AMQP_URL)} if publishing else {}
        group = new_task_id()
        try:
            async with (
                coordinator(
                    settings,
                    store=store,
                    workdir=workdir,
                    azure_connection_string=None,
                    profile=profile,
                    env=pulse,
                ) as running,
                MessageCount.bound(group) as queue,
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS + 8)) as session,
            ):
                done = await _window(
                    settings, running, store, session, group, row, broker=publishing
                )
                row.notes.append(f"{CLIENTS} concurrent clients, 3 requests per lifecycle")
                if not publishing:
                    continue
                arrived = await queue.wait_for(done.messages)
                row.notes.append(
                    f"{done.messages} messages; the last arrived "
                    f"{arrived - done.last_change:.2f} s after the last change"
                )
                await _outage(settings, running, store, session, proxy, drain)
        finally:
            await proxy.close()
    return [off, on, drain]


async def _outage(
    settings: Settings,
    running: Coordinator,
    store: StoreKind,
    session: aiohttp.ClientSession,
    proxy: TcpProxy,
    row: Row,
) -> None:
    """The broker away for ``duration`` seconds of driving, then back: the drain's rate."""
    group = new_task_id()
    async with MessageCount.bound(group) as queue:
        await proxy.sever()
        now = time.monotonic()
        done = await drive(session, running, group, start=now, stop=now + settings.duration)
        meter = _meter(running, store, broker=True)
        restored = time.monotonic()
        await proxy.restore()
        # timed from the first message the broker holds: the publisher tries to reconnect
        # once a second (coordinator.pulse.publisher.RETRY_EVERY), which is not the drain
        began = await queue.wait_for(1)
        meter.start()
        drained = await queue.wait_for(done.messages)
        meter.stop()
        row.count = done.messages
        row.window = drained - began
        row.rate = done.messages / row.window
        meter.fill(row)
        row.notes.append(
            f"{done.messages} messages waited in the outbox ({done.lifecycles} lifecycles "
            f"driven with the broker away); the first arrived {began - restored:.2f} s after "
            "the broker was back"
        )
