"""The secrets service (Taskcluster's secrets v1, docs/secrets.md): routes and handlers over
:class:`~coordinator.service.secrets.SecretService`.

A secret's value appears in ``get``'s answer and nowhere else: ``set`` is a
:attr:`~coordinator.api.endpoints.Endpoint.confidential` endpoint, so its error bodies show
none of its body's values and a body the schema refuses is described without quoting it.
"""

from __future__ import annotations

from aiohttp import web

from coordinator.api import keyset
from coordinator.api.auth_clients import caller_id
from coordinator.api.endpoints import NAME_PAGED, SECRETS_PREFIX, Endpoint
from coordinator.api.pipeline import ApiServices, Body, Handlers, Routes
from coordinator.domain.records import from_iso, to_iso

SECRET_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        prefix=SECRETS_PREFIX,
        name="set",
        method="PUT",
        route="/secret/{secretName}",
        input="set-secret-request",
        output=None,
        title="Set Secret",
        description="Set the secret associated with some key; if it exists, replace its value "
        "and expiry. Answers `{}`. A name that is empty, longer than 1,024 characters or not "
        "printable ASCII is a 400.",
        scopes="secrets:set:<secretName>",
        confidential=True,
    ),
    Endpoint(
        prefix=SECRETS_PREFIX,
        name="remove",
        method="DELETE",
        route="/secret/{secretName}",
        input=None,
        output=None,
        title="Delete Secret",
        description="Delete the secret associated with some key; `{}` whether it existed or not.",
        scopes="secrets:set:<secretName>",
    ),
    Endpoint(
        prefix=SECRETS_PREFIX,
        name="get",
        method="GET",
        route="/secret/{secretName}",
        input=None,
        output="get-secret-response",
        title="Read Secret",
        description="Read the secret associated with some key. A secret that does not exist "
        "or has expired is a 404 (`Secret not found`); a caller without the scope is refused "
        "(403) whether it exists or not.",
        scopes="secrets:get:<secretName>",
    ),
    Endpoint(
        prefix=SECRETS_PREFIX,
        name="list",
        method="GET",
        route="/secrets",
        input=None,
        output="list-secrets-response",
        title="List Secrets",
        description="List the names of the secrets that have not expired, in code-point order, "
        "up to `limit` (at most 1,000) per page; call again with the `continuationToken` until "
        "an answer has none.",
        query=NAME_PAGED,
        scopes="secrets:list-secrets",
    ),
)


class SecretHandlers(Handlers):
    """The secrets methods."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.service = services.secrets

    async def set(self, request: web.Request, body: Body) -> Body:
        by = caller_id(await self.auth.caller(request))
        await self.service.set_secret(
            _name(request), body["secret"], expires=from_iso(body["expires"]), by=by
        )
        return {}

    async def remove(self, request: web.Request, body: None) -> Body:
        by = caller_id(await self.auth.caller(request))
        await self.service.remove_secret(_name(request), by=by)
        return {}

    async def get(self, request: web.Request, body: None) -> Body:
        value, expires = await self.service.get_secret(_name(request))
        return {"secret": value, "expires": to_iso(expires)}

    async def list(self, request: web.Request, body: None) -> Body:
        after = keyset.after(request, (keyset.Name,))
        page = await self.service.list_secrets(
            limit=keyset.limit(request), after=None if after is None else str(after[0])
        )
        return keyset.page_body(request, "secrets", page, str)


def _name(request: web.Request) -> str:
    return request.match_info["secretName"]


ROUTES = Routes(SECRET_ENDPOINTS, SecretHandlers)
