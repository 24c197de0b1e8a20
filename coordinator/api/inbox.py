"""The task inbox's management API (docs/operations.md#the-task-inbox): its routes and
handlers, listing the rows the ingester refused and deleting them, over
:class:`~coordinator.service.inbox.InboxService`.

A refused row stays until an operator deletes it (after fixing the producer or the client's
scopes, and inserting the row again if the task is still wanted). Pending rows are the
ingester's: they are neither listed nor deletable here.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from coordinator.api import keyset
from coordinator.api.endpoints import PAGED, Endpoint
from coordinator.api.errors import ResourceNotFound
from coordinator.api.pipeline import ApiServices, Body, Handlers, Routes
from coordinator.domain.listings import Key, keyed_page
from coordinator.domain.records import to_iso
from coordinator.service.inbox import InboxRow

MANAGE = "queue:manage:inbox"

INBOX_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        name="listRejectedInboxRows",
        method="GET",
        route="/inbox/rejected",
        input=None,
        output="list-rejected-inbox-rows-response",
        title="List Rejected Inbox Rows",
        description="The task inbox's rows the coordinator refused to make tasks, by id, each "
        "with the reason; up to `limit` (at most 1,000) per page. Always empty on SQLite, which "
        f"has no inbox. Needs `{MANAGE}`.",
        stability="experimental",
        query=PAGED,
        scopes=MANAGE,
    ),
    Endpoint(
        name="deleteRejectedInboxRow",
        method="DELETE",
        route="/inbox/rejected/{rowId}",
        input=None,
        output=None,
        title="Delete Rejected Inbox Row",
        description="Delete one refused inbox row; answers `{}`. An id that is not a refused "
        f"row (unknown, or still pending) is a 404. Needs `{MANAGE}`.",
        stability="experimental",
        scopes=MANAGE,
    ),
)
"""The task inbox's management API."""


def _item(row: InboxRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "taskId": row.task_id,
        "clientId": row.client_id,
        "reason": row.reason,
        "created": to_iso(row.created),
    }


def _key(row: InboxRow) -> Key:
    return (row.id,)


class InboxHandlers(Handlers):
    """The task inbox's management methods."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.inbox = services.inbox

    async def listRejectedInboxRows(self, request: web.Request, body: None) -> Body:
        after = keyset.after(request, (int,))
        limit = keyset.limit(request)
        rows = await self.inbox.rejected(
            limit=limit + 1, after=None if after is None else int(after[0])
        )
        page = keyed_page(rows, limit, _key)
        return keyset.page_body(request, "rows", page, _item)

    async def deleteRejectedInboxRow(self, request: web.Request, body: None) -> Body:
        row_id = int(request.match_info["rowId"])
        if not await self.inbox.delete_rejected(row_id):
            raise ResourceNotFound(f"no rejected inbox row {row_id}")
        return {}


ROUTES = Routes(INBOX_ENDPOINTS, InboxHandlers)
