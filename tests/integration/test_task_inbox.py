"""The task inbox (docs/tasks.md#transactional-enqueue): rows producers commit in their own
transactions, through asyncpg and psycopg, become tasks exactly once, as the client each row
names; rolled-back rows create nothing; refused rows are kept with their reason."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import asyncpg
import psycopg
import pytest
import slugid
from prometheus_client.parser import text_string_to_metric_families

import hawk_signing
from coordinator.api.inbox import MANAGE
from devharness.api import Response, call
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.clients import Credentials, start_secured
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator
from tests.fixtures.sdk import running
from worker_sdk import App, InboxUnavailable, enqueue_in, enqueue_in_sync

CREATE = "queue:create-task:lowest:proj/inbox"
PRODUCER = [CREATE, "queue:scheduler-id:*", "queue:create-task:project:*"]


def _schema_and_dsn(url: str) -> tuple[str, str]:
    """The schema a test store is in, and the DSN without its search_path."""
    parts = urlsplit(url)
    return parse_qs(parts.query)["search_path"][0], urlunsplit(parts._replace(query=""))


def _task() -> dict[str, Any]:
    return task_definition(provisionerId="proj", workerType="inbox")


async def _secured(
    start_coordinator: StartCoordinator, tmp_path: Path, url: str
) -> RunningCoordinator:
    coordinator, _ = await _secured_with_credentials(start_coordinator, tmp_path, url)
    return coordinator


async def _secured_with_credentials(
    start_coordinator: StartCoordinator, tmp_path: Path, url: str
) -> tuple[RunningCoordinator, dict[str, Credentials]]:
    return await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {"producer": PRODUCER, "weak": PRODUCER[1:], "operator": [MANAGE]},
        store_url=url,
    )


async def _rows(dsn: str, schema: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        rows: list[asyncpg.Record] = await conn.fetch(
            f"SELECT task_id, state, reason FROM {schema}.task_inbox"
        )
        return rows
    finally:
        await conn.close()


async def _exists(coordinator: RunningCoordinator, task_id: str) -> bool:
    response = await coordinator.call("GET", f"/task/{task_id}/status")
    return response.status == 200


async def test_committed_rows_become_tasks_once_and_rolled_back_rows_nothing(
    postgres_schema_url: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator = await _secured(start_coordinator, tmp_path, postgres_schema_url)
    schema, dsn = _schema_and_dsn(postgres_schema_url)
    committed, rolled_back = [slugid.nice() for _ in range(3)], [slugid.nice() for _ in range(3)]

    conn = await asyncpg.connect(postgres_schema_url)  # the search_path finds the table
    try:
        async with conn.transaction():
            await enqueue_in(conn, committed[0], _task(), client_id="producer")
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await enqueue_in(conn, rolled_back[0], _task(), client_id="producer")
                raise RuntimeError("the producer's transaction fails")
    finally:
        await conn.close()
    async with await psycopg.AsyncConnection.connect(dsn) as aconn:
        async with aconn.transaction():
            await enqueue_in(aconn, committed[1], _task(), client_id="producer", schema=schema)
        await enqueue_in(aconn, rolled_back[1], _task(), client_id="producer", schema=schema)
        await aconn.rollback()
    with psycopg.connect(dsn) as sconn:
        enqueue_in_sync(sconn, committed[2], _task(), client_id="producer", schema=schema)
        sconn.commit()
        enqueue_in_sync(sconn, rolled_back[2], _task(), client_id="producer", schema=schema)
        sconn.rollback()

    async def all_created() -> bool:
        return all([await _exists(coordinator, task_id) for task_id in committed])

    await wait_until(all_created, what="the committed rows' tasks")
    await wait_until(lambda: _rows_left(dsn, schema), what="the inbox emptied")
    for task_id in rolled_back:
        assert not await _exists(coordinator, task_id)
    answer = await coordinator.ok("GET", f"/task/{committed[0]}")
    assert answer["workerType"] == "inbox"


async def _rows_left(dsn: str, schema: str) -> bool:
    return not await _rows(dsn, schema)


async def test_refused_rows_are_kept_with_their_reason(
    postgres_schema_url: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator = await _secured(start_coordinator, tmp_path, postgres_schema_url)
    schema, dsn = _schema_and_dsn(postgres_schema_url)
    not_json, bad, weak, unknown, good = (slugid.nice() for _ in range(5))
    conn = await asyncpg.connect(postgres_schema_url)
    try:
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO task_inbox (task_id, client_id, definition) VALUES ($1, $2, $3)",
                not_json,
                "producer",
                "{not json",
            )
            await enqueue_in(conn, bad, {**_task(), "priority": "urgent!"}, client_id="producer")
            await enqueue_in(conn, weak, _task(), client_id="weak")
            await enqueue_in(conn, unknown, _task(), client_id="nobody")
            await enqueue_in(conn, good, _task(), client_id="producer")
    finally:
        await conn.close()

    await wait_until(lambda: _exists(coordinator, good), what="the good row's task")

    async def all_refused() -> bool:
        states = [str(row["state"]) for row in await _rows(dsn, schema)]
        return states.count("rejected") == 4

    await wait_until(all_refused, what="four rows rejected")
    reasons = {row["task_id"]: row["reason"] for row in await _rows(dsn, schema)}
    assert "not JSON" in reasons[not_json]
    assert "priority" in reasons[bad]
    assert CREATE in reasons[weak] and "client the inbox row names" in reasons[weak]
    assert "'nobody'" in reasons[unknown]
    for task_id in (not_json, bad, weak, unknown):
        assert not await _exists(coordinator, task_id)
    async with coordinator.session.get(coordinator.url + "/metrics") as response:
        exposition = await response.text()
    gauge = next(
        family
        for family in text_string_to_metric_families(exposition)
        if family.name == "queue_inbox_rejected_rows"
    )
    assert gauge.samples[0].value == 4


async def test_sqlite_connections_are_refused_clearly(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "producer.db")
    try:
        with pytest.raises(InboxUnavailable, match="PostgreSQL"):
            await enqueue_in(conn, slugid.nice(), _task(), client_id="producer")
        with pytest.raises(InboxUnavailable, match="PostgreSQL"):
            enqueue_in_sync(conn, slugid.nice(), _task(), client_id="producer")
    finally:
        conn.close()


async def _as(
    coordinator: RunningCoordinator, credentials: Credentials, method: str, path: str
) -> Response:
    return await call(
        coordinator.session,
        method,
        coordinator.api + path,
        credentials=hawk_signing.Credentials.from_json(credentials),
    )


async def test_operators_list_and_delete_rejected_rows(
    postgres_schema_url: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await _secured_with_credentials(
        start_coordinator, tmp_path, postgres_schema_url
    )
    schema, dsn = _schema_and_dsn(postgres_schema_url)
    refused = [slugid.nice() for _ in range(3)]
    conn = await asyncpg.connect(postgres_schema_url)
    try:
        async with conn.transaction():
            for task_id in refused:
                await enqueue_in(conn, task_id, _task(), client_id="nobody")
    finally:
        await conn.close()

    async def all_refused() -> bool:
        return [str(row["state"]) for row in await _rows(dsn, schema)] == ["rejected"] * 3

    await wait_until(all_refused, what="three rows rejected")
    operator = creds["operator"]
    first = await _as(coordinator, operator, "GET", "/inbox/rejected?limit=2")
    assert first.status == 200, first.body
    second = await _as(
        coordinator,
        operator,
        "GET",
        f"/inbox/rejected?limit=2&continuationToken={first.body['continuationToken']}",
    )
    assert second.status == 200, second.body
    assert "continuationToken" not in second.body
    listed = first.body["rows"] + second.body["rows"]
    assert [row["taskId"] for row in listed] == refused
    assert all(row["clientId"] == "nobody" and "'nobody'" in row["reason"] for row in listed)
    assert listed[0]["id"] < listed[1]["id"] < listed[2]["id"]
    assert listed[0]["created"].endswith("Z")

    deleted = await _as(coordinator, operator, "DELETE", f"/inbox/rejected/{listed[0]['id']}")
    assert (deleted.status, deleted.body) == (200, {})
    again = await _as(coordinator, operator, "DELETE", f"/inbox/rejected/{listed[0]['id']}")
    assert again.status == 404 and again.body["code"] == "ResourceNotFound", again.body
    assert str(listed[0]["id"]) in again.body["message"]
    left = await _as(coordinator, operator, "GET", "/inbox/rejected")
    assert [row["taskId"] for row in left.body["rows"]] == refused[1:]
    assert sorted(str(row["task_id"]) for row in await _rows(dsn, schema)) == sorted(refused[1:])


async def test_the_rejected_rows_endpoint_refuses_bad_input_and_other_clients(
    postgres_schema_url: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await _secured_with_credentials(
        start_coordinator, tmp_path, postgres_schema_url
    )
    for path in ("/inbox/rejected/abc", "/inbox/rejected/0", "/inbox/rejected?limit=0"):
        method = "GET" if "?" in path else "DELETE"
        bad = await _as(coordinator, creds["operator"], method, path)
        assert bad.status == 400 and bad.body["code"] == "InputValidationError", (path, bad.body)
    forged = await _as(
        coordinator, creds["operator"], "GET", "/inbox/rejected?continuationToken=x.y"
    )
    assert forged.status == 400, forged.body
    missing = await _as(coordinator, creds["operator"], "DELETE", "/inbox/rejected/12345")
    assert missing.status == 404, missing.body
    for method, path in (("GET", "/inbox/rejected"), ("DELETE", "/inbox/rejected/1")):
        refused = await _as(coordinator, creds["producer"], method, path)
        assert refused.status == 403 and MANAGE in refused.body["message"], refused.body


async def test_sqlite_lists_no_rejected_rows(start_coordinator: StartCoordinator) -> None:
    coordinator = await start_coordinator()
    assert await coordinator.ok("GET", "/inbox/rejected") == {"rows": []}
    missing = await coordinator.call("DELETE", "/inbox/rejected/1")
    assert missing.status == 404, missing.body


async def multiply(x: int, y: int = 1) -> int:
    return x * y


async def test_dispatch_in_creates_the_functions_task_as_dispatch_would(
    postgres_schema_url: str, start_coordinator: StartCoordinator
) -> None:
    coordinator = await start_coordinator(store_url=postgres_schema_url)  # auth off: any client
    schema, dsn = _schema_and_dsn(postgres_schema_url)
    async with App(
        root_url=coordinator.url, credentials=None, task_queue="fn-prov/inbox-fn"
    ) as app:
        fn = app.task(multiply)
        dispatched = await fn.dispatch(2, y=3)
        conn = await asyncpg.connect(postgres_schema_url)
        try:
            async with conn.transaction():
                through_asyncpg = await fn.dispatch_in(conn, 4, y=5, client_id="producer")
        finally:
            await conn.close()
        async with await psycopg.AsyncConnection.connect(dsn) as aconn, aconn.transaction():
            through_psycopg = await fn.dispatch_in(aconn, 6, client_id="producer", schema=schema)
        with psycopg.connect(dsn) as sconn:
            through_sync = fn.dispatch_in_sync(sconn, 7, y=7, client_id="producer", schema=schema)
            sconn.commit()
            rolled_back = fn.dispatch_in_sync(sconn, 8, client_id="producer", schema=schema)
            sconn.rollback()

        async def all_created() -> bool:
            handles = (through_asyncpg, through_psycopg, through_sync)
            return all([await _exists(coordinator, h.task_id) for h in handles])

        await wait_until(all_created, what="the dispatch_in tasks")
        expected = await coordinator.ok("GET", f"/task/{dispatched.task_id}")
        for handle, args, kwargs in (
            (through_asyncpg, [4], {"y": 5}),
            (through_psycopg, [6], {}),
            (through_sync, [7], {"y": 7}),
        ):
            task = await coordinator.ok("GET", f"/task/{handle.task_id}")
            assert task["payload"] == {"function": fn.name, "args": args, "kwargs": kwargs}
            for field in ("taskQueueId", "priority", "retries", "schedulerId", "tags"):
                assert task[field] == expected[field], field
        async with running(app.worker(capacity=4)):
            results = [
                await handle.result(timeout=60)
                for handle in (dispatched, through_asyncpg, through_psycopg, through_sync)
            ]
        assert results == [6, 20, 6, 49]
        assert not await _exists(coordinator, rolled_back.task_id)
    app.close()
