"""The ``queue-coordinator clients`` commands that go through Taskcluster's auth API (``list``,
``show``, ``create``, ``update``, ``reset``, ``disable``, ``enable``, ``delete``, ``history``),
the ``roles`` commands (``list``, ``show``, ``create``, ``update``, ``delete``, ``expand``), and
``encryption-key``, which prints a new ``COORDINATOR_ENCRYPTION_KEY``.

This module owns the client side of those calls (docs/auth.md has their semantics): the flags
and the request bodies they become (an update reads the client or role first and keeps what
it is not given), percent-encoding the clientId or roleId as one path segment, and printing
details, JSON, or a new accessToken as shell ``export`` lines. Reading the ``TASKCLUSTER_*``
variables, signing, paging, the ``--expires`` notation, tables, and the one-line failures (exit
status 1 for a refusal, 2 for the environment) are :mod:`coordinator.cli.rest`'s, as for the
``tasks`` and ``index`` commands. ``clients add``, which edits the clients file instead, is
:mod:`coordinator.cli.main`'s.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TextIO
from urllib.parse import quote

import aiohttp

from coordinator.cli.rest import (
    EXIT_CONFIGURATION,
    EXIT_REFUSED,
    Caller,
    CommandFailed,
    Target,
    all_pages,
    expires_at,
    fetch_object,
    fit,
    new_session,
    one_line,
    run_command,
    table,
    to_second,
)
from coordinator.service.encryption import new_key_text

API_PATH = "/api/auth/v1"

TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)
"""Each call is one short request (a listing is read a page at a time)."""

DEFAULT_EXPIRES = "1 year"

COMMANDS_EPILOG = """\
Through the auth API at $TASKCLUSTER_ROOT_URL/api/auth/v1, signed with TASKCLUSTER_CLIENT_ID
and TASKCLUSTER_ACCESS_TOKEN (and TASKCLUSTER_CERTIFICATE): the clients the API keeps in the
store. The clients file's (queue-coordinator clients add) are neither listed nor changed."""

ROLES_DESCRIPTION = """\
Manage roles through the auth API at $TASKCLUSTER_ROOT_URL/api/auth/v1, signed with
TASKCLUSTER_CLIENT_ID and TASKCLUSTER_ACCESS_TOKEN (and TASKCLUSTER_CERTIFICATE). A client
holding assume:<roleId> holds the role's scopes (docs/auth.md)."""

EXPIRES_HELP = (
    "when the client expires: a duration from now as Taskcluster writes them (1y, 6 months, "
    "30d, 2 weeks, 12h) or an ISO 8601 time (2027-01-31T00:00:00Z)"
)


# --- the parsers ---------------------------------------------------------------------------


def configure_clients(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the API's commands to ``commands``, the subcommands of ``clients`` (beside
    ``add``, which :mod:`coordinator.cli.main` adds)."""
    listing = commands.add_parser(
        "list", help="list the API's clients (every page)", epilog=COMMANDS_EPILOG
    )
    listing.add_argument("--prefix", metavar="P", help="only clientIds starting with P")
    listing.add_argument(
        "--json", action="store_true", help="print each client as one JSON object per line"
    )
    show = commands.add_parser(
        "show", help="show a client, its scopes and their expansion", epilog=COMMANDS_EPILOG
    )
    _client_id(show)
    show.add_argument("--json", action="store_true", help="print the API's JSON answer")
    create = commands.add_parser(
        "create",
        help="create a client and print its credentials as shell exports",
        epilog=COMMANDS_EPILOG,
    )
    _client_id(create)
    _scopes(create, required=True, what="client", replacing=False)
    create.add_argument(
        "--expires",
        type=expires_at,
        default=DEFAULT_EXPIRES,  # argparse converts a string default with the type
        metavar="WHEN",
        help=EXPIRES_HELP + f" (default: {DEFAULT_EXPIRES})",
    )
    create.add_argument("--description", default="", help="what the client is for")
    create.add_argument(
        "--delete-on-expiration",
        action="store_true",
        help="delete the client once it has expired (it is kept, refused, otherwise)",
    )
    update = commands.add_parser(
        "update",
        help="change a client's scopes, expiry or description (keeping what is not given)",
        epilog=COMMANDS_EPILOG,
    )
    _client_id(update)
    _scopes(update, required=False, what="client", replacing=True)
    update.add_argument("--expires", type=expires_at, metavar="WHEN", help=EXPIRES_HELP)
    update.add_argument("--description", help="what the client is for")
    update.add_argument(
        "--delete-on-expiration",
        action=argparse.BooleanOptionalAction,
        help="delete the client once it has expired, or not",
    )
    for name, help_text in {
        "reset": "give a client a new accessToken (the old one stops working) and print it",
        "disable": "refuse a client's requests (and its temporary credentials') until enabled",
        "enable": "let a disabled client authenticate again",
        "delete": "delete a client",
    }.items():
        _client_id(commands.add_parser(name, help=help_text, epilog=COMMANDS_EPILOG))
    history = commands.add_parser(
        "history",
        help="who changed a client, how and when (every page of its audit history)",
        epilog=COMMANDS_EPILOG,
    )
    _client_id(history)
    history.add_argument(
        "--json", action="store_true", help="print each entry as one JSON object per line"
    )


def configure_roles(parser: argparse.ArgumentParser) -> None:
    """Add the ``roles`` commands to ``parser`` (the ``roles`` command's own parser, made by
    :mod:`coordinator.cli.main`)."""
    parser.description = ROLES_DESCRIPTION
    commands = parser.add_subparsers(dest="roles_command", required=True)
    listing = commands.add_parser("list", help="list the roles")
    listing.add_argument(
        "--json", action="store_true", help="print each role as one JSON object per line"
    )
    show = commands.add_parser("show", help="show a role, its scopes and their expansion")
    _role_id(show)
    show.add_argument("--json", action="store_true", help="print the API's JSON answer")
    create = commands.add_parser("create", help="create a role")
    _role_id(create)
    _scopes(create, required=True, what="role", replacing=False)
    create.add_argument("--description", default="", help="what the role is for")
    update = commands.add_parser(
        "update", help="replace a role's scopes (and its description when given)"
    )
    _role_id(update)
    _scopes(update, required=True, what="role", replacing=True)
    update.add_argument("--description", help="what the role is for (default: as it is)")
    _role_id(commands.add_parser("delete", help="delete a role"))
    expand = commands.add_parser(
        "expand", help="print what scopes expand to through the roles, one per line"
    )
    expand.add_argument("scopes", nargs="+", metavar="SCOPE")


def _client_id(command: argparse.ArgumentParser) -> None:
    command.add_argument("client_id", metavar="CLIENT_ID")


def _role_id(command: argparse.ArgumentParser) -> None:
    command.add_argument("role_id", metavar="ROLE_ID")


def _scopes(
    command: argparse.ArgumentParser, *, required: bool, what: str, replacing: bool
) -> None:
    replaces = f"; they replace the {what}'s" if replacing else ""
    command.add_argument(
        "--scope",
        action="append",
        dest="scopes",
        required=required,
        metavar="SCOPE",
        help=f"a scope the {what} holds (repeatable{replaces})",
    )


# --- running -------------------------------------------------------------------------------


def run(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """Run the ``clients`` (but ``add``) or ``roles`` command ``args`` asked for; the exit
    status."""
    return run_command(lambda target: _run(args, target, sys.stdout), api_path=API_PATH, env=env)


def encryption_key(out: TextIO) -> int:
    """``encryption-key``: print a new key for ``COORDINATOR_ENCRYPTION_KEY``."""
    out.write(new_key_text() + "\n")
    return 0


Command = Callable[[Caller, argparse.Namespace, TextIO], Coroutine[Any, Any, None]]


async def _run(args: argparse.Namespace, target: Target, out: TextIO) -> None:
    commands: dict[tuple[str, str], Command] = {
        ("clients", "list"): _list_clients,
        ("clients", "show"): _show_client,
        ("clients", "create"): _create_client,
        ("clients", "update"): _update_client,
        ("clients", "reset"): _reset_client,
        ("clients", "disable"): _disable_client,
        ("clients", "enable"): _enable_client,
        ("clients", "delete"): _delete_client,
        ("clients", "history"): _client_history,
        ("roles", "list"): _list_roles,
        ("roles", "show"): _show_role,
        ("roles", "create"): _create_role,
        ("roles", "update"): _update_role,
        ("roles", "delete"): _delete_role,
        ("roles", "expand"): _expand,
    }
    subcommand = args.clients_command if args.command == "clients" else args.roles_command
    async with new_session(TIMEOUT) as session:
        await commands[args.command, subcommand](Caller(session, target), args, out)


def _segment(value: str) -> str:
    """One path segment: clientIds hold ``/``, roleIds ``:``, ``*`` and spaces."""
    return quote(value, safe="")


def _client_path(args: argparse.Namespace, suffix: str = "") -> str:
    return f"/clients/{_segment(args.client_id)}{suffix}"


def _role_path(args: argparse.Namespace) -> str:
    return f"/roles/{_segment(args.role_id)}"


def _unique(scopes: Sequence[str]) -> list[str]:
    """The scopes given, each once, in order (the API refuses a repeated one)."""
    return list(dict.fromkeys(scopes))


def _details(fields: Sequence[tuple[str, Any]], answer: Mapping[str, Any]) -> str:
    """A client or role as ``name  value`` lines, then its scopes and their expansion, one
    per line, indented."""
    width = max(len(name) for name, _ in fields)
    lines = [f"{name:<{width}}  {value}" for name, value in fields]
    for key in ("scopes", "expandedScopes"):
        scopes = answer.get(key) or []
        lines.append(f"{key} ({len(scopes)}):")
        lines += [f"  {scope}" for scope in scopes]
    return "\n".join(lines) + "\n"


def _flag(value: Any) -> str:
    return "yes" if value else "no"


def _exports(answer: Mapping[str, Any], comment: str) -> str:
    """A new accessToken as the shell lines ``clients add`` prints (quoted where the shell
    needs it: a clientId may hold ``|`` or ``!``)."""
    token = answer.get("accessToken")
    if not isinstance(token, str) or not token:
        raise CommandFailed(
            "the coordinator's answer lacks the client's accessToken", exit_status=EXIT_REFUSED
        )
    return (
        f"# {comment}\n"
        f"export TASKCLUSTER_CLIENT_ID={shlex.quote(str(answer.get('clientId')))}\n"
        f"export TASKCLUSTER_ACCESS_TOKEN={shlex.quote(token)}\n"
    )


# --- clients -------------------------------------------------------------------------------


async def _list_clients(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    query = [] if args.prefix is None else [("prefix", args.prefix)]
    clients = await all_pages(caller, "/clients/", "clients", query)
    if args.json:
        out.writelines(json.dumps(client) + "\n" for client in clients)
        return
    header = ("CLIENT ID", "EXPIRES", "DISABLED", "SCOPES", "LAST USED")
    rows = [
        (
            str(client.get("clientId") or "-"),
            to_second(client.get("expires")),
            _flag(client.get("disabled")),
            str(len(client.get("scopes") or [])),
            to_second(client.get("lastDateUsed")),
        )
        for client in clients
    ]
    out.write(table(header, rows, right={3}))
    if not clients:
        print("no clients (the clients file's are not listed)", file=sys.stderr)


async def _show_client(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    text, client = await fetch_object(caller, "GET", _client_path(args))
    if args.json:
        out.write(text.rstrip("\n") + "\n")
        return
    fields = [
        ("clientId", client.get("clientId")),
        ("description", one_line(str(client.get("description") or ""))),
        ("expires", to_second(client.get("expires"))),
        ("deleteOnExpiration", _flag(client.get("deleteOnExpiration"))),
        ("disabled", _flag(client.get("disabled"))),
        ("created", to_second(client.get("created"))),
        ("lastModified", to_second(client.get("lastModified"))),
        ("lastRotated", to_second(client.get("lastRotated"))),
        ("lastDateUsed", to_second(client.get("lastDateUsed"))),
    ]
    out.write(_details(fields, client))


async def _create_client(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    body = {
        "description": args.description,
        "expires": args.expires,
        "scopes": _unique(args.scopes),
        "deleteOnExpiration": args.delete_on_expiration,
    }
    _, made = await fetch_object(caller, "PUT", _client_path(args), body=body)
    expiry = to_second(made.get("expires"))
    out.write(_exports(made, f"created {args.client_id} through the auth API, expires {expiry}"))


async def _update_client(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    given = (args.scopes, args.expires, args.description, args.delete_on_expiration)
    if all(value is None for value in given):
        raise CommandFailed(
            "nothing to update: give --scope, --expires, --description or "
            "--[no-]delete-on-expiration",
            exit_status=EXIT_CONFIGURATION,
        )
    path = _client_path(args)
    _, client = await fetch_object(caller, "GET", path)
    # updateClient replaces the description, expiry and deleteOnExpiration (and the scopes
    # when given): what the command was not given stays as the client has it.
    body: dict[str, Any] = {
        "description": client.get("description", "")
        if args.description is None
        else args.description,
        "expires": client.get("expires") if args.expires is None else args.expires,
        "deleteOnExpiration": bool(client.get("deleteOnExpiration"))
        if args.delete_on_expiration is None
        else args.delete_on_expiration,
    }
    if args.scopes is not None:
        body["scopes"] = _unique(args.scopes)
    _, updated = await fetch_object(caller, "POST", path, body=body)
    scopes = len(updated.get("scopes") or [])
    out.write(
        f"updated client {args.client_id}: expires {to_second(updated.get('expires'))}, "
        f"{scopes} scope{'' if scopes == 1 else 's'}\n"
    )


async def _reset_client(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    _, answer = await fetch_object(caller, "POST", _client_path(args, "/reset"))
    comment = f"new accessToken of {args.client_id}; the old one no longer works"
    out.write(_exports(answer, comment))


async def _disable_client(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    await fetch_object(caller, "POST", _client_path(args, "/disable"))
    out.write(f"disabled client {args.client_id}\n")


async def _enable_client(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    await fetch_object(caller, "POST", _client_path(args, "/enable"))
    out.write(f"enabled client {args.client_id}\n")


async def _delete_client(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    await caller.fetch_json("DELETE", _client_path(args))
    out.write(f"deleted client {args.client_id}\n")


async def _client_history(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    path = f"/audit/client/{_segment(args.client_id)}"
    entries = await all_pages(caller, path, "auditHistory")
    if args.json:
        out.writelines(json.dumps(entry) + "\n" for entry in entries)
        return
    rows = [
        (
            to_second(entry.get("created")),
            str(entry.get("actionType") or "-"),
            str(entry.get("clientId") or "-"),
        )
        for entry in entries
    ]
    out.write(table(("WHEN", "ACTION", "BY"), rows, right=set()))
    if not entries:
        print(f"no history of client {args.client_id}", file=sys.stderr)


# --- roles ---------------------------------------------------------------------------------


async def _list_roles(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    _, roles = await caller.fetch_json("GET", "/roles/")
    if not isinstance(roles, list):
        raise CommandFailed(
            "the coordinator's answer to GET /roles/ is not a list", exit_status=EXIT_REFUSED
        )
    if args.json:
        out.writelines(json.dumps(role) + "\n" for role in roles)
        return
    rows = [
        (
            str(role.get("roleId") or "-"),
            str(len(role.get("scopes") or [])),
            str(len(role.get("expandedScopes") or [])),
            fit(str(role.get("description") or ""), 60),
        )
        for role in (item if isinstance(item, dict) else {} for item in roles)
    ]
    out.write(table(("ROLE ID", "SCOPES", "EXPANDED", "DESCRIPTION"), rows, right={1, 2}))
    if not roles:
        print("no roles", file=sys.stderr)


async def _show_role(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    text, role = await fetch_object(caller, "GET", _role_path(args))
    if args.json:
        out.write(text.rstrip("\n") + "\n")
        return
    fields = [
        ("roleId", role.get("roleId")),
        ("description", one_line(str(role.get("description") or ""))),
        ("created", to_second(role.get("created"))),
        ("lastModified", to_second(role.get("lastModified"))),
    ]
    out.write(_details(fields, role))


async def _create_role(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    body = {"description": args.description, "scopes": _unique(args.scopes)}
    _, role = await fetch_object(caller, "PUT", _role_path(args), body=body)
    out.write(f"created role {args.role_id}: {_expansion(role)}\n")


async def _update_role(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    path = _role_path(args)
    description = args.description
    if description is None:
        # updateRole replaces the description too: keep the role's.
        _, current = await fetch_object(caller, "GET", path)
        description = str(current.get("description") or "")
    body = {"description": description, "scopes": _unique(args.scopes)}
    _, role = await fetch_object(caller, "POST", path, body=body)
    out.write(f"updated role {args.role_id}: {_expansion(role)}\n")


def _expansion(role: Mapping[str, Any]) -> str:
    scopes = len(role.get("scopes") or [])
    expanded = len(role.get("expandedScopes") or [])
    return f"{scopes} scope{'' if scopes == 1 else 's'}, expanding to {expanded}"


async def _delete_role(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    await caller.fetch_json("DELETE", _role_path(args))
    out.write(f"deleted role {args.role_id}\n")


async def _expand(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    _, answer = await fetch_object(
        caller, "POST", "/scopes/expand", body={"scopes": _unique(args.scopes)}
    )
    scopes = answer.get("scopes")
    if not isinstance(scopes, list):
        raise CommandFailed(
            "the coordinator's answer to POST /scopes/expand lacks 'scopes'",
            exit_status=EXIT_REFUSED,
        )
    out.writelines(f"{scope}\n" for scope in scopes)
