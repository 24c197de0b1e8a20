"""The ``queue-coordinator inbox`` commands, a client of the task inbox's management API
(``list`` the rows the coordinator refused to make tasks, ``delete`` one;
docs/operations.md#the-task-inbox).

This module owns their flags and what they print: the refused rows as a table or as JSON
lines. Reading the ``TASKCLUSTER_*`` variables, signing, paging and the one-line failures are
:mod:`coordinator.cli.rest`'s, as for the other REST commands.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import TextIO

import aiohttp

from coordinator.cli.rest import (
    Caller,
    Target,
    all_pages,
    fetch_object,
    fit,
    new_session,
    run_command,
    table,
    to_second,
)

API_PATH = "/api/queue/v1"

TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)

REASON_WIDTH = 100
"""A reason is cut to this many characters in the table (``--json`` shows it whole)."""

DESCRIPTION = """\
List and delete the task inbox's rejected rows (those the coordinator refused to make tasks)
through the queue API at $TASKCLUSTER_ROOT_URL/api/queue/v1, signed with TASKCLUSTER_CLIENT_ID
and TASKCLUSTER_ACCESS_TOKEN (and TASKCLUSTER_CERTIFICATE); the client needs
queue:manage:inbox."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``inbox`` commands to ``parser`` (the ``inbox`` command's own parser)."""
    parser.description = DESCRIPTION
    commands = parser.add_subparsers(dest="inbox_command", required=True)
    listing = commands.add_parser("list", help="list the rejected rows (every page), by id")
    listing.add_argument(
        "--json", action="store_true", help="print each row as one JSON object per line"
    )
    delete = commands.add_parser("delete", help="delete a rejected row")
    delete.add_argument("row_id", metavar="ROW_ID", type=_row_id)


def _row_id(text: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a row id (a positive integer)")
    return int(text)


def run(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """Run the ``inbox`` command ``args`` asked for; the exit status."""
    return run_command(lambda target: _run(args, target, sys.stdout), api_path=API_PATH, env=env)


async def _run(args: argparse.Namespace, target: Target, out: TextIO) -> None:
    async with new_session(TIMEOUT) as session:
        caller = Caller(session, target)
        if args.inbox_command == "list":
            await _list(caller, args, out)
        else:
            await fetch_object(caller, "DELETE", f"/inbox/rejected/{args.row_id}")
            out.write(f"deleted rejected inbox row {args.row_id}\n")


async def _list(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    rows = await all_pages(caller, "/inbox/rejected", "rows")
    if args.json:
        out.writelines(json.dumps(row) + "\n" for row in rows)
        return
    cells = [
        (
            str(row.get("id")),
            str(row.get("taskId")),
            str(row.get("clientId")),
            to_second(row.get("created")),
            fit(str(row.get("reason")), REASON_WIDTH),
        )
        for row in rows
    ]
    out.write(table(("ID", "TASK ID", "CLIENT ID", "CREATED", "REASON"), cells, right={0}))
    if not rows:
        print("no rejected inbox rows", file=sys.stderr)
