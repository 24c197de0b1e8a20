"""Row 1, the raw limit: put -> get (``batch`` at a time) -> delete straight against Azurite.

The harness process produces (``producers`` concurrent puts, keeping the queue ``depth``
deep); ``workers`` consumer processes (``python -m benchlib.raw``) each loop get -> delete
every message concurrently -> get, like an SDK worker's poll loop without the coordinator.
Two clients: ``rest`` (plain aiohttp with a SAS, :mod:`benchlib.azure_rest`) and ``sdk``
(``azure-storage-queue``'s async client). A message carries its send time; latency is send
-> delete done.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import aiohttp
from azure.storage.queue.aio import QueueClient, QueueServiceClient

from benchlib import azure_rest
from benchlib.common import (
    PYTHON,
    CpuMeter,
    DepthPacer,
    Row,
    Settings,
    azurite_group,
    latency_fields,
    own_process,
    pids,
)
from devharness.azurite import AzuriteProcess
from devharness.processes import child_env, end_processes, spawn
from devharness.waiting import WaitTimeout, wait_until

Client = Literal["rest", "sdk"]


# --- the consumer process ---------------------------------------------------------------------


class _Consumer:
    def __init__(self, *, batch: int, stop_at: float, drain_until: float) -> None:
        self.batch = batch
        self.stop_at = stop_at
        self.drain_until = drain_until
        self.done: list[tuple[float, float]] = []
        """(time.time() when deleted, seconds since sent)."""
        self.errors = 0
        self.stopping = False

    def finished(self, fetched: int) -> bool:
        now = time.time()
        return self.stopping or now >= self.drain_until or (now >= self.stop_at and not fetched)

    def record(self, text: str) -> None:
        sent = azure_rest.sent_at(text)
        now = time.time()
        if sent is not None:
            self.done.append((now, now - sent))


async def _consume_rest(consumer: _Consumer, endpoint: str, queue: str, sas: str) -> None:
    connector = aiohttp.TCPConnector(limit=consumer.batch + 4)
    async with aiohttp.ClientSession(connector=connector) as session:
        rest = azure_rest.RestQueue(session, endpoint, queue, sas)

        async def delete(message: azure_rest.Message) -> None:
            try:
                await rest.delete(message)
            except (aiohttp.ClientError, TimeoutError):
                consumer.errors += 1
                return
            consumer.record(message.text)

        fetched = -1
        while not consumer.finished(fetched):
            try:
                messages = await rest.get(consumer.batch)
            except (aiohttp.ClientError, TimeoutError):
                consumer.errors += 1
                await asyncio.sleep(0.1)
                continue
            fetched = len(messages)
            if not messages:
                await asyncio.sleep(0.05)
                continue
            await asyncio.gather(*(delete(m) for m in messages))


async def _consume_sdk(consumer: _Consumer, connection_string: str, queue: str) -> None:
    from azure.core.exceptions import AzureError

    async with QueueClient.from_connection_string(connection_string, queue) as client:

        async def delete(message: Any) -> None:
            try:
                await client.delete_message(message)
            except AzureError:
                consumer.errors += 1
                return
            consumer.record(str(message.content))

        fetched = -1
        while not consumer.finished(fetched):
            try:
                pages = client.receive_messages(
                    messages_per_page=consumer.batch,
                    max_messages=consumer.batch,
                    visibility_timeout=300,
                ).by_page()
                page = await anext(pages, None)
                messages = [] if page is None else [m async for m in page]
            except AzureError:
                consumer.errors += 1
                await asyncio.sleep(0.1)
                continue
            fetched = len(messages)
            if not messages:
                await asyncio.sleep(0.05)
                continue
            await asyncio.gather(*(delete(m) for m in messages))


def consumer_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchlib.raw")
    parser.add_argument("--client", choices=("rest", "sdk"), required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--connection-string", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--sas", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument(
        "--timeline", type=Path, required=True, help="JSON {stopAt, drainUntil}, epoch s"
    )
    parser.add_argument("--ready", type=Path, required=True, help="made once ready to consume")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    async def main() -> _Consumer:
        # The timeline is written once every consumer is ready, so that one slow to start (the
        # SDK's imports on a loaded machine) costs the warm-up nothing.
        args.ready.touch()
        await wait_until(args.timeline.exists, within=120, what="the row's timeline")
        times = json.loads(args.timeline.read_text())
        consumer = _Consumer(
            batch=args.batch, stop_at=times["stopAt"], drain_until=times["drainUntil"]
        )
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: setattr(consumer, "stopping", True))
        if args.client == "rest":
            await _consume_rest(consumer, args.endpoint, args.queue, args.sas)
        else:
            await _consume_sdk(consumer, args.connection_string, args.queue)
        return consumer

    consumer = asyncio.run(main())
    args.out.write_text(json.dumps({"done": consumer.done, "errors": consumer.errors}))
    return 0


# --- the row ----------------------------------------------------------------------------------


async def run(settings: Settings, azurite: AzuriteProcess, client: Client) -> Row:
    title = {
        "rest": "raw Azurite: put/get/delete, plain aiohttp + SAS",
        "sdk": "raw Azurite: put/get/delete, azure-storage-queue SDK",
    }[client]
    row = Row(key=f"raw-{client}", title=title, unit="msg/s")
    queue = f"bench-raw-{client}-{uuid.uuid4().hex[:8]}"
    workdir = settings.workdir / row.key
    workdir.mkdir(parents=True, exist_ok=True)
    sas = azure_rest.queue_sas(queue)
    service = QueueServiceClient.from_connection_string(azurite.connection_string)
    await service.create_queue(queue)
    consumers = []
    try:
        outs = [workdir / f"consumer-{i}.json" for i in range(settings.workers)]
        ready = [workdir / f"consumer-{i}.ready" for i in range(settings.workers)]
        timeline = workdir / "timeline.json"
        for i, out in enumerate(outs):
            consumers.append(
                await spawn(
                    [
                        PYTHON,
                        "-m",
                        "benchlib.raw",
                        f"--client={client}",
                        f"--endpoint={azurite.endpoint}",
                        f"--connection-string={azurite.connection_string}",
                        f"--queue={queue}",
                        f"--sas={sas}",
                        f"--batch={settings.batch}",
                        f"--timeline={timeline}",
                        f"--ready={ready[i]}",
                        f"--out={out}",
                    ],
                    env=child_env(),
                    log=workdir / f"consumer-{i}.log",
                )
            )
        await wait_until(
            lambda: all(path.exists() for path in ready),
            within=60,
            what="the consumers to start",
            interval=0.05,
        )
        begin = time.time()
        window_start = begin + settings.warmup
        stop_at = window_start + settings.duration
        drain_until = stop_at + settings.drain
        written = timeline.with_suffix(".tmp")
        written.write_text(json.dumps({"stopAt": stop_at, "drainUntil": drain_until}))
        written.replace(timeline)  # whole, or not yet there
        meter = CpuMeter(
            {
                "azurite": azurite_group(azurite.port),
                "consumers": pids(*consumers),
                "producer": own_process,
            }
        )
        row.depth_mean, row.depth_max = await _produce(
            settings, azurite, client, queue, sas, meter, begin, stop_at
        )
        with contextlib.suppress(WaitTimeout):
            await wait_until(
                lambda: all(c.returncode is not None for c in consumers),
                within=settings.drain + 5,
                what="the consumers to drain",
                interval=0.1,
            )
        await end_processes(consumers)
        done: list[tuple[float, float]] = []
        errors = 0
        for out in outs:
            with contextlib.suppress(OSError, ValueError):
                result = json.loads(out.read_text())
                done += [(float(t), float(lat)) for t, lat in result["done"]]
                errors += int(result["errors"])
        in_window = [t for t, _ in done if window_start <= t < stop_at]
        row.count = len(in_window)
        row.window = settings.duration
        row.rate = row.count / settings.duration
        # latency of messages sent inside the window (all of them were drained)
        latency_fields(row, [lat for t, lat in done if window_start <= t - lat < stop_at])
        meter.fill(row)
        if errors:
            row.notes.append(f"{errors} request errors")
    finally:
        await end_processes(consumers)
        with contextlib.suppress(Exception):
            await service.delete_queue(queue)
        await service.close()
    return row


async def _produce(
    settings: Settings,
    azurite: AzuriteProcess,
    client: Client,
    queue: str,
    sas: str,
    meter: CpuMeter,
    begin: float,
    stop_at: float,
) -> tuple[float | None, int | None]:
    """Keep the queue ``depth`` deep from ``begin`` to ``stop_at`` (epoch s); the CPU meter
    and the returned depth (mean, max) cover the window after the warm-up."""
    mono_stop = time.monotonic() + (stop_at - time.time())
    serial = itertools.count()
    connector = aiohttp.TCPConnector(limit=settings.producers + 4)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        QueueClient.from_connection_string(azurite.connection_string, queue) as sdk_queue,
    ):
        rest = azure_rest.RestQueue(session, azurite.endpoint, queue, sas)
        pacer = DepthPacer(rest.count, target=settings.depth)

        async def producer() -> None:
            while await pacer.acquire(mono_stop):
                text = azure_rest.bench_text(time.time(), next(serial))
                try:
                    if client == "rest":
                        await rest.put(text)
                    else:
                        await sdk_queue.send_message(text)
                except Exception as error:
                    print(f"bench: put failed: {error!r}", file=sys.stderr)
                    await asyncio.sleep(0.1)
                finally:
                    pacer.release()

        async def measure() -> tuple[float, float]:
            await asyncio.sleep(max(0.0, begin + settings.warmup - time.time()))
            meter.start()
            start = time.monotonic()
            await asyncio.sleep(max(0.0, stop_at - time.time()))
            meter.stop()
            return start, time.monotonic()

        gauge = asyncio.create_task(pacer.run(mono_stop))
        window = asyncio.create_task(measure())
        await asyncio.gather(*(producer() for _ in range(settings.producers)))
        start, end = await window
        await gauge
        return pacer.depth(start, end)


if __name__ == "__main__":
    sys.exit(consumer_main())
