"""What the bench (benchlib), the soak (soaklib) and measure_listing_rss.py share: the
environment of child processes, asyncio child processes, waiting until a started server
answers, a throwaway PostgreSQL database, and one (optionally Hawk-signed) API call.

It lies directly in scripts/ so that all three import it as they find their own code:
``python -m benchlib`` and ``python -m soaklib`` run with scripts/ on the path, and
``python scripts/measure_listing_rss.py`` puts the script's directory first on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
from yarl import URL

from worker_sdk.client import Credentials, authorization

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"


def child_env(**extra: str) -> dict[str, str]:
    """Children's environment: benchlib and soaklib importable, no proxy for loopback."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(SCRIPTS), str(REPO), env.get("PYTHONPATH", "")])
    )
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


SERVE = ["-m", "coordinator.cli", "serve"]
"""``python`` arguments that run ``queue-coordinator serve``."""
PING = "/api/queue/v1/ping"


def coordinator_env(
    *,
    port: int,
    data_dir: Path,
    store_url: str,
    clients_file: Path,
    azure_connection_string: str | None = None,
    **extra: str,
) -> dict[str, str]:
    """A ``queue-coordinator serve`` child's environment on 127.0.0.1:``port``: the
    parent's Azure connection string is never inherited, only the one passed here."""
    env = child_env(
        COORDINATOR_HOST="127.0.0.1",
        COORDINATOR_PORT=str(port),
        COORDINATOR_DATA_DIR=str(data_dir),
        COORDINATOR_STORE_URL=store_url,
        COORDINATOR_CLIENTS_FILE=str(clients_file),
        **extra,
    )
    env.pop("AZURE_STORAGE_CONNECTION_STRING", None)
    if azure_connection_string:
        env["AZURE_STORAGE_CONNECTION_STRING"] = azure_connection_string
    return env


async def spawn(
    command: Sequence[str], *, env: dict[str, str], log: Path
) -> asyncio.subprocess.Process:
    """Start ``command`` in the repository, its output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            *command,
            env=env,
            cwd=REPO,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )


async def end_process(process: asyncio.subprocess.Process, signum: int, wait: float) -> None:
    """Send ``signum`` and wait for the exit; SIGKILL after ``wait`` seconds."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)
    try:
        await asyncio.wait_for(process.wait(), wait)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def wait_until_answers(
    url: str,
    *,
    within: float,
    exit_code: Callable[[], int | None] = lambda: None,
    request_timeout: float = 1.0,
) -> None:
    """Poll ``url`` until it answers 200; fail after ``within`` seconds or as soon as
    ``exit_code`` tells that the process meant to answer has exited."""
    give_up = time.monotonic() + within
    timeout = aiohttp.ClientTimeout(total=request_timeout)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            code = exit_code()
            if code is not None:
                raise RuntimeError(f"process exited with {code} while starting")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            if time.monotonic() > give_up:
                raise RuntimeError(f"{url} did not answer within {within} s")
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def postgres_database(admin_dsn: str, name: str) -> AsyncIterator[str]:
    """The DSN of a new database ``name`` on the server of ``admin_dsn``; dropped on exit."""
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
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


async def call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: Any = None,
    *,
    credentials: Credentials | None,
    request_timeout: aiohttp.ClientTimeout | None = None,
) -> tuple[int, str]:
    """One API request with ``body`` as JSON, Hawk-signed when there are ``credentials``;
    its status and text. ``request_timeout`` defaults to the session's."""
    content = "" if body is None else json.dumps(body)
    headers = {"Content-Type": "application/json"} if content else {}
    if credentials is not None:
        headers["Authorization"] = authorization(
            credentials,
            method=method,
            url=url,
            content=content,
            content_type="application/json" if content else "",
        )
    async with session.request(
        method,
        # as signed: yarl must not re-quote the path, nor aiohttp add a Content-Type
        URL(url, encoded=True),
        data=content.encode() if content else None,
        headers=headers,
        skip_auto_headers=() if content else ("Content-Type",),
        timeout=session.timeout if request_timeout is None else request_timeout,
    ) as response:
        return response.status, await response.text()
