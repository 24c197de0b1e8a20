"""Nothing lost (docs/events.md): a ``queue-coordinator serve`` process publishing through a
local TCP proxy to the test broker is SIGKILLed between its transitions (the task groups'
priority change, seal and resolution among them) and their publishes,
and its broker connection is cut for 30 s; every transition's message still arrives at least
once, in order per task, and the outage is one log line, not one per message."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable

import pytest
import slugid

from devharness.tcp_proxy import TcpProxy
from tests.fixtures.coordinator import CoordinatorProcess
from tests.fixtures.pulse import (
    AMQP_URL,
    LIFE,
    Listener,
    bindings,
    check_body,
    exchanges_of,
    live,
)

MakeProcess = Callable[..., CoordinatorProcess]


@pytest.fixture
async def proxy() -> AsyncIterator[TcpProxy]:
    through = TcpProxy.in_front_of(AMQP_URL, default_port=5672)
    await through.start()
    yield through
    await through.close()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    listening = Listener()
    yield listening
    await listening.close()


async def test_a_sigkill_between_transitions_and_publishes_loses_nothing(
    coordinator_process: MakeProcess, proxy: TcpProxy, listener: Listener
) -> None:
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group))
    process = coordinator_process(pulse_url=proxy.url_through(AMQP_URL), resolver_interval_ms=200)
    c = await process.start()
    # the broker is away: every transition's message waits in the outbox
    await proxy.sever()
    task_ids = [await c.create(taskGroupId=group) for _ in range(5)]
    for task_id in task_ids[:3]:
        await live(c, task_id)
    assert process.process is not None
    await process.kill()
    assert process.process.returncode == -signal.SIGKILL
    assert listener.messages == []
    await proxy.restore()
    c = await process.start()
    # and a kill while it publishes: what it confirmed may come again, nothing is lost
    for task_id in task_ids[3:]:
        await live(c, task_id)
    await process.kill()
    c = await process.start()
    await listener.wait_for(
        lambda ms: all(exchanges_of(ms, t) == LIFE for t in task_ids), within=60
    )
    for message in listener.messages:
        check_body(message.name, message.body)


GROUP_EVENTS = ["task-group-priority-changed", "task-group-sealed", "task-group-resolved"]


async def test_group_events_survive_a_sigkill_between_each_change_and_its_publish(
    coordinator_process: MakeProcess, proxy: TcpProxy, listener: Listener
) -> None:
    """task-group-priority-changed, -sealed and -resolved are written in their change's
    transaction: a coordinator killed after each change and before anything of it was
    published still publishes each, once it runs again."""
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group))
    process = coordinator_process(pulse_url=proxy.url_through(AMQP_URL), resolver_interval_ms=200)
    c = await process.start()
    task_ids = [await c.create(taskGroupId=group, priority="low") for _ in range(2)]
    changes = [
        ("POST", f"/task-group/{group}/priority", {"newPriority": "high"}),
        ("POST", f"/task-group/{group}/seal", None),
    ]
    for step in range(len(changes) + len(task_ids)):
        await proxy.sever()  # nothing of the change can be published before the kill
        if step < len(changes):
            await c.ok(*changes[step])
        else:
            await live(c, task_ids[step - len(changes)])  # the last one resolves the group
        await process.kill()
        await proxy.restore()
        c = await process.start()
    await listener.wait_for(
        lambda ms: all(name in {m.name for m in ms} for name in GROUP_EVENTS), within=60
    )
    group_events = [m.name for m in listener.messages if m.name.startswith("task-group-")]
    # in the order of their changes; a message confirmed just before a kill may come twice
    assert list(dict.fromkeys(group_events)) == GROUP_EVENTS
    assert group_events.count("task-group-resolved") <= 2
    for message in listener.messages:
        check_body(message.name, message.body)


@pytest.mark.slow(seconds=35, waits=True)
async def test_a_broker_cut_for_30s_is_one_log_line_and_loses_nothing(
    coordinator_process: MakeProcess, proxy: TcpProxy, listener: Listener
) -> None:
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group))
    process = coordinator_process(pulse_url=proxy.url_through(AMQP_URL), resolver_interval_ms=200)
    c = await process.start()
    before = await c.create(taskGroupId=group)
    await listener.wait_for(lambda ms: exchanges_of(ms, before)[:2] == LIFE[:2])
    await proxy.sever()
    # the API keeps answering while the broker is away
    during = []
    for _ in range(30):
        task_id = await c.create(taskGroupId=group)
        await live(c, task_id)
        during.append(task_id)
        await asyncio.sleep(1)  # the cut lasts 30 s
    await live(c, before)
    await proxy.restore()
    await listener.wait_for(
        lambda ms: all(exchanges_of(ms, t) == LIFE for t in [before, *during]), within=60
    )
    await process.terminate()
    log = process.log_path.read_text()
    assert log.count("pulse broker unreachable") == 1, log
    assert log.count("pulse broker reachable again") == 1, log


async def test_replicas_share_the_outbox_without_publishing_twice(
    postgres_schema_url: str, coordinator_process: MakeProcess, listener: Listener
) -> None:
    """Two replicas on one PostgreSQL store, both publishing: every message once (the normal
    case: nobody is killed), in order per task, whichever replica made the change."""
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group))
    replicas = [
        await coordinator_process(
            store_url=postgres_schema_url, pulse_url=AMQP_URL, resolver_interval_ms=200
        ).start()
        for _ in range(2)
    ]
    task_ids = []
    for n in range(40):
        # created on one replica, claimed and completed on the other
        task_id = await replicas[n % 2].create(taskGroupId=group)
        await live(replicas[(n + 1) % 2], task_id)
        task_ids.append(task_id)
    await listener.wait_for(
        lambda ms: all(exchanges_of(ms, t) == LIFE for t in task_ids), within=60
    )
    await asyncio.sleep(1)  # anything published twice would have arrived by now
    keys = [
        (m.name, m.body["status"]["taskId"], m.body.get("runId"))
        for m in listener.messages
        if "status" in m.body
    ]
    assert len(keys) == len(set(keys)) == 4 * len(task_ids)
