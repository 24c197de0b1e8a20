"""The Azure layer (coordinator.azure.queues) against a real Azurite: names, hints, signed URLs used
the way a worker uses them (plain HTTP), pending counts, claimWork's receive/delete/release,
the unused-queue sweeper, and failure when Azure hangs (when it is down:
tests/e2e/test_azurite_outages.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Callable
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.queue.aio import QueueClient

from coordinator.azure.errors import QueueUnavailable
from coordinator.azure.hint_codec import decode_hint
from coordinator.azure.names import MAX_PREFIX_LENGTH, queue_name
from coordinator.azure.queues import QueueService, QueueSettings
from coordinator.domain.task_queues import PRIORITIES, priority_level
from devharness.azurite import AzuriteProcess
from devharness.waiting import wait_until
from tests.fixtures.azurite import AzureNamespace

MINUTE = 60_000
DAY = 86_400_000
SLUGID_RE = re.compile(r"^[A-Za-z0-9_-]{22}$")
# Azure: 3-63 chars of lowercase letters, digits and single hyphens, alphanumeric at both ends.
AZURE_QUEUE_NAME_RE = re.compile(r"^(?=.{3,63}$)[a-z0-9]+(-[a-z0-9]+)*$")

MakeService = Callable[..., QueueService]


def now_ms() -> int:
    return int(time.time() * 1000)


def parse_messages(xml_text: str) -> list[dict[str, str]]:
    root = ET.fromstring(xml_text)
    assert root.tag == "QueueMessagesList", xml_text
    return [{field.tag: field.text or "" for field in message} for message in root]


def decode_text(text: str) -> Any:
    return json.loads(base64.b64decode(text))


def sas_of(signed_poll_url: str) -> str:
    """The SAS query of a signed poll URL (everything after its own parameter)."""
    return signed_poll_url.split("?visibilitytimeout=300&", 1)[1]


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def make_service(
    azurite: AzuriteProcess, azure_namespace: AzureNamespace
) -> AsyncIterator[MakeService]:
    """``make_service(**settings)``: a QueueService on the session's Azurite, inside the test's
    namespace; all closed at the end."""
    made: list[QueueService] = []

    def make(connection_string: str | None = None, **settings: Any) -> QueueService:
        service = QueueService(
            connection_string or azurite.connection_string,
            azure_namespace.queue_settings(**settings),
        )
        made.append(service)
        return service

    yield make
    for service in made:
        await service.close()


@pytest.fixture
def queues(make_service: MakeService) -> QueueService:
    return make_service()


async def get_messages(
    http: aiohttp.ClientSession, signed_poll_url: str, count: int = 32
) -> list[dict[str, str]]:
    async with http.get(f"{signed_poll_url}&numofmessages={count}") as response:
        body = await response.text()
        assert response.status == 200, body
        return parse_messages(body)


# --- names ----------------------------------------------------------------------------------


def test_queue_names_are_deterministic_legal_and_distinct() -> None:
    ids = ["a", "Proj_X-1", "x" * 38, "UPPER", "upper"]
    prefixes = ["", "qc-", "a" * (MAX_PREFIX_LENGTH - 1) + "-"]
    names = set()
    for prefix in prefixes:
        for provisioner_id in ids:
            for worker_type in ids:
                for priority in PRIORITIES:
                    name = queue_name(prefix, provisioner_id, worker_type, priority)
                    assert name == queue_name(prefix, provisioner_id, worker_type, priority)
                    assert AZURE_QUEUE_NAME_RE.match(name), name
                    assert name.startswith(prefix)
                    assert name.endswith(f"-{priority_level(priority)}")
                    names.add(name)
    # Every (prefix, provisionerId, workerType, priority) has its own queue; case matters.
    assert len(names) == len(prefixes) * len(ids) ** 2 * len(PRIORITIES)
    assert queue_name("", "p", "w", "highest")[-1] == "7"
    assert queue_name("", "p", "w", "lowest")[-1] == "1"


@pytest.mark.parametrize("prefix", ["Upper-", "a--b", "-a", "a_b", "a" * (MAX_PREFIX_LENGTH + 1)])
def test_illegal_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="queue prefix"):
        QueueSettings(prefix=prefix)


async def test_longest_names_are_accepted_by_azure(
    make_service: MakeService, azure_namespace: AzureNamespace
) -> None:
    longest = azure_namespace.queue_prefix.ljust(MAX_PREFIX_LENGTH, "x")
    service = make_service(prefix=longest)
    urls = await service.poll_urls("P" * 38, "W" * 38, now=now_ms())
    assert len(urls.queues) == len(PRIORITIES)
    assert len(service.name("P" * 38, "W" * 38, "highest")) == 63


# --- hints and signed URLs ------------------------------------------------------------------


async def test_workers_get_hints_highest_priority_first_and_delete_them(
    queues: QueueService,
    make_service: MakeService,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    http: aiohttp.ClientSession,
) -> None:
    ns = azure_namespace
    now = now_ms()
    # Put lowest first so that insertion order cannot explain the order workers see.
    expected = {}
    for run_id, priority in enumerate(reversed(PRIORITIES)):
        task_id = f"task-{priority}"
        h = ns.hint(task_id=task_id, run_id=run_id, priority=priority, now=now)
        assert await queues.put_hint(h, now=now)
        expected[priority] = (task_id, run_id)

    urls = await queues.poll_urls(ns.provisioner_id, "wt", now=now)

    assert urls.expires == (now + 30 * MINUTE) // 1000 * 1000
    assert len(urls.queues) == 7
    for priority, signed in zip(PRIORITIES, urls.queues, strict=True):
        queue_url = f"{azurite.endpoint}/{queues.name(ns.provisioner_id, 'wt', priority)}"
        assert signed.signed_poll_url.startswith(f"{queue_url}/messages?visibilitytimeout=300&")
        assert signed.signed_delete_url.startswith(
            f"{queue_url}/messages/{{{{messageId}}}}?popreceipt={{{{popReceipt}}}}&"
        )
        sas = urllib.parse.parse_qs(sas_of(signed.signed_poll_url))
        assert sas["sp"] == ["p"]
        assert sas["se"] == [time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(urls.expires / 1000))]
        start = (now - 15 * MINUTE) / 1000
        assert sas["st"] == [time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start))]
        assert signed.signed_delete_url.endswith(sas_of(signed.signed_poll_url))

    seen = []
    for signed in urls.queues:
        messages = await get_messages(http, signed.signed_poll_url)
        assert len(messages) == 1
        message = messages[0]
        body = decode_text(message["MessageText"])
        assert set(body) == {"taskId", "runId", "hintId"}
        assert SLUGID_RE.match(body["hintId"])
        assert decode_hint(message["MessageText"]) == (body["taskId"], body["runId"])
        seen.append((body["taskId"], body["runId"]))
        assert message["DequeueCount"] == "1"
        # TTL = seconds until the deadline: the message expires with the task.
        expiration = parsedate_to_datetime(message["ExpirationTime"]).timestamp() * 1000
        assert abs(expiration - (now + 3_600_000)) <= 2_000

        delete_url = signed.signed_delete_url.replace(
            "{{messageId}}", urllib.parse.quote(message["MessageId"], safe="")
        ).replace("{{popReceipt}}", urllib.parse.quote(message["PopReceipt"], safe=""))
        async with http.delete(delete_url) as response:
            assert response.status == 204, await response.text()
    assert seen == [expected[p] for p in PRIORITIES]

    # The messages are gone, not merely invisible for the poll's 300 s.
    counter = make_service(pending_cache_s=0)
    assert await counter.pending_count(ns.provisioner_id, "wt") == 0


async def test_hint_ids_differ_between_puts_of_the_same_run(
    queues: QueueService, azure_namespace: AzureNamespace, http: aiohttp.ClientSession
) -> None:
    now = now_ms()
    h = azure_namespace.hint(task_id="same", now=now)
    assert await queues.put_hint(h, now=now)
    assert await queues.put_hint(h, now=now)
    urls = await queues.poll_urls(azure_namespace.provisioner_id, "wt", now=now)
    messages = await get_messages(http, urls.queues[-1].signed_poll_url)
    bodies = [decode_text(m["MessageText"]) for m in messages]
    assert [(b["taskId"], b["runId"]) for b in bodies] == [("same", 0), ("same", 0)]
    assert bodies[0]["hintId"] != bodies[1]["hintId"]


async def test_signed_urls_only_get_and_delete_on_their_own_queue(
    queues: QueueService,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    http: aiohttp.ClientSession,
) -> None:
    ns, now = azure_namespace, now_ms()
    urls = await queues.poll_urls(ns.provisioner_id, "wt", now=now)
    other = await queues.poll_urls(ns.provisioner_id, "other-wt", now=now)
    signed = urls.queues[0]
    queue_url = signed.signed_poll_url.split("/messages?")[0]
    sas = sas_of(signed.signed_poll_url)
    add = "<QueueMessage><MessageText>Zm9v</MessageText></QueueMessage>"

    async with http.post(f"{queue_url}/messages?{sas}", data=add) as response:
        assert response.status == 403
    async with http.get(f"{queue_url}?comp=metadata&{sas}") as response:
        assert response.status == 403
    async with http.delete(f"{queue_url}/messages?{sas}") as response:  # clear the queue
        assert response.status == 403
    # Another worker type's queue (and another priority's) refuses this queue's SAS.
    for foreign in (other.queues[0], urls.queues[1]):
        foreign_url = foreign.signed_poll_url.split("/messages?")[0]
        async with http.get(f"{foreign_url}/messages?{sas}") as response:
            assert response.status == 403
    # Control: the same SAS does get messages from its own queue.
    assert await get_messages(http, signed.signed_poll_url) == []


async def test_expired_signed_urls_are_refused(
    queues: QueueService, azure_namespace: AzureNamespace, http: aiohttp.ClientSession
) -> None:
    now = now_ms()
    stale = await queues.poll_urls(azure_namespace.provisioner_id, "wt", now=now - 31 * MINUTE)
    assert stale.expires < now
    async with http.get(stale.queues[0].signed_poll_url) as response:
        assert response.status == 403
    fresh = await queues.poll_urls(azure_namespace.provisioner_id, "wt", now=now)
    async with http.get(fresh.queues[0].signed_poll_url) as response:
        assert response.status == 200


async def test_delayed_hint_becomes_visible_only_after_its_delay(
    queues: QueueService, azure_namespace: AzureNamespace, http: aiohttp.ClientSession
) -> None:
    ns, now = azure_namespace, now_ms()
    assert await queues.put_hint(ns.hint(task_id="later", now=now, delay=2_000), now=now)
    assert await queues.put_hint(ns.hint(task_id="now", now=now), now=now)
    urls = await queues.poll_urls(ns.provisioner_id, "wt", now=now)
    poll_url = urls.queues[-1].signed_poll_url  # lowest
    first = await get_messages(http, poll_url)
    assert [decode_text(m["MessageText"])["taskId"] for m in first] == ["now"]

    later: list[dict[str, str]] = []

    async def visible() -> bool:
        later.extend(await get_messages(http, poll_url))
        return bool(later)

    await wait_until(visible, within=10.0, what="the delayed hint")
    assert now_ms() - now >= 1_000
    assert [decode_text(m["MessageText"])["taskId"] for m in later] == ["later"]


async def test_no_hint_is_put_past_the_deadline(
    make_service: MakeService, azure_namespace: AzureNamespace
) -> None:
    ns, now = azure_namespace, now_ms()
    queues = make_service(pending_cache_s=0)
    assert not await queues.put_hint(ns.hint(task_id="late", now=now, deadline=now - 1), now=now)
    assert not await queues.put_hint(ns.hint(task_id="at", now=now, deadline=now), now=now)
    # A retry delay reaching the deadline would make a hint nobody can see in time.
    never_visible = ns.hint(task_id="delayed", now=now, delay=60_000, deadline=now + 60_000)
    assert not await queues.put_hint(never_visible, now=now)
    assert await queues.pending_count(ns.provisioner_id, "wt") == 0
    # Control: one second before the deadline is still in time.
    assert await queues.put_hint(ns.hint(task_id="ok", now=now, deadline=now + 1_000), now=now)
    assert await queues.pending_count(ns.provisioner_id, "wt") == 1


async def test_pending_count_sums_priorities_and_is_cached(
    make_service: MakeService, azure_namespace: AzureNamespace
) -> None:
    ns, now = azure_namespace, now_ms()
    queues = make_service(pending_cache_s=1.0)
    assert await queues.pending_count(ns.provisioner_id, "nothing-here") == 0
    await queues.put_hint(ns.hint(task_id="a", priority="highest", now=now), now=now)
    await queues.put_hint(ns.hint(task_id="b", priority="low", now=now, delay=60_000), now=now)
    assert await queues.pending_count(ns.provisioner_id, "wt") == 2

    await queues.put_hint(ns.hint(task_id="c", priority="lowest", now=now), now=now)
    assert await queues.pending_count(ns.provisioner_id, "wt") == 2  # cached

    async def counted() -> bool:
        return await queues.pending_count(ns.provisioner_id, "wt") == 3

    await wait_until(counted, within=5.0, what="the pending count cache to expire")


# --- claimWork's side -----------------------------------------------------------------------


async def test_receive_walks_priorities_and_delete_release_settle_hints(
    make_service: MakeService, azurite: AzuriteProcess, azure_namespace: AzureNamespace
) -> None:
    ns, now = azure_namespace, now_ms()
    queues = make_service()
    counter = make_service(pending_cache_s=0)
    for task_id, priority in [("C", "lowest"), ("B", "medium"), ("A", "highest")]:
        assert await queues.put_hint(ns.hint(task_id=task_id, priority=priority, now=now), now=now)
    await queues.poll_urls(ns.provisioner_id, "wt", now=now)  # creates the other queues
    poison_queue = queues.name(ns.provisioner_id, "wt", "very-high")
    async with QueueClient.from_connection_string(
        azurite.connection_string, poison_queue
    ) as client:
        await client.send_message("not a hint!")

    first = await queues.receive(ns.provisioner_id, "wt", max_messages=3, visibility_timeout=60)
    assert [(r.task_id, r.run_id) for r in first] == [("A", 0), (None, None), ("B", 0)]
    a, poison, b = first
    assert not poison.decodable and a.decodable
    assert poison.azure_queue == poison_queue
    assert a.azure_queue == queues.name(ns.provisioner_id, "wt", "highest")
    assert [r.dequeue_count for r in first] == [1, 1, 1]
    # Received hints are invisible: only C is left to receive.
    rest = await queues.receive(ns.provisioner_id, "wt", max_messages=32, visibility_timeout=60)
    assert [r.task_id for r in rest] == ["C"]

    assert await queues.release(b)
    again = await queues.receive(ns.provisioner_id, "wt", max_messages=32, visibility_timeout=60)
    assert [(r.task_id, r.dequeue_count) for r in again] == [("B", 2)]
    new_b = again[0]
    # b's pop receipt is stale now: the hint is someone else's to settle.
    assert not await queues.delete(b)
    assert not await queues.release(b)

    assert await queues.delete(a)
    assert not await queues.delete(a)
    assert await queues.delete(new_b)
    assert await queues.delete(poison)
    assert await counter.pending_count(ns.provisioner_id, "wt") == 1  # C, still invisible

    assert (
        await queues.receive(ns.provisioner_id, "no-queues", max_messages=1, visibility_timeout=1)
        == []
    )
    with pytest.raises(ValueError):
        await queues.receive(ns.provisioner_id, "wt", max_messages=33, visibility_timeout=1)


# --- sweeping -------------------------------------------------------------------------------


async def test_sweep_deletes_only_our_old_empty_queues(
    queues: QueueService, azurite: AzuriteProcess, azure_namespace: AzureNamespace
) -> None:
    ns, now = azure_namespace, now_ms()
    old = now - 11 * DAY
    await queues.poll_urls(ns.provisioner_id, "idle", now=old)
    await queues.put_hint(
        ns.hint(task_id="t", worker_type="busy", now=old, deadline=now + DAY), now=old
    )
    await queues.poll_urls(ns.provisioner_id, "recent", now=now - 9 * DAY)
    stranger = f"{ns.queue_prefix}not-ours"
    async with QueueClient.from_connection_string(azurite.connection_string, stranger) as client:
        await client.create_queue()

    deleted = await queues.sweep_unused(now=now)

    assert sorted(deleted) == sorted(queues.name(ns.provisioner_id, "idle", p) for p in PRIORITIES)
    remaining = set()
    async with QueueClient.from_connection_string(azurite.connection_string, stranger) as client:
        await client.get_queue_properties()  # still there
    for worker_type in ("idle", "busy", "recent"):
        for priority in PRIORITIES:
            name = queues.name(ns.provisioner_id, worker_type, priority)
            async with QueueClient.from_connection_string(azurite.connection_string, name) as c:
                with contextlib.suppress(ResourceNotFoundError):
                    await c.get_queue_properties()
                    remaining.add((worker_type, priority))
    assert remaining == {("busy", "lowest")} | {("recent", p) for p in PRIORITIES}
    assert await queues.sweep_unused(now=now) == []

    # The swept queue comes back when it is needed again.
    assert await queues.put_hint(ns.hint(task_id="u", worker_type="idle", now=now), now=now)
    received = await queues.receive(ns.provisioner_id, "idle", max_messages=1, visibility_timeout=5)
    assert [r.task_id for r in received] == ["u"]


# --- failures -------------------------------------------------------------------------------


async def test_put_hint_gives_up_on_a_server_that_never_answers(
    azure_namespace: AzureNamespace,
) -> None:
    ns = azure_namespace
    accepted: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # keep the connection open and say nothing

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    silent = AzuriteProcess(port=port)  # never started: only for its connection string
    service = QueueService(silent.connection_string, ns.queue_settings(request_timeout_s=0.5))
    try:
        now = now_ms()
        started = time.monotonic()
        with pytest.raises(QueueUnavailable, match=r"no answer within 0\.5 s"):
            await service.put_hint(ns.hint(task_id="t", now=now), now=now)
        assert 0.5 <= time.monotonic() - started < 1.5
        assert accepted
    finally:
        await service.close()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()
