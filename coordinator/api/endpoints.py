"""How the REST API's routes are declared: :class:`Endpoint` (a route, its schemas, scopes and
documentation), the path and query :data:`PARAMETERS`, and the pieces several services'
tables share (paging, the task filters, the worker's scopes).

Each service's module declares its own table beside its handlers (:mod:`coordinator.api.tasks`,
:mod:`~coordinator.api.claims`, :mod:`~coordinator.api.artifacts`, ...), and
:mod:`coordinator.api.services` gathers them per service; handlers are bound by
:attr:`Endpoint.name`, which is the Taskcluster method name, and the OpenAPI documents
(:mod:`coordinator.api.openapi`) are built from the same tables. Routes are aiohttp patterns
relative to the service's prefix (:data:`API_PREFIX` for the queue).

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
:data:`~coordinator.domain.scopes.Template` whose ``<name>`` placeholders are filled from the path
(:func:`url_parameters`, with ``taskQueueId`` for the two-segment form too) and from what only
the handler knows (the stored task's schedulerId, the body's workerId). The request pipeline
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

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from coordinator.domain.scopes import Template, template_parameters
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import Stability

API_PREFIX = "/api/queue/v1"
HOOKS_PREFIX = "/api/hooks/v1"
"""Where Taskcluster's hooks service answers on the same root URL (:mod:`coordinator.api.hooks`)."""
AUTH_PREFIX = "/api/auth/v1"
"""Where Taskcluster's auth service answers (:mod:`coordinator.api.auth_clients` and the other
``auth_*`` parts)."""
SECRETS_PREFIX = "/api/secrets/v1"
"""Where Taskcluster's secrets service answers (:mod:`coordinator.api.secrets`)."""
PURGE_CACHE_PREFIX = "/api/purge-cache/v1"
"""Where Taskcluster's purge-cache service answers (:mod:`coordinator.api.purge_cache`)."""

INDEX_PREFIX = "/api/index/v1"
"""Where Taskcluster's index service answers (:mod:`coordinator.api.index`)."""

MAX_REQUEST_LINE = 8190
"""Longest request line (method, path and query string, percent-encoded, in bytes) the server
reads, aiohttp's default; a longer one is answered 400."""

Method = Literal["GET", "POST", "PUT", "DELETE"]
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
    :param may_be_empty: a :attr:`splat` that also matches nothing, so that an empty value
        reaches the schema check (a 400 naming it) instead of being no route (a 404).
    :param required: a query parameter the endpoint cannot do without (path parameters
        always are).
    """

    name: str
    schema: str
    description: str
    repeat: int = 1
    refusal: str | None = None
    splat: bool = False
    may_be_empty: bool = False
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
        is ``output``, or whose body is text without one) or 204 (no body).
    :param statuses: what the endpoint answers besides the success and the errors every
        endpoint may answer (:data:`coordinator.api.openapi.ERROR_STATUSES`), e.g. ``"410"``.
    :param uploads: the request body is an artifact's bytes, streamed, of any Content-Type.
    :param downloads: the success is an artifact's bytes, with its Content-Type.
    :param prefix: the service the route belongs to: the queue's :data:`API_PREFIX`, or the
        hooks service's :data:`HOOKS_PREFIX`.
    :param confidential: the request body holds a secret (the secrets service's ``set``): an
        error body shows none of its values (upstream's ``cleanPayload``), and a body the
        schema refuses is described without quoting it.
    :param built_output: the response body is made only by the builders of a record's
        answers (its ``status()``, a claim, a run's error), whose shapes the unit tests check
        against ``output``: it is not checked again on every request, on the hot paths of
        work (createTasks, claimWork, claimRuns, resolveRuns), unless
        :data:`coordinator.api.validation.CHECK_BUILT_OUTPUT` says to.
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
    confidential: bool = False
    built_output: bool = False

    @property
    def operation_id(self) -> str:
        return self.name + self.variant

    @property
    def server_route(self) -> str:
        """:attr:`route` as aiohttp matches it: a :attr:`~Parameter.splat` parameter takes
        the rest of the path."""
        return _PLACEHOLDER.sub(
            lambda match: _server_placeholder(PARAMETERS[match[1]], match[0]), self.route
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
        """Whether the path alone supplies every parameter of :attr:`scopes`, so the request
        pipeline checks them before the handler runs."""
        names = set(self.path_parameters)
        if {"provisionerId", "workerType"} <= names:
            names.add("taskQueueId")
        return self.scopes is not None and template_parameters(self.scopes) <= names


_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_NOT_AN_INDEX_PATH = (
    "{value!r} is not an index path: dot-separated non-empty words of letters, digits and "
    "_!~*'()%-, at most 255 characters in all"
)


def _server_placeholder(parameter: Parameter, placeholder: str) -> str:
    if not parameter.splat:
        return placeholder
    return f"{{{parameter.name}:{'.*' if parameter.may_be_empty else '.+'}}}"


PARAMETERS: Mapping[str, Parameter] = {
    p.name: p
    for p in (
        Parameter(name="taskId", schema="slugid", description="The task's slugid."),
        Parameter(name="taskGroupId", schema="slugid", description="The task group's slugid."),
        Parameter(name="runId", schema="run-id-parameter", description="The run's index."),
        Parameter(name="rowId", schema="inbox-row-id", description="The task inbox row's id."),
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
        Parameter(name="clientId", schema="client-id", description="The client."),
        Parameter(
            name="prefix", schema="client-id-prefix", description="Only clientIds starting so."
        ),
        Parameter(name="roleId", schema="role-id", description="The role (percent-encoded)."),
        Parameter(
            name="indexPath",
            schema="index-path",
            description="An index path: dot-separated words of `[a-zA-Z0-9_!~*'()%-]`, at most "
            "255 characters.",
            refusal=_NOT_AN_INDEX_PATH,
        ),
        Parameter(
            name="namespace",
            schema="index-path",
            description="A namespace (an index path).",
            refusal=_NOT_AN_INDEX_PATH,
        ),
        Parameter(name="entityType", schema="audit-entity-type", description="The entity's kind."),
        Parameter(name="entityId", schema="audit-entity-id", description="The entity's id."),
        Parameter(
            name="continuationToken",
            schema="continuation-token-parameter",
            description="The `continuationToken` of the previous page. A token this API did not "
            "issue, or one of another listing or of other parameters (only `limit` may change), "
            "is a 400.",
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
            "`exception`, or `unresolved` (the first four).",
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
            name="secretName",
            schema="secret-name",
            description="The secret's name: 1 to 1,024 printable ASCII characters, `/` included "
            "(sent raw or as `%2F`).",
            splat=True,
            may_be_empty=True,
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
"""Every path and query parameter any endpoint uses, by name: the request pipeline checks each
value against its schema."""

PAGED = (PARAMETERS["limit"], PARAMETERS["continuationToken"])
BOUNDED_PAGED = (
    Parameter(
        name="limit",
        schema="bounded-limit-parameter",
        description="Maximum page size: 1 to 1,000 (a larger one is a 400).",
    ),
    PARAMETERS["continuationToken"],
)
"""The management listings' paging: they refuse a limit over 1,000 instead of capping it."""
NAME_PAGED = (
    PARAMETERS["limit"],
    Parameter(
        name="continuationToken",
        schema="name-continuation-token-parameter",
        description="The `continuationToken` of the previous page.",
        refusal=PARAMETERS["continuationToken"].refusal,
    ),
)
"""The paging of listings by name (artifacts, clients, roles): their tokens hold a name of up
to 1,024 characters."""
SIGNED = (PARAMETERS["expires"], PARAMETERS["sig"])

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

MANAGEMENT_FILTERS = (
    "Filters, combined with AND: "
    + ", ".join(f"`{name}`" for name in TASK_FILTERS)
    + " (`state` and `tag` repeatable). Not a Taskcluster method."
)
STREAMING = (
    " With `Accept: application/x-ndjson` the answer is every match, one JSON object per "
    "line, streamed (no `continuationToken`)."
)


WORKER_ID = "queue:worker-id:<workerGroup>/<workerId>"


def task_action(action: str) -> Template:
    """Taskcluster's scopes to act on a stored task: its own scope, or its project's."""
    return {
        "AnyOf": [
            f"queue:{action}:<schedulerId>/<taskGroupId>/<taskId>",
            f"queue:{action}-in-project:<projectId>",
        ]
    }


def as_worker(scope: str) -> Template:
    """``scope`` together with the worker-id scope of the worker the body names."""
    return {"AllOf": [scope, WORKER_ID]}


def run_or_holder(action: str) -> Template:
    """reclaimRuns' and resolveRuns' rule per run: the run's own scope (what its temporary
    credentials carry), or the worker-id scope of the worker holding it (``held``)."""
    return {"AnyOf": [f"{action}:<taskId>/<runId>", {"if": "held", "then": WORKER_ID}]}


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
