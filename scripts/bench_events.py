"""Pulse publishing figures (docs/events.md): the end-to-end rate of tasks driven through
createTask, claimTask and reportCompleted with publishing off and on, and how fast the
outbox drains after a broker outage.

    .venv/bin/python scripts/bench_events.py [--tasks 2000] [--concurrency 32]
        [--store sqlite|postgres]

A ``queue-coordinator serve`` process started as the bench's rows start theirs
(``benchlib.coordproc.coordinator``): without Azure and without authentication, on a fresh
SQLite file (or a throwaway PostgreSQL database), publishing through a local TCP proxy
(devharness/tcp_proxy.py) to the test broker (``COORDINATOR_TEST_AMQP``). The outage: the
proxy is severed, the tasks are driven (their messages wait in the outbox), the proxy is
restored, and the drain is timed until a listener bound to the run's task group has received
every message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import aio_pika
import aiohttp
import slugid

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib.common import Settings
from benchlib.coordproc import coordinator

from devharness.api import call
from devharness.tasks import task_definition
from devharness.tcp_proxy import TcpProxy

AMQP_URL = os.environ.get("COORDINATOR_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")
EXCHANGE = "exchange/taskcluster-queue/v1/"
PER_TASK = 4  # task-defined, task-pending, task-running, task-completed


class Counter:
    """An exclusive queue bound to the four task exchanges for one task group."""

    def __init__(self, target: int) -> None:
        self.count = 0
        self.target = target
        self.reached = asyncio.Event()

    async def start(self, group: str) -> aio_pika.abc.AbstractConnection:
        connection = await aio_pika.connect(AMQP_URL)
        channel = await connection.channel()
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        for name in ("task-defined", "task-pending", "task-running", "task-completed"):
            exchange = await channel.declare_exchange(
                EXCHANGE + name, aio_pika.ExchangeType.TOPIC, durable=True
            )
            await queue.bind(exchange, routing_key=f"primary.*.*.*.*.*.*.*.{group}.#")

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            self.count += 1
            if self.count >= self.target:
                self.reached.set()

        await queue.consume(on_message, no_ack=True)
        return connection


async def drive(
    session: aiohttp.ClientSession, api: str, count: int, concurrency: int, group: str
) -> float:
    """Drive ``count`` tasks through their life; the seconds it took."""
    todo = iter(range(count))

    async def one_worker() -> None:
        for _ in todo:
            task_id = slugid.nice()
            created = await call(
                session, "PUT", f"{api}/task/{task_id}", task_definition(taskGroupId=group)
            )
            assert created.status == 200, created.body
            claim = await call(
                session,
                "POST",
                f"{api}/task/{task_id}/runs/0/claim",
                {"workerGroup": "wg", "workerId": "w"},
            )
            assert claim.status == 200, claim.body
            done = await call(session, "POST", f"{api}/task/{task_id}/runs/0/completed")
            assert done.status == 200, done.body

    started = time.monotonic()
    await asyncio.gather(*(one_worker() for _ in range(concurrency)))
    return time.monotonic() - started


async def run(args: argparse.Namespace) -> dict[str, float]:
    figures: dict[str, float] = {}
    for publishing in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            proxy = TcpProxy.in_front_of(AMQP_URL, default_port=5672)
            await proxy.start()
            pulse = {"COORDINATOR_PULSE_URL": proxy.url_through(AMQP_URL)} if publishing else {}
            async with coordinator(
                Settings(coordinator_log_level="WARNING"),
                store=args.store,
                workdir=directory,
                azure_connection_string=None,
                profile=None,
                **pulse,
            ) as serve:
                counter = Counter(args.tasks * PER_TASK)
                group = slugid.nice()
                listening = await counter.start(group)
                async with aiohttp.ClientSession() as session:
                    seconds = await drive(session, serve.api, args.tasks, args.concurrency, group)
                    label = "on" if publishing else "off"
                    figures[f"e2e_tasks_per_s_publishing_{label}"] = args.tasks / seconds
                    if publishing:
                        started = time.monotonic()
                        await counter.reached.wait()
                        figures["messages_delivered_after_run_s"] = time.monotonic() - started
                        # the outage: messages wait in the outbox, then drain
                        await proxy.sever()
                        group = slugid.nice()
                        await listening.close()
                        counter = Counter(args.tasks * PER_TASK)
                        listening = await counter.start(group)
                        seconds = await drive(
                            session, serve.api, args.tasks, args.concurrency, group
                        )
                        # the cost of writing the outbox alone, nothing published meanwhile
                        figures["e2e_tasks_per_s_broker_away"] = args.tasks / seconds
                        await asyncio.sleep(1)
                        started = time.monotonic()
                        await proxy.restore()
                        await counter.reached.wait()
                        drained = time.monotonic() - started
                        figures["outbox_backlog_messages"] = args.tasks * PER_TASK
                        figures["outbox_drain_messages_per_s"] = args.tasks * PER_TASK / drained
                await listening.close()
            await proxy.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()
    figures = asyncio.run(run(args))
    print(
        json.dumps(
            {
                "store": args.store,
                "tasks": args.tasks,
                **{k: round(v, 1) for k, v in figures.items()},
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
