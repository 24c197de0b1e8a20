"""The event publisher's own process: ``python -m coordinator.cli.publish_events``, which
``serve`` starts (never a user), and :class:`PublisherProcess`, the API process's side of it.

With ``COORDINATOR_PULSE_URL`` set and ``COORDINATOR_PULSE_IN_PROCESS`` off, the API process
only writes the outbox (in each change's transaction); this child opens the same store and the
broker and runs the event publisher actor alone, so publishing (pika's frames, the outbox's
reads and deletes) takes another core than the API's (docs/events.md#the-publisher-process).

The child talks to its parent through its standard streams: it reports what it published as
one JSON line per pass that did something on stdout (:class:`CountsRelay`), which the parent
adds to its own ``/metrics``; it stops when its stdin ends, so a parent killed with SIGKILL
leaves no publisher behind, and on SIGTERM (it ignores SIGINT). Its log lines go to the
parent's stderr.

The parent restarts a child that exits with a growing delay
(:class:`~coordinator.cli.restarts.RestartDelays`), one warning each time, and on shutdown
closes its stdin, sends SIGTERM and reaps it (SIGKILL after :data:`STOP_WAIT` seconds).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import sys
from typing import IO

import glibc_malloc
from coordinator.cli.restarts import RestartDelays
from coordinator.config import Config, ConfigurationError
from coordinator.logs import configure_logging
from coordinator.pulse.publisher import PulsePublisher
from coordinator.resolvers import event_publisher
from coordinator.resolvers.runner import Runner
from coordinator.service.clock import wall_clock
from coordinator.service.event_outbox import EventOutbox
from coordinator.service.metrics import ServiceMetrics
from coordinator.store.factory import open_store

log = logging.getLogger(__name__)

MODULE = "coordinator.cli.publish_events"

STOP_WAIT = 10.0
"""Seconds a stopped child has to finish its pass and close before it is SIGKILLed."""


class CountsRelay:
    """The publisher's counts in the child: kept per pass and written to stdout as one JSON
    line (``{"acted": n, "published": {exchange: n}, "parked": {...}, "depth": n}``) after
    each pass that changed any of them."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._published: collections.Counter[str] = collections.Counter()
        self._parked: collections.Counter[str] = collections.Counter()
        self._depth: int | None = None

    def event_published(self, exchange: str, count: int = 1) -> None:
        self._published[exchange] += count

    def event_parked(self, exchange: str, count: int = 1) -> None:
        self._parked[exchange] += count

    def set_outbox_depth(self, depth: int) -> None:
        self._depth = depth

    def passed(self, actor: str, count: int) -> None:
        """After each pass (the runner's observer): send what it changed."""
        if not (count or self._published or self._parked or self._depth is not None):
            return
        line = {"acted": count, "published": self._published, "parked": self._parked}
        if self._depth is not None:
            line["depth"] = self._depth
        self._out.write(json.dumps(line).encode() + b"\n")
        self._out.flush()
        self._published, self._parked = collections.Counter(), collections.Counter()
        self._depth = None


def apply_counts(line: bytes, metrics: ServiceMetrics) -> None:
    """Add one line of :class:`CountsRelay` to the API process's metrics."""
    counts = json.loads(line)
    metrics.resolver_acted(event_publisher.NAME, counts["acted"])
    for exchange, count in counts["published"].items():
        metrics.event_published(exchange, count)
    for exchange, count in counts["parked"].items():
        metrics.event_parked(exchange, count)
    if "depth" in counts:
        metrics.set_outbox_depth(counts["depth"])


class PublisherProcess:
    """The API process's child that publishes the outbox: started, restarted when it exits,
    stopped and reaped.

    :param config: the coordinator's settings; the child gets the store and the broker's URLs
        (through its environment, never its command line, which every user can read).
    :param metrics: the API process's metrics, to which the child's counts are added.
    """

    def __init__(self, config: Config, metrics: ServiceMetrics) -> None:
        assert config.pulse_url is not None
        self._env = {
            **os.environ,
            "COORDINATOR_STORE_URL": config.store_url,
            "COORDINATOR_PULSE_URL": config.pulse_url,
            "COORDINATOR_LOG_LEVEL": logging.getLevelName(logging.getLogger().getEffectiveLevel()),
        }
        self._metrics = metrics
        self._stopping = asyncio.Event()
        self._supervising: asyncio.Task[None] | None = None
        self.process: asyncio.subprocess.Process | None = None
        """The child running now (tests kill it)."""

    def start(self) -> None:
        self._supervising = asyncio.get_running_loop().create_task(self._supervise())

    async def _supervise(self) -> None:
        delays = RestartDelays()
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            started = loop.time()
            ended = await self._run_one()
            if ended is None:
                return
            delay = delays.after(loop.time() - started)
            log.warning("event publisher process %s: restarting it in %.0f s", ended, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    async def _run_one(self) -> str | None:
        """Start a child and relay its counts until it exits; how it ended, or ``None`` if
        it was stopped."""
        try:
            process = self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                MODULE,
                env=self._env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        except OSError as error:  # no fork or exec now (memory, process limits)
            return f"did not start error={error!r}"
        if self._stopping.is_set():  # stopped while it started
            await _end(process)
            return None
        await self._relay(process)
        status = await process.wait()
        return None if self._stopping.is_set() else f"exited pid={process.pid} status={status}"

    async def _relay(self, process: asyncio.subprocess.Process) -> None:
        """Add the child's counts to the metrics until its stdout ends."""
        assert process.stdout is not None
        async for line in process.stdout:
            try:
                apply_counts(line, self._metrics)
            except (ValueError, KeyError, TypeError) as error:
                log.warning("event publisher process wrote an unreadable line error=%r", error)

    async def stop(self) -> None:
        """Stop the child (its current pass finishes) and reap it; no restart after."""
        self._stopping.set()
        if self.process is not None:
            await _end(self.process)
        if self._supervising is not None:
            await self._supervising


async def _end(process: asyncio.subprocess.Process) -> None:
    """Close the child's stdin and SIGTERM it; SIGKILL it after :data:`STOP_WAIT` seconds;
    reap it."""
    if process.returncode is not None:
        return
    if process.stdin is not None:
        process.stdin.close()
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        await asyncio.wait_for(process.wait(), STOP_WAIT)
    except TimeoutError:
        log.warning("event publisher process outlived SIGTERM pid=%d", process.pid)
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def _until_stopped(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGTERM or the end of stdin (the parent is stopping it, or has
    gone)."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    # A terminal's ^C reaches the parent too, which stops this child in its own shutdown: the
    # child ending first would look like a crash to restart.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    ended = loop.create_task(reader.read())  # the parent writes nothing: this is its end
    ended.add_done_callback(lambda _: stop.set())
    await stop.wait()
    ended.cancel()


async def _publish(config: Config) -> None:
    assert config.pulse_url is not None
    stop = asyncio.Event()
    store = await open_store(config.store_url)
    publisher = PulsePublisher(config.pulse_url)
    relay = CountsRelay(sys.stdout.buffer)
    outbox = EventOutbox(store=store, publisher=publisher, metrics=relay, clock=wall_clock)
    runner = Runner([event_publisher.actor(outbox)], on_pass=relay.passed)
    runner.start()
    try:
        await _until_stopped(stop)
    finally:
        await runner.stop()
        await publisher.close()
        await store.close()


def main() -> int:
    """The child's entry point: the settings of its environment, published until stopped."""
    try:
        config = Config.from_env(os.environ)
        configure_logging(level=os.environ.get("COORDINATOR_LOG_LEVEL", "INFO"), env=os.environ)
        if config.pulse_url is None:
            raise ConfigurationError("COORDINATOR_PULSE_URL is unset: there is nothing to publish")
        glibc_malloc.keep_heap_flat()
        asyncio.run(_publish(config))
    except ConfigurationError as error:
        print(f"queue-coordinator publish-events: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass  # SIGINT before it was ignored: nothing to stop yet
    return 0


if __name__ == "__main__":
    sys.exit(main())
