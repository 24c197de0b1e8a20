"""Azure Storage Queue access through the coordinator's signed URLs, and hint parsing.

Owns Azure's wire format and nothing more: the ``numofmessages`` parameter, the
``QueueMessagesList`` XML, the ``{{messageId}}``/``{{popReceipt}}`` placeholders of the delete
and release URLs, and the hint message text, ``base64(JSON {"taskId", "runId", "hintId"})``.
A release is Azure's Update Message without a body: the release URL carries the short
``visibilitytimeout`` the coordinator chose, so the message only becomes visible again. The SAS
signature lives in the URLs' query strings, so URLs are sent exactly as given (never
re-quoted) and never logged whole.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import aiohttp
from yarl import URL

from worker_sdk.client import MAX_BATCH_RUNS
from worker_sdk.errors import RequestFailed, check_status, no_answer_fails

AZURE_TIMEOUT = aiohttp.ClientTimeout(total=30)


@dataclass(frozen=True, kw_only=True)
class QueueMessage:
    """One message as Get Messages returns it."""

    message_id: str
    pop_receipt: str
    dequeue_count: int
    text: str


@dataclass(frozen=True, kw_only=True)
class AzureHint:
    """What a hint message read from Azure says: run ``run_id`` of ``task_id`` may be pending."""

    task_id: str
    run_id: int
    hint_id: str


class PoisonHint(ValueError):
    """A message whose text is not a hint; it can never be acted on, only deleted."""


_VISIBILITY = re.compile(r"([?&]visibilitytimeout=)\d+")


def poll_url(signed_poll_url: str, count: int) -> str:
    """The Get Messages URL asking for ``count`` messages (1..32)."""
    if not 1 <= count <= MAX_BATCH_RUNS:
        raise ValueError(f"numofmessages must be 1..{MAX_BATCH_RUNS}, not {count}")
    separator = "&" if "?" in signed_poll_url else "?"
    return f"{signed_poll_url}{separator}numofmessages={count}"


def delete_url(template: str, message: QueueMessage) -> str:
    """The Delete Message URL for ``message``, from a ``signedDeleteUrl``."""
    return _message_url(template, message)


MAX_RELEASE_S = 3600
"""The longest a released message is kept hidden (a coordinator's ``Retry-After`` beyond it
is cut short: the hint is then only tried again sooner)."""


def release_url(template: str, message: QueueMessage, *, after_s: int | None = None) -> str:
    """The Update Message URL that releases ``message``, from a ``signedReleaseUrl``: visible
    again after the URL's own ``visibilitytimeout``, or after ``after_s`` seconds when given
    (the SAS signs the queue and the permission, not that parameter)."""
    url = _message_url(template, message)
    if after_s is None:
        return url
    seconds = min(after_s, MAX_RELEASE_S)
    if _VISIBILITY.search(url):
        return _VISIBILITY.sub(f"\\g<1>{seconds}", url, count=1)
    return f"{url}{'&' if '?' in url else '?'}visibilitytimeout={seconds}"


def _message_url(template: str, message: QueueMessage) -> str:
    """``template`` with the message's id and pop receipt in place of the placeholders.

    Pop receipts are base64 and may hold ``+``, ``/`` and ``=``, which would change meaning
    inside a URL, so both values are percent-encoded before substitution.
    """
    return template.replace("{{messageId}}", quote(message.message_id, safe="")).replace(
        "{{popReceipt}}", quote(message.pop_receipt, safe="")
    )


def queue_name_of_url(url: str) -> str:
    """The queue's name taken from one of its URLs, for logs: the path segment before
    ``/messages`` (the whole URL when it has none)."""
    segments = urlsplit(url).path.split("/")
    return segments[segments.index("messages") - 1] if "messages" in segments[1:] else url


def parse_messages(xml: str) -> list[QueueMessage]:
    """The messages of a ``QueueMessagesList`` document; ``ValueError`` if it is not one."""
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as error:
        raise ValueError(f"not XML: {error}") from error
    if root.tag != "QueueMessagesList":
        raise ValueError(f"expected QueueMessagesList, got {root.tag}")
    messages = []
    for element in root.iter("QueueMessage"):
        fields = {child.tag: child.text or "" for child in element}
        try:
            messages.append(
                QueueMessage(
                    message_id=fields["MessageId"],
                    pop_receipt=fields["PopReceipt"],
                    dequeue_count=int(fields["DequeueCount"]),
                    text=fields["MessageText"],
                )
            )
        except (KeyError, ValueError) as error:
            raise ValueError(f"incomplete QueueMessage {fields!r}") from error
    return messages


def parse_hint(text: str) -> AzureHint:
    """Read the hint an Azure message's text holds; raises :class:`PoisonHint` (never returns
    ``None``) when it holds none."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
        value = json.loads(raw)
    except (binascii.Error, ValueError) as error:
        raise PoisonHint(f"not base64 JSON: {error}") from error
    if not isinstance(value, dict):
        raise PoisonHint(f"not a JSON object: {value!r}")
    task_id, run_id, hint_id = value.get("taskId"), value.get("runId"), value.get("hintId")
    if not isinstance(task_id, str) or not task_id:
        raise PoisonHint(f"taskId missing or not a string: {value!r}")
    # bool is an int subclass; true is not a run id.
    if not isinstance(run_id, int) or isinstance(run_id, bool) or run_id < 0:
        raise PoisonHint(f"runId missing or not a run index: {value!r}")
    if not isinstance(hint_id, str):
        raise PoisonHint(f"hintId missing or not a string: {value!r}")
    return AzureHint(task_id=task_id, run_id=run_id, hint_id=hint_id)


async def get_messages(session: aiohttp.ClientSession, url: str) -> list[QueueMessage]:
    """GET a poll URL (from :func:`poll_url`); a 2xx that is not the XML is transient."""
    text = await _request(session, "GET", url)
    try:
        return parse_messages(text)
    except ValueError as error:
        raise RequestFailed(
            method="GET", url=url, status=None, code="InvalidResponse", message=str(error)
        ) from error


async def delete_message(session: aiohttp.ClientSession, url: str) -> None:
    """DELETE a message through a URL from :func:`delete_url`."""
    await _request(session, "DELETE", url)


async def release_message(session: aiohttp.ClientSession, url: str) -> None:
    """PUT (Update Message, no body) through a URL from :func:`release_url`: the message
    becomes visible again once the URL's ``visibilitytimeout`` has passed."""
    await _request(session, "PUT", url)


async def _request(session: aiohttp.ClientSession, method: str, url: str) -> str:
    with no_answer_fails(method, url):
        async with session.request(
            method,
            URL(url, encoded=True),
            # an explicit empty body: Update Message wants a Content-Length
            data=b"" if method == "PUT" else None,
            timeout=AZURE_TIMEOUT,
        ) as response:
            text = await response.text()
            status = response.status
    check_status(method, url, status, text, _error_fields)
    return text


def _error_fields(text: str) -> tuple[str, str]:
    """``Code`` and ``Message`` of Azure's XML error body, or a snippet of anything else."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError:
        return "", text[:200]
    # Azure appends "RequestId:..." and "Time:..." lines to the message; the first says it all.
    return root.findtext("Code", ""), (root.findtext("Message") or "").split("\n", 1)[0]
