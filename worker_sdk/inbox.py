"""Transactional enqueue (docs/tasks.md#transactional-enqueue): a createTask request written as
a row of the coordinator's task inbox inside the producer's own PostgreSQL transaction, so the
task exists if and only if that transaction commits.

The row names the client whose scopes the coordinator checks when it ingests it; whoever may
``INSERT`` into the inbox may therefore create tasks as any client (docs/operations.md). The
connection is an ``asyncpg`` connection or a ``psycopg`` (3) one, async or not; neither library
is imported here, so the worker library does not depend on them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

TABLE = "task_inbox"


class InboxUnavailable(TypeError):
    """The connection is not one the task inbox can be written through (SQLite's, say)."""


def _statement(schema: str | None, placeholder: str) -> str:
    """The INSERT, the table qualified by ``schema`` (quoted), or found on the search_path."""
    table = TABLE if schema is None else '"{}".{}'.format(schema.replace('"', '""'), TABLE)
    marks = ", ".join(placeholder.format(n) for n in (1, 2, 3))
    return f"INSERT INTO {table} (task_id, client_id, definition) VALUES ({marks})"


def _driver(connection: object) -> str:
    """``asyncpg``, ``psycopg-async`` or ``psycopg``.

    :raises InboxUnavailable: any other connection.
    """
    kind = type(connection)
    module = kind.__module__.partition(".")[0]
    if module == "asyncpg":
        return "asyncpg"
    if module == "psycopg":
        return "psycopg-async" if "Async" in kind.__name__ else "psycopg"
    raise InboxUnavailable(
        f"the task inbox is a PostgreSQL table: give an asyncpg or psycopg connection to the "
        f"coordinator's database, not a {kind.__module__}.{kind.__qualname__} (a SQLite "
        "coordinator has no inbox: create the task with dispatch or createTask instead)"
    )


def _row(task_id: str, definition: Mapping[str, Any], client_id: str) -> tuple[str, str, str]:
    return task_id, client_id, json.dumps(definition, separators=(",", ":"))


async def enqueue_in(
    connection: Any,
    task_id: str,
    definition: Mapping[str, Any],
    *,
    client_id: str,
    schema: str | None = None,
) -> None:
    """Insert the createTask request ``definition`` for ``task_id`` into the task inbox, in
    the connection's open transaction (asyncpg's or psycopg's ``AsyncConnection``); the
    coordinator creates the task once the transaction commits, checking ``client_id``'s scopes.

    :param schema: the schema the coordinator's tables are in; ``None``: the connection's
        ``search_path`` finds it.
    :raises InboxUnavailable: not an asyncpg or async psycopg connection (for a psycopg
        ``Connection``, call :func:`enqueue_in_sync`).
    """
    driver = _driver(connection)
    row = _row(task_id, definition, client_id)
    if driver == "asyncpg":
        await connection.execute(_statement(schema, "${}"), *row)
    elif driver == "psycopg-async":
        await connection.execute(_statement(schema, "%s"), row)
    else:
        raise InboxUnavailable("a synchronous psycopg connection: call enqueue_in_sync")


def enqueue_in_sync(
    connection: Any,
    task_id: str,
    definition: Mapping[str, Any],
    *,
    client_id: str,
    schema: str | None = None,
) -> None:
    """:func:`enqueue_in` on a synchronous psycopg ``Connection``."""
    if _driver(connection) != "psycopg":
        raise InboxUnavailable("enqueue_in_sync takes a synchronous psycopg connection")
    connection.execute(_statement(schema, "%s"), _row(task_id, definition, client_id))
