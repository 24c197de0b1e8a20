"""The hint queues of one storage account (docs/protocol.md): :class:`QueueService`.

One queue per (provisionerId, workerType, priority), named by
:func:`coordinator.azure.names.queue_name` and created lazily with metadata. The service wraps
one async ``QueueServiceClient`` per process and

* puts hints (:meth:`QueueService.put_hint`, through :class:`~coordinator.azure.put.HintPutter`)
  that expire at the task's deadline and may stay invisible for a retry delay;
* signs poll/delete/release URLs for workers (:meth:`QueueService.poll_urls`);
* estimates pending work (:meth:`QueueService.pending_count`);
* receives, deletes and releases hints for the server-side ``claimWork``;
* deletes queues that stayed unused and empty (:meth:`QueueService.sweep_unused`).

Hints are not truth: the store is. Every Azure failure surfaces as
:class:`~coordinator.azure.errors.QueueUnavailable`,
and every Azure request is cut off after ``QueueSettings.request_timeout_s``, so a caller never
hangs: it keeps the run marked ``hint_needed`` and puts the hint again later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType

import slugid
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.storage.queue import QueueMessage, QueueProperties
from azure.storage.queue.aio import QueueClient, QueueServiceClient

from coordinator.azure.account import account_key, client_options
from coordinator.azure.errors import QueueMissing, unavailable
from coordinator.azure.hint_codec import decode_hint, encode_hint
from coordinator.azure.names import check_prefix, queue_name, queue_name_pattern
from coordinator.azure.put import HintPutter
from coordinator.domain.lifecycle import Hint
from coordinator.domain.records import from_iso, to_iso
from coordinator.domain.task_queues import MAX_BATCH_RUNS, PRIORITIES

logger = logging.getLogger(__name__)

UNUSED_QUEUE_LIMIT = 10 * 86_400_000
"""How long (ms) a queue must stay unused, and empty, before :meth:`sweep_unused` deletes it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueSettings:
    """Knobs of the Azure layer; durations carry their unit in the name.

    :param prefix: starts every queue name, so several deployments or test runs can share
        one storage account: lowercase letters, digits and single hyphens, at most
        :data:`~coordinator.azure.names.MAX_PREFIX_LENGTH` characters.
    :param poll_visibility_s: how long a message a worker fetched stays invisible to others.
    :param release_visibility_s: how long a message a worker released (through its release
        URL, having found no coordinator to claim its run) stays invisible: long enough that
        the releasing worker, which stops taking hints until a coordinator answers, does not
        take it straight back.
    :param sas_start_skew_ms: signed URLs are valid from this long before ``now`` (clock skew).
    :param sas_life_ms: signed URLs expire this long after ``now``.
    :param pending_cache_s: how long :meth:`QueueService.pending_count` reuses a sum.
    :param request_timeout_s: bound on every Azure request (the SDK's one quick retry
        included); a call whose first request fails raises at once.
    :param last_used_refresh_ms: how often a queue in use gets its ``last_used`` metadata
        rewritten; far below :data:`UNUSED_QUEUE_LIMIT`.
    """

    prefix: str = "qc-"
    poll_visibility_s: int = 300
    release_visibility_s: int = 1
    sas_start_skew_ms: int = 15 * 60_000
    sas_life_ms: int = 30 * 60_000
    pending_cache_s: float = 20.0
    request_timeout_s: float = 10.0
    last_used_refresh_ms: int = 3 * 3_600_000

    def __post_init__(self) -> None:
        check_prefix(self.prefix)


@dataclass(frozen=True, kw_only=True, slots=True)
class SignedQueue:
    """The signed URLs of one queue, as a worker receives them; the delete and release URLs
    hold the literal ``{{messageId}}`` and ``{{popReceipt}}`` placeholders."""

    signed_poll_url: str
    signed_delete_url: str
    signed_release_url: str


@dataclass(frozen=True, kw_only=True, slots=True)
class PollUrls:
    """The answer of pollTaskUrls: queues highest priority first, and when the URLs expire.

    :param expires: epoch ms, whole seconds (SAS times have second precision).
    """

    queues: tuple[SignedQueue, ...]
    expires: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ReceivedHint:
    """A message fetched by :meth:`QueueService.receive`, invisible to others until released.

    :param task_id: ``None`` when the message is not a decodable hint (a poison message,
        to be deleted); ``run_id`` is then ``None`` too.
    """

    azure_queue: str
    message_id: str
    pop_receipt: str
    dequeue_count: int
    task_id: str | None
    run_id: int | None

    @property
    def decodable(self) -> bool:
        return self.task_id is not None


def _seconds_ceil(ms: int) -> int:
    return -(-ms // 1000)


def _error_code(error: HttpResponseError) -> str:
    # The SDK sets error_code only on errors it has parsed: a StorageErrorCode (a str enum)
    # for known codes, a plain str otherwise.
    code = getattr(error, "error_code", None)
    return str(getattr(code, "value", code) or "")


def _last_used(metadata: Mapping[str, str] | None) -> int | None:
    # Azure treats metadata names case-insensitively; read them that way.
    values = {key.lower(): value for key, value in (metadata or {}).items()}
    try:
        return from_iso(values["last_used"])
    except (KeyError, ValueError):
        return None


class QueueService:
    """The hint queues of one storage account, over one async ``QueueServiceClient``.

    :param connection_string: must carry an account key (SAS signing needs it).
    """

    def __init__(self, connection_string: str, settings: QueueSettings | None = None) -> None:
        self.settings = settings or QueueSettings()
        timeout = self.settings.request_timeout_s
        self._service = QueueServiceClient.from_connection_string(
            connection_string, **client_options(timeout)
        )
        self._account = account_key(self._service)
        self._clients: dict[str, QueueClient] = {}
        self._fresh: dict[str, int] = {}
        """Queue name -> the ``now`` at which we last wrote its ``last_used``."""
        self._ensure_locks: dict[str, asyncio.Lock] = {}
        self._pending: dict[tuple[str, str], tuple[float, int]] = {}
        """(provisionerId, workerType) -> (monotonic expiry, cached sum)."""
        self._putter = HintPutter(
            account=self._account,
            queue_url=lambda name: self._client(name).url,
            sas_start_skew_ms=self.settings.sas_start_skew_ms,
            request_timeout_s=timeout,
        )

    async def close(self) -> None:
        await self._service.close()
        await self._putter.close()

    async def __aenter__(self) -> QueueService:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def name(self, provisioner_id: str, worker_type: str, priority: str) -> str:
        """This deployment's queue of (provisionerId, workerType, priority)."""
        return queue_name(self.settings.prefix, provisioner_id, worker_type, priority)

    def _client(self, name: str) -> QueueClient:
        client = self._clients.get(name)
        if client is None:
            # Queue clients share the service's transport (one connection pool).
            client = self._clients[name] = self._service.get_queue_client(name)
        return client

    @contextlib.asynccontextmanager
    async def _azure(
        self, action: str, queue: str, *, task_id: str | None = None, run_id: int | None = None
    ) -> AsyncIterator[None]:
        """Bound the Azure calls in the block by the request timeout and turn every failure
        into :class:`~coordinator.azure.errors.QueueUnavailable` (:class:`QueueMissing` when
        the queue is gone)."""
        timeout = self.settings.request_timeout_s
        try:
            async with asyncio.timeout(timeout):
                yield
        except ResourceNotFoundError as error:
            if _error_code(error) != "QueueNotFound":
                raise unavailable(action, queue, error, task_id=task_id, run_id=run_id) from error
            raise QueueMissing(f"{action}: queue {queue} does not exist") from error
        except TimeoutError as error:
            message = f"no answer within {timeout} s"
            raise unavailable(action, queue, message, task_id=task_id, run_id=run_id) from error
        except AzureError as error:
            raise unavailable(action, queue, error, task_id=task_id, run_id=run_id) from error

    def _is_fresh(self, name: str, now: int) -> bool:
        last = self._fresh.get(name)
        return last is not None and now - last < self.settings.last_used_refresh_ms

    async def _ensure(
        self, name: str, provisioner_id: str, worker_type: str, priority: str, *, now: int
    ) -> None:
        """Create the queue if needed and keep its ``last_used`` metadata recent.

        Does nothing (no request) while our own record of ``last_used`` is younger than
        ``last_used_refresh_ms``.
        """
        if self._is_fresh(name, now):
            return
        async with self._ensure_locks.setdefault(name, asyncio.Lock()):
            # Whoever held the lock before us may have just done it.
            if self._is_fresh(name, now):
                return
            metadata = {
                "provisioner_id": provisioner_id,
                "worker_type": worker_type,
                "priority": priority,
                "last_used": to_iso(now),
            }
            client = self._client(name)
            try:
                # Usually the queue exists: one request refreshes last_used.
                async with self._azure("set queue metadata", name):
                    await client.set_queue_metadata(metadata)
            except QueueMissing:
                async with self._azure("create queue", name):
                    try:
                        await client.create_queue(metadata=metadata)
                    except ResourceExistsError:
                        # Another replica created it between our two requests.
                        await client.set_queue_metadata(metadata)
                logger.info(
                    "queue created queue=%s provisionerId=%s workerType=%s priority=%s",
                    name,
                    provisioner_id,
                    worker_type,
                    priority,
                )
            self._fresh[name] = now

    async def put_hint(self, hint: Hint, *, now: int) -> bool:
        """Put a hint for ``hint``'s run into its queue, creating the queue if needed.

        The message expires at the task's deadline and stays invisible until
        ``hint.visible_at``. Returns ``False`` without putting anything when the deadline has
        passed or the hint could not become visible before it.

        Raises :class:`~coordinator.azure.errors.QueueUnavailable` if Azure fails or does not
        answer in time.
        """
        ttl = _seconds_ceil(hint.deadline - now)
        delay = max(0, _seconds_ceil(hint.visible_at - now))
        if hint.deadline <= now or delay >= ttl:
            logger.info(
                "hint not put taskId=%s runId=%s reason=%s deadline=%s visibleAt=%s",
                hint.task_id,
                hint.run_id,
                "past-deadline" if hint.deadline <= now else "visible-after-deadline",
                to_iso(hint.deadline),
                to_iso(hint.visible_at),
            )
            return False
        name = self.name(hint.provisioner_id, hint.worker_type, hint.priority)
        hint_id = slugid.nice()
        text = encode_hint(task_id=hint.task_id, run_id=hint.run_id, hint_id=hint_id)

        async def ensure_and_send() -> None:
            await self._ensure(name, hint.provisioner_id, hint.worker_type, hint.priority, now=now)
            await self._putter.put(
                name, text, delay=delay, ttl=ttl, task_id=hint.task_id, run_id=hint.run_id
            )

        try:
            await ensure_and_send()
        except QueueMissing:
            # Our cache said the queue exists but it is gone (swept by another replica, or
            # an emulator restarted): create it again, once.
            logger.info(
                "queue vanished queue=%s taskId=%s runId=%s", name, hint.task_id, hint.run_id
            )
            self._fresh.pop(name, None)
            await ensure_and_send()
        logger.debug(
            "hint put taskId=%s runId=%s hintId=%s queue=%s delay=%s ttl=%s",
            hint.task_id,
            hint.run_id,
            hint_id,
            name,
            delay,
            ttl,
        )
        return True

    async def poll_urls(self, provisioner_id: str, worker_type: str, *, now: int) -> PollUrls:
        """Signed poll, delete and release URLs for the worker type's queues, highest priority
        first (docs/protocol.md), creating the queues if needed.

        The poll and delete URLs' SAS allows only ``p`` (get and delete messages), the release
        URL's only ``u`` (Update Message, which sets the message's visibility timeout to
        ``release_visibility_s``), each on its own queue, from ``now - sas_start_skew_ms``
        until ``expires = now + sas_life_ms``.
        """
        priorities = PRIORITIES  # highest first
        names = [self.name(provisioner_id, worker_type, p) for p in priorities]
        await asyncio.gather(
            *(
                self._ensure(name, provisioner_id, worker_type, priority, now=now)
                for name, priority in zip(names, priorities, strict=True)
            )
        )
        # SAS times have whole-second precision; ``expires`` must be the expiry actually signed.
        expiry = (now + self.settings.sas_life_ms) // 1000 * 1000
        start = now - self.settings.sas_start_skew_ms
        queues = []
        for name in names:
            sas = self._account.queue_sas(name, permission="p", start_ms=start, expiry_ms=expiry)
            update_sas = self._account.queue_sas(
                name, permission="u", start_ms=start, expiry_ms=expiry
            )
            url = self._client(name).url
            message = f"{url}/messages/{{{{messageId}}}}?popreceipt={{{{popReceipt}}}}"
            queues.append(
                SignedQueue(
                    signed_poll_url=(
                        f"{url}/messages?visibilitytimeout={self.settings.poll_visibility_s}&{sas}"
                    ),
                    signed_delete_url=f"{message}&{sas}",
                    signed_release_url=(
                        f"{message}&visibilitytimeout={self.settings.release_visibility_s}"
                        f"&{update_sas}"
                    ),
                )
            )
        return PollUrls(queues=tuple(queues), expires=expiry)

    async def pending_count(self, provisioner_id: str, worker_type: str) -> int:
        """Approximate number of hints in the worker type's queues (an upper bound: it
        includes delayed and in-flight hints and stale ones), cached ``pending_cache_s``."""
        key = (provisioner_id, worker_type)
        cached = self._pending.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        counts = await asyncio.gather(
            *(self._message_count(self.name(provisioner_id, worker_type, p)) for p in PRIORITIES)
        )
        total = sum(counts)
        self._pending[key] = (time.monotonic() + self.settings.pending_cache_s, total)
        return total

    async def hint_count(self, provisioner_id: str, worker_type: str, priority: str) -> int:
        """Azure's approximate number of messages in one queue, uncached: visible, invisible
        (delayed, or taken by a worker and not yet deleted) and stale ones alike; 0 for a
        queue that does not exist."""
        return await self._message_count(self.name(provisioner_id, worker_type, priority))

    async def _message_count(self, name: str) -> int:
        try:
            async with self._azure("count messages", name):
                properties = await self._client(name).get_queue_properties()
        except QueueMissing:
            return 0
        count: int = properties.approximate_message_count or 0
        return count

    async def receive(
        self,
        provisioner_id: str,
        worker_type: str,
        *,
        max_messages: int,
        visibility_timeout: int,
        quotas: Mapping[str, int] | None = None,
    ) -> list[ReceivedHint]:
        """Fetch up to ``max_messages`` (1 to :data:`MAX_BATCH_RUNS`) hints, walking the queues
        highest priority first; each stays invisible to others for ``visibility_timeout``
        seconds unless deleted or released. Queues that do not exist count as empty.

        :param quotas: how many to receive from each priority's queue first (a worker's
            weighted draw); what they leave of ``max_messages`` then comes from the queues
            highest first, but for those that gave fewer than their quota (they are empty).
        """
        if not 1 <= max_messages <= MAX_BATCH_RUNS:
            raise ValueError(f"max_messages must be 1..{MAX_BATCH_RUNS}, not {max_messages}")
        received: list[ReceivedHint] = []
        drained: set[str] = set()
        for priority in PRIORITIES:
            wanted = min((quotas or {}).get(priority, 0), max_messages - len(received))
            if wanted:
                got = await self._receive_priority(
                    provisioner_id, worker_type, priority, wanted, visibility_timeout
                )
                received += got
                if len(got) < wanted:
                    drained.add(priority)
        for priority in PRIORITIES:
            wanted = max_messages - len(received)
            if wanted == 0:
                break
            if priority not in drained:
                received += await self._receive_priority(
                    provisioner_id, worker_type, priority, wanted, visibility_timeout
                )
        return received

    async def _receive_priority(
        self,
        provisioner_id: str,
        worker_type: str,
        priority: str,
        wanted: int,
        visibility_timeout: int,
    ) -> list[ReceivedHint]:
        """Up to ``wanted`` hints of one priority's queue; none when it does not exist."""
        name = self.name(provisioner_id, worker_type, priority)
        try:
            messages = await self._receive_from(name, wanted, visibility_timeout)
        except QueueMissing:
            return []
        return [self._received(name, message) for message in messages]

    async def _receive_from(
        self, name: str, wanted: int, visibility_timeout: int
    ) -> list[QueueMessage]:
        pages = self._client(name).receive_messages(
            messages_per_page=wanted, max_messages=wanted, visibility_timeout=visibility_timeout
        )
        async with self._azure("receive hints", name):
            # Only the first page: iterating further would ask the queue again even when
            # it just said it had fewer than we wanted.
            async for page in pages.by_page():
                return [message async for message in page]
        return []

    @staticmethod
    def _received(name: str, message: QueueMessage) -> ReceivedHint:
        decoded = decode_hint(message.content) if isinstance(message.content, str) else None
        if decoded is None:
            logger.warning(
                "poison hint queue=%s messageId=%s dequeueCount=%s",
                name,
                message.id,
                message.dequeue_count,
            )
        return ReceivedHint(
            azure_queue=name,
            message_id=message.id,
            pop_receipt=message.pop_receipt or "",
            dequeue_count=message.dequeue_count or 0,
            task_id=decoded[0] if decoded else None,
            run_id=decoded[1] if decoded else None,
        )

    async def delete(self, received: ReceivedHint) -> bool:
        """Delete a received hint. ``False`` if it was already gone or someone else has
        received it since (its pop receipt is stale): either way it is not ours to delete."""
        return await self._settle(
            received,
            "delete hint",
            lambda client: client.delete_message(received.message_id, received.pop_receipt),
        )

    async def release(self, received: ReceivedHint, *, after_s: int = 0) -> bool:
        """Make a received hint visible again, at once or ``after_s`` seconds from now.
        ``False`` if it is gone or someone else has received it since."""
        return await self._settle(
            received,
            "release hint",
            lambda client: client.update_message(
                received.message_id, received.pop_receipt, visibility_timeout=after_s
            ),
        )

    async def _settle(
        self,
        received: ReceivedHint,
        action: str,
        operation: Callable[[QueueClient], Awaitable[object]],
    ) -> bool:
        async with self._azure(
            action, received.azure_queue, task_id=received.task_id, run_id=received.run_id
        ):
            try:
                await operation(self._client(received.azure_queue))
            except HttpResponseError as error:
                # 404: message (or queue) gone; 400 PopReceiptMismatch: received again since.
                if error.status_code != 404 and _error_code(error) != "PopReceiptMismatch":
                    raise
                logger.info(
                    "hint already settled action=%s queue=%s messageId=%s taskId=%s runId=%s "
                    "error=%s",
                    action,
                    received.azure_queue,
                    received.message_id,
                    received.task_id,
                    received.run_id,
                    _error_code(error),
                )
                return False
        return True

    async def sweep_unused(self, *, now: int, unused_for: int = UNUSED_QUEUE_LIMIT) -> list[str]:
        """Delete this deployment's queues (by prefix) that are empty and whose ``last_used``
        is at least ``unused_for`` ms before ``now``; the names deleted.

        Queues without a readable ``last_used`` are not ours and are left alone.
        """
        ours = queue_name_pattern(self.settings.prefix)

        def unused(metadata: Mapping[str, str] | None) -> bool:
            last_used = _last_used(metadata)
            return last_used is not None and now - last_used >= unused_for

        candidates = [
            properties.name
            async for properties in self._list_queues()
            if ours.fullmatch(properties.name) and unused(properties.metadata)
        ]
        deleted = []
        for name in candidates:
            client = self._client(name)
            with contextlib.suppress(QueueMissing):
                async with self._azure("sweep queue", name):
                    # Look again right before deleting: a replica may have used it since the
                    # listing. (A put racing the delete itself can still lose its hint; the
                    # window is this one round trip after ten idle days.)
                    properties = await client.get_queue_properties()
                    if properties.approximate_message_count or not unused(properties.metadata):
                        continue
                    await client.delete_queue()
                self._fresh.pop(name, None)
                deleted.append(name)
                logger.info(
                    "queue deleted queue=%s reason=unused lastUsed=%s",
                    name,
                    (properties.metadata or {}).get("last_used"),
                )
        return deleted

    async def _list_queues(self) -> AsyncIterator[QueueProperties]:
        pages = self._service.list_queues(
            name_starts_with=self.settings.prefix, include_metadata=True
        ).by_page()
        while True:
            # Bound each page, not the whole listing: an account may hold many queues.
            async with self._azure("list queues", self.settings.prefix + "*"):
                page = await anext(pages, None)
                items = [] if page is None else [properties async for properties in page]
            if page is None:
                return
            for properties in items:
                yield properties
