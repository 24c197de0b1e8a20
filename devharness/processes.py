"""Child processes: their environment, starting one with its output appended to a log file,
ending them with bounded waits (the signal, then SIGKILL, then give up and say so: a harness
never hangs on a child), and ``queue-coordinator serve`` as a restartable child
(:class:`ServeProcess`) whose environment is built here and nowhere else; :func:`serving`
runs one on a given store for the measurement scripts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path

from coordinator.service.clients_file import ensure_root_client
from devharness.api import API
from devharness.ports import free_port
from devharness.waiting import ProcessExited, WaitTimeout, wait_until_answers

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
KILL_WAIT = 10.0
"""How long a SIGKILLed child may take to be reaped before it is given up on (a process in
uninterruptible sleep; the caller sees it still running and reports it)."""
GROUP_STOP_WAIT = 30.0
"""How long :func:`run_module`'s child gets after SIGTERM to its process group before the
group is SIGKILLed."""


def child_env(**extra: str) -> dict[str, str]:
    """A child's environment: this one, with devharness, benchlib and soaklib importable, no
    proxy for loopback, and without the parent's Azure connection string (whoever starts a
    child that needs one passes its own Azurite's)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(SCRIPTS), str(REPO), env.get("PYTHONPATH", "")])
    )
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.pop("AZURE_STORAGE_CONNECTION_STRING", None)
    env.update(extra)
    return env


def run_module(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``python -m module args`` in the repository with :func:`child_env` to its end,
    its output captured (the tests run ``benchlib`` and ``soaklib`` so).

    The child leads a process group of its own, so that whatever it started goes with it: if
    it has not ended after ``timeout`` seconds (or the wait is interrupted), the whole group
    gets SIGTERM, then SIGKILL :data:`GROUP_STOP_WAIT` seconds later, and
    ``subprocess.TimeoutExpired`` (or the interruption) is raised."""
    # Not a ``with`` block: leaving one waits for the child without a bound.
    child = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except BaseException:
        _end_group(child)
        raise
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)


def _end_group(child: subprocess.Popen[str]) -> None:
    """SIGTERM ``child``'s process group, SIGKILL it once the child has exited or
    :data:`GROUP_STOP_WAIT` has passed (its own children may outlive it), each wait bounded."""
    for signum, wait in ((signal.SIGTERM, GROUP_STOP_WAIT), (signal.SIGKILL, KILL_WAIT)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)
        # Reads the pipes too: a child blocked writing to a full one would never exit.
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
            child.communicate(timeout=wait)
    if child.poll() is None:
        logger.error("child outlived SIGKILL pid=%s args=%s", child.pid, child.args)


async def spawn(
    command: Sequence[str], *, env: dict[str, str], log: Path, cwd: Path = REPO
) -> asyncio.subprocess.Process:
    """Start ``command`` in ``cwd`` (the repository), its output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            *command,
            env=env,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )


async def end_processes(
    processes: Iterable[asyncio.subprocess.Process | None],
    *,
    signum: int = signal.SIGTERM,
    wait: float = 10.0,
) -> list[asyncio.subprocess.Process]:
    """Send ``signum`` to each process still running and wait up to ``wait`` seconds for it
    to exit; SIGKILL those still running then and wait up to :data:`KILL_WAIT` seconds more.
    Never waits longer than that.

    :param processes: ``None`` entries are skipped (a process never started).
    :param signum: the first signal.
    :param wait: seconds each process has to exit after ``signum``.
    :returns: the processes that had to be SIGKILLed because they outlived ``signum``'s
        wait (never those asked with SIGKILL in the first place). A process whose
        ``returncode`` is still ``None`` afterwards outlived the SIGKILL too: the caller
        reports it.
    """

    async def end(process: asyncio.subprocess.Process) -> bool:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)
        try:
            await asyncio.wait_for(process.wait(), wait)
        except TimeoutError:
            logger.warning(
                "child outlived its signal, killing it pid=%s signal=%s wait=%s",
                process.pid,
                signal.Signals(signum).name,
                wait,
            )
        else:
            return False
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        try:
            await asyncio.wait_for(process.wait(), KILL_WAIT)
        except TimeoutError:
            logger.error("child outlived SIGKILL pid=%s wait=%s", process.pid, KILL_WAIT)
        return signum != signal.SIGKILL

    present = [process for process in processes if process is not None]
    forced = await asyncio.gather(*(end(process) for process in present))
    return [process for process, killed in zip(present, forced, strict=True) if killed]


def processes_mentioning(text: str) -> dict[int, str]:
    """This machine's live processes whose command line or environment contains ``text`` (a
    work directory): pid -> command line, read from ``/proc`` (Linux), independently of any
    bookkeeping of whoever started them. Zombies (exited, not yet reaped) have neither and
    are not listed; nor are processes of other users."""
    found: dict[int, str] = {}
    needle = text.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            command = (entry / "cmdline").read_bytes()
            if needle in command or needle in (entry / "environ").read_bytes():
                found[int(entry.name)] = command.replace(b"\0", b" ").decode(errors="replace")
    return found


def log_tail(path: Path, chars: int = 3000) -> str:
    """The end of a log file, for error messages."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _trusting_only(certificate: Path) -> ssl.SSLContext:
    """A client's TLS context that trusts ``certificate`` itself, whoever issued it: a
    serve process with ``COORDINATOR_TLS_CERT`` is ready once it answers with the certificate
    it was given."""
    context = ssl.create_default_context(cafile=certificate)
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


class ServeProcess:
    """``queue-coordinator serve`` as a child on 127.0.0.1, restartable on the same port
    with the same environment; its output (all starts) goes to ``log``. With
    ``COORDINATOR_TLS_CERT`` among its settings it serves HTTPS, and ``url`` says so.

    :param port: 0 picks a free one now.
    :param azure_connection_string: the storage account for hints; none: no queues.
    :param interpreter_args: ``python`` arguments before ``-m coordinator.cli serve`` (a
        profiler).
    :param source: the checkout whose ``coordinator`` runs (its directory and the first
        entry of its PYTHONPATH): this repository, or a worktree of a past release (which
        runs with this environment's dependencies).
    :param settings: further ``COORDINATOR_*`` variables.
    """

    def __init__(
        self,
        *,
        data_dir: Path,
        store_url: str,
        clients_file: Path,
        log: Path,
        port: int = 0,
        azure_connection_string: str | None = None,
        interpreter_args: Sequence[str] = (),
        source: Path = REPO,
        **settings: str,
    ) -> None:
        self.port = port or free_port()
        self.source = source
        self._tls_cert = settings.get("COORDINATOR_TLS_CERT")
        self.url = f"{'https' if self._tls_cert else 'http'}://127.0.0.1:{self.port}"
        self.log = log
        self.command = [sys.executable, *interpreter_args, "-m", "coordinator.cli", "serve"]
        self.env = child_env(
            COORDINATOR_HOST="127.0.0.1",
            COORDINATOR_PORT=str(self.port),
            COORDINATOR_DATA_DIR=str(data_dir),
            COORDINATOR_STORE_URL=store_url,
            COORDINATOR_CLIENTS_FILE=str(clients_file),
            **settings,
        )
        if source != REPO:
            self.env["PYTHONPATH"] = os.pathsep.join([str(source), self.env["PYTHONPATH"]])
        if azure_connection_string:
            self.env["AZURE_STORAGE_CONNECTION_STRING"] = azure_connection_string
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0

    @property
    def api(self) -> str:
        return self.url + API

    @property
    def running(self) -> bool:
        """The last process started has not been reaped yet."""
        return self.process is not None and self.process.returncode is None

    async def start(self, *, within: float = 60.0) -> None:
        """Start the process and return once it answers ``ping``; raise ``RuntimeError``
        with the log's tail if it exits or does not answer within ``within`` seconds (the
        process is ended first), or if the previous one is still running (one process per
        ``ServeProcess`` at a time: stop it first)."""
        if self.running:
            raise RuntimeError(f"coordinator on port {self.port} is already running")
        self.starts += 1
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"==== coordinator start #{self.starts}\n".encode())
        process = self.process = await spawn(
            self.command, env=self.env, log=self.log, cwd=self.source
        )
        try:
            await wait_until_answers(
                f"{self.api}/ping",
                within=within,
                exit_code=lambda: process.returncode,
                tls=_trusting_only(Path(self._tls_cert)) if self._tls_cert else None,
            )
        except (WaitTimeout, ProcessExited) as error:
            await self.stop(signal.SIGKILL)
            raise RuntimeError(
                f"coordinator did not start: {error}\n{log_tail(self.log)}"
            ) from None

    async def stop(
        self, signum: int = signal.SIGTERM, *, wait: float = 10.0
    ) -> list[asyncio.subprocess.Process]:
        """End the process (see :func:`end_processes`, whose answer this is: the process if
        it had to be SIGKILLed after ``wait``); nothing if it never started."""
        return await end_processes([self.process], signum=signum, wait=wait)


@contextlib.asynccontextmanager
async def serving(store_url: str, directory: Path, **settings: str) -> AsyncIterator[ServeProcess]:
    """``queue-coordinator serve`` on ``store_url``, answering, with its clients file (a root
    client) and log in ``directory`` and no Azure; stopped on exit. ``settings`` are further
    ``COORDINATOR_*`` variables."""
    clients_file = directory / "clients.json"
    ensure_root_client(clients_file)
    serve = ServeProcess(
        data_dir=directory,
        store_url=store_url,
        clients_file=clients_file,
        log=directory / "coordinator.log",
    )
    serve.env.update(settings)
    try:
        await serve.start()
        yield serve
    finally:
        await serve.stop()
