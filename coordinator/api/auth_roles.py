"""The auth service's roles (Taskcluster's ``listRoles`` to ``deleteRole``): routes and
handlers over :class:`~coordinator.service.auth.AuthService`.

A role's ``expandedScopes`` are what holding ``assume:<roleId>`` grants. A change that would
make an expansion cyclic or larger than the bound is a 400, and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from coordinator.api import keyset
from coordinator.api.auth_clients import caller_id
from coordinator.api.endpoints import AUTH_PREFIX, NAME_PAGED, Endpoint
from coordinator.api.pipeline import ApiServices, Body, Handlers, Routes
from coordinator.domain.clients import Role
from coordinator.domain.listings import Key, keyed_page
from coordinator.domain.records import to_iso
from coordinator.domain.scopes import granting
from coordinator.service.auth import AuthService


def role_body(role: Role, auth: AuthService) -> Body:
    return {
        "roleId": role.role_id,
        "scopes": list(role.scopes),
        "expandedScopes": list(auth.directory.expand([f"assume:{role.role_id}"])),
        "description": role.description,
        "created": to_iso(role.created),
        "lastModified": to_iso(role.last_modified),
    }


ROLE_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        prefix=AUTH_PREFIX,
        name="listRoles",
        method="GET",
        route="/roles/",
        input=None,
        output="list-roles-response",
        title="List Roles (no pagination)",
        description="Every role with its expansion, in one answer.",
        scopes="auth:list-roles",
    ),
    Endpoint(
        prefix=AUTH_PREFIX,
        name="listRoles2",
        method="GET",
        route="/roles2/",
        input=None,
        output="list-roles2-response",
        title="List Roles",
        description="The roles with their expansions, a page at a time, by roleId.",
        query=NAME_PAGED,
        scopes="auth:list-roles",
    ),
    Endpoint(
        prefix=AUTH_PREFIX,
        name="listRoleIds",
        method="GET",
        route="/roleids/",
        input=None,
        output="list-role-ids-response",
        title="List Role IDs",
        description="The roleIds, a page at a time, in order.",
        query=NAME_PAGED,
        scopes="auth:list-roles",
    ),
    Endpoint(
        prefix=AUTH_PREFIX,
        name="role",
        method="GET",
        route="/roles/{roleId}",
        input=None,
        output="get-role-response",
        title="Get Role",
        description="One role and what it expands to.",
        scopes="auth:get-role:<roleId>",
    ),
    Endpoint(
        prefix=AUTH_PREFIX,
        name="createRole",
        method="PUT",
        route="/roles/{roleId}",
        input="create-role-request",
        output="get-role-response",
        title="Create Role",
        description="Create a role; the caller must hold every scope it grants. Repeating the "
        "call with the same scopes and description returns it; another role of that id is a "
        "409. A 400 for a roleId longer than 256 characters, a scope ending in `**`, or a role "
        "that would make an expansion cyclic or exceed 10,000 scopes.",
        scopes=granting("auth:create-role:<roleId>", "scopes"),
    ),
    Endpoint(
        prefix=AUTH_PREFIX,
        name="updateRole",
        method="POST",
        route="/roles/{roleId}",
        input="create-role-request",
        output="get-role-response",
        title="Update Role",
        description="Replace the role's scopes and description; the caller must hold the scopes "
        "added that the role did not already grant. A 400 as createRole's.",
        scopes=granting("auth:update-role:<roleId>", "scopesAdded"),
    ),
    Endpoint(
        prefix=AUTH_PREFIX,
        name="deleteRole",
        method="DELETE",
        route="/roles/{roleId}",
        input=None,
        output=None,
        title="Delete Role",
        description="Delete the role; `{}` whether it existed or not.",
        scopes="auth:delete-role:<roleId>",
    ),
)


class RoleHandlers(Handlers):
    """The roles methods."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.service = services.auth

    async def listRoles(self, request: web.Request, body: None) -> list[Body]:
        roles = await self.service.roles()
        return [role_body(role, self.service) for role in roles.roles]

    async def listRoles2(self, request: web.Request, body: None) -> Body:
        return await self._page(request, "roles")

    async def listRoleIds(self, request: web.Request, body: None) -> Body:
        return await self._page(request, "roleIds")

    async def _page(self, request: web.Request, name: str) -> Body:
        after = keyset.after(request, (keyset.Name,))
        roles = [
            role
            for role in (await self.service.roles()).roles
            if after is None or role.role_id > str(after[0])
        ]
        page = keyed_page(roles, keyset.limit(request), _role_key)
        if name == "roleIds":
            return keyset.page_body(request, name, page, lambda role: role.role_id)
        return keyset.page_body(request, name, page, lambda role: role_body(role, self.service))

    async def role(self, request: web.Request, body: None) -> Body:
        return role_body(await self.service.get_role(_role_id(request)), self.service)

    async def createRole(self, request: web.Request, body: Body) -> Body:
        auth = await self.authorize(request, scopes=tuple(body["scopes"]))
        role = await self.service.create_role(
            _role_id(request),
            scopes=body["scopes"],
            description=body["description"],
            by=caller_id(auth),
        )
        return role_body(role, self.service)

    async def updateRole(self, request: web.Request, body: Body) -> Body:
        async def authorize(added: Sequence[str]) -> None:
            await self.authorize(request, scopesAdded=tuple(added))

        role = await self.service.update_role(
            _role_id(request),
            scopes=body["scopes"],
            description=body["description"],
            by=caller_id(await self.auth.caller(request)),
            authorize=authorize,
        )
        return role_body(role, self.service)

    async def deleteRole(self, request: web.Request, body: None) -> Body:
        by = caller_id(await self.auth.caller(request))
        await self.service.delete_role(_role_id(request), by=by)
        return {}


def _role_key(role: Role) -> Key:
    return (role.role_id,)


def _role_id(request: web.Request) -> str:
    return request.match_info["roleId"]


ROUTES = Routes(ROLE_ENDPOINTS, RoleHandlers)
