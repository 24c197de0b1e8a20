"""HTTP client for the coordinator routes a worker uses, and those a producer uses.

Covers ``ping``, ``pollTaskUrls``, ``claimTask``, ``claimWork``, ``reclaimTask`` and the three
reports, their batch forms ``claimRuns``, ``reclaimRuns`` and ``resolveRuns`` (not Taskcluster
methods: up to 32 runs per request, one result per run), ``watchRuns`` (ours too: the long
poll that tells which running runs were cancelled), ``createArtifact`` and the upload of an
s3 artifact's bytes to the ``putUrl`` it answers (:meth:`CoordinatorClient.upload_to`); and for
producers (:mod:`worker_sdk.app`) ``createTask``, ``createTasks`` (up to 1,000 tasks a
request), ``status``, ``cancelTask`` and an artifact's bytes (``artifact``'s signed URL,
then a GET of it). Requests are signed by :mod:`hawk_signing`
exactly as the official ``taskcluster`` client signs them, or not at all without credentials.
Every failure surfaces as :class:`~worker_sdk.errors.RequestFailed`; retrying is the caller's
business, because only the caller knows its deadline.

A client may know several root URLs (replicas of one coordinator sharing one store): each
request goes to the one that answered last, and to the next in turn while one does not answer
(no connection, a timeout, a 5xx or 429), within the same call; the first that answers is the
one used from then on. With one root URL a failure is raised at once, as it comes.

Every session of the SDK comes from :func:`new_session`, whose HTTPS connections trust the CA
file ``SSL_CERT_FILE`` names when it is set (a coordinator with a private CA's certificate).
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import ssl
import time
from collections.abc import AsyncIterable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import aiohttp
from yarl import URL

from hawk_signing import Credentials, authorization
from worker_sdk import timing
from worker_sdk.errors import RequestFailed, check_status, no_answer_fails
from worker_sdk.progress import RunProgress

_T = TypeVar("_T")

log = logging.getLogger(__name__)

MAX_BATCH_RUNS = 32
"""The most runs one claimRuns, reclaimRuns or resolveRuns names, and the most tasks one
claimWork gets: one Azure get's worth of hints (Azure's ``numofmessages`` limit)."""

MAX_INLINE_ARTIFACT_BYTES = 64 * 1024
"""The most bytes an artifact carried in a report may have (the coordinator's limit)."""

REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30)
CLAIM_WORK_TIMEOUT = aiohttp.ClientTimeout(total=60)
"""claimWork and watchRuns long-poll about 20 s on the server before answering."""
UPLOAD_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=300)
"""An artifact's upload may take as long as its size needs; only silence ends it."""


@dataclass(frozen=True, kw_only=True)
class SignedQueue:
    """One Azure queue as ``pollTaskUrls`` hands it out: where to get, delete and release
    messages."""

    poll_url: str
    delete_url: str
    """Still holds the literal ``{{messageId}}`` and ``{{popReceipt}}`` placeholders."""
    release_url: str | None
    """Like ``delete_url``; ``None`` from a coordinator that does not sign release URLs."""


@dataclass(frozen=True, kw_only=True)
class PollUrls:
    """The answer of ``pollTaskUrls``: queues highest priority first."""

    queues: tuple[SignedQueue, ...]
    expires: datetime
    refresh_at: float
    """Monotonic time at which to ask for new URLs."""


@dataclass(frozen=True, kw_only=True)
class Claim:
    """A run this worker now holds, from ``claimTask`` or ``claimWork``."""

    task_id: str
    run_id: int
    task: Mapping[str, Any]
    taken_until: datetime
    expires_at: float
    """Monotonic time at which ``taken_until`` passes on the server."""
    credentials: Credentials
    """Temporary credentials for reclaiming and reporting this run."""
    retries_left: int
    """The task's ``retriesLeft`` when the run was claimed: how many more runs an
    ``intermittent-task`` report would get it."""
    traceparent: str | None = None
    """The W3C traceparent of the coordinator's span of this claim; ``None`` when the
    coordinator does not trace (docs/operations.md#tracing)."""


@dataclass(frozen=True, kw_only=True)
class Reclaim:
    """The answer of ``reclaimTask``: a later deadline and fresh credentials."""

    taken_until: datetime
    expires_at: float
    credentials: Credentials


@dataclass(frozen=True, kw_only=True)
class StoppedRun:
    """A run ``watchRuns`` found no longer running: its ``state`` and ``reasonResolved``."""

    state: str
    reason_resolved: str | None


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """How a run is reported: ``reportCompleted``, ``reportFailed`` or ``reportException``."""

    kind: Literal["completed", "failed", "exception"]
    reason: str | None = None
    """The reportException reason, given exactly when ``kind`` is ``exception``."""
    retry_after: float | None = None
    """reportException's ``retryAfter`` (seconds), only with reason ``intermittent-task``."""

    def __post_init__(self) -> None:
        if (self.kind == "exception") != (self.reason is not None):
            raise ValueError(f"an {self.kind} resolution with reason {self.reason!r}")
        if self.retry_after is not None and self.reason != "intermittent-task":
            raise ValueError(f"retry_after with reason {self.reason!r}, not intermittent-task")

    def exception_body(self) -> dict[str, Any]:
        """The reportException body (without ``retryAfter`` unless there is one)."""
        body: dict[str, Any] = {"reason": self.reason}
        if self.retry_after is not None:
            body["retryAfter"] = self.retry_after
        return body


@dataclass(frozen=True, kw_only=True)
class InlineArtifact:
    """A small artifact of a run carried in its report (``resolveRuns`` ``artifacts``, at
    most :data:`MAX_INLINE_ARTIFACT_BYTES`): the coordinator stores it with the report, so it
    costs no createArtifact and no upload of its own."""

    name: str
    content_type: str
    content_encoding: str | None
    content: bytes

    def to_json(self) -> dict[str, Any]:
        item = {
            "name": self.name,
            "contentType": self.content_type,
            "content": base64.b64encode(self.content).decode("ascii"),
        }
        if self.content_encoding is not None:
            item["contentEncoding"] = self.content_encoding
        return item


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """One report of a ``resolveRuns`` batch."""

    task_id: str
    run_id: int
    resolution: Resolution
    artifacts: Sequence[InlineArtifact] = ()


@dataclass(frozen=True, kw_only=True)
class _Answer:
    method: str
    url: str
    body: Mapping[str, Any]
    sent_at: float
    answered_at: float
    """When the answer's headers arrived (monotonic)."""
    long_poll: bool
    date: str | None
    """The ``Date`` header, read only by the routes whose timing needs it."""

    @property
    def stamped_after(self) -> float:
        """A monotonic time no later than the server's ``Date``: when the request was sent,
        or for a long poll, answered only once the server had something, when the answer
        arrived less :data:`~worker_sdk.timing.LONG_POLL_TRANSIT` (never before the send)."""
        if self.long_poll:
            return max(self.sent_at, self.answered_at - timing.LONG_POLL_TRANSIT)
        return self.sent_at

    @functools.cached_property
    def server_time(self) -> datetime:
        return _server_time(self.date)


class CoordinatorClient:
    """Calls the coordinator's queue routes under ``<root_url>/api/queue/v1``.

    ``credentials`` sign the worker's own calls (polling, claiming, and the batches of
    reclaims and reports, which the coordinator lets the worker holding the runs make);
    single reclaims and reports are signed with the run's temporary credentials, passed per
    call.

    The batch calls answer one item per run, in order: the single call's answer, or the
    :class:`RequestFailed` (status, code, message) the single call would have raised; an item
    that is not what the route promises becomes a transient one with code
    ``InvalidResponse``. They raise only for the request as a whole.
    """

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        root_url: str | None = None,
        root_urls: Sequence[str] = (),
        credentials: Credentials | None,
    ) -> None:
        """:param root_url: the coordinator; or ``root_urls``, its replicas in order of
        preference (see the module docs), not both."""
        self._session = session
        self._bases = tuple(url + "/api/queue/v1" for url in root_urls_of(root_url, root_urls))
        self._current = 0
        """Index into ``_bases`` of the root URL that answered last."""
        self._credentials = credentials

    async def ping(self) -> None:
        """Raises :class:`RequestFailed` unless the coordinator answers ``ping`` with a 2xx."""
        await self._call("GET", ("ping",))

    async def server_time(self) -> datetime:
        """The coordinator's clock now, from ``ping``'s ``Date`` (erring early by at most its
        one-second resolution)."""
        answer = await self._call("GET", ("ping",))
        return answer.server_time + timedelta(seconds=time.monotonic() - answer.answered_at)

    async def create_tasks(
        self, tasks: Mapping[str, Mapping[str, Any]], *, traceparent: str | None = None
    ) -> list[dict[str, Any]]:
        """createTasks, which the official clients lack: up to 1,000 task definitions by
        taskId, in one request. Returns the per-task results in order: ``{taskId, status}``,
        or ``{taskId, error: {code, message}}`` for a task refused as createTask would.

        :param traceparent: the producer's span, sent as the ``traceparent`` header.
        """
        body = {"tasks": [{"taskId": task_id, "task": task} for task_id, task in tasks.items()]}
        answer = await self._call("PUT", ("tasks",), body=body, traceparent=traceparent)
        with _parsing(answer, "createTasks"):
            results: list[dict[str, Any]] = list(answer.body["tasks"])
        return results

    async def create_task(
        self, task_id: str, task: Mapping[str, Any], *, traceparent: str | None = None
    ) -> dict[str, Any]:
        """createTask; returns the task's status. ``traceparent`` as for :meth:`create_tasks`."""
        answer = await self._call("PUT", ("task", task_id), body=task, traceparent=traceparent)
        return _status_of(answer, "createTask")

    async def task_status(self, task_id: str) -> dict[str, Any]:
        """status: the task's status (``state``, ``runs``, ...)."""
        answer = await self._call("GET", ("task", task_id, "status"))
        return _status_of(answer, "status")

    async def task_progress(self, task_id: str) -> list[RunProgress]:
        """taskProgress: each run's last progress report, by runId."""
        answer = await self._call("GET", ("task", task_id, "progress"))
        with _parsing(answer, "taskProgress"):
            return [RunProgress.from_json(run) for run in answer.body["runs"]]

    async def cancel_task(self, task_id: str) -> dict[str, Any]:
        """cancelTask; returns the task's status."""
        answer = await self._call("POST", ("task", task_id, "cancel"))
        return _status_of(answer, "cancelTask")

    async def artifact_content(self, task_id: str, run_id: int, name: str) -> bytes:
        """The bytes of an ``s3`` artifact of the run: the ``artifact`` method's signed URL,
        then an unsigned GET of it (decompressed as its ``Content-Encoding`` says)."""
        answer = await self._call(
            "GET", ("task", task_id, "runs", str(run_id), "artifact-content", name)
        )
        with _parsing(answer, "artifact"):
            url = answer.body["url"]
            if not isinstance(url, str):
                raise TypeError(f"url {url!r} is not a string")
        with no_answer_fails("GET", url):
            async with self._session.get(
                URL(url, encoded=True), timeout=UPLOAD_TIMEOUT
            ) as response:
                content = await response.read()
                status = response.status
        check_status("GET", url, status, content[:200].decode(errors="replace"), _error_fields)
        return content

    async def poll_task_urls(self, provisioner_id: str, worker_type: str) -> PollUrls:
        answer = await self._call("GET", ("poll-task-url", provisioner_id, worker_type))
        with _parsing(answer, "pollTaskUrls"):
            expires = _parse_time(answer.body["expires"])
            queues = tuple(
                SignedQueue(
                    poll_url=str(q["signedPollUrl"]),
                    delete_url=str(q["signedDeleteUrl"]),
                    release_url=str(q["signedReleaseUrl"]) if q.get("signedReleaseUrl") else None,
                )
                for q in answer.body["queues"]
            )
        expires_at = timing.deadline(
            stamped_after=answer.stamped_after, until=expires, server_time=answer.server_time
        )
        return PollUrls(
            queues=queues,
            expires=expires,
            refresh_at=timing.refresh_at(sent_at=answer.sent_at, expires_at=expires_at),
        )

    async def claim_task(
        self, task_id: str, run_id: int, *, worker_group: str, worker_id: str
    ) -> Claim:
        answer = await self._call(
            "POST",
            ("task", task_id, "runs", str(run_id), "claim"),
            body={"workerGroup": worker_group, "workerId": worker_id},
        )
        with _parsing(answer, "claimTask"):
            return _claim(answer.body, answer)

    async def claim_work(
        self,
        provisioner_id: str,
        worker_type: str,
        *,
        worker_group: str,
        worker_id: str,
        tasks: int,
        weights: Mapping[str, float] | None = None,
    ) -> list[Claim]:
        """claimWork; ``weights`` per priority (this coordinator's extension: it draws each
        run's priority by them, in both dispatch modes) are sent only when given."""
        body: dict[str, Any] = {"workerGroup": worker_group, "workerId": worker_id, "tasks": tasks}
        if weights is not None:
            body["weights"] = dict(weights)
        answer = await self._call(
            "POST", ("claim-work", provisioner_id, worker_type), body=body, long_poll=True
        )
        with _parsing(answer, "claimWork"):
            return [_claim(claim, answer) for claim in answer.body["tasks"]]

    async def claim_runs(
        self, runs: Sequence[tuple[str, int]], *, worker_group: str, worker_id: str
    ) -> list[Claim | RequestFailed]:
        """claimRuns: claimTask for each ``(taskId, runId)`` of ``runs`` (1 to 32, distinct)."""
        answer = await self._call(
            "POST",
            ("claim-runs",),
            body={
                "workerGroup": worker_group,
                "workerId": worker_id,
                "runs": [{"taskId": task_id, "runId": run_id} for task_id, run_id in runs],
            },
        )
        return _run_results(answer, "claimRuns", "claims", runs, _claim_item)

    async def reclaim_task(self, task_id: str, run_id: int, *, credentials: Credentials) -> Reclaim:
        answer = await self._call(
            "POST", ("task", task_id, "runs", str(run_id), "reclaim"), credentials=credentials
        )
        with _parsing(answer, "reclaimTask"):
            return _reclaim(answer.body, answer)

    async def reclaim_runs(self, runs: Sequence[tuple[str, int]]) -> list[Reclaim | RequestFailed]:
        """reclaimRuns: reclaimTask for each ``(taskId, runId)`` of ``runs`` (1 to 32, distinct)."""
        answer = await self._call(
            "POST",
            ("reclaim-runs",),
            body={"runs": [{"taskId": task_id, "runId": run_id} for task_id, run_id in runs]},
        )
        return _run_results(answer, "reclaimRuns", "reclaims", runs, _reclaim_item)

    async def watch_runs(
        self, runs: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], StoppedRun | RequestFailed]:
        """watchRuns (not a Taskcluster method): long-polls until any of ``runs`` (1 to 32,
        distinct) is no longer running; those runs, and those the coordinator refused (why),
        by ``(taskId, runId)``; empty when all of them still run at the end of its wait."""
        answer = await self._call(
            "POST",
            ("runs", "watch"),
            body={"runs": [{"taskId": task_id, "runId": run_id} for task_id, run_id in runs]},
            long_poll=True,
        )
        found: dict[tuple[str, int], StoppedRun | RequestFailed] = {}
        with _parsing(answer, "watchRuns"):
            items = answer.body["runs"]
            if not isinstance(items, list):
                raise TypeError(f"runs {items!r} is not a list")
            for item in items:
                if "error" in item:
                    run, failure = _run_error(item, answer)
                    found[run] = failure
                    continue
                reason = item.get("reasonResolved")
                found[_run_of(item["taskId"], item["runId"])] = StoppedRun(
                    state=str(item["state"]),
                    reason_resolved=None if reason is None else str(reason),
                )
        return found

    async def report_completed(
        self,
        task_id: str,
        run_id: int,
        *,
        credentials: Credentials,
        traceparent: str | None = None,
    ) -> None:
        """reportCompleted; ``traceparent``, the worker's span of the report, is sent as the
        header of that name (so for the other reports)."""
        await self._call(
            "POST",
            ("task", task_id, "runs", str(run_id), "completed"),
            credentials=credentials,
            traceparent=traceparent,
        )

    async def report_progress(
        self,
        task_id: str,
        run_id: int,
        fraction: float,
        message: str | None,
        *,
        credentials: Credentials,
    ) -> None:
        """reportProgress: how far the running run is."""
        await self._call(
            "POST",
            ("task", task_id, "runs", str(run_id), "progress"),
            body={"fraction": fraction, "message": message},
            credentials=credentials,
        )

    async def report_failed(
        self,
        task_id: str,
        run_id: int,
        *,
        credentials: Credentials,
        traceparent: str | None = None,
    ) -> None:
        await self._call(
            "POST",
            ("task", task_id, "runs", str(run_id), "failed"),
            credentials=credentials,
            traceparent=traceparent,
        )

    async def report_exception(
        self,
        task_id: str,
        run_id: int,
        resolution: Resolution,
        *,
        credentials: Credentials,
        traceparent: str | None = None,
    ) -> None:
        """reportException of ``resolution`` (its reason and any ``retryAfter``)."""
        await self._call(
            "POST",
            ("task", task_id, "runs", str(run_id), "exception"),
            body=resolution.exception_body(),
            credentials=credentials,
            traceparent=traceparent,
        )

    async def resolve_runs(self, reports: Sequence[RunReport]) -> list[RequestFailed | None]:
        """resolveRuns: the report of each of ``reports`` (1 to 32, distinct runs); ``None``
        for a report accepted."""
        items = []
        for report in reports:
            item: dict[str, Any] = {
                "taskId": report.task_id,
                "runId": report.run_id,
                "resolution": report.resolution.kind,
            }
            if report.resolution.reason is not None:
                item.update(report.resolution.exception_body())
            if report.artifacts:
                item["artifacts"] = [artifact.to_json() for artifact in report.artifacts]
            items.append(item)
        answer = await self._call("POST", ("resolve-runs",), body={"reports": items})
        runs = [(report.task_id, report.run_id) for report in reports]
        return _run_results(answer, "resolveRuns", "reports", runs, _report_item)

    async def create_artifact(
        self,
        task_id: str,
        run_id: int,
        name: str,
        body: Mapping[str, Any],
        *,
        credentials: Credentials,
    ) -> dict[str, Any]:
        """createArtifact: ``body`` as post-artifact-request.json has it; returns the answer
        (post-artifact-response.json), whose ``putUrl`` an s3 artifact's bytes go to."""
        answer = await self._call(
            "POST",
            ("task", task_id, "runs", str(run_id), "artifacts", name),
            body=body,
            credentials=credentials,
        )
        with _parsing(answer, "createArtifact"):
            if answer.body["storageType"] != body["storageType"]:
                raise ValueError(f"storageType is not {body['storageType']!r}")
            if body["storageType"] == "s3" and not isinstance(answer.body["putUrl"], str):
                raise TypeError("putUrl is not a string")
        return dict(answer.body)

    async def upload_to(
        self,
        put_url: str,
        data: bytes | AsyncIterable[bytes],
        *,
        content_type: str,
        content_length: int,
        content_encoding: str | None = None,
    ) -> None:
        """PUT an s3 artifact's bytes to the ``putUrl`` createArtifact gave: unsigned (the
        URL's own signature is the authority), with ``Content-Type`` as createArtifact
        declared, ``Content-Length`` and, when given, ``Content-Encoding``. ``data`` may be an
        async iterable of chunks, sent as they come (never all in memory at once); it must
        yield exactly ``content_length`` bytes. Any 2xx is success."""
        headers = {"Content-Type": content_type, "Content-Length": str(content_length)}
        if content_encoding is not None:
            headers["Content-Encoding"] = content_encoding
        with no_answer_fails("PUT", put_url):
            # encoded=True: the URL's signature covers it exactly as createArtifact gave it.
            async with self._session.put(
                URL(put_url, encoded=True), data=data, headers=headers, timeout=UPLOAD_TIMEOUT
            ) as response:
                text = await response.text()
                status = response.status
        check_status("PUT", put_url, status, text, _error_fields)

    async def _call(
        self,
        method: str,
        segments: tuple[str, ...],
        *,
        body: Mapping[str, Any] | None = None,
        credentials: Credentials | None = None,
        long_poll: bool = False,
        traceparent: str | None = None,
    ) -> _Answer:
        """The request at the root URL that answered last, then at each other in turn while
        they do not answer; raises the last one's failure when none answers."""
        path = "".join("/" + quote(segment, safe="") for segment in segments)
        index = self._current
        others = [(index + step) % len(self._bases) for step in range(1, len(self._bases))]
        while True:
            try:
                answer = await self._call_at(
                    self._bases[index] + path,
                    method,
                    body=body,
                    credentials=credentials,
                    long_poll=long_poll,
                    traceparent=traceparent,
                )
            except RequestFailed as error:
                if not error.transient or not others:
                    raise
                log.warning(
                    "coordinator not answering, trying the next one rootUrl=%s next=%s error=%s",
                    _root_of(self._bases[index]),
                    _root_of(self._bases[others[0]]),
                    error,
                )
                index = others.pop(0)
                continue
            if index != self._current:
                log.info(
                    "coordinator failover rootUrl=%s previous=%s",
                    _root_of(self._bases[index]),
                    _root_of(self._bases[self._current]),
                )
                self._current = index
            return answer

    async def _call_at(
        self,
        url: str,
        method: str,
        *,
        body: Mapping[str, Any] | None,
        credentials: Credentials | None,
        long_poll: bool,
        traceparent: str | None,
    ) -> _Answer:
        # Routes without an input schema get no body at all, like the official client sends.
        content = json.dumps(body, separators=(",", ":")) if body is not None else ""
        content_type = "application/json" if content else ""
        headers = {"Content-Type": content_type} if content else {}
        if traceparent is not None:
            headers["traceparent"] = traceparent
        signer = credentials or self._credentials
        if signer is not None:
            headers["Authorization"] = authorization(
                signer, method=method, url=url, content=content, content_type=content_type
            )
        sent_at = time.monotonic()
        with no_answer_fails(method, url):
            # encoded=True: send the URL exactly as signed, without yarl re-quoting it.
            async with self._session.request(
                method,
                URL(url, encoded=True),
                data=content.encode() if content else None,
                headers=headers,
                # aiohttp would label an empty POST application/octet-stream, which the
                # coordinator would then hash into the signature we made without one.
                skip_auto_headers=() if content else ("Content-Type",),
                timeout=CLAIM_WORK_TIMEOUT if long_poll else REQUEST_TIMEOUT,
            ) as response:
                answered_at = time.monotonic()
                text = await response.text()
                status = response.status
                date = response.headers.get("Date")
                retry_after = response.headers.get("Retry-After")
        check_status(method, url, status, text, _error_fields, retry_after=retry_after)
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise RequestFailed(
                method=method,
                url=url,
                status=None,
                code="InvalidResponse",
                message=f"expected a JSON object, got {text[:200]!r}",
            )
        return _Answer(
            method=method,
            url=url,
            body=parsed,
            sent_at=sent_at,
            answered_at=answered_at,
            long_poll=long_poll,
            date=date,
        )


def ca_context() -> ssl.SSLContext | bool:
    """What verifies servers' certificates: the CA file ``SSL_CERT_FILE`` names, loaded now
    (aiohttp reads the variable once, as it is imported, which a process setting it later
    would miss, and ignores a file it cannot read); without it ``True``, aiohttp's default
    (the system's CAs). Raises ``ValueError`` naming the variable when the file cannot be
    loaded."""
    cafile = os.environ.get("SSL_CERT_FILE")
    if not cafile:
        return True
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as error:
        raise ValueError(
            f"SSL_CERT_FILE={cafile!r} cannot be loaded as PEM certificates: {error}; point it "
            "at the PEM file of the CA that issued the coordinator's certificate, or unset it "
            "for the system's CAs"
        ) from None


def new_session(tls: ssl.SSLContext | bool | None = None) -> aiohttp.ClientSession:
    """A session whose HTTPS connections verify with ``tls`` (by default
    :func:`ca_context`'s)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=ca_context() if tls is None else tls)
    )


def root_urls_of(root_url: str | None, root_urls: Sequence[str]) -> tuple[str, ...]:
    """The coordinator root URLs a client or worker is given, in order of preference, each
    without a trailing ``/``: ``root_url`` alone or ``root_urls``; ``ValueError`` for neither,
    both, an empty or repeated one."""
    if (root_url is None) == (not root_urls):
        raise ValueError("give root_url, or root_urls for several replicas (not both)")
    urls = tuple(url.rstrip("/") for url in ([root_url] if root_url is not None else root_urls))
    for position, url in enumerate(urls):
        if not url:
            raise ValueError("a root URL is empty")
        if url in urls[:position]:
            raise ValueError(f"root URL {url} is given twice")
    return urls


def _root_of(base: str) -> str:
    return base.removesuffix("/api/queue/v1")


@contextmanager
def _parsing(answer: _Answer, route: str) -> Iterator[None]:
    """Turn a 2xx body that lacks what the route promises into a transient RequestFailed."""
    try:
        yield
    except (KeyError, TypeError, ValueError) as error:
        raise _invalid(answer, route, dict(answer.body), error) from error


def _invalid(answer: _Answer, route: str, value: Any, error: Exception) -> RequestFailed:
    return RequestFailed(
        method=answer.method,
        url=answer.url,
        status=None,
        code="InvalidResponse",
        message=f"not a {route} answer: {value!r} ({error!r})",
    )


def _status_of(answer: _Answer, route: str) -> dict[str, Any]:
    """The ``status`` object of an answer that carries one."""
    with _parsing(answer, route):
        status = answer.body["status"]
        if not isinstance(status, dict) or not isinstance(status.get("state"), str):
            raise TypeError(f"status {status!r} is not a task status")
    return status


def _run_results(
    answer: _Answer,
    route: str,
    key: str,
    runs: Sequence[tuple[str, int]],
    parse: Callable[[Any, _Answer], tuple[tuple[str, int], _T]],
) -> list[_T | RequestFailed]:
    """The items of a batch route's answer, one per run of ``runs`` and in their order.

    ``parse`` reads a successful item into the run it answers and its result. An item that
    does not parse, or answers another run, fails alone: the others are good answers, and a
    claim among them is a run this worker now holds.
    """
    with _parsing(answer, route):
        items = answer.body[key]
        if not isinstance(items, list) or len(items) != len(runs):
            raise ValueError(f"{key} must list {len(runs)} results")
    results: list[_T | RequestFailed] = []
    for run, item in zip(runs, items, strict=True):
        result: _T | RequestFailed
        try:
            if isinstance(item, Mapping) and "error" in item:
                answered, result = _run_error(item, answer)
            else:
                answered, result = parse(item, answer)
            if answered != run:
                raise ValueError(f"answers run {answered}, not {run}")
        except (KeyError, TypeError, ValueError) as error:
            result = _invalid(answer, route, item, error)
        results.append(result)
    return results


def _run_of(task_id: Any, run_id: Any) -> tuple[str, int]:
    # bool is an int subclass; true is not a run id.
    if not isinstance(run_id, int) or isinstance(run_id, bool):
        raise TypeError(f"runId {run_id!r} is not an integer")
    return str(task_id), run_id


def _run_error(item: Mapping[str, Any], answer: _Answer) -> tuple[tuple[str, int], RequestFailed]:
    """A batch item ``{taskId, runId, error: {status, code, message}}``: the RequestFailed the
    single call would have raised."""
    error = item["error"]
    status = error["status"]
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        raise ValueError(f"error status {status!r} is not an HTTP error status")
    retry_after = error.get("retryAfter")
    failure = RequestFailed(
        method=answer.method,
        url=answer.url,
        status=status,
        code=str(error["code"]),
        message=str(error["message"]),
        retry_after=retry_after if isinstance(retry_after, int) and retry_after > 0 else None,
    )
    return _run_of(item["taskId"], item["runId"]), failure


def _claim_item(item: Any, answer: _Answer) -> tuple[tuple[str, int], Claim]:
    claim = _claim(item, answer)
    return (claim.task_id, claim.run_id), claim


def _reclaim_item(item: Any, answer: _Answer) -> tuple[tuple[str, int], Reclaim]:
    return _run_of(item["status"]["taskId"], item["runId"]), _reclaim(item, answer)


def _report_item(item: Any, answer: _Answer) -> tuple[tuple[str, int], None]:
    if not isinstance(item["status"], Mapping):
        raise TypeError(f"status {item['status']!r} is not an object")
    return _run_of(item["taskId"], item["runId"]), None


def _claim(value: Mapping[str, Any], answer: _Answer) -> Claim:
    taken_until = _parse_time(value["takenUntil"])
    run_id = value["runId"]
    retries_left = value["status"]["retriesLeft"]
    for name, number in (("runId", run_id), ("retriesLeft", retries_left)):
        if not isinstance(number, int):
            raise TypeError(f"{name} {number!r} is not an integer")
    return Claim(
        task_id=str(value["status"]["taskId"]),
        run_id=run_id,
        task=value["task"],
        taken_until=taken_until,
        expires_at=timing.deadline(
            stamped_after=answer.stamped_after, until=taken_until, server_time=answer.server_time
        ),
        credentials=Credentials.from_json(value["credentials"]),
        retries_left=retries_left,
        traceparent=_traceparent(value.get("traceparent")),
    )


def _traceparent(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"traceparent {value!r} is not a string")
    return value


def _reclaim(value: Mapping[str, Any], answer: _Answer) -> Reclaim:
    taken_until = _parse_time(value["takenUntil"])
    return Reclaim(
        taken_until=taken_until,
        expires_at=timing.deadline(
            stamped_after=answer.stamped_after, until=taken_until, server_time=answer.server_time
        ),
        credentials=Credentials.from_json(value["credentials"]),
    )


def _parse_time(text: Any) -> datetime:
    parsed = datetime.fromisoformat(str(text))
    if parsed.tzinfo is None:
        raise ValueError(f"date-time {text!r} has no time zone")
    return parsed


def _server_time(date: str | None) -> datetime:
    """The server's clock from its ``Date`` header, or ours when it sent none we can read."""
    if date:
        try:
            parsed = parsedate_to_datetime(date)
        except (TypeError, ValueError):
            pass
        else:
            # RFC 2822's "-0000" parses as naive; HTTP dates are always GMT.
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return datetime.now(UTC)


def _error_fields(text: str) -> tuple[str, str]:
    """``code`` and ``message`` of a Taskcluster error body, or a snippet of anything else."""
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return str(parsed.get("code", "")), str(parsed.get("message", ""))
    return "", text[:200]
