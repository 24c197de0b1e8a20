"""OutageWatch: a driver's outage errors become StoreUnavailable, and each outage is logged
once when it begins and once when it ends, whatever the calls in flight say meanwhile."""

from __future__ import annotations

import asyncio
import logging

import pytest

from coordinator.store.errors import StoreUnavailable
from coordinator.store.outages import OutageWatch

STORE = "postgresql://127.0.0.1:5432/queue"


class Gone(Exception):
    """What the test's "driver" raises when its store is not there."""


def watch() -> OutageWatch:
    return OutageWatch(store=STORE, is_outage=lambda error: isinstance(error, Gone))


async def ok() -> str:
    return "ok"


async def gone() -> str:
    raise Gone("connection refused\nsecond line")


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "coordinator.store.outages"]


async def test_an_outage_error_becomes_store_unavailable_naming_the_store_and_the_cause() -> None:
    with pytest.raises(StoreUnavailable) as raised:
        await watch().watch(gone())

    assert raised.value.store == STORE
    assert raised.value.reason == "Gone: connection refused"
    assert str(raised.value) == f"the store {STORE} is unavailable: Gone: connection refused"
    assert isinstance(raised.value.__cause__, Gone)


async def test_other_errors_pass_unchanged_and_say_nothing_about_the_store(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outages = watch()

    async def bug() -> None:
        raise ValueError("a bad statement")

    with pytest.raises(ValueError, match="a bad statement"):
        await outages.watch(bug())
    assert await outages.watch(ok()) == "ok"
    assert lines(caplog) == []


async def test_one_line_when_an_outage_begins_and_one_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    outages = watch()
    assert await outages.watch(ok()) == "ok"

    for _ in range(5):
        with pytest.raises(StoreUnavailable):
            await outages.watch(gone())
    assert await outages.watch(ok()) == "ok"
    assert await outages.watch(ok()) == "ok"

    assert len(lines(caplog)) == 2
    begun, ended = lines(caplog)
    assert begun.startswith(f"store unavailable, calls answered 503 until it is back store={STORE}")
    assert "Gone: connection refused" in begun
    assert ended.startswith(f"store available again store={STORE} down_for=")
    assert ended.endswith("calls_failed=5")
    assert all(record.exc_info is None for record in caplog.records)


async def test_calls_in_flight_when_the_store_goes_or_comes_back_change_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outages = watch()
    released = asyncio.Event()

    async def answer_late() -> str:
        await released.wait()
        return "late"

    async def fail_late() -> str:
        await released.wait()
        raise Gone("reset by peer")

    # started before the outage: its success does not end it
    early = asyncio.ensure_future(outages.watch(answer_late()))
    await asyncio.sleep(0)
    with pytest.raises(StoreUnavailable):
        await outages.watch(gone())
    released.set()
    assert await early == "late"
    assert len(lines(caplog)) == 1

    # back; a call started during the outage fails afterwards: no new outage
    released.clear()
    straggler = asyncio.ensure_future(outages.watch(fail_late()))
    await asyncio.sleep(0)
    assert await outages.watch(ok()) == "ok"
    released.set()
    with pytest.raises(StoreUnavailable):
        await straggler
    assert len(lines(caplog)) == 2

    # a failure of a call started after it came back is a new outage
    with pytest.raises(StoreUnavailable):
        await outages.watch(gone())
    assert len(lines(caplog)) == 3
