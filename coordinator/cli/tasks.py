"""The ``queue-coordinator tasks`` commands: ``list``, ``summary``, ``count``, ``cancel``,
``rerun`` and ``delete`` the tasks that match a filter, through the coordinator's management
REST API; ``artifacts`` lists a task's artifacts and ``download`` fetches one, through
Taskcluster's artifact API (listArtifacts/listLatestArtifacts, getArtifact/getLatestArtifact).

This module owns the client side of those calls: the filter flags and the query string they
become, streaming NDJSON listings, paging artifact listings, following an artifact's redirect
to its bytes (streamed, a gzip ``Content-Encoding`` decoded), and printing tables or JSON.
Reading the address and credentials from the ``TASKCLUSTER_*`` variables, signing, and the
one-line failures are :mod:`coordinator.cli.rest`'s, shared with the ``clients`` and ``roles``
commands. It speaks HTTP only and never opens the store, so it works against any coordinator,
local or remote, and needs no ``COORDINATOR_*`` settings.

Exit statuses: 0 on success; 1 when the coordinator answered with an error (one line on stderr:
``queue-coordinator: <code>: <message>``, or ``queue-coordinator: <reason>: <message>`` for an
``error`` artifact), an artifact's bytes could not be fetched, or the answer broke off; 2 for a
mistake in the environment or an unreachable coordinator (one line naming it and the way out);
never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, TextIO
from urllib.parse import quote

import aiohttp
from yarl import URL

from coordinator.cli.rest import (
    EXIT_CONFIGURATION,
    EXIT_REFUSED,
    Caller,
    CommandFailed,
    Target,
    describe,
    fit,
    json_body,
    new_session,
    refusal,
    run_command,
    to_second,
)
from coordinator.domain.task_filters import FILTER_STATES, UNRESOLVED

API_PATH = "/api/queue/v1"
NDJSON = "application/x-ndjson"

TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=300)
"""No total: a listing streams for as long as it has tasks, a download for as long as the
artifact's bytes take. A bulk cancel, rerun or delete may take the server a while before it answers,
hence the generous read timeout."""

ROW = "{task_id:<22}  {state:<11}  {task_queue:<32}  {created:<20}  {name}"
"""Fixed widths, so each row can be printed as it streams in: a slugid is 22 characters, the
longest state ``unscheduled`` 11, ``created`` to the second 20."""
TASK_QUEUE_WIDTH = 32
NAME_WIDTH = 60

ARTIFACT_ROW = "{name:<{width}}  {storage_type:<9}  {content_type:<30}  {expires}"
"""An artifact listing is printed once complete, so the name column fits the longest name;
``reference``, the longest storage type, is 9 characters."""
CONTENT_TYPE_WIDTH = 30
CHUNK = 1 << 16
"""How much of an artifact's bytes is read and written at a time."""

DESCRIPTION = """\
List, count, cancel, rerun or delete the tasks matching a filter, through the coordinator's
REST API. The coordinator's address comes from TASKCLUSTER_ROOT_URL (its API lies at
<root>/api/queue/v1); TASKCLUSTER_CLIENT_ID and TASKCLUSTER_ACCESS_TOKEN (and
TASKCLUSTER_CERTIFICATE for temporary credentials) sign the requests. list, summary and count
are open reads; cancel needs the scope queue:manage:cancel-tasks, rerun
queue:manage:rerun-tasks, delete queue:manage:delete-tasks. Filters combine with AND.
artifacts lists a run's artifacts (scope queue:list-artifacts:<taskId>[:<runId>]) and
download fetches one (scope queue:get-artifact:<name>; anonymous callers may fetch public/
names)."""

ARTIFACTS_EPILOG = """\
Without --run-id, the task's latest run. Every page of the listing is read."""

DOWNLOAD_EPILOG = """\
Without --run-id, the task's latest run. The bytes are fetched from where the coordinator
redirects (its own download route, Azure Blob Storage, or a reference artifact's URL) and a
gzip Content-Encoding is decoded, so a log reads as text. An error artifact exits 1 with its
reason and message."""

FILTER_EPILOG = """\
Times are ISO 8601, e.g. 2026-11-23T10:00:00.000Z. The coordinator checks the values and
answers 400 naming a bad one."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``list``/``summary``/``count``/``cancel``/``rerun``/``delete`` commands to
    ``parser`` (the ``tasks`` command's own parser, made by :mod:`coordinator.cli.main`)."""
    parser.description = DESCRIPTION
    commands = parser.add_subparsers(dest="tasks_command", required=True)
    helps = {
        "list": "stream the matching tasks (status and definition)",
        "summary": "stream the matching tasks without their payload and extra",
        "count": "count the matching tasks by state",
        "cancel": "cancel the unresolved matching tasks (scope queue:manage:cancel-tasks)",
        "rerun": "rerun the failed and exception matching tasks (scope queue:manage:rerun-tasks)",
        "delete": "delete the matching tasks (scope queue:manage:delete-tasks)",
    }
    for name, help_text in helps.items():
        command = commands.add_parser(name, help=help_text, epilog=FILTER_EPILOG)
        _add_filters(command)
        json_help = (
            "print each task as one JSON object per line, as the coordinator sends them"
            if name in ("list", "summary")
            else "print the coordinator's JSON answer"
        )
        command.add_argument("--json", action="store_true", help=json_help)
        if name in ("list", "summary"):
            command.add_argument(
                "--limit", type=_positive_int, metavar="N", help="stop after N tasks"
            )
    artifacts = commands.add_parser(
        "artifacts", help="list a task's artifacts", epilog=ARTIFACTS_EPILOG
    )
    artifacts.add_argument("task_id", metavar="TASK_ID")
    artifacts.add_argument("--run-id", type=_run_id, metavar="N", help="the run (default: latest)")
    artifacts.add_argument(
        "--json", action="store_true", help="print each artifact as one JSON object per line"
    )
    download = commands.add_parser(
        "download", help="download one of a task's artifacts", epilog=DOWNLOAD_EPILOG
    )
    download.add_argument("task_id", metavar="TASK_ID")
    download.add_argument("name", metavar="NAME", help="the artifact's name, e.g. public/x.log")
    download.add_argument("--run-id", type=_run_id, metavar="N", help="the run (default: latest)")
    download.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="write to FILE (default: stdout)"
    )


def _add_filters(command: argparse.ArgumentParser) -> None:
    filters = command.add_argument_group("filters")
    filters.add_argument("--task-queue-id", metavar="PROV/WT", help="the task queue")
    filters.add_argument(
        "--state",
        action="append",
        choices=(*FILTER_STATES, UNRESOLVED),
        help="any of these states (repeatable; unresolved: unscheduled, pending, delayed, running)",
    )
    filters.add_argument("--scheduler-id")
    filters.add_argument("--task-group-id")
    filters.add_argument("--project-id")
    filters.add_argument(
        "--tag", action="append", metavar="KEY:VALUE", help="a tag the task has (repeatable)"
    )
    filters.add_argument("--created-after", metavar="TIME")
    filters.add_argument("--created-before", metavar="TIME")
    filters.add_argument("--resolved-after", metavar="TIME")
    filters.add_argument("--resolved-before", metavar="TIME")


def _whole_number(text: str, *, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, not {value}")
    return value


def _positive_int(text: str) -> int:
    return _whole_number(text, least=1)


def _run_id(text: str) -> int:
    return _whole_number(text, least=0)


_FILTER_PARAMETERS = (
    ("task_queue_id", "taskQueueId"),
    ("state", "state"),
    ("scheduler_id", "schedulerId"),
    ("task_group_id", "taskGroupId"),
    ("project_id", "projectId"),
    ("tag", "tag"),
    ("created_after", "createdAfter"),
    ("created_before", "createdBefore"),
    ("resolved_after", "resolvedAfter"),
    ("resolved_before", "resolvedBefore"),
)
"""Flag (argparse dest) -> query parameter; a list value repeats the parameter."""


def filter_query(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The filter flags as query parameters, in a fixed order."""
    query: list[tuple[str, str]] = []
    for dest, parameter in _FILTER_PARAMETERS:
        value: str | list[str] | None = getattr(args, dest, None)
        if value is None:
            continue
        for item in [value] if isinstance(value, str) else value:
            query.append((parameter, item))
    return query


# --- output --------------------------------------------------------------------------------


def table_header() -> str:
    return ROW.format(
        task_id="TASK ID", state="STATE", task_queue="TASK QUEUE", created="CREATED", name="NAME"
    )


def table_row(item: Mapping[str, Any]) -> str:
    """One listed ``{status, task}`` as a table row; missing fields print as ``-``."""
    status = item.get("status") or {}
    task = item.get("task") or {}
    metadata = task.get("metadata") or {}
    task_queue = status.get("taskQueueId") or task.get("taskQueueId") or "-"
    return ROW.format(
        task_id=str(status.get("taskId") or "-"),
        state=str(status.get("state") or "-"),
        task_queue=fit(str(task_queue), TASK_QUEUE_WIDTH),
        created=to_second(task.get("created")),
        name=fit(str(metadata.get("name") or ""), NAME_WIDTH),
    )


async def _batches(response: aiohttp.ClientResponse) -> AsyncIterator[list[bytes]]:
    """The NDJSON body's lines, batched as they arrive (the complete lines of each chunk);
    memory holds one chunk and one partial line at most.

    Not ``StreamReader.readline``: it refuses a line past its buffer limit, and a task's
    definition may be larger.
    """
    partial: list[bytes] = []  # the pieces of a line not yet complete, joined once it is
    async for chunk in response.content.iter_any():
        if b"\n" not in chunk:
            partial.append(chunk)
            continue
        first, *complete = chunk.split(b"\n")
        complete.insert(0, b"".join([*partial, first]))
        partial = [complete.pop()]
        if lines := [line for line in complete if line.strip()]:
            yield lines
    if (rest := b"".join(partial)).strip():
        yield [rest]


async def _stream(caller: Caller, args: argparse.Namespace, path: str, out: TextIO) -> None:
    limit: int | None = args.limit
    printed = 0
    async with caller.open("GET", path, filter_query(args), accept=NDJSON) as response:
        if response.content_type != NDJSON:
            raise CommandFailed(
                f"the coordinator answered {path} with {response.content_type or 'no type'}, "
                f"not {NDJSON}; it is older than this command",
                exit_status=EXIT_REFUSED,
            )
        if not args.json:
            out.write(table_header() + "\n")
        async for batch in _batches(response):
            for line in batch[: None if limit is None else limit - printed]:
                out.write(_render(line, as_json=args.json) + "\n")
                printed += 1
            # Shown as they arrive even through a pipe, at one flush per chunk, not per line.
            out.flush()
            if printed == limit:
                # Hang up rather than read (and have the server produce) the rest.
                response.close()
                break
    if printed == 0 and not args.json:
        print("no tasks match", file=sys.stderr)


def _render(line: bytes, *, as_json: bool) -> str:
    text = line.decode("utf-8", errors="replace")
    if as_json:
        return text
    try:
        item = json.loads(text)
    except ValueError:
        raise CommandFailed(
            f"the coordinator sent a line that is not JSON: {text[:100]!r}",
            exit_status=EXIT_REFUSED,
        ) from None
    return table_row(item if isinstance(item, dict) else {})


def _count_table(body: Mapping[str, Any]) -> str:
    states: Mapping[str, Any] = body.get("states") or {}
    # The known states in their lifecycle order, then any the coordinator added since.
    rows: list[tuple[str, Any]] = [(state, states.get(state, 0)) for state in FILTER_STATES]
    rows += [(state, count) for state, count in states.items() if state not in FILTER_STATES]
    rows.append(("total", body.get("total", "-")))
    width = max(len("TASKS"), *(len(str(count)) for _, count in rows))
    return "\n".join(
        f"{state:<11}  {count!s:>{width}}" for state, count in [("STATE", "TASKS"), *rows]
    )


def _plural(count: Any) -> str:
    return f"{count} task" if count == 1 else f"{count} tasks"


def artifact_table(artifacts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The artifact records (``{name, storageType, contentType, expires}``) as table lines,
    the header first; missing fields print as ``-``."""
    width = max([len("NAME"), *(len(str(a.get("name") or "-")) for a in artifacts)])
    header = ARTIFACT_ROW.format(
        name="NAME", width=width, storage_type="STORAGE", content_type="CONTENT TYPE",
        expires="EXPIRES",
    )  # fmt: skip
    return [header] + [
        ARTIFACT_ROW.format(
            name=str(a.get("name") or "-"),
            width=width,
            storage_type=str(a.get("storageType") or "-"),
            content_type=fit(str(a.get("contentType") or "-"), CONTENT_TYPE_WIDTH),
            expires=to_second(a.get("expires")),
        )
        for a in artifacts
    ]


def _run_path(task_id: str, run_id: int | None) -> str:
    """``/task/<taskId>`` for the latest run's methods, ``/task/<taskId>/runs/<runId>``."""
    path = f"/task/{quote(task_id, safe='')}"
    return path if run_id is None else f"{path}/runs/{run_id}"


async def _artifacts(caller: Caller, args: argparse.Namespace, out: TextIO) -> None:
    """Every page of listArtifacts (``--run-id``) or listLatestArtifacts; with ``--json`` each
    page is printed as it arrives, a table once the last has."""
    path = _run_path(args.task_id, args.run_id) + "/artifacts"
    listed: list[Mapping[str, Any]] = []
    token: str | None = None
    while True:
        query = [] if token is None else [("continuationToken", token)]
        _, page = await caller.fetch_json("GET", path, query)
        items = page.get("artifacts") if isinstance(page, dict) else None
        if not isinstance(items, list):
            raise CommandFailed(
                f"the coordinator's answer to GET {path} lacks 'artifacts'",
                exit_status=EXIT_REFUSED,
            )
        if args.json:
            out.writelines(json.dumps(item) + "\n" for item in items)
            out.flush()
        else:
            listed += [item if isinstance(item, dict) else {} for item in items]
        token = page.get("continuationToken")
        if not token:
            break
    if not args.json:
        out.write("\n".join(artifact_table(listed)) + "\n")
        if not listed:
            print("no artifacts", file=sys.stderr)


async def _download(
    session: aiohttp.ClientSession, caller: Caller, args: argparse.Namespace, out: TextIO
) -> None:
    """getArtifact (``--run-id``) or getLatestArtifact, then the bytes at the URL its 303
    names, to ``--output`` or ``out``."""
    path = f"{_run_path(args.task_id, args.run_id)}/artifacts/{quote(args.name, safe='')}"
    async with caller.open("GET", path, ()) as response:
        if response.status != 303:
            raise CommandFailed(
                f"the coordinator answered GET {path} with {response.status}, not a 303 "
                "redirect to the artifact's bytes",
                exit_status=EXIT_REFUSED,
            )
        _, body = await json_body(response, f"GET {path}")
    url = body.get("url") if isinstance(body, dict) else None
    if not isinstance(url, str) or not url:
        raise CommandFailed(
            f"the coordinator's answer to GET {path} lacks the artifact's 'url'",
            exit_status=EXIT_REFUSED,
        )
    output: Path | None = args.output
    if output is None:
        out.flush()
        await fetch_bytes(session, url, out.buffer)
        out.buffer.flush()
        return
    try:
        with _written_in_place(output) as part:
            written = await fetch_bytes(session, url, part)
    except OSError as error:
        raise CommandFailed(
            f"cannot write {output}: {error.strerror or error}; choose another -o FILE",
            exit_status=EXIT_CONFIGURATION,
        ) from None
    print(f"wrote {written} bytes to {output}", file=sys.stderr)


@contextmanager
def _written_in_place(path: Path) -> Iterator[IO[bytes]]:
    """A file beside ``path`` that becomes ``path`` when the block ends without an error and
    is removed otherwise: a failed download leaves no partial file, and an existing one as it
    was."""
    descriptor, part = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with open(descriptor, "wb") as file:
            yield file
        # mkstemp makes the file 0600; a download gets the mode any new file would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(part, 0o666 & ~umask)
        os.replace(part, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(part)
        raise


async def fetch_bytes(session: aiohttp.ClientSession, url: str, sink: IO[bytes]) -> int:
    """Stream the bytes at ``url`` into ``sink``; the number written.

    No Authorization: the URL carries its own authority (a signature, a SAS) or is public, and
    redirects are followed (a reference artifact's URL may redirect again). aiohttp decodes a
    gzip Content-Encoding, so a log reads as text, and refuses a body shorter than its
    Content-Length.
    """
    written = 0
    try:
        async with session.get(URL(url, encoded=True)) as response:
            if response.status >= 400:
                raise await refusal(response, anonymous=False)
            async for chunk in response.content.iter_chunked(CHUNK):
                sink.write(chunk)
                written += len(chunk)
    except aiohttp.ClientConnectorError as error:
        raise CommandFailed(
            f"cannot download the artifact from {url}: {describe(error)}",
            exit_status=EXIT_REFUSED,
        ) from None
    except (aiohttp.ClientError, TimeoutError) as error:
        raise CommandFailed(
            f"the download from {url} broke off: {describe(error)}", exit_status=EXIT_REFUSED
        ) from None
    return written


async def _run(args: argparse.Namespace, target: Target, out: TextIO) -> None:
    async with new_session(TIMEOUT) as session:
        caller = Caller(session, target)
        command: str = args.tasks_command
        if command == "artifacts":
            await _artifacts(caller, args, out)
            return
        if command == "download":
            await _download(session, caller, args, out)
            return
        if command in ("list", "summary"):
            await _stream(caller, args, "/tasks" if command == "list" else "/tasks/summary", out)
            return
        method, path, key, verb = {
            "count": ("GET", "/tasks/count", "total", ""),
            "cancel": ("POST", "/tasks/cancel", "cancelled", "cancelled"),
            "rerun": ("POST", "/tasks/rerun", "rerun", "rerun"),
            "delete": ("DELETE", "/tasks", "deleted", "deleted"),
        }[command]
        text, body = await caller.fetch_json(method, path, filter_query(args))
        if args.json:
            out.write(text.rstrip("\n") + "\n")
        elif not isinstance(body, dict) or key not in body:
            raise CommandFailed(
                f"the coordinator's answer to {method} {path} lacks {key!r}",
                exit_status=EXIT_REFUSED,
            )
        elif command == "count":
            out.write(_count_table(body) + "\n")
        else:
            out.write(f"{verb} {_plural(body[key])}\n")


def run(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """Run the ``tasks`` command ``args`` asked for; the exit status."""
    return run_command(lambda target: _run(args, target, sys.stdout), api_path=API_PATH, env=env)
