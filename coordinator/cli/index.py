"""The ``queue-coordinator index`` commands, a client of Taskcluster's index API (``find``,
``list``, ``insert``, ``delete``; docs/index-service.md has their semantics).

This module owns their flags, the insertTask body they become (``--data`` as a JSON object,
``--expires`` in the notation :func:`~coordinator.cli.rest.expires_at` reads), and what they
print: a taskId, the namespaces and tasks under a namespace as tables, or the API's JSON.
Reading the ``TASKCLUSTER_*`` variables, signing, paging and the one-line failures are
:mod:`coordinator.cli.rest`'s, as for the other REST commands.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO
from urllib.parse import quote

import aiohttp

from coordinator.cli.rest import (
    Caller,
    Target,
    all_pages,
    expires_at,
    fetch_object,
    new_session,
    run_command,
    table,
    to_second,
)

API_PATH = "/api/index/v1"

TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)

DESCRIPTION = """\
Find, list, insert and delete index entries through the index API at
$TASKCLUSTER_ROOT_URL/api/index/v1, signed with TASKCLUSTER_CLIENT_ID and
TASKCLUSTER_ACCESS_TOKEN (and TASKCLUSTER_CERTIFICATE; none: anonymous). A task that completes
is indexed at <namespace> for each of its routes index.<namespace>."""

DEFAULT_EXPIRES = "1 year"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``index`` commands to ``parser`` (the ``index`` command's own parser)."""
    parser.description = DESCRIPTION
    commands = parser.add_subparsers(dest="index_command", required=True)
    find = commands.add_parser("find", help="print the taskId indexed at an index path")
    find.add_argument("path", metavar="INDEX_PATH")
    find.add_argument("--json", action="store_true", help="print the API's JSON answer")
    listing = commands.add_parser(
        "list", help="list the namespaces and tasks directly under a namespace (every page)"
    )
    listing.add_argument(
        "namespace", metavar="NAMESPACE", nargs="?", default="", help="default: the top level"
    )
    listing.add_argument(
        "--json", action="store_true", help="print each item as one JSON object per line"
    )
    insert = commands.add_parser(
        "insert", help="index a task at an index path (kept only if it outranks what is there)"
    )
    insert.add_argument("path", metavar="INDEX_PATH")
    insert.add_argument("task_id", metavar="TASK_ID")
    insert.add_argument("--rank", type=int, default=0, help="an integer (default: 0)")
    insert.add_argument(
        "--data", type=_json_object, default={}, metavar="JSON", help="a JSON object to keep"
    )
    insert.add_argument(
        "--expires",
        type=expires_at,
        default=DEFAULT_EXPIRES,
        metavar="WHEN",
        help="when the entry expires: a duration from now (1y, 30d, 12h) or an ISO 8601 time "
        f"(default: {DEFAULT_EXPIRES})",
    )
    delete = commands.add_parser("delete", help="remove the entry at an index path")
    delete.add_argument("path", metavar="INDEX_PATH")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("not a JSON object")
    return value


def run(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """Run the ``index`` command ``args`` asked for; the exit status."""
    return run_command(lambda target: _run(args, target, sys.stdout), api_path=API_PATH, env=env)


async def _run(args: argparse.Namespace, target: Target, out: TextIO) -> None:
    async with new_session(TIMEOUT) as session:
        caller = Caller(session, target)
        if args.index_command == "find":
            text, found = await fetch_object(caller, "GET", _task_path(args.path))
            out.write(text.rstrip("\n") + "\n" if args.json else f"{found.get('taskId')}\n")
        elif args.index_command == "list":
            await _list(caller, args, out)
        elif args.index_command == "insert":
            body = {
                "taskId": args.task_id,
                "rank": args.rank,
                "data": args.data,
                "expires": args.expires,
            }
            _, stored = await fetch_object(caller, "PUT", _task_path(args.path), body=body)
            if stored.get("taskId") == args.task_id:
                out.write(f"indexed {args.task_id} at {args.path} (rank {args.rank})\n")
            else:
                out.write(
                    f"not indexed: {stored.get('taskId')} (rank {stored.get('rank')}) outranks "
                    f"it at {args.path}\n"
                )
        else:
            await fetch_object(caller, "DELETE", _task_path(args.path))
            out.write(f"deleted the entry at {args.path}\n")


def _task_path(path: str) -> str:
    """``/task/<path>``: an index path may hold ``%``, which is sent as ``%25``."""
    return f"/task/{quote(path, safe='')}"


async def _list(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    suffix = f"/{quote(args.namespace, safe='')}" if args.namespace else "/"
    namespaces = await all_pages(caller, f"/namespaces{suffix}", "namespaces")
    tasks = await all_pages(caller, f"/tasks{suffix}", "tasks")
    if args.json:
        out.writelines(json.dumps(item) + "\n" for item in [*namespaces, *tasks])
        return
    rows = [
        ("namespace", str(n.get("namespace")), "-", "-", to_second(n.get("expires")))
        for n in namespaces
    ] + [
        (
            "task",
            str(t.get("namespace")),
            str(t.get("taskId")),
            str(t.get("rank")),
            to_second(t.get("expires")),
        )
        for t in tasks
    ]
    out.write(table(("KIND", "INDEX PATH", "TASK ID", "RANK", "EXPIRES"), rows, right={3}))
    if not rows:
        where = args.namespace or "the top level"
        print(f"nothing indexed under {where}", file=sys.stderr)
