"""The purge-cache service (docs/secrets.md#purge-cache) through the official
``taskcluster.PurgeCache`` client, sync and aio, unmodified, against an in-process coordinator
with authentication on: a purge raises its request's ``before``, workers read their pool's
requests since a time, administrators page through all of them, each method needs exactly its
scope (upstream's two-colon purgeRequests scope and the older single-colon one), requests are
swept a day after they were last made, and bad input is a 400 with nothing changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import hawk_signing
from coordinator.api.endpoints import PURGE_CACHE_PREFIX
from coordinator.domain.records import from_iso, to_iso
from coordinator.resolvers import purge_request_sweeper
from devharness.api import call
from tests.fixtures.clients import (
    Credentials,
    PurgeCache,
    missing_scopes,
    rejected,
    start_secured,
)
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator

DAY_S = 24 * 3600


async def secured(
    start_coordinator: StartCoordinator, tmp_path: Path, **overrides: Any
) -> tuple[RunningCoordinator, dict[str, Credentials]]:
    return await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {
            "purger": ["purge-cache:prov/wt:cache-a"],
            "worker": ["purge-cache:purge-requests::prov/wt"],  # upstream's template
            "old-worker": ["purge-cache:purge-requests:prov/wt"],  # the pre-2021 one
            "admin": ["purge-cache:all-purge-requests"],
        },
        **overrides,
    )


def requests_of(answer: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["provisionerId"], r["workerType"], r["cacheName"]) for r in answer["requests"]]


@pytest.mark.parametrize("kind", ["sync", "aio"])
async def test_purges_are_read_by_pool_since_a_time_and_all_together(
    kind: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    clock = FakeClock()
    coordinator, creds = await secured(start_coordinator, tmp_path, clock=clock)
    root = PurgeCache(kind, coordinator.url, creds["root"])
    assert (await root.ping())["alive"] is True
    assert await root.purgeCache("prov/wt", {"cacheName": "cache-a"}) is None  # 204
    first = clock.now
    clock.advance(10)
    await root.purgeCache("prov/wt", {"cacheName": "cache-b"})
    await root.purgeCache("prov/other", {"cacheName": "cache-a"})

    mine = await root.purgeRequests("prov/wt")
    assert requests_of(mine) == [("prov", "wt", "cache-a"), ("prov", "wt", "cache-b")]
    assert from_iso(mine["requests"][0]["before"]) == first
    since = await root.purgeRequests("prov/wt", query={"since": to_iso(first + 1)})
    assert requests_of(since) == [("prov", "wt", "cache-b")]

    # Purging again raises `before`: a worker that read since then sees it again.
    clock.advance(10)
    await root.purgeCache("prov/wt", {"cacheName": "cache-a"})
    again = await root.purgeRequests("prov/wt", query={"since": to_iso(clock.now)})
    assert requests_of(again) == [("prov", "wt", "cache-a")]
    assert from_iso(again["requests"][0]["before"]) == clock.now

    everything: list[tuple[str, str, str]] = []
    query: dict[str, Any] = {"limit": 2}
    while True:
        page = await root.allPurgeRequests(query=query)
        everything += requests_of(page)
        if "continuationToken" not in page:
            break
        query["continuationToken"] = page["continuationToken"]
    assert everything == [
        ("prov", "other", "cache-a"),
        ("prov", "wt", "cache-a"),
        ("prov", "wt", "cache-b"),
    ]


async def test_both_url_forms_name_one_worker_pool(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    url = coordinator.url + PURGE_CACHE_PREFIX + "/purge-cache/"
    root = hawk_signing.Credentials.from_json(creds["root"])
    # prov/wt as two segments (older clients, curl) and as one (prov%2Fwt, today's clients)
    made = await call(
        coordinator.session, "POST", url + "prov/wt", {"cacheName": "raw"}, credentials=root
    )
    assert (made.status, made.body) == (204, None)
    read = await call(coordinator.session, "GET", url + "prov%2Fwt", credentials=root)
    assert requests_of(read.body) == [("prov", "wt", "raw")]
    read = await call(coordinator.session, "GET", url + "prov/wt", credentials=root)
    assert requests_of(read.body) == [("prov", "wt", "raw")]


async def test_each_method_needs_exactly_its_scope(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    purger = PurgeCache("aio", coordinator.url, creds["purger"])
    await purger.purgeCache("prov/wt", {"cacheName": "cache-a"})
    status, error = await rejected(purger.purgeCache("prov/wt", {"cacheName": "cache-b"}))
    assert status == 403 and missing_scopes(error) == "purge-cache:prov/wt:cache-b"
    status, error = await rejected(purger.purgeCache("prov/other", {"cacheName": "cache-a"}))
    assert status == 403
    status, _ = await rejected(purger.purgeRequests("prov/wt"))
    assert status == 403

    for worker in ("worker", "old-worker"):
        reader = PurgeCache("aio", coordinator.url, creds[worker])
        assert requests_of(await reader.purgeRequests("prov/wt")) == [("prov", "wt", "cache-a")]
        status, _ = await rejected(reader.purgeRequests("prov/other"))
        assert status == 403
        status, _ = await rejected(reader.allPurgeRequests())
        assert status == 403
        status, _ = await rejected(reader.purgeCache("prov/wt", {"cacheName": "cache-a"}))
        assert status == 403

    admin = PurgeCache("aio", coordinator.url, creds["admin"])
    assert requests_of(await admin.allPurgeRequests()) == [("prov", "wt", "cache-a")]
    status, error = await rejected(purger.allPurgeRequests())
    assert status == 403 and missing_scopes(error) == "purge-cache:all-purge-requests"


async def test_a_request_is_swept_a_day_after_it_was_last_made(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    clock = FakeClock()
    coordinator, creds = await secured(
        start_coordinator, tmp_path, clock=clock, run_resolvers=False
    )
    root = PurgeCache("aio", coordinator.url, creds["root"])
    await root.purgeCache("prov/wt", {"cacheName": "old"})
    clock.advance(60)
    await root.purgeCache("prov/wt", {"cacheName": "new"})
    service = coordinator.parts.purge_cache
    start = clock.now
    clock.now = start + DAY_S * 1000 - 30_000  # "old" is past its day, "new" is not
    assert await purge_request_sweeper.run_once(service) == 1
    assert await purge_request_sweeper.run_once(service) == 0
    clock.now = start  # within Hawk's allowed skew of the requests' real time again
    assert requests_of(await root.purgeRequests("prov/wt")) == [("prov", "wt", "new")]


async def test_bad_worker_pools_cache_names_and_dates_are_a_400_with_nothing_changed(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = hawk_signing.Credentials.from_json(creds["root"])
    url = coordinator.url + PURGE_CACHE_PREFIX + "/purge-cache/"

    async def answer(method: str, path: str, sent: Any = None) -> tuple[int, Any]:
        response = await call(coordinator.session, method, url + path, sent, credentials=root)
        return response.status, response.body

    ok = {"cacheName": "c"}
    for pool, named in [
        ("bad!/wt", "provisionerId"),
        ("prov/w.t", "workerType"),
        ("p" * 39 + "/wt", "provisionerId"),
        ("prov%2Fw%20t", "taskQueueId"),
        ("prov%2F", "taskQueueId"),
        ("prov", "taskQueueId"),
    ]:
        for method, sent in [("POST", ok), ("GET", None)]:
            status, error = await answer(method, pool, sent)
            assert status == 400, (method, pool, error)
            assert named in error["message"], error
    for bad in [
        {},
        {"cacheName": ""},
        {"cacheName": "a\x01"},
        {"cacheName": "x" * 513},
        {"cacheName": 7},
        {"cacheName": "c", "extra": 1},
        ["c"],
    ]:
        status, error = await answer("POST", "prov/wt", bad)
        assert status == 400, (bad, error)
        assert "cacheName" in error["message"] or "body" in error["message"], error
    for since in ["yesterday", "2024-01-01", ""]:
        status, error = await answer("GET", f"prov/wt?since={since}")
        assert status == 400 and "since" in error["message"], (since, error)
    status, error = await answer("GET", "list?limit=0")
    assert status == 400 and "limit" in error["message"]
    status, error = await answer("GET", "list?continuationToken=abc")
    assert status == 400
    status, listed = await answer("GET", "list")
    assert (status, listed) == (200, {"requests": []})  # nothing changed
    status, _ = await answer("POST", "prov/wt", {"cacheName": "x" * 512})  # the longest
    assert status == 204
