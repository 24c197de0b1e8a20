"""The auth service's clients (Taskcluster's ``listClients`` to ``resetAccessToken``): routes and
handlers over :class:`~coordinator.service.auth.AuthService`.

Only the clients the API manages are listed and changed; the clients file's are static (a
400 when named). An accessToken appears in createClient's and resetAccessToken's answers and
nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from coordinator.api import keyset
from coordinator.api.auth import Auth, RequestAuth
from coordinator.api.endpoints import (
    AUTH_PREFIX,
    NAME_PAGED,
    PARAMETERS,
    Endpoint,
    Method,
    Parameter,
)
from coordinator.api.pipeline import ApiServices, Body, Handlers, Routes
from coordinator.domain.clients import StoredClient
from coordinator.domain.records import from_iso, to_iso
from coordinator.domain.scopes import Template, granting
from coordinator.service.auth import AuthService


def caller_id(auth: RequestAuth) -> str:
    """Who the audit history says made a change."""
    return auth.client_id if isinstance(auth, Auth) else "anonymous"


def client_body(client: StoredClient, auth: AuthService) -> Body:
    """A client as Taskcluster's get-client-response shows it (never its accessToken)."""
    return {
        "clientId": client.client_id,
        "description": client.description,
        "expires": to_iso(client.expires),
        "created": to_iso(client.created),
        "lastModified": to_iso(client.last_modified),
        "lastDateUsed": to_iso(client.last_date_used),
        "lastRotated": to_iso(client.last_rotated),
        "deleteOnExpiration": client.delete_on_expiration,
        "scopes": list(client.scopes),
        "expandedScopes": list(auth.directory.expand(client.scopes)),
        "disabled": client.disabled,
    }


def _client_endpoint(
    name: str,
    method: Method,
    route: str,
    title: str,
    description: str,
    *,
    scopes: Template,
    input: str | None = None,
    output: str | None = "get-client-response",
    query: tuple[Parameter, ...] = (),
) -> Endpoint:
    """A clients method: most answer a client and take no body."""
    return Endpoint(
        prefix=AUTH_PREFIX,
        name=name,
        method=method,
        route=route,
        title=title,
        description=description,
        input=input,
        output=output,
        query=query,
        scopes=scopes,
    )


CLIENT_ENDPOINTS: tuple[Endpoint, ...] = (
    _client_endpoint(
        "listClients",
        "GET",
        "/clients/",
        "List Clients",
        "The clients the auth API manages (not the clients file's), by clientId; with "
        "`prefix`, those whose clientId starts with it.",
        output="list-clients-response",
        query=(PARAMETERS["prefix"], *NAME_PAGED),
        scopes="auth:list-clients",
    ),
    _client_endpoint(
        "client",
        "GET",
        "/clients/{clientId}",
        "Get Client",
        "One client, with its scopes expanded through the roles; never its accessToken.",
        scopes="auth:get-client:<clientId>",
    ),
    _client_endpoint(
        "createClient",
        "PUT",
        "/clients/{clientId}",
        "Create Client",
        "Create a client and answer its `accessToken`, which no other call shows again. The "
        "caller must hold every scope it gives the client. A 409 when the client exists; a 400 "
        "for a clientId of the clients file or starting with `static/`, one longer than 256 "
        "characters, or a scope ending in `**`.",
        input="create-client-request",
        output="create-client-response",
        scopes=granting("auth:create-client:<clientId>", "scopes"),
    ),
    _client_endpoint(
        "updateClient",
        "POST",
        "/clients/{clientId}",
        "Update Client",
        "Replace the client's description, expiry and deleteOnExpiration, and its scopes when "
        "given; the caller must hold the scopes added (not those it already had).",
        input="create-client-request",
        scopes=granting("auth:update-client:<clientId>", "scopesAdded"),
    ),
    _client_endpoint(
        "enableClient",
        "POST",
        "/clients/{clientId}/enable",
        "Enable Client",
        "Let a disabled client authenticate again.",
        scopes="auth:enable-client:<clientId>",
    ),
    _client_endpoint(
        "disableClient",
        "POST",
        "/clients/{clientId}/disable",
        "Disable Client",
        "Refuse the client's requests (401) until it is enabled; temporary credentials it "
        "issued stop working too.",
        scopes="auth:disable-client:<clientId>",
    ),
    _client_endpoint(
        "deleteClient",
        "DELETE",
        "/clients/{clientId}",
        "Delete Client",
        "Delete the client; `{}` whether it existed or not.",
        output=None,
        scopes="auth:delete-client:<clientId>",
    ),
    _client_endpoint(
        "resetAccessToken",
        "POST",
        "/clients/{clientId}/reset",
        "Reset `accessToken`",
        "A new accessToken for the client, answered once; the old one (and temporary "
        "credentials issued with it) stops working on every replica within a second.",
        output="create-client-response",
        scopes="auth:reset-access-token:<clientId>",
    ),
)


class ClientHandlers(Handlers):
    """The clients methods."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.service = services.auth

    async def listClients(self, request: web.Request, body: None) -> Body:
        after = keyset.after(request, (keyset.Name,))
        page = await self.service.list_clients(
            prefix=request.query.get("prefix"),
            limit=keyset.limit(request),
            after=None if after is None else str(after[0]),
        )
        return keyset.page_body(request, "clients", page, lambda c: client_body(c, self.service))

    async def client(self, request: web.Request, body: None) -> Body:
        return client_body(await self.service.get_client(_client_id(request)), self.service)

    async def createClient(self, request: web.Request, body: Body) -> Body:
        scopes: list[str] = body.get("scopes", [])
        auth = await self.authorize(request, scopes=tuple(scopes))
        client, token = await self.service.create_client(
            _client_id(request),
            description=body["description"],
            expires=from_iso(body["expires"]),
            scopes=scopes,
            delete_on_expiration=body.get("deleteOnExpiration", False),
            by=caller_id(auth),
        )
        return {**client_body(client, self.service), "accessToken": token}

    async def updateClient(self, request: web.Request, body: Body) -> Body:
        async def authorize(added: Sequence[str]) -> None:
            await self.authorize(request, scopesAdded=tuple(added))

        client = await self.service.update_client(
            _client_id(request),
            description=body["description"],
            expires=from_iso(body["expires"]),
            scopes=body.get("scopes"),
            delete_on_expiration=body.get("deleteOnExpiration", False),
            by=caller_id(await self.auth.caller(request)),
            authorize=authorize,
        )
        return client_body(client, self.service)

    async def enableClient(self, request: web.Request, body: None) -> Body:
        return await self._set_disabled(request, False)

    async def disableClient(self, request: web.Request, body: None) -> Body:
        return await self._set_disabled(request, True)

    async def _set_disabled(self, request: web.Request, disabled: bool) -> Body:
        by = caller_id(await self.auth.caller(request))
        client = await self.service.set_disabled(_client_id(request), disabled, by=by)
        return client_body(client, self.service)

    async def deleteClient(self, request: web.Request, body: None) -> Body:
        by = caller_id(await self.auth.caller(request))
        await self.service.delete_client(_client_id(request), by=by)
        return {}

    async def resetAccessToken(self, request: web.Request, body: None) -> Body:
        by = caller_id(await self.auth.caller(request))
        client, token = await self.service.reset_access_token(_client_id(request), by=by)
        return {**client_body(client, self.service), "accessToken": token}


def _client_id(request: web.Request) -> str:
    return request.match_info["clientId"]


ROUTES = Routes(CLIENT_ENDPOINTS, ClientHandlers)
