"""The Azurite emulator (queue and blob services) as a child process, for the tests, the
scripts and ``./scripts/dev``.

:class:`AzuriteProcess` owns one ``azurite`` process from the pinned npm package
(``node_modules/.bin/azurite``), serving queues (hints) and blobs (artifacts): it picks the
ports, starts the process, waits until both services answer HTTP, and stops it again; it can be
restarted on the same ports (with ``location`` queues and blobs survive a restart, with
in-memory persistence they do not). ``connection_string`` points at Azurite's well-known
``devstoreaccount1`` account and names both endpoints. Azurite cannot leave its table service
out, so that one listens on a port the system picks and nothing uses.

``python -m devharness.azurite [--location DIR] [--port N] [--blob-port N]`` runs Azurite in
the foreground for ``./scripts/dev``: it prints the connection string on stdout once Azurite
answers, and stops Azurite on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp

from devharness.ports import free_port
from devharness.processes import end_processes
from devharness.waiting import ProcessExited, WaitTimeout, wait_until_answers

logger = logging.getLogger(__name__)

ACCOUNT_NAME = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
"""Azurite's fixed development account and key (public, the same in every installation)."""

DEFAULT_NODE_MODULES = Path(__file__).resolve().parent.parent / "node_modules"
DEFAULT_PORT = 10001
"""Azurite's own default queue port, used by the command line."""
DEFAULT_BLOB_PORT = 10000
"""Azurite's own default blob port, used by the command line."""

_OUTPUT_TAIL_LINES = 40
READER_GRACE = 10.0
"""Seconds to wait for Azurite's output to close once the process has exited."""


class AzuriteError(Exception):
    """Azurite could not be started, or stopped answering."""


class AzuriteProcess:
    """One ``azurite`` child process serving queues and blobs.

    :param port: queue port; 0 picks a free one now, which then stays fixed across restarts.
    :param blob_port: blob port, chosen the same way.
    :param host: listening address.
    :param location: directory for persistent data (created if missing); ``None`` keeps
        everything in memory.
    :param node_modules: the directory where ``npm install`` put the pinned ``azurite``.
    :param start_timeout: seconds :meth:`start` waits for Azurite to answer.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        blob_port: int = 0,
        host: str = "127.0.0.1",
        location: Path | None = None,
        node_modules: Path = DEFAULT_NODE_MODULES,
        start_timeout: float = 30.0,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.blob_port = blob_port or _free_port_besides(host, self.port)
        self.location = location
        self.node_modules = node_modules
        self.start_timeout = start_timeout
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._output: collections.deque[str] = collections.deque(maxlen=_OUTPUT_TAIL_LINES)

    @property
    def endpoint(self) -> str:
        """The account's queue endpoint, as a connection string's ``QueueEndpoint``."""
        return f"http://{self.host}:{self.port}/{ACCOUNT_NAME}"

    @property
    def blob_endpoint(self) -> str:
        """The account's blob endpoint, as a connection string's ``BlobEndpoint``."""
        return f"http://{self.host}:{self.blob_port}/{ACCOUNT_NAME}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};"
            f"AccountKey={ACCOUNT_KEY};QueueEndpoint={self.endpoint};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    def command(self) -> list[str]:
        """The command line :meth:`start` runs."""
        command = [
            str(self.node_modules / ".bin" / "azurite"),
            "--queueHost",
            self.host,
            "--queuePort",
            str(self.port),
            "--blobHost",
            self.host,
            "--blobPort",
            str(self.blob_port),
            "--tableHost",
            self.host,
            # unused, and it cannot be switched off: the system picks its port
            "--tablePort",
            "0",
            # Node 20 machines run an Azurite older than the SDK's API version.
            "--skipApiVersionCheck",
            "--loose",
            # Azurite otherwise phones home; tests and dev must stay on 127.0.0.1.
            "--disableTelemetry",
            # The access log costs Node a lot under load and says nothing the SDK logs don't.
            "--silent",
        ]
        if self.location is None:
            command.append("--inMemoryPersistence")
        else:
            command += ["--location", str(self.location)]
        return command

    async def start(self) -> None:
        """Spawn Azurite and return once both its queue and blob services answer HTTP.

        Raises :class:`AzuriteError` (with Azurite's last output lines) if it exits or does
        not answer within ``start_timeout``.
        """
        if self.running:
            raise AzuriteError(f"Azurite is already running on port {self.port}")
        executable = self.node_modules / ".bin" / "azurite"
        if not executable.exists():
            raise AzuriteError(f"{executable} not found; run `npm ci` in the repository first")
        if self.location is not None:
            self.location.mkdir(parents=True, exist_ok=True)
        self._output.clear()
        self._process = await asyncio.create_subprocess_exec(
            *self.command(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._reader = asyncio.create_task(self._read_output(self._process))
        logger.info(
            "azurite starting pid=%s port=%s blob_port=%s location=%s",
            self._process.pid,
            self.port,
            self.blob_port,
            self.location or "memory",
        )
        process = self._process
        try:
            try:
                # Azurite opens both services together: the blob one answers soon after the
                # queue one does.
                for endpoint, server in (
                    (self.endpoint, "Azurite-Queue"),
                    (self.blob_endpoint, "Azurite-Blob"),
                ):
                    await wait_until_answers(
                        f"{endpoint}?comp=list",
                        within=self.start_timeout,
                        # An unauthenticated request is refused, but only Azurite says so with
                        # this header: something else may hold a port we picked.
                        accept=_served_by(server),
                        exit_code=lambda: process.returncode,
                    )
            except ProcessExited:
                raise AzuriteError(
                    f"Azurite exited while starting:\n{self.output_tail()}"
                ) from None
            except WaitTimeout:
                raise AzuriteError(
                    f"Azurite did not answer on {endpoint} within "
                    f"{self.start_timeout} s:\n{self.output_tail()}"
                ) from None
        except BaseException:
            await self.stop()
            raise
        logger.info(
            "azurite ready pid=%s endpoint=%s blob_endpoint=%s",
            self._process.pid,
            self.endpoint,
            self.blob_endpoint,
        )

    async def _read_output(self, process: asyncio.subprocess.Process) -> None:
        # Draining the pipe keeps Azurite from blocking on a full buffer; the tail explains a
        # failed start.
        assert process.stdout is not None
        async for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip()
            self._output.append(line)
            logger.debug("azurite output pid=%s line=%s", process.pid, line)

    def output_tail(self) -> str:
        """Azurite's last lines of output (for error messages)."""
        return "\n".join(self._output)

    async def wait(self) -> int:
        """Wait for the process to exit (on its own or through :meth:`stop`); its exit code."""
        if self._process is None:
            raise AzuriteError("Azurite was never started")
        return await self._process.wait()

    async def stop(self, *, grace: float = 5.0, signum: int = signal.SIGTERM) -> None:
        """End Azurite with ``signum`` (SIGKILL: as a crash, before it persists anything),
        killing it if it has not exited after ``grace`` seconds.

        Safe to call when it is not running.
        """
        process, reader = self._process, self._reader
        if process is None:
            return
        await end_processes([process], signum=signum, wait=grace)
        if reader is not None:
            # The pipe closes when the process exits and the reader then ends by itself, unless
            # something the process started still holds the pipe: never wait on that forever.
            try:
                await asyncio.wait_for(reader, timeout=READER_GRACE)
            except TimeoutError:
                logger.warning("azurite output still open %.0f s after exit", READER_GRACE)
        logger.info("azurite stopped pid=%s code=%s", process.pid, process.returncode)

    async def __aenter__(self) -> AzuriteProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


def _free_port_besides(host: str, taken: int) -> int:
    """A free port other than ``taken`` (which is free too until Azurite binds it)."""
    for _ in range(10):
        port = free_port(host)
        if port != taken:
            return port
    raise AzuriteError(f"no free port on {host} besides {taken}")


def _served_by(server: str) -> Callable[[aiohttp.ClientResponse], bool]:
    """Whether an answer comes from the Azurite service whose ``Server`` header starts so."""
    return lambda response: response.headers.get("Server", "").startswith(server)


async def _run_foreground(azurite: AzuriteProcess) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with azurite:
        print(azurite.connection_string, flush=True)
        stopped = asyncio.create_task(stop.wait())
        exited = asyncio.create_task(azurite.wait())
        await asyncio.wait({stopped, exited}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if exited.done():
            logger.error(
                "azurite exited unexpectedly code=%s\n%s", exited.result(), azurite.output_tail()
            )
            return 1
        exited.cancel()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devharness.azurite",
        description="Run the Azurite emulator (queues and blobs) in the foreground and print "
        "its connection string once it answers.",
    )
    parser.add_argument(
        "--location", type=Path, help="data directory (default: keep everything in memory)"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="queue port; 0 picks a free one"
    )
    parser.add_argument(
        "--blob-port", type=int, default=DEFAULT_BLOB_PORT, help="blob port; 0 picks a free one"
    )
    parser.add_argument("--host", default="127.0.0.1", help="listening address")
    parser.add_argument(
        "--node-modules", type=Path, default=DEFAULT_NODE_MODULES, help="where azurite is"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    azurite = AzuriteProcess(
        port=args.port,
        blob_port=args.blob_port,
        host=args.host,
        location=args.location,
        node_modules=args.node_modules,
    )
    try:
        return asyncio.run(_run_foreground(azurite))
    except AzuriteError as error:
        logger.error("azurite failed error=%s", error)
        return 1


if __name__ == "__main__":
    sys.exit(main())
