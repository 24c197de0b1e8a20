"""The auth service's scope and authentication methods: expandScopes, currentScopes,
testAuthenticate(Get), and authenticateHawk, which another service calls to learn who signed
a request it received (Taskcluster's services all validate their requests this way).
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from coordinator.api.auth import Anonymous, Auth, Rejected, RequestAuth, require
from coordinator.api.endpoints import AUTH_PREFIX, Endpoint
from coordinator.api.errors import AuthenticationFailed
from coordinator.api.pipeline import ApiServices, Body, Handlers, Routes
from coordinator.domain.records import to_iso
from coordinator.domain.scopes import normalize_scope_set
from hawk_signing.protocol import HawkHeaderError, parse_header

ANONYMOUS_VALIDITY_MS = 15 * 60 * 1000
"""How long authenticateHawk says an anonymous answer holds (Taskcluster's)."""

TESTER_GET_SCOPES = ("test:*", "auth:create-client:test:*")
"""testAuthenticateGet's ``tester`` scopes (Taskcluster's)."""

SCOPE_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        prefix=AUTH_PREFIX,
        name="expandScopes",
        method="POST",
        route="/scopes/expand",
        input="scopeset",
        output="scopeset",
        title="Expand Scopes",
        description="The scopes given, with every scope their `assume:` scopes grant through "
        "the roles, normalized.",
        scopes="auth:expand-scopes",
    ),
    Endpoint(
        prefix=AUTH_PREFIX,
        name="currentScopes",
        method="GET",
        route="/scopes/current",
        input=None,
        output="scopeset",
        title="Get Current Scopes",
        description="What the credentials of this request hold, expanded.",
        scopes="auth:current-scopes",
    ),
    Endpoint(
        prefix=AUTH_PREFIX,
        name="testAuthenticate",
        method="POST",
        route="/test-authenticate",
        input="test-authenticate-request",
        output="test-authenticate-response",
        title="Test Authentication",
        description="Authenticate the request as if the only client were `tester` (accessToken "
        "`no-secret`) holding `clientScopes`, and require `requiredScopes`: how a client "
        "library tests its signing.",
    ),
    Endpoint(
        prefix=AUTH_PREFIX,
        name="testAuthenticateGet",
        method="GET",
        route="/test-authenticate-get/",
        input=None,
        output="test-authenticate-response",
        title="Test Authentication (GET)",
        description="As testAuthenticate, for a GET: `tester` holds "
        "`['test:*', 'auth:create-client:test:*']` and `test:authenticate-get` is required.",
    ),
    Endpoint(
        prefix=AUTH_PREFIX,
        name="authenticateHawk",
        method="POST",
        route="/authenticate-hawk",
        input="authenticate-hawk-request",
        output="authenticate-hawk-response",
        title="Authenticate Hawk Request",
        description="Who signed a request another service received: `auth-success` with the "
        "clientId, its expanded scopes and until when they hold; `auth-failed` with the "
        "reason; `no-auth` (the anonymous scopes) without credentials. The payload hash is "
        "answered as `hash` for that service to check against the body.",
    ),
)


class ScopeHandlers(Handlers):
    """expandScopes, currentScopes, testAuthenticate(Get) and authenticateHawk."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.directory = services.auth.directory

    async def expandScopes(self, request: web.Request, body: Body) -> Body:
        return {"scopes": list(self.directory.expand(body["scopes"]))}

    async def currentScopes(self, request: web.Request, body: None) -> Body:
        auth = await self.auth.caller(request)
        scopes = auth.scopes if isinstance(auth, Auth | Anonymous) else ()
        return {"scopes": list(normalize_scope_set(scopes))}

    async def testAuthenticate(self, request: web.Request, body: Body) -> Body:
        return await self._test(request, body["clientScopes"], body["requiredScopes"])

    async def testAuthenticateGet(self, request: web.Request, body: None) -> Body:
        return await self._test(request, TESTER_GET_SCOPES, ["test:authenticate-get"])

    async def _test(
        self, request: web.Request, client_scopes: Sequence[str], required: Sequence[str]
    ) -> Body:
        auth = await self.auth.as_tester(request, client_scopes)
        if isinstance(auth, Anonymous):
            raise AuthenticationFailed("testAuthenticate needs credentials: the tester client's")
        require(auth, {"AllOf": list(required)})
        assert isinstance(auth, Auth)
        return {"clientId": auth.client_id, "scopes": list(auth.scopes)}

    async def authenticateHawk(self, request: web.Request, body: Body) -> Body:
        port = body["port"]
        scheme = "https" if port == 443 else "http"
        auth = self.auth.verify_signature(
            method=body["method"].upper(),
            resource=body["resource"],
            origin=f"{scheme}://{body['host']}:{port}",
            authorization=body.get("authorization"),
        )
        return _hawk_answer(auth, body.get("authorization"), now_ms=self.auth.now_ms())


def _hawk_answer(auth: RequestAuth, authorization: str | None, *, now_ms: int) -> Body:
    if isinstance(auth, Rejected):
        return {"status": "auth-failed", "message": auth.message}
    if isinstance(auth, Anonymous):
        return {
            "status": "no-auth",
            "scheme": "none",
            "scopes": list(auth.scopes),
            "expires": to_iso(now_ms + ANONYMOUS_VALIDITY_MS),
        }
    answer: Body = {
        "status": "auth-success",
        "scheme": "hawk",
        "scopes": list(auth.scopes),
        "clientId": auth.client_id,
        # A client without an expiry (the clients file's) is good for as long as anonymous.
        "expires": to_iso(auth.expires or now_ms + ANONYMOUS_VALIDITY_MS),
    }
    payload_hash = _payload_hash(authorization)
    if payload_hash:
        answer["hash"] = payload_hash
    return answer


def _payload_hash(authorization: str | None) -> str | None:
    if authorization is None:
        return None
    try:
        return parse_header(authorization).get("hash")
    except HawkHeaderError:  # verified already, so it parses
        return None


ROUTES = Routes(SCOPE_ENDPOINTS, ScopeHandlers)
