"""Waiting with a deadline: :func:`wait_until` is the one poll loop of the tests and the
scripts, and :func:`wait_until_answers` waits on it for a server that was just started."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ssl
import time
from collections.abc import Awaitable, Callable

import aiohttp

REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=2.0)
"""How long :func:`wait_until_answers` gives each request (a server starting on a busy
machine may be slow to answer the first ones)."""


class WaitTimeout(Exception):
    """What :func:`wait_until` waited for did not happen before its deadline."""


class ProcessExited(Exception):
    """The process that was to answer exited while :func:`wait_until_answers` waited."""


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    *,
    within: float = 20.0,
    what: str = "condition",
    interval: float = 0.05,
) -> None:
    """Poll ``predicate`` (plain or async) every ``interval`` seconds until it holds; raise
    :class:`WaitTimeout` once ``within`` seconds have passed. What ``predicate`` raises ends
    the wait at once."""
    give_up = time.monotonic() + within
    while True:
        held = predicate()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() > give_up:
            raise WaitTimeout(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(interval)


def _is_ok(response: aiohttp.ClientResponse) -> bool:
    return response.status == 200


async def wait_until_answers(
    url: str,
    *,
    within: float,
    accept: Callable[[aiohttp.ClientResponse], bool] = _is_ok,
    exit_code: Callable[[], int | None] = lambda: None,
    tls: ssl.SSLContext | None = None,
) -> None:
    """Poll ``url`` until an answer passes ``accept`` (by default: a 200); raise
    :class:`WaitTimeout` after ``within`` seconds, or :class:`ProcessExited` as soon as
    ``exit_code`` tells that the process meant to answer has exited. ``tls`` verifies an
    ``https`` server's certificate (by default: against the system's CAs)."""
    connector = aiohttp.TCPConnector(ssl=tls) if tls is not None else None
    async with aiohttp.ClientSession(timeout=REQUEST_TIMEOUT, connector=connector) as session:

        async def answers() -> bool:
            code = exit_code()
            if code is not None:
                raise ProcessExited(f"process exited with {code} while starting")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(url) as response:
                    return accept(response)
            return False

        await wait_until(answers, within=within, what=f"{url} to answer")
