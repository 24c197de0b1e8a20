"""Putting hints: Put Message over plain aiohttp with a cached add-only SAS, the hot path of
createTask.

The azure-storage-queue client costs several times the CPU per request (its policy pipeline,
and two thread-pool hops per request for proxy and netrc look-ups), which made the hint put the
largest single cost of a task (docs/performance-history.md); the other, rarer calls keep the SDK.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from xml.sax.saxutils import escape as xml_escape

import aiohttp

from coordinator.azure.errors import QueueMissing, unavailable
from coordinator.azure.signing import AccountKey

ADD_SAS_LIFE_MS = 24 * 3_600_000
"""Life of the coordinator's own add-only SAS for putting hints (never handed out)."""
ADD_SAS_RENEW_MS = 3_600_000
"""An add-only SAS is renewed this long before it expires."""

_PUT_HEADERS = {"Content-Type": "application/xml"}
_ERROR_CODE = re.compile(r"<Code>([^<]*)</Code>")


def _error_code_text(body: str) -> str:
    """The ``<Code>`` of an Azure error body, else its start."""
    match = _ERROR_CODE.search(body)
    return match[1] if match else body[:200]


class HintPutter:
    """Puts message texts into queues over one aiohttp session.

    :param account: signs the add-only SAS of each queue.
    :param queue_url: the URL of a queue, by name.
    :param sas_start_skew_ms: a SAS is valid from this long before now (clock skew).
    :param request_timeout_s: bound on each put.
    """

    def __init__(
        self,
        *,
        account: AccountKey,
        queue_url: Callable[[str], str],
        sas_start_skew_ms: int,
        request_timeout_s: float,
    ) -> None:
        self._account = account
        self._queue_url = queue_url
        self._sas_start_skew_ms = sas_start_skew_ms
        self._timeout = request_timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._sas: dict[str, tuple[int, str]] = {}
        """Queue name -> (expiry, add-only SAS)."""

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def put(
        self, name: str, text: str, *, delay: int, ttl: int, task_id: str, run_id: int
    ) -> None:
        """Put ``text`` into queue ``name``, invisible for ``delay`` s, expiring after ``ttl`` s.

        :raises QueueMissing: the queue does not exist.
        :raises QueueUnavailable: Azure failed or did not answer in time.
        """
        url = (
            f"{self._queue_url(name)}/messages?visibilitytimeout={delay}&messagettl={ttl}"
            f"&{self._add_sas(name)}"
        )
        body = f"<QueueMessage><MessageText>{xml_escape(text)}</MessageText></QueueMessage>"
        failure: BaseException | str
        # One retry absorbs a keep-alive connection the server closed; a duplicate hint is
        # harmless, so retrying a POST whose answer was lost is safe.
        for attempt in range(2):
            try:
                async with (
                    asyncio.timeout(self._timeout),
                    self._http().post(url, data=body.encode(), headers=_PUT_HEADERS) as response,
                ):
                    if response.status == 201:
                        return
                    detail = await response.text()
                    if response.status == 404 and "QueueNotFound" in detail:
                        raise QueueMissing(f"put hint: queue {name} does not exist")
                    failure = f"HTTP {response.status}: {_error_code_text(detail)}"
                    if response.status < 500:
                        break
            except TimeoutError:
                failure = f"no answer within {self._timeout} s"
                break
            except aiohttp.ClientError as error:
                failure = repr(error)
            if attempt == 0:
                await asyncio.sleep(0.05)
        raise unavailable("put hint", name, failure, task_id=task_id, run_id=run_id)

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    def _add_sas(self, name: str) -> str:
        now = int(time.time() * 1000)
        cached = self._sas.get(name)
        if cached is not None and cached[0] - now > ADD_SAS_RENEW_MS:
            return cached[1]
        expiry = now + ADD_SAS_LIFE_MS
        sas = self._account.queue_sas(
            name, permission="a", start_ms=now - self._sas_start_skew_ms, expiry_ms=expiry
        )
        self._sas[name] = (expiry, sas)
        return sas
