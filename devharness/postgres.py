"""Throwaway PostgreSQL: databases created on the server of an admin DSN and dropped on exit
(:func:`throwaway_database`), and whole clusters of a test's own, started with ``initdb`` and
``pg_ctl`` on a free port, that a test may stop and restart (:func:`throwaway_cluster`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from devharness.ports import free_port

ADMIN_DSN = os.environ.get(
    "COORDINATOR_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
"""A DSN of any database on a server where the user may create databases."""


@contextlib.asynccontextmanager
async def throwaway_database(
    admin_dsn: str, prefix: str, *, options: str = ""
) -> AsyncIterator[str]:
    """The DSN of a new database ``<prefix>_<pid>_<random>`` on the server of ``admin_dsn``
    (``options`` go to ``CREATE DATABASE``); dropped, with whatever is still connected to
    it, on exit."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" {options}')
    finally:
        await admin.close()
    try:
        yield urlunsplit(urlsplit(admin_dsn)._replace(path=f"/{name}"))
    finally:
        admin = await asyncpg.connect(admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


COMMAND_TIMEOUT = 120.0
"""Seconds an ``initdb`` or ``pg_ctl`` may take (``pg_ctl`` itself waits up to 60)."""


class ClusterError(Exception):
    """A throwaway cluster's command failed; the message holds its output."""


def postgres_bindir() -> Path | None:
    """The directory of PostgreSQL's server programs (``initdb``, ``pg_ctl``): that of
    ``pg_ctl`` on ``PATH``, else the newest ``/usr/lib/postgresql/<version>/bin`` (Debian and
    Ubuntu keep them off ``PATH``); ``None`` if neither has them."""
    on_path = shutil.which("pg_ctl")
    candidates = [Path(on_path).parent] if on_path else []
    candidates += sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
        reverse=True,
    )
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    return None


@dataclass(kw_only=True)
class Cluster:
    """A PostgreSQL server of a test's own, on ``127.0.0.1:<port>``, that the test may stop,
    start and restart (the shared server must never be).

    :param bindir: where ``pg_ctl`` is.
    :param data: the cluster's data directory.
    :param port: the port it listens on.
    :param user: the system user it runs as (``None``: this process's).
    """

    bindir: Path
    data: Path
    port: int
    user: str | None

    @property
    def dsn(self) -> str:
        """The ``postgres`` database as the ``postgres`` superuser (trust authentication)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def log(self) -> Path:
        """The server's log file."""
        return self.data.parent / "server.log"

    async def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m <mode>``, waiting until the server has exited (``fast`` ends
        every session, as an operator's restart does)."""
        await self._pg_ctl("stop", "-m", mode)

    async def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.data.parent} -c listen_addresses=127.0.0.1"
        await self._pg_ctl("start", "-l", str(self.log), "-o", options)

    async def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m <mode>``: stop, then start with the same options, waiting for
        both. (The log is named again: a server without one would hold ``pg_ctl``'s output
        open, and this harness would wait for its end.)"""
        await self._pg_ctl("restart", "-m", mode, "-l", str(self.log))

    async def _pg_ctl(self, *args: str) -> None:
        await _run(
            [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args],
            user=self.user,
        )


@contextlib.asynccontextmanager
async def throwaway_cluster(bindir: Path) -> AsyncIterator[Cluster]:
    """A new PostgreSQL cluster, started, in a temporary directory; stopped (``immediate``)
    and deleted on exit. As root it runs as the ``postgres`` system user, since ``initdb``
    refuses root.

    :param bindir: :func:`postgres_bindir`.
    :raises ClusterError: ``initdb`` or ``pg_ctl`` failed, or root has no ``postgres`` user.
    """
    owner = _non_root_owner()
    # In /tmp, not under a test's tmp_path: pytest's base directory is private to its user.
    directory = Path(tempfile.mkdtemp(prefix="qc-postgres-"))
    if owner is not None:
        os.chown(directory, owner.pw_uid, owner.pw_gid)
    cluster = Cluster(
        bindir=bindir,
        data=directory / "data",
        port=free_port(),
        user=None if owner is None else owner.pw_name,
    )
    try:
        await _run(
            [
                str(bindir / "initdb"),
                "-D",
                str(cluster.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",  # a throwaway: not worth an fsync of every file
            ],
            user=cluster.user,
        )
        await cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(ClusterError):
            await cluster.stop("immediate")
        shutil.rmtree(directory, ignore_errors=True)


def _non_root_owner() -> pwd.struct_passwd | None:
    """The ``postgres`` system user when this process is root (``initdb`` refuses root),
    else ``None`` (the cluster runs as this process's user)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise ClusterError(
            "initdb refuses to run as root and there is no 'postgres' system user to run it "
            "as; create one (useradd --system postgres) or run the tests as another user"
        ) from None


async def _run(command: list[str], *, user: str | None) -> None:
    """Run ``command`` (as ``user``) to its end; :class:`ClusterError` with its output if it
    fails or outlasts :data:`COMMAND_TIMEOUT`."""
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        user=user,
        group=None if user is None else pwd.getpwnam(user).pw_gid,
        extra_groups=None if user is None else [],
        cwd="/",
    )
    try:
        async with asyncio.timeout(COMMAND_TIMEOUT):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ClusterError(f"{' '.join(command)} still ran after {COMMAND_TIMEOUT}s") from None
    if process.returncode != 0:
        text = output.decode(errors="replace")
        raise ClusterError(f"{' '.join(command)} exited with {process.returncode}:\n{text}")
