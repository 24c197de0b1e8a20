"""The soak's Pulse listener: what the coordinators published about the soak's tasks, as a
Taskcluster user receives it.

:class:`EventLog` connects to the broker itself (not through the proxy the soak cuts), binds
an exclusive queue to every task exchange with the soak's route (``route.<route>``: every soak
task carries it in ``routes``) and records which exchanges each task's messages came through.
:func:`soaklib.checks.check_events` compares that with the tasks' final states.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from typing import Any

import aio_pika
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection

from coordinator.domain.events import EXCHANGE_PREFIX, TASK_EXCHANGES


class EventLog:
    """The soak's task messages: ``seen[taskId]`` is the set of exchange names (``task-defined``,
    ``task-pending``, ...) a message of that task came through; ``received`` counts them all."""

    def __init__(self, amqp_url: str, route: str) -> None:
        self.amqp_url = amqp_url
        self.route = route
        self.seen: defaultdict[str, set[str]] = defaultdict(set)
        self.received = 0
        self._connection: AbstractRobustConnection | None = None

    async def start(self) -> None:
        self._connection = await aio_pika.connect_robust(self.amqp_url)
        channel = await self._connection.channel()
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        for name in TASK_EXCHANGES:
            exchange = await channel.declare_exchange(
                EXCHANGE_PREFIX + name, aio_pika.ExchangeType.TOPIC, durable=True
            )
            await queue.bind(exchange, routing_key=f"route.{self.route}")
        await queue.consume(self._on_message, no_ack=True)

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        body: Any = json.loads(message.body)
        task_id = body.get("status", {}).get("taskId") if isinstance(body, dict) else None
        if task_id:
            self.received += 1
            self.seen[task_id].add((message.exchange or "").removeprefix(EXCHANGE_PREFIX))

    async def wait_for(self, wanted: dict[str, set[str]], *, within: float) -> None:
        """Wait until every task of ``wanted`` was seen on each of its exchanges, or
        ``within`` seconds."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if all(names <= self.seen.get(task_id, set()) for task_id, names in wanted.items()):
                return
            await asyncio.sleep(0.5)

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()
