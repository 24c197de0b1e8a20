"""The index service's endpoints (Taskcluster's ``Index`` client, at ``/api/index/v1``,
docs/index-service.md): routes and handlers over :class:`~coordinator.service.index.
IndexService`.

Listings of a namespace have two routes each, as upstream's ``/namespaces{/:namespace}``: the
top level (``/namespaces/``, which the official clients send for an empty namespace, and
``/namespaces``) and a namespace's (``/namespaces/{namespace}``), each in a GET form and the
deprecated POST form. findArtifactFromTask answers what getLatestArtifact of the entry's task
would (:meth:`~coordinator.api.artifacts.ArtifactHandlers.latest`), the caller's
``queue:get-artifact:<name>`` scopes checked the same way, with a text body as upstream's
redirect has: the official Python client then hands taskgraph the response to read
``Location`` from.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from coordinator.api import keyset
from coordinator.api.artifacts import GET_ARTIFACT, ArtifactHandlers
from coordinator.api.endpoints import INDEX_PREFIX, NAME_PAGED, Endpoint
from coordinator.api.pipeline import ApiServices, Handlers, Routes
from coordinator.domain.index import IndexedTask, Namespace
from coordinator.domain.records import from_iso, to_iso

Body = dict[str, Any]

_FIND = "index:find-task:<indexPath>"
"""findTasksAtIndex's scope of each path; findTask's is the same of its path (named
``namespace`` as insertTask's and deleteTask's, which share its route)."""
_LIST_NAMESPACES = "index:list-namespaces:<namespace>"
_LIST_TASKS = "index:list-tasks:<namespace>"
_PAGING = (
    " A page holds at most 1,000 (`limit`); a `continuationToken` in the answer gets the next."
)


def _listing(
    name: str, *, method: str, route: str, scopes: str, title: str, description: str, **more: Any
) -> tuple[Endpoint, Endpoint]:
    """A namespace listing's two routes: the top level's (``<route>/``) and a namespace's."""
    common: dict[str, Any] = {
        "prefix": INDEX_PREFIX,
        "name": name,
        "method": method,
        "title": title,
        "query": NAME_PAGED,
        "scopes": scopes,
        **more,
    }
    return (
        Endpoint(
            route=f"{route}/",
            variant="TopLevel",
            description=f"{description} The top level's (the empty namespace's).{_PAGING}",
            **common,
        ),
        Endpoint(route=f"{route}/{{namespace}}", description=description + _PAGING, **common),
    )


INDEX_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        prefix=INDEX_PREFIX,
        name="findTask",
        method="GET",
        route="/task/{namespace}",
        input=None,
        output="indexed-task-response",
        title="Find Indexed Task",
        description="The task at the index path: the highest-ranked (of equal ranks, the latest) "
        "indexed there. 404 if there is none, or it has expired.",
        scopes="index:find-task:<namespace>",
    ),
    Endpoint(
        prefix=INDEX_PREFIX,
        name="findTasksAtIndex",
        method="POST",
        route="/tasks/indexes",
        input="list-tasks-at-index",
        output="list-indexed-tasks-response",
        title="Find tasks at indexes",
        description="The tasks at the index paths of `indexes` (each path once, in their order; "
        "a path without an unexpired task adds nothing). The caller needs "
        "`index:find-task:<path>` for every path; a continuationToken continues the same "
        "`indexes` only." + _PAGING,
        query=NAME_PAGED,
        scopes={"AllOf": [{"for": "indexPath", "in": "indexPaths", "each": _FIND}]},
        stability="experimental",
        batch=True,
    ),
    *_listing(
        "listNamespaces",
        method="GET",
        route="/namespaces",
        scopes=_LIST_NAMESPACES,
        input=None,
        output="list-namespaces-response",
        title="List Namespaces",
        description="The unexpired namespaces immediately under the namespace, by name.",
    ),
    *_listing(
        "listNamespacesPost",
        method="POST",
        route="/namespaces",
        scopes=_LIST_NAMESPACES,
        input="list-namespaces-request",
        output="list-namespaces-response",
        title="List Namespaces (POST)",
        description="listNamespaces in Taskcluster's deprecated POST form: paging is read from "
        "the query string, not the body.",
        stability="deprecated",
    ),
    *_listing(
        "listTasks",
        method="GET",
        route="/tasks",
        scopes=_LIST_TASKS,
        input=None,
        output="list-indexed-tasks-response",
        title="List Tasks",
        description="The unexpired tasks indexed immediately in the namespace, by name.",
    ),
    *_listing(
        "listTasksPost",
        method="POST",
        route="/tasks",
        scopes=_LIST_TASKS,
        input=None,
        output="list-indexed-tasks-response",
        title="List Tasks (POST)",
        description="listTasks in Taskcluster's deprecated POST form.",
        stability="deprecated",
    ),
    Endpoint(
        prefix=INDEX_PREFIX,
        name="insertTask",
        method="PUT",
        route="/task/{namespace}",
        input="insert-task-request",
        output="indexed-task-response",
        title="Insert Task into Index",
        description="Index the task at the path: it replaces the task there if its rank is at "
        "least that one's, or that one has expired; otherwise the answer is the task that "
        "stays (still 200). A 400 for a path longer than 255 characters or not dot-separated "
        "words of `[a-zA-Z0-9_!~*'()%-]`, a rank that is not an integer, or data over 32 KiB.",
        scopes="index:insert-task:<namespace>",
    ),
    Endpoint(
        prefix=INDEX_PREFIX,
        name="deleteTask",
        method="DELETE",
        route="/task/{namespace}",
        input=None,
        output=None,
        title="Remove Task from Index",
        description="Remove the task at the path, if any (`{}` either way). Its namespaces "
        "stay; an entry it had outranked does not come back.",
        scopes="index:delete-task:<namespace>",
    ),
    Endpoint(
        prefix=INDEX_PREFIX,
        name="findArtifactFromTask",
        method="GET",
        route="/task/{indexPath}/artifacts/{name}",
        input=None,
        output=None,
        title="Get Artifact From Indexed Task",
        description="getLatestArtifact of the task at the index path: a redirect (303, "
        "`Location`, a text body) to the artifact of its latest run (404 if the path has no "
        "unexpired task). The caller needs "
        "`queue:get-artifact:<name>` for every name links lead through (anonymous callers "
        "hold `public/*`).",
        scopes=GET_ARTIFACT,
        success=303,
        statuses=("410", "424"),
    ),
)
"""The index methods."""


def indexed_task_body(found: IndexedTask) -> Body:
    return {
        "namespace": found.path,
        "taskId": found.task_id,
        "rank": found.rank,
        "data": dict(found.data),
        "expires": to_iso(found.expires),
    }


def namespace_body(found: Namespace) -> Body:
    return {"namespace": found.path, "name": found.name, "expires": to_iso(found.expires)}


class IndexHandlers(Handlers):
    """The index methods."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.index = services.index
        self._artifacts = ArtifactHandlers(services)

    async def findTask(self, request: web.Request, body: None) -> Body:
        return indexed_task_body(await self.index.find(request.match_info["namespace"]))

    async def findTasksAtIndex(self, request: web.Request, body: Body) -> Body:
        paths = list(body.get("indexes", []))
        await self.authorize(request, indexPaths=tuple(paths))
        page = await self.index.find_many(
            paths, after=self._after(request), limit=keyset.limit(request)
        )
        return keyset.page_body(request, "tasks", page, indexed_task_body)

    async def listNamespaces(self, request: web.Request, body: None) -> Body:
        namespace = await self._namespace(request)
        page = await self.index.namespaces(
            namespace, after=self._after(request), limit=keyset.limit(request)
        )
        return keyset.page_body(request, "namespaces", page, namespace_body)

    async def listNamespacesPost(self, request: web.Request, body: Body) -> Body:
        return await self.listNamespaces(request, None)

    async def listTasks(self, request: web.Request, body: None) -> Body:
        namespace = await self._namespace(request)
        page = await self.index.tasks(
            namespace, after=self._after(request), limit=keyset.limit(request)
        )
        return keyset.page_body(request, "tasks", page, indexed_task_body)

    async def listTasksPost(self, request: web.Request, body: None) -> Body:
        return await self.listTasks(request, None)

    async def insertTask(self, request: web.Request, body: Body) -> Body:
        stored = await self.index.insert(
            request.match_info["namespace"],
            task_id=body["taskId"],
            rank=body["rank"],
            data=body["data"],
            expires=from_iso(body["expires"]),
        )
        return indexed_task_body(stored)

    async def deleteTask(self, request: web.Request, body: None) -> Body:
        await self.index.delete(request.match_info["namespace"])
        return {}

    async def findArtifactFromTask(self, request: web.Request, body: None) -> web.StreamResponse:
        name = request.match_info["name"]
        await self.authorize(request, names=(name,))  # before the index is read
        found = await self.index.find(request.match_info["indexPath"])
        artifact = await self._artifacts.latest(request, found.task_id, name)
        return self._artifacts.redirect(artifact, plain=True)

    async def _namespace(self, request: web.Request) -> str:
        """The listing's namespace, its scope checked (the top level's has no path
        parameter to check it before the handler)."""
        namespace = request.match_info.get("namespace", "")
        if "namespace" not in request.match_info:
            await self.authorize(request, namespace=namespace)
        return namespace

    @staticmethod
    def _after(request: web.Request) -> str | None:
        after = keyset.after(request, (keyset.Name,))
        return None if after is None else str(after[0])


ROUTES = Routes(INDEX_ENDPOINTS, IndexHandlers)
