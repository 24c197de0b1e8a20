"""The query plans of the management API's statements: ``list_tasks`` and ``count_tasks`` of a
driver's ``queries.sql`` with the ``{filters}`` clause of a
:class:`~coordinator.domain.task_filters.TaskFilter`, explained with the parameters the store
passes (``EXPLAIN`` on PostgreSQL, ``EXPLAIN QUERY PLAN`` on SQLite), and what the plans scan.

The statements and clauses are the coordinator's own (:func:`coordinator.store.task_filters.
filter_clause`, :func:`coordinator.store.sqlfiles.queries`, and the PostgreSQL driver's
rewriting of ``:name`` parameters), so a plan here is the plan of the store's query.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import asyncpg

from coordinator.domain.task_filters import TaskFilter
from coordinator.store.postgres import filtered_statement
from coordinator.store.sqlfiles import queries
from coordinator.store.task_filters import filter_clause

Statement = Literal["list_tasks", "count_tasks"]

_SQLITE_SCAN = re.compile(
    r"(?P<node>SEARCH|SCAN) (?P<table>\w+)"
    r"(?: USING (?:COVERING )?INDEX (?P<index>\w+)| USING (?:INTEGER )?PRIMARY KEY)?"
    r"(?: \((?P<conditions>.*)\))?"
)
"""A line of SQLite's ``EXPLAIN QUERY PLAN`` that reads a table."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Scan:
    """One node of a plan that reads a table or an index.

    :param node: the node type as the database names it (``Index Scan``, ``Seq Scan``,
        ``Bitmap Index Scan``; for SQLite ``SEARCH`` or ``SCAN``).
    :param table: the table it reads (for a bitmap index scan: the index's table).
    :param index: the index it reads, if any.
    :param filtered: whether it discards rows by a condition the index does not serve
        (PostgreSQL's ``Filter``). SQLite does not say; there it is whether the scan is bound
        by nothing but a range of task ids, so that every other condition filters its rows.
    """

    node: str
    table: str | None
    index: str | None
    filtered: bool

    def __str__(self) -> str:
        on = f" {self.index}" if self.index else ""
        table = f" on {self.table}" if self.table else ""
        return f"{self.node}{on}{table}{' (filter)' if self.filtered else ''}"


_PRIMARY_KEYS = frozenset({"tasks_pkey", "sqlite_autoindex_tasks_1"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """A plan: its nodes from the top, and the scans among them."""

    nodes: tuple[str, ...]
    scans: tuple[Scan, ...]
    text: str

    def summary(self) -> str:
        """The node types from the top down to the first scan, then every scan."""
        above = list(self.nodes[: self._first_scan()])
        return " > ".join([*above, "; ".join(str(scan) for scan in self.scans)])

    def _first_scan(self) -> int:
        for index, node in enumerate(self.nodes):
            if "Scan" in node or node in ("SEARCH", "SCAN"):
                return index
        return len(self.nodes)

    def full_scans_of_tasks(self) -> list[Scan]:
        """Scans that may read all of ``tasks``: a sequential scan (SQLite: ``SCAN tasks``,
        with or without an index), or a walk of its primary key from the page's first task id
        that filters what it reads."""
        return [
            scan
            for scan in self.scans
            if scan.table == "tasks"
            and (
                scan.node in ("Seq Scan", "SCAN") or (scan.index in _PRIMARY_KEYS and scan.filtered)
            )
        ]


def parameters(
    statement: Statement,
    task_filter: TaskFilter,
    *,
    postgres: bool,
    now: int,
    limit: int = 100,
    after: str = "",
) -> tuple[str, dict[str, Any]]:
    """The ``{filters}`` clause of ``task_filter`` and every parameter ``statement`` takes, as
    the store of that driver passes them for a page of ``limit`` tasks after the task id
    ``after`` (``""``: the first page; a count passes ``""``)."""
    clause = filter_clause(task_filter, listed_apart=postgres)
    # a count passes the first page's keyset, which the clause's tag conditions use too
    params: dict[str, Any] = {**clause.params, "now": now, "after": after}
    if statement == "list_tasks":
        # the store asks for one more row, which tells it whether another page follows
        params["limit"] = limit + 1
    return clause.sql, params


async def postgres_plan(
    conn: asyncpg.Connection,
    statement: Statement,
    task_filter: TaskFilter,
    *,
    now: int,
    limit: int = 100,
    after: str = "",
    generic: bool = False,
    analyse: bool = False,
) -> Plan:
    """The plan PostgreSQL picks for the statement with these values (see :func:`parameters`;
    ``generic``: the plan it uses for any values, as a prepared statement run often enough
    may). With ``analyse`` the statement runs too, and :attr:`Plan.text` tells what each node
    took (``EXPLAIN (ANALYZE, BUFFERS)``)."""
    filters, params = parameters(
        statement, task_filter, postgres=True, now=now, limit=limit, after=after
    )
    rewritten = filtered_statement(statement, filters)
    args = rewritten.args(params)
    async with conn.transaction():
        if generic:
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        found = await conn.fetchval("EXPLAIN (FORMAT JSON) " + rewritten.sql, *args)
        options = "(ANALYZE, BUFFERS) " if analyse else ""
        text = await conn.fetch(f"EXPLAIN {options}" + rewritten.sql, *args)
    nodes = list(_postgres_nodes(json.loads(found)[0]["Plan"], None))
    return Plan(
        nodes=tuple(node["Node Type"] for node, _ in nodes),
        scans=tuple(
            Scan(
                node=node["Node Type"],
                table=table,
                index=node.get("Index Name"),
                filtered="Filter" in node,
            )
            for node, table in nodes
            if "Scan" in node["Node Type"]
        ),
        text="\n".join(row[0] for row in text),
    )


def _postgres_nodes(
    node: Mapping[str, Any], parent_table: str | None
) -> Iterator[tuple[Mapping[str, Any], str | None]]:
    """Every node with its table: its own, or for a bitmap index scan its heap scan's."""
    table = node.get("Relation Name", parent_table)
    yield node, table
    for child in node.get("Plans", ()):
        yield from _postgres_nodes(child, table)


def sqlite_plan(
    conn: sqlite3.Connection,
    statement: Statement,
    task_filter: TaskFilter,
    *,
    now: int,
    limit: int = 100,
) -> Plan:
    """The plan SQLite picks (``EXPLAIN QUERY PLAN``): one line per step."""
    filters, params = parameters(statement, task_filter, postgres=False, now=now, limit=limit)
    sql = queries("sqlite")[statement].format(filters=filters)
    details = [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
    scans = []
    for detail in details:
        match = _SQLITE_SCAN.match(detail)
        if match:
            bound_by = set(re.findall(r"(\w+)[<>=]", match["conditions"] or ""))
            scans.append(
                Scan(
                    node=match["node"],
                    table=match["table"],
                    index=match["index"],
                    filtered=bound_by <= {"task_id"},
                )
            )
    return Plan(
        nodes=tuple(detail.split()[0] for detail in details),
        scans=tuple(scans),
        text="\n".join(details),
    )
