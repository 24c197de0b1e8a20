"""The Azure side of the soak, with the account key (never given to workers): inject
duplicate and garbage hints, and read what is left in the soak's queues at the end.

Queue names and the hint encoding come from the coordinator's own code
(:mod:`coordinator.azure`): no API hands out the account's queues or lets a client put a
hint, and the checks must read the queues behind the coordinator's back."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import slugid
from azure.storage.queue.aio import QueueServiceClient

from coordinator.azure.hint_codec import decode_hint, encode_hint
from coordinator.azure.names import queue_name
from soaklib.processes import PROVISIONER_ID, WORKER_TYPE

NOISE_TTL = 3600
"""Seconds injected hints live: longer than any soak, so only a worker removes them."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LeftHint:
    """A message found in a soak queue at the end: the run it names, or none (garbage)."""

    queue: str
    message_id: str
    task_id: str | None
    run_id: int | None
    dequeue_count: int


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueCensus:
    """What the soak's queues hold: ``visible`` every message a reader could get, and
    ``approximate`` Azure's count, which also includes invisible (in-flight) messages."""

    visible: list[LeftHint]
    approximate: int


class Hints:
    def __init__(self, connection_string: str, prefix: str) -> None:
        # Few, quick retries (as the coordinator does): Azurite may be down for a restart,
        # and the noise loop must not stall on the SDK's long default backoff.
        self._service = QueueServiceClient.from_connection_string(
            connection_string,
            connection_timeout=5,
            read_timeout=5,
            retry_total=1,
            initial_backoff=0.2,
            increment_base=0,
            random_jitter_range=0,
        )
        self.prefix = prefix

    async def close(self) -> None:
        await self._service.close()

    async def put_duplicate(self, task_id: str, run_id: int, priority: str) -> None:
        """A second hint for a run, as a retried put or a re-put by the hint keeper makes."""
        name = queue_name(self.prefix, PROVISIONER_ID, WORKER_TYPE, priority)
        text = encode_hint(task_id=task_id, run_id=run_id, hint_id=slugid.nice())
        await self._service.get_queue_client(name).send_message(text, time_to_live=NOISE_TTL)

    async def put_garbage(self, priority: str, number: int) -> None:
        """A message that is not a hint (the workers must delete it as poison)."""
        name = queue_name(self.prefix, PROVISIONER_ID, WORKER_TYPE, priority)
        texts = (
            base64.b64encode(b'{"taskId": 7}').decode(),
            "not base64 at all",
            base64.b64encode(b"not json").decode(),
        )
        await self._service.get_queue_client(name).send_message(
            texts[number % len(texts)], time_to_live=NOISE_TTL
        )

    async def queue_names(self) -> list[str]:
        return [
            queue.name
            async for queue in self._service.list_queues(name_starts_with=self.prefix)
            if queue.name
        ]

    async def visible_count(self) -> int:
        """Visible messages over all soak queues (peeked, so nothing changes; at most 32 a
        queue are counted, which is all "zero or not" needs)."""
        total = 0
        for name in await self.queue_names():
            total += len(await self._service.get_queue_client(name).peek_messages(max_messages=32))
        return total

    async def census(self, *, hide_for: int = 600) -> QueueCensus:
        """Read every visible message of every soak queue. Messages are received (made
        invisible for ``hide_for`` seconds) rather than peeked because peek stops at 32;
        call it only once the workers are gone."""
        approximate = 0
        visible: list[LeftHint] = []
        for name in await self.queue_names():
            client = self._service.get_queue_client(name)
            properties = await client.get_queue_properties()
            approximate += properties.approximate_message_count or 0
            while True:
                batch = [
                    message
                    async for message in client.receive_messages(
                        messages_per_page=32, max_messages=32, visibility_timeout=hide_for
                    )
                ]
                if not batch:
                    break
                for message in batch:
                    decoded = (
                        decode_hint(message.content) if isinstance(message.content, str) else None
                    )
                    visible.append(
                        LeftHint(
                            queue=name,
                            message_id=message.id,
                            task_id=decoded[0] if decoded else None,
                            run_id=decoded[1] if decoded else None,
                            dequeue_count=message.dequeue_count or 0,
                        )
                    )
        return QueueCensus(visible=visible, approximate=approximate)
