"""The leanest Azure Storage Queue client: plain aiohttp on the queue REST API with a SAS.

Only what the bench needs: put, get (up to 32), delete and the approximate message count of
one queue. Queues are created and deleted with the ``azure-storage-queue`` SDK (setup only).
"""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote
from xml.sax.saxutils import escape

import aiohttp
from azure.storage.queue import generate_queue_sas
from yarl import URL

from devharness.azurite import ACCOUNT_KEY, ACCOUNT_NAME

TIMEOUT = aiohttp.ClientTimeout(total=30)


def queue_sas(queue: str, permission: str = "raup", hours: float = 2.0) -> str:
    """A service SAS on ``queue`` of Azurite's well-known account."""
    now = datetime.now(UTC)
    token: str = generate_queue_sas(
        ACCOUNT_NAME,
        queue,
        ACCOUNT_KEY,
        permission=permission,
        start=now - timedelta(minutes=15),
        expiry=now + timedelta(hours=hours),
        protocol="https,http",
    )
    return token


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    message_id: str
    pop_receipt: str
    text: str


def bench_text(sent_at: float, serial: int) -> str:
    """A message as big as a coordinator hint, carrying its send time (``time.time()``)."""
    body = {"taskId": f"bench{serial:017d}", "runId": 0, "hintId": f"{serial:022d}", "t": sent_at}
    return base64.b64encode(json.dumps(body).encode()).decode("ascii")


def sent_at(text: str) -> float | None:
    """The send time :func:`bench_text` put into a message, if it has one."""
    try:
        value = json.loads(base64.b64decode(text))
    except ValueError:
        return None
    t = value.get("t") if isinstance(value, dict) else None
    return float(t) if isinstance(t, int | float) else None


class RestQueue:
    """One queue at ``<endpoint>/<name>``, every request signed by ``sas``."""

    def __init__(self, session: aiohttp.ClientSession, endpoint: str, name: str, sas: str):
        self._session = session
        self.url = f"{endpoint.rstrip('/')}/{name}"
        self._sas = sas
        self._messages = f"{self.url}/messages?{sas}"

    async def put(self, text: str) -> None:
        body = f"<QueueMessage><MessageText>{escape(text)}</MessageText></QueueMessage>"
        async with self._session.post(
            URL(self._messages, encoded=True), data=body.encode(), timeout=TIMEOUT
        ) as response:
            await response.read()
            response.raise_for_status()

    async def get(self, count: int, visibility: int = 300) -> list[Message]:
        url = f"{self._messages}&numofmessages={count}&visibilitytimeout={visibility}"
        async with self._session.get(URL(url, encoded=True), timeout=TIMEOUT) as response:
            text = await response.text()
            response.raise_for_status()
        root = ElementTree.fromstring(text)
        return [
            Message(
                message_id=element.findtext("MessageId", ""),
                pop_receipt=element.findtext("PopReceipt", ""),
                text=element.findtext("MessageText", ""),
            )
            for element in root.iter("QueueMessage")
        ]

    async def delete(self, message: Message) -> None:
        url = (
            f"{self.url}/messages/{quote(message.message_id, safe='')}"
            f"?popreceipt={quote(message.pop_receipt, safe='')}&{self._sas}"
        )
        async with self._session.delete(URL(url, encoded=True), timeout=TIMEOUT) as response:
            await response.read()
            response.raise_for_status()

    async def count(self) -> int:
        """Azure's approximate message count (exact in Azurite); 0 for a missing queue."""
        url = f"{self.url}?comp=metadata&{self._sas}"
        async with self._session.get(URL(url, encoded=True), timeout=TIMEOUT) as response:
            await response.read()
            if response.status == 404:
                return 0
            response.raise_for_status()
            return int(response.headers.get("x-ms-approximate-messages-count", "0"))
