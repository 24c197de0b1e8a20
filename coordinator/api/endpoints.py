"""The declarative table of the REST API: every route, its schemas and its documentation.

Handlers are bound to :data:`ENDPOINTS` by :attr:`Endpoint.name`, which is the Taskcluster
method name; the OpenAPI document (:mod:`coordinator.api.openapi`) is built from the same table.
Routes are aiohttp patterns relative to :data:`API_PREFIX`.

**Task-queue route variants.** ``claimWork``, ``pendingTasks`` and ``taskQueueCounts`` name a
worker pool either as two path segments (``/claim-work/{provisionerId}/{workerType}``, what
client 3.x sends) or as one URL-encoded ``taskQueueId`` segment (``/claim-work/proj%2Fwt``, what
modern clients send). Each form is its own :class:`Endpoint`, and the two share a ``name`` (so
one handler serves both) while their ``variant`` keeps OpenAPI operation ids unique. The
segment counts differ, so aiohttp cannot confuse them; it matches ``proj%2Fwt`` as one segment
and hands the handler the decoded ``proj/wt``. Handlers call :func:`task_queue_of` to get
``(provisionerId, workerType)`` from either form's match info. ``getTaskQueue``,
``listPendingTasks`` and ``listClaimedTasks`` (newer than client 3.x) have only the one-segment
form: a route ``/task-queues/{provisionerId}/{workerType}`` would also match
``/task-queues/proj%2Fwt/pending``, with ``pending`` as the workerType.

**Scopes.** An endpoint declares what it requires as Taskcluster's ``declare()`` does: a
:data:`~coordinator.api.scopes.Template` whose ``<name>`` placeholders are filled from the path
(:func:`url_parameters`, with ``taskQueueId`` for the two-segment form too) and from what only
the handler knows (the stored task's schedulerId, the body's workerId). The route dispatch
checks it before the handler when the path supplies every parameter, and otherwise hands the
handler the check to complete; the batch calls declare their per-run scopes (``run_scopes``)
as well. The OpenAPI document shows both.

**Artifact names.** An artifact's ``name`` may hold ``/``: it is the last path parameter of its
routes, matched whole (:attr:`Parameter.splat`), whether a client sends its slashes raw (the
JavaScript client, curl) or as ``%2F`` (the Python client); the handler gets it decoded.

**Request line.** :data:`MAX_REQUEST_LINE` bounds the method, path and query string; every
parameter's schema bounds its length (a ``maxLength``, or an ``enum``) and a repeatable one's
count (``maxItems`` in the OpenAPI document), so that any query the document allows fits in
it, percent-encoded (tests/unit/test_validation.py adds up the worst case).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from coordinator.api.scopes import CREATE_TASK_SCOPES, Template, template_parameters
from coordinator.domain.task_queues import TaskQueue

API_PREFIX = "/api/queue/v1"
HOOKS_PREFIX = "/api/hooks/v1"
"""Where Taskcluster's hooks service answers on the same root URL (:data:`HOOK_ENDPOINTS`)."""

MAX_REQUEST_LINE = 8190
"""Longest request line (method, path and query string, percent-encoded, in bytes) the server
reads, aiohttp's default; a longer one is answered 400."""

Method = Literal["GET", "POST", "PUT", "DELETE"]
Stability = Literal["stable", "experimental", "deprecated"]
FilterUse = Literal["optional", "required"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Parameter:
    """A path or query parameter.

    :param schema: the ``$defs`` entry of ``schemas/v1/common.json`` that the raw (decoded,
        string) value must match.
    :param repeat: how many times a query parameter may be given (an array of at most that
        many in the OpenAPI document when more than once).
    :param refusal: what a 400 says first of a value that does not match the schema, before
        the schema's words (``{value}`` is the value), when those alone would not help.
    :param splat: a path parameter that takes the rest of the path, ``/`` included.
    :param required: a query parameter the endpoint cannot do without (path parameters
        always are).
    """

    name: str
    schema: str
    description: str
    repeat: int = 1
    refusal: str | None = None
    splat: bool = False
    required: bool = False


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class Endpoint:
    """One route of the API (one object per route, compared and hashed by identity).

    :param name: the Taskcluster method name; handlers are bound by it.
    :param route: aiohttp pattern relative to :data:`API_PREFIX`, e.g. ``/task/{taskId}``.
    :param input: schema name (file stem under ``schemas/v1``) of the request body, or
        ``None`` for endpoints that take no body.
    :param output: schema name of the 200 response body, or ``None`` when the body is not
        described by a schema file (only the OpenAPI document itself).
    :param query: the accepted query-string parameters besides the task filters.
    :param filters: takes the task filters (:data:`TASK_FILTERS`); ``required``: at least one.
    :param variant: suffix distinguishing endpoints that share a ``name``; appended to it in
        the OpenAPI operation id.
    :param batch: takes many items at once, so its body may be larger than other requests'.
    :param scopes: the scope expression template the caller must satisfy (``None``: anyone
        may call, without credentials).
    :param run_scopes: for the batch calls on runs, the template each run requires; a run
        refused is that run's 403, never the batch's.
    :param success: the status of a successful answer: 200, 303 (a redirect whose JSON body
        is ``output``) or 204 (no body).
    :param statuses: what the endpoint answers besides the success and the errors every
        endpoint may answer (:data:`coordinator.api.openapi.ERROR_STATUSES`), e.g. ``"410"``.
    :param uploads: the request body is an artifact's bytes, streamed, of any Content-Type.
    :param downloads: the success is an artifact's bytes, with its Content-Type.
    :param prefix: the service the route belongs to: the queue's :data:`API_PREFIX`, or the
        hooks service's :data:`HOOKS_PREFIX`.
    """

    name: str
    method: Method
    route: str
    input: str | None
    output: str | None
    title: str
    description: str
    stability: Stability = "stable"
    query: tuple[Parameter, ...] = ()
    filters: FilterUse | None = None
    variant: str = ""
    batch: bool = False
    scopes: Template | None = None
    run_scopes: Template | None = None
    success: int = 200
    statuses: tuple[str, ...] = ()
    uploads: bool = False
    downloads: bool = False
    prefix: str = API_PREFIX

    @property
    def operation_id(self) -> str:
        return self.name + self.variant

    @property
    def server_route(self) -> str:
        """:attr:`route` as aiohttp matches it: a :attr:`~Parameter.splat` parameter takes
        the rest of the path."""
        return _PLACEHOLDER.sub(
            lambda match: f"{{{match[1]}:.+}}" if PARAMETERS[match[1]].splat else match[0],
            self.route,
        )

    @property
    def path_parameters(self) -> tuple[str, ...]:
        """Names of the ``{...}`` placeholders of the route, in order."""
        return tuple(_PLACEHOLDER.findall(self.route))

    @property
    def query_names(self) -> tuple[str, ...]:
        """Every query parameter the endpoint accepts: the task filters, then the rest."""
        return tuple(self.query_parameters)

    @property
    def query_parameters(self) -> dict[str, Parameter]:
        """Every query parameter the endpoint accepts, by name: the task filters, then the
        rest (a name may mean something else elsewhere: an artifact listing's
        continuationToken holds a name)."""
        filters = TASK_FILTERS if self.filters is not None else ()
        return {
            **{name: PARAMETERS[name] for name in filters},
            **{parameter.name: parameter for parameter in self.query},
        }

    @property
    def scopes_from_url(self) -> bool:
        """Whether the path alone supplies every parameter of :attr:`scopes`, so the route
        dispatch checks them before the handler runs."""
        names = set(self.path_parameters)
        if {"provisionerId", "workerType"} <= names:
            names.add("taskQueueId")
        return self.scopes is not None and template_parameters(self.scopes) <= names


_PLACEHOLDER = re.compile(r"\{(\w+)\}")

PARAMETERS: Mapping[str, Parameter] = {
    p.name: p
    for p in (
        Parameter(name="taskId", schema="slugid", description="The task's slugid."),
        Parameter(name="taskGroupId", schema="slugid", description="The task group's slugid."),
        Parameter(name="runId", schema="run-id-parameter", description="The run's index."),
        Parameter(name="provisionerId", schema="identifier", description="The provisioner."),
        Parameter(name="workerType", schema="identifier", description="The worker type."),
        Parameter(
            name="taskQueueId",
            schema="task-queue-id",
            description="`<provisionerId>/<workerType>`, URL-encoded as one path segment "
            "(`proj%2Fwt`).",
        ),
        Parameter(name="limit", schema="limit-parameter", description="Maximum page size."),
        Parameter(name="hookGroupId", schema="hook-group-id", description="The hook's group."),
        Parameter(
            name="hookId",
            schema="hook-id",
            description="The hook within its group (a `/` in it sent as `%2F`).",
        ),
        Parameter(name="token", schema="trigger-token", description="The hook's trigger token."),
        Parameter(
            name="continuationToken",
            schema="continuation-token-parameter",
            description="The `continuationToken` of the previous page.",
            refusal="continuationToken {value!r} is not one this API issued: pass the token of "
            "the previous page of the same listing, with the same parameters (only limit may "
            "change)",
        ),
        Parameter(name="workerGroup", schema="identifier", description="The worker group."),
        Parameter(name="workerId", schema="identifier", description="The worker."),
        Parameter(name="schedulerId", schema="identifier", description="The schedulerId."),
        Parameter(name="projectId", schema="project-id", description="The projectId."),
        Parameter(
            name="state",
            schema="task-filter-state",
            description="A state (repeatable: any of them): `unscheduled`, `pending` (claimable "
            "now), `delayed` (pending, not claimable yet), `running`, `completed`, `failed`, "
            "`exception`.",
            repeat=7,
        ),
        Parameter(
            name="tag",
            schema="tag-filter",
            description="`<key>:<value>`: the task's `tags` hold that key with that value "
            "(repeatable, up to 3 times: all of them). The key is everything before the first "
            "colon.",
            repeat=3,
        ),
        Parameter(
            name="createdAfter",
            schema="date-time-parameter",
            description="`created` at or after this date-time.",
        ),
        Parameter(
            name="createdBefore",
            schema="date-time-parameter",
            description="`created` before this date-time.",
        ),
        Parameter(
            name="resolvedAfter",
            schema="date-time-parameter",
            description="Resolved (the last run's `resolved`) at or after this date-time.",
        ),
        Parameter(
            name="resolvedBefore",
            schema="date-time-parameter",
            description="Resolved before this date-time.",
        ),
        Parameter(
            name="quarantined",
            schema="quarantined-parameter",
            description="`true` lists only quarantined workers, `false` only the others.",
        ),
        Parameter(
            name="name",
            schema="artifact-name",
            description="The artifact's name: printable ASCII, `/` included (sent raw or as "
            "`%2F`).",
            splat=True,
        ),
        Parameter(
            name="expires",
            schema="signed-url-expires-parameter",
            description="When the signed URL stops working (epoch milliseconds).",
            required=True,
        ),
        Parameter(
            name="sig",
            schema="signed-url-signature-parameter",
            description="The URL's signature, made by the coordinator.",
            required=True,
        ),
    )
}
"""Every path and query parameter any endpoint uses, by name: the route dispatch checks each
value against its schema."""

_PAGED = (PARAMETERS["limit"], PARAMETERS["continuationToken"])
_BOUNDED_PAGED = (
    Parameter(
        name="limit",
        schema="bounded-limit-parameter",
        description="Maximum page size: 1 to 1,000 (a larger one is a 400).",
    ),
    PARAMETERS["continuationToken"],
)
"""The management listings' paging: they refuse a limit over 1,000 instead of capping it."""
_ARTIFACT_PAGED = (
    PARAMETERS["limit"],
    Parameter(
        name="continuationToken",
        schema="artifact-continuation-token-parameter",
        description="The `continuationToken` of the previous page.",
        refusal=PARAMETERS["continuationToken"].refusal,
    ),
)
"""The artifact listings' paging: their tokens hold an artifact name, up to 1,024 characters."""
_SIGNED = (PARAMETERS["expires"], PARAMETERS["sig"])

TASK_FILTERS = (
    "taskQueueId",
    "state",
    "schedulerId",
    "taskGroupId",
    "projectId",
    "tag",
    "createdAfter",
    "createdBefore",
    "resolvedAfter",
    "resolvedBefore",
)
"""The query parameters that select tasks in the management API, combined with AND."""

_MANAGEMENT = (
    "Filters, combined with AND: "
    + ", ".join(f"`{name}`" for name in TASK_FILTERS)
    + " (`state` and `tag` repeatable). Not a Taskcluster method."
)
_STREAMING = (
    " With `Accept: application/x-ndjson` the answer is every match, one JSON object per "
    "line, streamed (no `continuationToken`)."
)

_CLAIM_WORK_DESCRIPTION = (
    "Long-poll (about 20 s) for up to `tasks` pending runs of the worker pool and claim them. "
    "Returns as soon as at least one claim succeeds, or an empty list at the end of the poll."
)
_PENDING_DESCRIPTION = (
    "Approximate number of pending tasks of the worker pool, from the Azure queues' message "
    "counts (an upper bound, cached for up to 20 s)."
)
_COUNTS_DESCRIPTION = (
    "Exact numbers of pending and running runs of the worker pool, counted in the store. "
    "This is the coordinator's management endpoint, not Taskcluster's approximate one."
)

_WORKER_ID = "queue:worker-id:<workerGroup>/<workerId>"


_GET_ARTIFACT: Template = {
    "AllOf": [{"for": "name", "in": "names", "each": "queue:get-artifact:<name>"}]
}
"""getArtifact's scopes: one per name visited while following links (the handler's ``names``)."""


def _task_action(action: str) -> Template:
    """Taskcluster's scopes to act on a stored task: its own scope, or its project's."""
    return {
        "AnyOf": [
            f"queue:{action}:<schedulerId>/<taskGroupId>/<taskId>",
            f"queue:{action}-in-project:<projectId>",
        ]
    }


def _as_worker(scope: str) -> Template:
    """``scope`` together with the worker-id scope of the worker the body names."""
    return {"AllOf": [scope, _WORKER_ID]}


def _run_or_holder(action: str) -> Template:
    """reclaimRuns' and resolveRuns' rule per run: the run's own scope (what its temporary
    credentials carry), or the worker-id scope of the worker holding it (``held``)."""
    return {"AnyOf": [f"{action}:<taskId>/<runId>", {"if": "held", "then": _WORKER_ID}]}


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        name="ping",
        method="GET",
        route="/ping",
        input=None,
        output="ping-response",
        title="Ping Server",
        description="Answer whether the server is alive, and for how long it has been.",
    ),
    Endpoint(
        name="heartbeat",
        method="GET",
        route="/__heartbeat__",
        input=None,
        output="heartbeat-response",
        title="Heartbeat",
        description="Answer `{}` when the service and its store answer, 503 otherwise (also at "
        "the service root).",
    ),
    Endpoint(
        name="lbheartbeat",
        method="GET",
        route="/__lbheartbeat__",
        input=None,
        output="heartbeat-response",
        title="Load Balancer Heartbeat",
        description="Answer `{}` while the process serves requests; checks nothing else, so a "
        "load balancer does not drop every replica when the database blinks (also at the root).",
    ),
    Endpoint(
        name="version",
        method="GET",
        route="/__version__",
        input=None,
        output="version-response",
        title="Version",
        description="What is deployed, in the Dockerflow shape (also at the service root).",
    ),
    Endpoint(
        name="createTask",
        method="PUT",
        route="/task/{taskId}",
        input="create-task-request",
        output="task-status-response",
        title="Create New Task",
        description="Define a task. It is scheduled at once unless it has dependencies. "
        "Repeating the call with an identical definition returns the current status; a "
        "different definition under the same taskId is a conflict.",
        scopes=CREATE_TASK_SCOPES,
    ),
    Endpoint(
        name="createTasks",
        method="PUT",
        route="/tasks",
        input="create-tasks-request",
        output="create-tasks-response",
        title="Create Many Tasks",
        description="Define 1 to 1,000 tasks in one request. Each item is validated and is "
        "idempotent exactly as createTask; the new tasks are written in one transaction and "
        "their hints put concurrently. The caller needs every item's createTask scopes (403 "
        "for the whole batch otherwise). Per-item results come back in request order. Not a "
        "Taskcluster method.",
        stability="experimental",
        batch=True,
        scopes={"AllOf": [{"for": "task", "in": "tasks", "each": CREATE_TASK_SCOPES}]},
    ),
    Endpoint(
        name="task",
        method="GET",
        route="/task/{taskId}",
        input=None,
        output="task-definition-response",
        title="Get Task Definition",
        description="The task definition, normalised and with every default filled in.",
    ),
    Endpoint(
        name="status",
        method="GET",
        route="/task/{taskId}/status",
        input=None,
        output="task-status-response",
        title="Get Task Status",
        description="The status of the task and its runs.",
    ),
    Endpoint(
        name="scheduleTask",
        method="POST",
        route="/task/{taskId}/schedule",
        input=None,
        output="task-status-response",
        title="Schedule Defined Task",
        description="Give an unscheduled task its first run without waiting for its "
        "dependencies. A no-op for a task that already has runs.",
        scopes=_task_action("schedule-task"),
    ),
    Endpoint(
        name="rerunTask",
        method="POST",
        route="/task/{taskId}/rerun",
        input=None,
        output="task-status-response",
        title="Rerun a Resolved Task",
        description="Add a new pending run to a resolved task, restoring its retries.",
        stability="deprecated",
        scopes=_task_action("rerun-task"),
    ),
    Endpoint(
        name="cancelTask",
        method="POST",
        route="/task/{taskId}/cancel",
        input=None,
        output="task-status-response",
        title="Cancel Task",
        description="Resolve the task as `exception/canceled`. A no-op for a resolved task.",
        scopes=_task_action("cancel-task"),
    ),
    Endpoint(
        name="listTaskGroup",
        method="GET",
        route="/task-group/{taskGroupId}/list",
        input=None,
        output="list-task-group-response",
        title="List Task Group",
        description="One page of the tasks of the task group, with their statuses.",
        query=_PAGED,
    ),
    Endpoint(
        name="listDependentTasks",
        method="GET",
        route="/task/{taskId}/dependents",
        input=None,
        output="list-dependent-tasks-response",
        title="List Dependent Tasks",
        description="One page of the tasks that depend on the task, with their statuses.",
        query=_PAGED,
    ),
    Endpoint(
        name="tasks",
        method="POST",
        route="/tasks",
        input="tasks-request",
        output="tasks-response",
        title="Get Many Task Definitions",
        description="The definitions of up to 1,000 tasks; unknown taskIds are left out.",
        stability="experimental",
        query=_PAGED,
    ),
    Endpoint(
        name="statuses",
        method="POST",
        route="/tasks/status",
        input="tasks-request",
        output="tasks-statuses-response",
        title="Get Many Task Statuses",
        description="The statuses of up to 1,000 tasks; unknown taskIds are left out.",
        stability="experimental",
        query=_PAGED,
    ),
    Endpoint(
        name="getTaskGroup",
        method="GET",
        route="/task-group/{taskGroupId}",
        input=None,
        output="task-group-response",
        title="Get Task Group",
        description="The task group: its schedulerId, expiry and whether it is sealed.",
    ),
    Endpoint(
        name="sealTaskGroup",
        method="POST",
        route="/task-group/{taskGroupId}/seal",
        input=None,
        output="task-group-response",
        title="Seal Task Group",
        description="From now on no task may join the group: createTask into it answers 409. "
        "Idempotent; sealing and creating are atomic with each other.",
        stability="experimental",
        scopes="queue:seal-task-group:<schedulerId>/<taskGroupId>",
    ),
    Endpoint(
        name="cancelTaskGroup",
        method="POST",
        route="/task-group/{taskGroupId}/cancel",
        input=None,
        output="cancel-task-group-response",
        title="Cancel Task Group",
        description="Cancel every unresolved task of a sealed group (409 if it is not sealed), "
        "in bounded batches; answers the tasks this call cancelled.",
        stability="experimental",
        scopes="queue:cancel-task-group:<schedulerId>/<taskGroupId>",
    ),
    Endpoint(
        name="changeTaskGroupPriority",
        method="POST",
        route="/task-group/{taskGroupId}/priority",
        input="change-task-priority-request",
        output="task-group-priority-change-response",
        title="Change Task Group Priority",
        description="Give every unresolved task of the group the new priority (see "
        "changeTaskPriority).",
        stability="experimental",
        scopes="queue:change-task-group-priority:<schedulerId>/<taskGroupId>",
    ),
    Endpoint(
        name="changeTaskPriority",
        method="POST",
        route="/task/{taskId}/priority",
        input="change-task-priority-request",
        output="task-status-response",
        title="Change Task Priority",
        description="The task's priority from now on: its definition and scopes show it, and a "
        "pending run's hint is put again on the new priority's queue (the old hint goes stale, "
        "which is harmless). 409 past the deadline or once resolved.",
        stability="experimental",
        scopes={
            "AnyOf": [
                "queue:change-task-priority:<taskId>",
                "queue:change-task-priority-in-queue:<taskQueueId>",
            ]
        },
    ),
    Endpoint(
        name="pollTaskUrls",
        method="GET",
        route="/poll-task-url/{provisionerId}/{workerType}",
        input=None,
        output="poll-task-urls-response",
        title="Get Urls to Poll Pending Tasks",
        description="Signed URLs to get and delete hint messages of the worker pool's Azure "
        "queues, highest priority first, valid until `expires`.",
        stability="deprecated",
        scopes="queue:poll-task-urls:<taskQueueId>",
    ),
    Endpoint(
        name="claimTask",
        method="POST",
        route="/task/{taskId}/runs/{runId}/claim",
        input="task-claim-request",
        output="task-claim-response",
        title="Claim Task",
        description="Claim a pending run for the worker until `takenUntil`. Repeating the "
        "claim of a run the same worker holds returns the claim again. 429 with `Retry-After` "
        "while the task queue is paused or at its limits.",
        stability="deprecated",
        scopes=_as_worker("queue:claim-task:<provisionerId>/<workerType>"),
        statuses=("429",),
    ),
    Endpoint(
        name="claimWork",
        method="POST",
        route="/claim-work/{provisionerId}/{workerType}",
        input="claim-work-request",
        output="claim-work-response",
        title="Claim Work",
        description=_CLAIM_WORK_DESCRIPTION,
        scopes=_as_worker("queue:claim-work:<taskQueueId>"),
    ),
    Endpoint(
        name="claimWork",
        method="POST",
        route="/claim-work/{taskQueueId}",
        input="claim-work-request",
        output="claim-work-response",
        title="Claim Work (by taskQueueId)",
        description=_CLAIM_WORK_DESCRIPTION,
        variant="ByTaskQueueId",
        scopes=_as_worker("queue:claim-work:<taskQueueId>"),
    ),
    Endpoint(
        name="reclaimTask",
        method="POST",
        route="/task/{taskId}/runs/{runId}/reclaim",
        input=None,
        output="task-reclaim-response",
        title="Reclaim Task",
        description="Extend the claim of a running run and get fresh credentials. A conflict "
        "means the worker must stop the task and report nothing.",
        scopes="queue:reclaim-task:<taskId>/<runId>",
    ),
    Endpoint(
        name="reportCompleted",
        method="POST",
        route="/task/{taskId}/runs/{runId}/completed",
        input=None,
        output="task-status-response",
        title="Report Run Completed",
        description="Resolve the running run as `completed`.",
        scopes="queue:resolve-task:<taskId>/<runId>",
    ),
    Endpoint(
        name="reportFailed",
        method="POST",
        route="/task/{taskId}/runs/{runId}/failed",
        input=None,
        output="task-status-response",
        title="Report Run Failed",
        description="Resolve the running run as `failed`.",
        scopes="queue:resolve-task:<taskId>/<runId>",
    ),
    Endpoint(
        name="reportException",
        method="POST",
        route="/task/{taskId}/runs/{runId}/exception",
        input="task-exception-request",
        output="task-status-response",
        title="Report Task Exception",
        description="Resolve the running run as `exception` with the given reason; "
        "`worker-shutdown` and `intermittent-task` retry the task while retries remain.",
        scopes="queue:resolve-task:<taskId>/<runId>",
    ),
    # --- artifacts
    Endpoint(
        name="createArtifact",
        method="POST",
        route="/task/{taskId}/runs/{runId}/artifacts/{name}",
        input="post-artifact-request",
        output="post-artifact-response",
        title="Create Artifact",
        description="Create an artifact of a running run (or of one resolved `exception` less "
        "than 25 minutes ago), expiring no later than its task. `s3`: the answer's `putUrl` "
        "takes the bytes (PUT, no Authorization, `Content-Type` equal to `contentType`, "
        "`Content-Length` exact, optional `Content-Encoding`), for 45 minutes; repeating the "
        "request answers a fresh one. `reference`, `link` and `error` are complete at once. "
        "`object` is refused: use `s3`. A repeat may extend `expires` (never shorten it), "
        "change a reference's URL or make a reference a link; anything else that differs is a "
        "409.",
        scopes="queue:create-artifact:<taskId>/<runId>",
    ),
    Endpoint(
        name="finishArtifact",
        method="PUT",
        route="/task/{taskId}/runs/{runId}/artifacts/{name}",
        input="finish-artifact-request",
        output=None,
        title="Finish Artifact",
        description="Taskcluster's completion of an `object` artifact. This coordinator makes "
        "none, so an existing artifact is a 400 (`Only object artifacts can be finished`) and "
        "a missing one a 404.",
        scopes="queue:create-artifact:<taskId>/<runId>",
        success=204,
    ),
    Endpoint(
        name="getArtifact",
        method="GET",
        route="/task/{taskId}/runs/{runId}/artifacts/{name}",
        input=None,
        output="get-artifact-response",
        title="Get Artifact Data from Run",
        description="Redirect (303) to the artifact's content, following `link` artifacts: an "
        "`s3` artifact's bytes (a signed URL valid 30 minutes; 404 until they are uploaded), a "
        "`reference`'s URL. An `error` artifact answers 424 with its `reason` and `message`; an "
        "expired one 410; links in a cycle 400. The caller needs `queue:get-artifact:<name>` "
        "for every name the links visit (anonymous callers hold `public/*`); a signed URL "
        "(`?bewit=`) carries its signer's scopes.",
        scopes=_GET_ARTIFACT,
        success=303,
        statuses=("410", "424"),
    ),
    Endpoint(
        name="getLatestArtifact",
        method="GET",
        route="/task/{taskId}/artifacts/{name}",
        input=None,
        output="get-artifact-response",
        title="Get Artifact Data from Latest Run",
        description="getArtifact of the task's latest run (404 when the task has none).",
        scopes=_GET_ARTIFACT,
        success=303,
        statuses=("410", "424"),
    ),
    Endpoint(
        name="listArtifacts",
        method="GET",
        route="/task/{taskId}/runs/{runId}/artifacts",
        input=None,
        output="list-artifacts-response",
        title="Get Artifacts from Run",
        description="One page of the run's artifacts in name order, expired ones (until they "
        "are deleted) and `s3` ones not uploaded yet included. A pending run lists none; a run "
        "the task does not have is a 404.",
        query=_ARTIFACT_PAGED,
        scopes="queue:list-artifacts:<taskId>:<runId>",
    ),
    Endpoint(
        name="listLatestArtifacts",
        method="GET",
        route="/task/{taskId}/artifacts",
        input=None,
        output="list-artifacts-response",
        title="Get Artifacts from Latest Run",
        description="listArtifacts of the task's latest run (404 when the task has none).",
        query=_ARTIFACT_PAGED,
        scopes="queue:list-artifacts:<taskId>",
    ),
    Endpoint(
        name="artifactInfo",
        method="GET",
        route="/task/{taskId}/runs/{runId}/artifact-info/{name}",
        input=None,
        output="artifact-response",
        title="Get Artifact Information From Run",
        description="The artifact's record: a link is not followed, an expired artifact is "
        "shown until it is deleted. Grants no access to the content.",
        scopes="queue:list-artifacts:<taskId>:<runId>",
    ),
    Endpoint(
        name="latestArtifactInfo",
        method="GET",
        route="/task/{taskId}/artifact-info/{name}",
        input=None,
        output="artifact-response",
        title="Get Artifact Information From Latest Run",
        description="artifactInfo of the task's latest run (404 when the task has none).",
        scopes="queue:list-artifacts:<taskId>",
    ),
    Endpoint(
        name="artifact",
        method="GET",
        route="/task/{taskId}/runs/{runId}/artifact-content/{name}",
        input=None,
        output="artifact-content-response",
        title="Get Artifact Content From Run",
        description="Where the artifact's content is, as JSON (200), following links as "
        "getArtifact does and with its scopes: an `s3` artifact's signed URL, a `reference`'s "
        "URL, or an `error` artifact's `reason` and `message`.",
        scopes=_GET_ARTIFACT,
        statuses=("410",),
    ),
    Endpoint(
        name="latestArtifact",
        method="GET",
        route="/task/{taskId}/artifact-content/{name}",
        input=None,
        output="artifact-content-response",
        title="Get Artifact Content From Latest Run",
        description="artifact of the task's latest run (404 when the task has none).",
        scopes=_GET_ARTIFACT,
        statuses=("410",),
    ),
    Endpoint(
        name="uploadArtifact",
        method="PUT",
        route="/task/{taskId}/runs/{runId}/artifact-upload/{name}",
        input=None,
        output=None,
        title="Upload Artifact Bytes",
        description="The `putUrl` createArtifact answers for an `s3` artifact: the bytes, "
        "streamed, with `Content-Type` equal to the artifact's `contentType` (400 otherwise), "
        "an exact `Content-Length` (411 without one; 413 past the coordinator's limit; a body "
        "that ends early is a 400 and stores nothing) and optionally `Content-Encoding`, given "
        "back on download. A repeat replaces the bytes. No Authorization: the URL's signature "
        "is the authority (403 once expired or altered). Not a Taskcluster method.",
        stability="experimental",
        query=_SIGNED,
        statuses=("411",),
        uploads=True,
    ),
    Endpoint(
        name="downloadArtifact",
        method="GET",
        route="/task/{taskId}/runs/{runId}/artifact-download/{name}",
        input=None,
        output=None,
        title="Download Artifact Bytes",
        description="The signed URL getArtifact redirects to for an `s3` artifact when the "
        "coordinator keeps the bytes on its disk: the bytes with the `Content-Type`, "
        "`Content-Encoding` and length they were uploaded with. No Authorization: the URL's "
        "signature is the authority (403 once expired or altered). Not a Taskcluster method.",
        stability="experimental",
        query=_SIGNED,
        downloads=True,
    ),
    Endpoint(
        name="claimRuns",
        method="POST",
        route="/claim-runs",
        input="claim-runs-request",
        output="claim-runs-response",
        title="Claim Many Runs",
        description="Claim 1 to 32 pending runs (the hints of one Azure get) for one worker in "
        "one request and one store round trip. Needs `queue:worker-id:<workerGroup>/<workerId>` "
        "(401/403 for the whole batch otherwise) and, per run, the claimTask scope of its task "
        "queue. Results come back in request order: the claim as claimTask answers it, or "
        "`{taskId, runId, error: {status, code, message}}` with what claimTask would have "
        "answered; one run refused never fails the others. Not a Taskcluster method.",
        stability="experimental",
        scopes=_WORKER_ID,
        run_scopes="queue:claim-task:<taskQueueId>",
    ),
    Endpoint(
        name="reclaimRuns",
        method="POST",
        route="/reclaim-runs",
        input="reclaim-runs-request",
        output="reclaim-runs-response",
        title="Reclaim Many Runs",
        description="reclaimTask for 1 to 32 running runs at once. Per run the caller needs "
        "`queue:reclaim-task:<taskId>/<runId>` or `queue:worker-id:<workerGroup>/<workerId>` "
        "of the worker holding the run (a worker batches with its own credentials). Per-run "
        "results in request order, as claimRuns. Not a Taskcluster method.",
        stability="experimental",
        run_scopes=_run_or_holder("queue:reclaim-task"),
    ),
    Endpoint(
        name="resolveRuns",
        method="POST",
        route="/resolve-runs",
        input="resolve-runs-request",
        output="resolve-runs-response",
        title="Resolve Many Runs",
        description="reportCompleted, reportFailed and reportException for 1 to 32 running "
        "runs at once (`resolution`, and `reason` exactly for `exception`). Per run the caller "
        "needs `queue:resolve-task:<taskId>/<runId>` or the worker-id scope of the worker "
        "holding the run. Per-run results in request order, as claimRuns. Not a Taskcluster "
        "method.",
        stability="experimental",
        run_scopes=_run_or_holder("queue:resolve-task"),
    ),
    Endpoint(
        name="pendingTasks",
        method="GET",
        route="/pending/{provisionerId}/{workerType}",
        input=None,
        output="pending-tasks-response",
        title="Get Number of Pending Tasks",
        description=_PENDING_DESCRIPTION,
        stability="deprecated",
    ),
    Endpoint(
        name="pendingTasks",
        method="GET",
        route="/pending/{taskQueueId}",
        input=None,
        output="pending-tasks-response",
        title="Get Number of Pending Tasks (by taskQueueId)",
        description=_PENDING_DESCRIPTION,
        stability="deprecated",
        variant="ByTaskQueueId",
    ),
    Endpoint(
        name="taskQueueCounts",
        method="GET",
        route="/task-queues/{provisionerId}/{workerType}/counts",
        input=None,
        output="task-queue-counts-response",
        title="Count Pending and Running Runs",
        description=_COUNTS_DESCRIPTION,
        stability="experimental",
    ),
    Endpoint(
        name="taskQueueCounts",
        method="GET",
        route="/task-queues/{taskQueueId}/counts",
        input=None,
        output="task-queue-counts-response",
        title="Count Pending and Running Runs (by taskQueueId)",
        description=_COUNTS_DESCRIPTION,
        stability="experimental",
        variant="ByTaskQueueId",
    ),
    Endpoint(
        name="listTasks",
        method="GET",
        route="/tasks",
        input=None,
        output="list-tasks-response",
        title="List Tasks",
        description="One page of the tasks that match the filters, by taskId, with their "
        "statuses. " + _MANAGEMENT + _STREAMING,
        stability="experimental",
        query=_BOUNDED_PAGED,
        filters="optional",
    ),
    Endpoint(
        name="listTaskSummaries",
        method="GET",
        route="/tasks/summary",
        input=None,
        output="list-task-summaries-response",
        title="List Task Summaries",
        description="As listTasks, without each task's `payload` and `extra`. "
        + _MANAGEMENT
        + _STREAMING,
        stability="experimental",
        query=_BOUNDED_PAGED,
        filters="optional",
    ),
    Endpoint(
        name="countTasks",
        method="GET",
        route="/tasks/count",
        input=None,
        output="count-tasks-response",
        title="Count Tasks",
        description="How many tasks match the filters, by state (`delayed`: pending, not "
        "claimable yet; the states are disjoint and add up to `total`). " + _MANAGEMENT,
        stability="experimental",
        filters="optional",
    ),
    Endpoint(
        name="cancelTasks",
        method="POST",
        route="/tasks/cancel",
        input=None,
        output="cancel-tasks-response",
        title="Cancel Tasks",
        description="cancelTask for every unresolved task that matches the filters, in bounded "
        "batches; `cancelled` counts the tasks this call resolved. Needs "
        "`queue:manage:cancel-tasks`; at least one filter is required. " + _MANAGEMENT,
        stability="experimental",
        filters="required",
        scopes="queue:manage:cancel-tasks",
    ),
    Endpoint(
        name="rerunTasks",
        method="POST",
        route="/tasks/rerun",
        input=None,
        output="rerun-tasks-response",
        title="Rerun Tasks",
        description="rerunTask for every failed or exception task that matches the filters, in "
        "bounded batches; `rerun` counts the tasks this call reran, `matched` the failed and "
        "exception tasks it found (one past its deadline or at its maximum of runs is not "
        "rerun). Needs `queue:manage:rerun-tasks`; at least one filter is required. " + _MANAGEMENT,
        stability="experimental",
        filters="required",
        scopes="queue:manage:rerun-tasks",
    ),
    Endpoint(
        name="deleteTasks",
        method="DELETE",
        route="/tasks",
        input=None,
        output="delete-tasks-response",
        title="Delete Tasks",
        description="Remove the tasks that match the filters, in bounded batches; their hints "
        "become stale, and a worker holding one of their runs gets 404 when it reports. Needs "
        "`queue:manage:delete-tasks`; at least one filter is required. " + _MANAGEMENT,
        stability="experimental",
        filters="required",
        scopes="queue:manage:delete-tasks",
    ),
    Endpoint(
        name="openapi",
        method="GET",
        route="/openapi.json",
        input=None,
        output=None,
        title="OpenAPI Document",
        description="This API described as an OpenAPI 3.1 document.",
    ),
    # --- task queues and workers, as records kept from claims
    Endpoint(
        name="listTaskQueues",
        method="GET",
        route="/task-queues",
        input=None,
        output="list-task-queues-response",
        title="List Task Queues",
        description="One page of the task queues seen (a task created in it, a worker polling "
        "or claiming, declareWorker) and not expired, by taskQueueId.",
        query=_PAGED,
    ),
    Endpoint(
        name="getTaskQueue",
        method="GET",
        route="/task-queues/{taskQueueId}",
        input=None,
        output="task-queue-response",
        title="Get Task Queue",
        description="The task queue; 404 when never seen or expired.",
    ),
    Endpoint(
        name="pauseTaskQueue",
        method="POST",
        route="/task-queues/{taskQueueId}/pause",
        input="pause-task-queue-request",
        output="task-queue-controls-response",
        title="Pause a Task Queue",
        description="No run of the task queue is claimed until it is resumed: claimWork hands "
        "out nothing, claimTask and claimRuns answer 429 with `Retry-After`. Tasks are still "
        "accepted and stay pending. Every replica applies it within about a second. Pausing a "
        "paused queue keeps its `since` and takes the new reason. Not a Taskcluster method.",
        stability="experimental",
        scopes="queue:manage:pause:<taskQueueId>",
    ),
    Endpoint(
        name="resumeTaskQueue",
        method="POST",
        route="/task-queues/{taskQueueId}/resume",
        input=None,
        output="task-queue-controls-response",
        title="Resume a Task Queue",
        description="Lift the task queue's pause (nothing happens to one not paused). Not a "
        "Taskcluster method.",
        stability="experimental",
        scopes="queue:manage:pause:<taskQueueId>",
    ),
    Endpoint(
        name="setTaskQueueLimits",
        method="PUT",
        route="/task-queues/{taskQueueId}/limits",
        input="task-queue-limits-request",
        output="task-queue-controls-response",
        title="Set a Task Queue's Limits",
        description="At most `maxRunning` runs of the task queue running, at most "
        "`maxClaimsPerSecond` claims a second, across every replica; a claim beyond them is "
        "answered 429 with `Retry-After`, and claimWork hands out nothing beyond them. Only "
        "the limits in the body change; `null` lifts one. Not a Taskcluster method.",
        stability="experimental",
        scopes="queue:manage:limits:<taskQueueId>",
    ),
    Endpoint(
        name="listPendingTasks",
        method="GET",
        route="/task-queues/{taskQueueId}/pending",
        input=None,
        output="list-pending-tasks-response",
        title="List Pending Tasks",
        description="One page of the task queue's pending runs with their tasks, the oldest "
        "claimable first (runs delayed by notBefore or a retry delay by when they become "
        "claimable). An unknown queue has none.",
        stability="experimental",
        query=_PAGED,
    ),
    Endpoint(
        name="listClaimedTasks",
        method="GET",
        route="/task-queues/{taskQueueId}/claimed",
        input=None,
        output="list-claimed-tasks-response",
        title="List Claimed Tasks",
        description="One page of the task queue's running runs with their workers and tasks, "
        "the oldest claim first. An unknown queue has none.",
        stability="experimental",
        query=_PAGED,
    ),
    Endpoint(
        name="taskQueueCountsBatch",
        method="POST",
        route="/task-queues/counts",
        input="task-queue-counts-request",
        output="task-queue-counts-list-response",
        title="Count Pending and Running Runs of Many Task Queues",
        description="taskQueueCounts of up to 1,000 distinct task queues in one store query, "
        "in request order; an unknown queue counts zeros.",
        stability="experimental",
    ),
    Endpoint(
        name="listProvisioners",
        method="GET",
        route="/provisioners",
        input=None,
        output="list-provisioners-response",
        title="List Provisioners",
        description="One page of the provisionerIds of the unexpired task queues, by "
        "provisionerId. Use listTaskQueues.",
        stability="deprecated",
        query=_PAGED,
    ),
    Endpoint(
        name="getProvisioner",
        method="GET",
        route="/provisioners/{provisionerId}",
        input=None,
        output="provisioner-response",
        title="Get Provisioner",
        description="The provisioner, derived from its unexpired task queues; 404 without any.",
        stability="deprecated",
    ),
    Endpoint(
        name="listWorkerTypes",
        method="GET",
        route="/provisioners/{provisionerId}/worker-types",
        input=None,
        output="list-worker-types-response",
        title="List Worker Types",
        description="One page of the provisioner's unexpired task queues, as worker types, by "
        "workerType. Use listTaskQueues.",
        stability="deprecated",
        query=_PAGED,
    ),
    Endpoint(
        name="getWorkerType",
        method="GET",
        route="/provisioners/{provisionerId}/worker-types/{workerType}",
        input=None,
        output="worker-type-response",
        title="Get Worker Type",
        description="The task queue `<provisionerId>/<workerType>` as a worker type; 404 when "
        "never seen or expired. Use getTaskQueue.",
        stability="deprecated",
    ),
    Endpoint(
        name="listWorkers",
        method="GET",
        route="/provisioners/{provisionerId}/worker-types/{workerType}/workers",
        input=None,
        output="list-workers-response",
        title="List Workers",
        description="One page of the task queue's workers that are unexpired or quarantined, by "
        "workerGroup and workerId; `quarantined=true|false` keeps only those that are, or are "
        "not, quarantined.",
        stability="deprecated",
        query=(*_PAGED, PARAMETERS["quarantined"]),
    ),
    Endpoint(
        name="getWorker",
        method="GET",
        route="/provisioners/{provisionerId}/worker-types/{workerType}/workers/{workerGroup}/"
        "{workerId}",
        input=None,
        output="worker-response",
        title="Get Worker",
        description="The worker, with its 20 latest claims and its quarantine history; 404 when "
        "never seen, or expired and not quarantined.",
        stability="deprecated",
    ),
    Endpoint(
        name="quarantineWorker",
        method="PUT",
        route="/provisioners/{provisionerId}/worker-types/{workerType}/workers/{workerGroup}/"
        "{workerId}",
        input="quarantine-worker-request",
        output="worker-response",
        title="Quarantine a Worker",
        description="Until `quarantineUntil` (a past time lifts it) the worker claims nothing: "
        "claimWork answers no tasks at the end of its poll and claimTask 409. Every replica "
        "applies it within about a second. 404 for a worker never seen or declared.",
        stability="experimental",
        scopes="queue:quarantine-worker:<taskQueueId>/<workerGroup>/<workerId>",
    ),
    Endpoint(
        name="declareWorker",
        method="PUT",
        route="/provisioners/{provisionerId}/worker-types/{workerType}/{workerGroup}/{workerId}",
        input="update-worker-request",
        output="worker-response",
        title="Declare a Worker",
        description="Record the worker (and its task queue) as seen now, listed until at least "
        "`expires` (a day from now without it); expiry never moves back.",
        stability="experimental",
        scopes={
            "AllOf": [
                {
                    "for": "property",
                    "in": "properties",
                    "each": "queue:declare-worker:<taskQueueId>/<workerGroup>/<workerId>"
                    "#<property>",
                }
            ]
        },
    ),
)


_HOOK = "<hookGroupId>/<hookId>"
_MODIFY_HOOK: Template = {"AllOf": [f"hooks:modify-hook:{_HOOK}", f"assume:hook-id:{_HOOK}"]}
"""createHook's and updateHook's scopes: to change the hook, and to hold what its tasks will
(Taskcluster's role ``hook-id:<hookGroupId>/<hookId>``)."""


def _hook_endpoint(**fields: Any) -> Endpoint:
    return Endpoint(prefix=HOOKS_PREFIX, **fields)


HOOK_ENDPOINTS: tuple[Endpoint, ...] = (
    *(
        dataclasses.replace(endpoint, prefix=HOOKS_PREFIX, variant="Hooks")
        for endpoint in ENDPOINTS
        if endpoint.name in ("ping", "heartbeat", "lbheartbeat", "version", "openapi")
    ),
    _hook_endpoint(
        name="listHookGroups",
        method="GET",
        route="/hooks",
        input=None,
        output="list-hook-groups-response",
        title="List hook groups",
        description="Every hook group with at least one hook.",
        scopes="hooks:list-hooks:",
    ),
    _hook_endpoint(
        name="listHooks",
        method="GET",
        route="/hooks/{hookGroupId}",
        input=None,
        output="list-hooks-response",
        title="List hooks in a given group",
        description="Every hook definition of the group; 404 for a group without hooks.",
        scopes="hooks:list-hooks:<hookGroupId>",
    ),
    _hook_endpoint(
        name="hook",
        method="GET",
        route="/hooks/{hookGroupId}/{hookId}",
        input=None,
        output="hook-definition",
        title="Get hook definition",
        description="The hook's definition.",
        scopes="hooks:get:<hookGroupId>:<hookId>",
    ),
    _hook_endpoint(
        name="getHookStatus",
        method="GET",
        route="/hooks/{hookGroupId}/{hookId}/status",
        input=None,
        output="hook-status",
        title="Get hook status",
        description="The hook's last fire and, with a schedule, its next scheduled date "
        "(deprecated in favour of listLastFires).",
        stability="deprecated",
        scopes=f"hooks:status:{_HOOK}",
    ),
    _hook_endpoint(
        name="createHook",
        method="PUT",
        route="/hooks/{hookGroupId}/{hookId}",
        input="create-hook-request",
        output="hook-definition",
        title="Create a hook",
        description="Create a hook. Its tasks are created with the scopes of the client that "
        "created it (or last updated it). Repeating the call with the same definition returns "
        "it; another definition under the same id is a 409.",
        scopes=_MODIFY_HOOK,
    ),
    _hook_endpoint(
        name="updateHook",
        method="POST",
        route="/hooks/{hookGroupId}/{hookId}",
        input="create-hook-request",
        output="hook-definition",
        title="Update a hook",
        description="Replace every field of the hook but its ids and trigger token (bindings "
        "stay when the body has none); its schedule restarts from now.",
        scopes=_MODIFY_HOOK,
    ),
    _hook_endpoint(
        name="removeHook",
        method="DELETE",
        route="/hooks/{hookGroupId}/{hookId}",
        input=None,
        output=None,
        title="Delete a hook",
        description="Delete the hook and its last fires; `{}` whether it existed or not.",
        scopes=f"hooks:modify-hook:{_HOOK}",
    ),
    _hook_endpoint(
        name="triggerHook",
        method="POST",
        route="/hooks/{hookGroupId}/{hookId}/trigger",
        input="trigger-hook",
        output="trigger-hook-response",
        title="Trigger a hook",
        description="Create the hook's task now, its template rendered with this payload "
        "(which must match the hook's triggerSchema) as `payload`.",
        scopes=f"hooks:trigger-hook:{_HOOK}",
    ),
    _hook_endpoint(
        name="getTriggerToken",
        method="GET",
        route="/hooks/{hookGroupId}/{hookId}/token",
        input=None,
        output="trigger-token-response",
        title="Get a trigger token",
        description="The hook's secret token for triggerHookWithToken.",
        scopes=f"hooks:get-trigger-token:{_HOOK}",
    ),
    _hook_endpoint(
        name="resetTriggerToken",
        method="POST",
        route="/hooks/{hookGroupId}/{hookId}/token",
        input=None,
        output="trigger-token-response",
        title="Reset a trigger token",
        description="A new trigger token; the previous one stops working.",
        scopes=f"hooks:reset-trigger-token:{_HOOK}",
    ),
    _hook_endpoint(
        name="triggerHookWithToken",
        method="POST",
        route="/hooks/{hookGroupId}/{hookId}/trigger/{token}",
        input="trigger-hook",
        output="trigger-hook-response",
        title="Trigger a hook with a token",
        description="triggerHook for whoever holds the hook's trigger token (a webhook): no "
        "credentials; a wrong token is a 401.",
    ),
    _hook_endpoint(
        name="listLastFires",
        method="GET",
        route="/hooks/{hookGroupId}/{hookId}/last-fires",
        input=None,
        output="list-last-fires-response",
        title="Get information about recent hook fires",
        description="The hook's fires, the newest first, each with its task's state now; 404 "
        "when it never fired.",
        query=_PAGED,
        scopes=f"hooks:list-last-fires:{_HOOK}",
    ),
)
"""The hooks service, under :data:`HOOKS_PREFIX`: Taskcluster's 14 methods of the ``Hooks``
client (its four service-status ones shared with the queue's handlers), and its own OpenAPI
document."""


def url_parameters(match_info: Mapping[str, str]) -> dict[str, str]:
    """The scope parameters the path supplies: its (schema-valid) parameters, ``runId`` as the
    number it is (``007`` is run 7), and ``taskQueueId`` for either task-queue form."""
    params = dict(match_info)
    if "runId" in params:
        params["runId"] = str(int(params["runId"]))
    if "provisionerId" in params and "workerType" in params:
        params["taskQueueId"] = f"{params['provisionerId']}/{params['workerType']}"
    return params


def task_queue_of(match_info: Mapping[str, str]) -> TaskQueue:
    """The task queue of the match info of either task-queue route variant (one
    ``taskQueueId`` segment, or ``provisionerId`` and ``workerType``)."""
    if "taskQueueId" in match_info:
        return TaskQueue.parse(match_info["taskQueueId"])
    return TaskQueue(match_info["provisionerId"], match_info["workerType"])
