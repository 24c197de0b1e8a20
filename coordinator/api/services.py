"""The services the coordinator serves on its root URL, each under its own prefix with its own
OpenAPI document: the queue (its parts: tasks, a worker's calls on runs, artifacts, the
batches of runs, task queues and workers, the management API), the hooks service, the auth
service, the index service, the secrets service and the purge-cache service.

A new service is one :class:`Service` here, built from the :class:`~coordinator.api.pipeline.
Routes` its own module declares beside its handlers; the app serves every endpoint of
:data:`SERVICES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.api import (
    artifacts,
    auth_audit,
    auth_clients,
    auth_roles,
    auth_scopes,
    claims,
    hooks,
    inbox,
    index,
    management,
    purge_cache,
    run_batches,
    secrets,
    status,
    task_queues,
    tasks,
)
from coordinator.api.endpoints import (
    API_PREFIX,
    AUTH_PREFIX,
    HOOKS_PREFIX,
    INDEX_PREFIX,
    MAX_REQUEST_LINE,
    PURGE_CACHE_PREFIX,
    SECRETS_PREFIX,
    Endpoint,
)
from coordinator.api.pipeline import Routes


@dataclass(frozen=True, kw_only=True)
class Service:
    """One API served on the coordinator's root URL, described by a document of its own.

    :param title: the document's ``info.title``.
    :param prefix: where the API answers, below the public URL; the document's server.
    :param parts: its routes, each part with the class that handles them.
    :param about: the opening of ``info.description``; the protocol's rules follow it.
    :param errors: :data:`~coordinator.api.openapi.ERROR_STATUSES` the service says
        otherwise.
    """

    title: str
    prefix: str
    parts: tuple[Routes, ...]
    about: str
    errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """Its endpoint table: every part's, in order."""
        return tuple(endpoint for part in self.parts for endpoint in part.endpoints)


PROTOCOL = (
    "Authentication is Taskcluster's Hawk scheme; an operation's `x-scopes` is the scope "
    "expression its caller must satisfy. The request line (method, path and query string, "
    f"percent-encoded) may be at most {MAX_REQUEST_LINE} bytes, which every query these "
    "parameters allow fits in; a longer one is a 400."
)

UNAVAILABLE = "ServiceUnavailable: the store does not answer; retry after `Retry-After` seconds."
"""The 503 every service beside the queue answers when its store is down."""

QUEUE = Service(
    title="Queue",
    prefix=API_PREFIX,
    parts=(
        status.ROUTES,
        tasks.ROUTES,
        claims.ROUTES,
        artifacts.ROUTES,
        run_batches.ROUTES,
        task_queues.ROUTES,
        management.ROUTES,
        inbox.ROUTES,
    ),
    about="A Taskcluster-queue-v1-compatible coordinator: tasks and runs are kept in its store, "
    "and workers claim pending runs from it through claimWork (store dispatch) or find them "
    "through hints in Azure Storage Queues (Azure dispatch). "
    + PROTOCOL
    + " A GET may carry a Hawk bewit instead of an Authorization header (`?bewit=`, what the "
    "official clients' `buildSignedUrl` appends); a request with neither holds the anonymous "
    "scopes (by default `queue:get-artifact:public/*`).",
)
HOOKS = Service(
    title="Hooks",
    prefix=HOOKS_PREFIX,
    parts=(status.status_routes(HOOKS_PREFIX, "Hooks"), hooks.ROUTES),
    about="Taskcluster's hooks service v1, served by the coordinator beside its queue: a hook "
    "is a task template the coordinator creates tasks from on a cron schedule, or when "
    "triggered. " + PROTOCOL,
    errors={
        "404": "ResourceNotFound: no such hook (or hook group, or last fire).",
        "409": "RequestConflict: another hook definition already has this id.",
        "503": UNAVAILABLE,
    },
)
AUTH = Service(
    title="Auth Service",
    prefix=AUTH_PREFIX,
    parts=(
        status.status_routes(AUTH_PREFIX, "Auth"),
        auth_clients.ROUTES,
        auth_roles.ROUTES,
        auth_scopes.ROUTES,
        auth_audit.ROUTES,
    ),
    about="Taskcluster's auth service v1, served by the coordinator beside its queue: the "
    "clients and roles it manages (besides the clients file's, which it never shows or "
    "changes), their audit history, scope expansion, and authenticateHawk for other services "
    "to check the requests they receive. Taskcluster's cloud-credential methods (AWS, GCP, "
    "Azure, Sentry, websocktunnel, GitHub) are not served. " + PROTOCOL,
    errors={
        "404": "ResourceNotFound: no such client or role.",
        "409": "RequestConflict: the client exists, or another role has this id.",
        "503": UNAVAILABLE,
    },
)
INDEX = Service(
    title="Index Service",
    prefix=INDEX_PREFIX,
    parts=(status.status_routes(INDEX_PREFIX, "Index"), index.ROUTES),
    about="Taskcluster's index service v1, served by the coordinator beside its queue: tasks "
    "found by names (index paths) instead of taskIds. A task that completes is indexed at "
    "`<namespace>` for each of its routes `index.<namespace>`, with its "
    "`extra.index.{rank, expires, data}`, in the transaction that stores its completion. "
    "Slashes (`/`) are not allowed in index paths. " + PROTOCOL,
    errors={
        "404": "ResourceNotFound: no (unexpired) task at the index path.",
        "503": UNAVAILABLE,
    },
)
SECRETS = Service(
    title="Secrets Service",
    prefix=SECRETS_PREFIX,
    parts=(status.status_routes(SECRETS_PREFIX, "Secrets"), secrets.ROUTES),
    about="Taskcluster's secrets service v1, served by the coordinator beside its queue: a "
    "key/value store for small bits of secret data, each value a JSON object encrypted at rest "
    "and readable only with the scope that names it, until it expires. " + PROTOCOL,
    errors={
        "404": "ResourceNotFound: no such secret, or it has expired (`Secret not found`).",
        "503": UNAVAILABLE,
    },
)
PURGE_CACHE = Service(
    title="Purge Cache Service",
    prefix=PURGE_CACHE_PREFIX,
    parts=(status.status_routes(PURGE_CACHE_PREFIX, "PurgeCache"), purge_cache.ROUTES),
    about="Taskcluster's purge-cache service v1, served by the coordinator beside its queue: "
    "requests to purge the caches of a name on a worker pool's workers, timestamped; workers "
    "ask before starting a task and purge the caches made before. " + PROTOCOL,
    errors={
        "503": UNAVAILABLE,
    },
)
SERVICES = (QUEUE, HOOKS, AUTH, INDEX, SECRETS, PURGE_CACHE)
"""Every service, served under its prefix with its document at ``<prefix>/openapi.json``."""

PARTS = tuple(part for service in SERVICES for part in service.parts)
"""Every service's parts; a part may serve several services (the status endpoints)."""

ENDPOINTS = QUEUE.endpoints
"""The queue's endpoint table."""
HOOK_ENDPOINTS = HOOKS.endpoints
"""The hooks service's endpoint table, its status endpoints included."""
