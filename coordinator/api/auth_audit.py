"""The auth service's audit history: what was done to a client, a role or a secret (whose
entries the secrets service writes here) (getEntityHistory), and what a client did
(listAuditHistory), oldest first, kept after the entity is deleted.
"""

from __future__ import annotations

from aiohttp import web

from coordinator.api import keyset
from coordinator.api.endpoints import AUTH_PREFIX, PAGED, Endpoint
from coordinator.api.pipeline import ApiServices, Body, Handlers, Routes
from coordinator.domain.clients import AuditEntry
from coordinator.domain.records import to_iso

AUDIT_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        prefix=AUTH_PREFIX,
        name="getEntityHistory",
        method="GET",
        route="/audit/{entityType}/{entityId}",
        input=None,
        output="get-entity-history-response",
        title="Get Entity History",
        description="Who changed this client, role or secret, how and when, oldest first "
        "(Taskcluster's `hook` and `worker-pool` entities have no history here: an empty list).",
        query=PAGED,
        scopes="auth:audit-history:<entityType>",
    ),
    Endpoint(
        prefix=AUTH_PREFIX,
        name="listAuditHistory",
        method="GET",
        route="/clients/{clientId}/audit",
        input=None,
        output="get-entity-history-response",
        title="List Audit History",
        description="The changes to clients and roles this client made, oldest first.",
        query=PAGED,
        scopes="auth:client-audit-history:<clientId>",
    ),
)


def _entry_body(entry: AuditEntry) -> Body:
    return {
        "clientId": entry.client_id,
        "actionType": entry.action_type,
        "created": to_iso(entry.created),
        "entityId": entry.entity_id,
        "entityType": entry.entity_type,
    }


class AuditHandlers(Handlers):
    """The audit history methods."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.service = services.auth

    async def getEntityHistory(self, request: web.Request, body: None) -> Body:
        page = await self.service.entity_history(
            request.match_info["entityType"],
            request.match_info["entityId"],
            limit=keyset.limit(request),
            after=_after(request),
        )
        return keyset.page_body(request, "auditHistory", page, _entry_body)

    async def listAuditHistory(self, request: web.Request, body: None) -> Body:
        page = await self.service.client_history(
            request.match_info["clientId"], limit=keyset.limit(request), after=_after(request)
        )
        return keyset.page_body(request, "auditHistory", page, _entry_body)


def _after(request: web.Request) -> tuple[int, int] | None:
    after = keyset.after(request, (int, int))
    return None if after is None else (int(after[0]), int(after[1]))


ROUTES = Routes(AUDIT_ENDPOINTS, AuditHandlers)
