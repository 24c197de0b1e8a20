"""What the command line's REST clients share: the ``tasks`` commands (:mod:`.tasks`), the
``clients``/``roles`` commands (:mod:`.auth`) and the ``index`` commands (:mod:`.index`).

This module owns reading the address and credentials from the environment as the official
``taskcluster`` clients do (``TASKCLUSTER_ROOT_URL``, ``TASKCLUSTER_CLIENT_ID``,
``TASKCLUSTER_ACCESS_TOKEN``, ``TASKCLUSTER_CERTIFICATE``), sending a request Hawk-signed with
:mod:`hawk_signing` (bodiless, or with a JSON body), turning a failure into one line
(:class:`CommandFailed`: the coordinator's ``code: message`` for a refusal), and running a
command to its exit status (:func:`run_command`), reading a JSON object or every page of a
listing (:func:`fetch_object`, :func:`all_pages`), the ``--expires`` notation
(:func:`expires_at`: Taskcluster's ``1 year``, ``30d``, or an ISO 8601 time), and their tables
(:func:`table`) and cells (:func:`fit`, :func:`to_second`), and the session that verifies a
coordinator's certificate against the CA file ``SSL_CERT_FILE`` names (:func:`new_session`).

Exit statuses: 0 on success; 1 when the coordinator answered with an error or the answer broke
off; 2 for a mistake in the environment or an unreachable coordinator (one line naming it and
the way out); never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import ssl
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from yarl import URL

from hawk_signing import Credentials, authorization

EXIT_REFUSED = 1
EXIT_CONFIGURATION = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""What a process killed by SIGPIPE reports (128 + 13), as ``yes | head`` leaves it."""


class CommandFailed(Exception):
    """Ends the command with one line on stderr and ``exit_status``."""

    def __init__(self, message: str, *, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


@dataclass(frozen=True, kw_only=True, slots=True)
class Target:
    """Where the API lies and what signs the requests (``None``: anonymous)."""

    api: str
    """``<root>/api/<service>/v1``, without a trailing slash."""
    credentials: Credentials | None


def target_from_env(env: Mapping[str, str], api_path: str) -> Target:
    """Read the ``TASKCLUSTER_*`` variables as the official clients name them; the API is
    ``<root URL><api_path>`` (``/api/queue/v1``, ``/api/auth/v1``)."""
    root = env.get("TASKCLUSTER_ROOT_URL", "").strip()
    if not root:
        raise CommandFailed(
            "TASKCLUSTER_ROOT_URL is not set; export the coordinator's root URL, e.g. "
            "TASKCLUSTER_ROOT_URL=http://127.0.0.1:8080",
            exit_status=EXIT_CONFIGURATION,
        )
    try:
        parsed = URL(root)
    except ValueError:
        parsed = URL()
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise CommandFailed(
            f"TASKCLUSTER_ROOT_URL={root!r} is not an http(s)://host[:port] URL; set it to "
            "the coordinator's root URL, e.g. http://127.0.0.1:8080",
            exit_status=EXIT_CONFIGURATION,
        )
    try:
        credentials = Credentials.from_environment(env)
    except ValueError as error:
        raise CommandFailed(
            f"{error} (neither: anonymous reads)", exit_status=EXIT_CONFIGURATION
        ) from None
    if credentials is not None and credentials.certificate is not None:
        # Checked here: the signing parses it, and a bad one would surface as a traceback.
        try:
            json.loads(credentials.certificate)
        except ValueError:
            raise CommandFailed(
                "TASKCLUSTER_CERTIFICATE is not JSON; export the certificate of the "
                "temporary credentials as given, or unset it for permanent ones",
                exit_status=EXIT_CONFIGURATION,
            ) from None
    return Target(api=root.rstrip("/") + api_path, credentials=credentials)


def one_line(text: str) -> str:
    """``text`` on one line: error messages are Markdown with fenced blocks and newlines."""
    return " ".join(text.replace("```", " ").split())


def fit(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters (the last an ellipsis) for a table."""
    text = one_line(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def to_second(iso: object) -> str:
    """A time as the coordinator writes it, to the second: 2026-11-23T10:00:00.000Z ->
    2026-11-23T10:00:00Z (UTC); anything shorter as it is, a missing one as ``-``."""
    text = str(iso or "-")
    return text[:19] + "Z" if len(text) >= 19 else text


def describe(error: BaseException) -> str:
    """An exception as a reason in a message."""
    return str(error) or type(error).__name__


class Caller:
    """Sends signed requests to one :class:`Target` and turns failures into
    :class:`CommandFailed`."""

    def __init__(self, session: aiohttp.ClientSession, target: Target) -> None:
        self._session = session
        self._target = target

    @asynccontextmanager
    async def open(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        *,
        accept: str = "application/json",
        body: Any = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The answer to one request, once its status is a success or a redirect (not
        followed: the Authorization header signs this URL only, and the official clients
        hand a 303's JSON to their caller too); its body is left to the caller to read (a
        listing streams).

        :param path: percent-encoded, relative to the target's API.
        :param body: sent as JSON when not ``None``; otherwise the request has no body.
        """
        # Signed exactly as sent: the coordinator checks the MAC against the raw path and
        # query, so the URL is built encoded here and handed to aiohttp as is.
        url = self._target.api + path
        if query:
            url += "?" + urlencode(query, quote_via=quote)
        headers = {"Accept": accept}
        # The official client signs a bodiless request (GET, DELETE, and a POST without a
        # body alike) over empty content with no Content-Type, and sends none; a JSON body
        # is signed over its bytes and application/json.
        content = "" if body is None else json.dumps(body, separators=(",", ":"))
        content_type = "" if body is None else "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        if self._target.credentials is not None:
            headers["Authorization"] = authorization(
                self._target.credentials,
                method=method,
                url=url,
                content=content,
                content_type=content_type,
            )
        try:
            async with self._session.request(
                method,
                URL(url, encoded=True),
                headers=headers,
                data=content.encode() if body is not None else None,
                skip_auto_headers=("Content-Type",),
                allow_redirects=False,
            ) as response:
                if response.status >= 400:
                    raise await refusal(response, anonymous=self._target.credentials is None)
                yield response
        except aiohttp.ClientConnectorCertificateError as error:
            raise CommandFailed(
                f"the certificate of {self._target.api} is not trusted: "
                f"{describe(error.certificate_error)}; set SSL_CERT_FILE to the PEM file of "
                "the CA that issued it",
                exit_status=EXIT_CONFIGURATION,
            ) from None
        except aiohttp.ClientConnectorError as error:
            raise self._unreachable(describe(error)) from None
        except aiohttp.ConnectionTimeoutError:
            within = self._session.timeout.sock_connect
            raise self._unreachable(f"no connection within {within:g} s") from None
        except (aiohttp.ClientError, TimeoutError) as error:
            raise CommandFailed(
                f"the answer to {method} {self._target.api}{path} broke off: {describe(error)}",
                exit_status=EXIT_REFUSED,
            ) from None

    async def fetch_json(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        *,
        body: Any = None,
    ) -> tuple[str, Any]:
        """The answer's text and its JSON (see :func:`json_body`)."""
        async with self.open(method, path, query, body=body) as response:
            return await json_body(response, f"{method} {path}")

    def _unreachable(self, reason: str) -> CommandFailed:
        return CommandFailed(
            f"cannot reach the coordinator at {self._target.api}: {reason}; check "
            "TASKCLUSTER_ROOT_URL and that the coordinator is running",
            exit_status=EXIT_CONFIGURATION,
        )


async def refusal(response: aiohttp.ClientResponse, *, anonymous: bool) -> CommandFailed:
    """The one line for an error answer: the coordinator's ``code: message``, an ``error``
    artifact's ``reason: message`` (424), or else the status and the start of the body."""
    text = await response.text(errors="replace")
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        message = f"{body['code']}: {one_line(str(body.get('message', '')))}"
    elif response.status == 424 and isinstance(body, dict) and isinstance(body.get("reason"), str):
        message = f"{body['reason']}: {one_line(str(body.get('message', '')))}"
    else:
        # Not the coordinator's error body (a proxy's page, say): its status and a start.
        message = f"HTTP {response.status} {response.reason or ''}".rstrip()
        if text.strip():
            message += f": {one_line(text)[:200]}"
    if response.status in (401, 403) and anonymous:
        message += " (set TASKCLUSTER_CLIENT_ID and TASKCLUSTER_ACCESS_TOKEN)"
    return CommandFailed(message, exit_status=EXIT_REFUSED)


async def json_body(response: aiohttp.ClientResponse, what: str) -> tuple[str, Any]:
    """The answer's text and its JSON; ``what`` names the request in the failure."""
    text = await response.text(errors="replace")
    try:
        return text, json.loads(text)
    except ValueError:
        raise CommandFailed(
            f"the coordinator answered {what} with a body that is not JSON",
            exit_status=EXIT_REFUSED,
        ) from None


def new_session(timeout: aiohttp.ClientTimeout) -> aiohttp.ClientSession:
    """A session whose HTTPS connections trust the CA file ``SSL_CERT_FILE`` names (instead
    of the system's CAs), read here so that a file that cannot be loaded is one line naming
    it (OpenSSL would ignore it, and every request fail verification); without it, the
    system's CAs."""
    cafile = os.environ.get("SSL_CERT_FILE")
    if not cafile:
        return aiohttp.ClientSession(timeout=timeout)
    try:
        context = ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as error:
        raise CommandFailed(
            f"SSL_CERT_FILE={cafile!r} cannot be loaded as PEM certificates: "
            f"{describe(error)}; point it at the PEM file of the CA that issued the "
            "coordinator's certificate, or unset it for the system's CAs",
            exit_status=EXIT_CONFIGURATION,
        ) from None
    return aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(ssl=context))


def run_command(
    command: Callable[[Target], Coroutine[Any, Any, None]],
    *,
    api_path: str,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``command`` against the API at ``api_path`` of the environment's root URL; the
    exit status. A failure is one line on stderr, an interruption 130, a reader gone away
    (``| head``) 141, quietly."""
    try:
        target = target_from_env(os.environ if env is None else env, api_path)
        asyncio.run(command(target))
    except CommandFailed as error:
        print(f"queue-coordinator: {error}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly. Python would report the failed
        # flush of stdout at exit, so stdout now points at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return 0


# --- what several commands share ------------------------------------------------------------

DURATION = re.compile(
    r"^(\s*(?P<years>\d+)\s*y(ears?)?)?"
    r"(\s*(?P<months>\d+)\s*mo(nths?)?)?"
    r"(\s*(?P<weeks>\d+)\s*w(eeks?)?)?"
    r"(\s*(?P<days>\d+)\s*d(ays?)?)?"
    r"(\s*(?P<hours>\d+)\s*h(ours?)?)?"
    r"(\s*(?P<minutes>\d+)\s*m(in(utes?)?)?)?\s*"
    r"(\s*(?P<seconds>\d+)\s*s(ec(onds?)?)?)?\s*$"
)
"""The official clients' ``fromNow`` notation (a year is 365 days, a month 30), without a
sign: an expiry lies ahead."""


def expires_at(text: str) -> str:
    """``--expires``: a duration from now or an ISO 8601 time, as the API's timestamp
    (``2027-01-31T00:00:00.000Z``); a time without an offset is UTC."""
    now = datetime.now(UTC)
    match = DURATION.match(text)
    if match and any(match.groupdict().values()):
        number = {unit: int(value or 0) for unit, value in match.groupdict().items()}
        delta = timedelta(
            days=365 * number["years"] + 30 * number["months"] + number["days"],
            weeks=number["weeks"],
            hours=number["hours"],
            minutes=number["minutes"],
            seconds=number["seconds"],
        )
        if not delta:
            raise argparse.ArgumentTypeError(f"{text!r} is no time from now")
        return timestamp(now + delta)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (1y, 6 months, 30d, 2 weeks, 12h) nor an ISO 8601 "
            "time (2027-01-31T00:00:00Z)"
        ) from None
    return timestamp(when if when.tzinfo else when.replace(tzinfo=UTC))


def timestamp(when: datetime) -> str:
    """``when`` as the API writes times: UTC, milliseconds, ``Z``."""
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def fetch_object(
    caller: Caller,
    method: str,
    path: str,
    *,
    body: Any = None,
    query: Sequence[tuple[str, str]] = (),
) -> tuple[str, dict[str, Any]]:
    """The answer's text and its JSON object."""
    text, answer = await caller.fetch_json(method, path, query, body=body)
    if not isinstance(answer, dict):
        raise CommandFailed(
            f"the coordinator's answer to {method} {path} is not a JSON object",
            exit_status=EXIT_REFUSED,
        )
    return text, answer


async def all_pages(
    caller: Caller, path: str, key: str, query: Sequence[tuple[str, str]] = ()
) -> list[dict[str, Any]]:
    """Every item of every page of a listing under ``key``."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        paged = [*query] if token is None else [*query, ("continuationToken", token)]
        _, page = await fetch_object(caller, "GET", path, query=paged)
        listed = page.get(key)
        if not isinstance(listed, list):
            raise CommandFailed(
                f"the coordinator's answer to GET {path} lacks {key!r}", exit_status=EXIT_REFUSED
            )
        items += [item if isinstance(item, dict) else {} for item in listed]
        token = page.get("continuationToken")
        if not token:
            return items


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: set[int]) -> str:
    """Columns as wide as their widest cell, two spaces apart; ``right``: the columns
    aligned right (counts)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"
