"""The request pipeline every endpoint of every service shares, and its scope plumbing.

A service's module declares its routes beside the class that handles them (a :class:`Routes`:
its :class:`~coordinator.api.endpoints.Endpoint` table and a :class:`Handlers` subclass with
one method per endpoint name), as upstream's ``artifacts.js`` declares its own. :func:`bind`
checks at start-up that every endpoint has its method; :func:`route_handler` does the work
around each call: the JSON and schema checks of every parameter, request and response body
against ``schemas/``, and the endpoint's declared scopes
(:attr:`~coordinator.api.endpoints.Endpoint.scopes`), which it checks itself when the path
supplies their parameters and otherwise leaves for the handler to complete with what only it
knows (:meth:`Handlers.authorize`), making sure it did.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from coordinator.api import validation
from coordinator.api.auth import Authorizer, RequestAuth
from coordinator.api.endpoints import PARAMETERS, Endpoint, Parameter, url_parameters
from coordinator.api.errors import InputValidationError
from coordinator.api.http import ENDPOINT, PAYLOAD, json_response, read_json
from coordinator.config import Deployment
from coordinator.domain.records import TaskRecord
from coordinator.domain.scopes import Expression, expand
from coordinator.service.artifacts import ArtifactService
from coordinator.service.auth import AuthService
from coordinator.service.claims import ClaimPolicy, CreatePolicy
from coordinator.service.dispatch import WorkDispatch
from coordinator.service.hooks import HookService
from coordinator.service.inbox import InboxService
from coordinator.service.index import IndexService
from coordinator.service.management import TaskManagement
from coordinator.service.purge_cache import PurgeCacheService
from coordinator.service.queue_controls import QueueControlService
from coordinator.service.secrets import SecretService
from coordinator.service.tasks import TaskService
from coordinator.service.workers import WorkerService
from otlp_tracing import Tracer

if TYPE_CHECKING:
    from coordinator.api.artifacts import ArtifactUrls

Body = dict[str, Any]
Method = Callable[[web.Request, Any], Awaitable[Body | web.StreamResponse]]

OMITTED = "(OMITTED)"
"""What an error body shows for each value of a :attr:`~Endpoint.confidential` body."""

BEWIT = "bewit"
"""The query parameter of a signed URL (``buildSignedUrl``), which every GET accepts."""


def declared(endpoint: Endpoint, params: Mapping[str, object], *, run: bool = False) -> Expression:
    """The expression ``endpoint``'s :attr:`~Endpoint.scopes` (``run``: its
    :attr:`~Endpoint.run_scopes`) declare for ``params``; the same object for the same
    parameters while they are cached (never mutate it).
    """
    try:
        return _declared(endpoint, run, frozenset(params.items()))
    except TypeError:  # a list or an object among them (createTasks' tasks): not cached
        return expand(declared_template(endpoint, run), params)


@functools.lru_cache(maxsize=1024)
def _declared(endpoint: Endpoint, run: bool, params: frozenset[tuple[str, Any]]) -> Expression:
    return expand(declared_template(endpoint, run), dict(params))


def declared_template(endpoint: Endpoint, run: bool) -> Any:
    template = endpoint.run_scopes if run else endpoint.scopes
    if template is None:
        raise ValueError(f"{endpoint.operation_id} declares no {'run_' if run else ''}scopes")
    return template


@dataclass(kw_only=True, slots=True)
class ScopeCheck:
    """The declared scopes of one request: its endpoint, the parameters its path supplies, and
    whether the scopes were checked (:meth:`Handlers.authorize`)."""

    endpoint: Endpoint
    url: dict[str, str]
    checked: bool = False


SCOPE_CHECK = web.RequestKey[ScopeCheck]("scope_check")


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiServices:
    """What the handlers of every service are built from: the service layer's objects of one
    coordinator process, and the API's own authorizer and artifact URL signer."""

    tasks: TaskService
    claims: ClaimPolicy
    creates: CreatePolicy
    dispatch: WorkDispatch
    workers: WorkerService
    controls: QueueControlService
    management: TaskManagement
    artifacts: ArtifactService
    artifact_urls: ArtifactUrls
    hooks: HookService
    auth: AuthService
    index: IndexService
    secrets: SecretService
    purge_cache: PurgeCacheService
    inbox: InboxService
    authorizer: Authorizer
    deployment: Deployment
    tracer: Tracer | None = None
    """The spans of tasks' ways (:mod:`coordinator.api.tracing`); ``None``: tracing off."""


class Handlers:
    """The handlers of one part of a service: a subclass has one method per endpoint name of
    its :class:`Routes`, and takes from :class:`ApiServices` what it uses."""

    def __init__(self, services: ApiServices) -> None:
        self.auth = services.authorizer

    async def authorize(self, request: web.Request, **params: object) -> RequestAuth:
        """Check the scopes the request's endpoint declares, filled in with the path's
        parameters and ``params`` (what only the handler knows): the one place a request's
        scopes are checked. Returns the caller.

        :raises AuthenticationFailed: 401, the credentials are missing or invalid.
        :raises InsufficientScopes: 403, naming what the caller lacks.
        """
        check = request[SCOPE_CHECK]
        if self.auth.unrestricted:
            # Every scope is held: no expression to build (createTasks' would hold every
            # task's routes and scopes).
            auth = await self.auth.caller(request)
        else:
            expression = declared(check.endpoint, {**check.url, **params})
            auth = await self.auth.require(request, expression)
        check.checked = True
        return auth


@dataclass(frozen=True, slots=True)
class Routes:
    """A part of a service: its endpoints, and the class whose methods of the same names
    handle them."""

    endpoints: tuple[Endpoint, ...]
    handlers: type[Handlers]


HANDLERS = web.AppKey("handlers", dict[type[Handlers], Handlers])
"""The app's instance of each :class:`Handlers` subclass its routes name, made at start-up."""


def bind(parts: Iterable[Routes]) -> None:
    """Check that every endpoint of ``parts`` has its handler method, at start-up rather than
    at its first request.

    :raises TypeError: naming the endpoints without one.
    """
    missing = [
        f"{part.handlers.__name__}.{endpoint.name}"
        for part in parts
        for endpoint in part.endpoints
        if endpoint.name != "openapi" and not callable(getattr(part.handlers, endpoint.name, None))
    ]
    if missing:
        raise TypeError(f"endpoints without a handler method: {', '.join(missing)}")


def task_id_of(request: web.Request, name: str = "taskId") -> str:
    return request.match_info[name]


def run_id_of(request: web.Request) -> int:
    return int(request.match_info["runId"])


def status_body(record: TaskRecord) -> Body:
    return {"status": record.status()}


def _check_query(
    endpoint: Endpoint, accepted: Mapping[str, Parameter], request: web.Request
) -> None:
    """:raises InputValidationError: a query parameter the endpoint does not take (of
    ``accepted``, its :attr:`~Endpoint.query_parameters`; a GET also takes a bewit), a value
    that does not match its schema, or a repeatable one given more often than it may be."""
    query = request.query
    unknown = sorted(set(query) - set(accepted) - ({BEWIT} if endpoint.method == "GET" else set()))
    if unknown:
        # A silently ignored filter (listTaskGroup?state=failed) looks as if it worked.
        raise InputValidationError(
            f"unknown query parameters {', '.join(unknown)}: {endpoint.name} accepts "
            f"{', '.join(accepted) or 'none'}"
        )
    missing = [name for name, p in accepted.items() if p.required and name not in query]
    if missing:
        raise InputValidationError(
            f"missing query parameters {', '.join(missing)}: {endpoint.name} needs the signed "
            "URL whole, as it was given"
        )
    try:
        validation.validate_params(query, accepted)
    except InputValidationError:
        _refuse(accepted, query)
        raise
    for parameter in {accepted[key] for key in query if key in accepted}:
        given = len(query.getall(parameter.name))
        if parameter.repeat > 1 and given > parameter.repeat:
            raise InputValidationError(
                f"query parameter {parameter.name} is given {given} times: at most "
                f"{parameter.repeat}"
            )


def _refuse(parameters: Mapping[str, Parameter], values: Mapping[str, str]) -> None:
    """After ``values`` failed their schemas: raise the :attr:`~Parameter.refusal` of the
    first that failed and has one (with how it failed), if any does.

    :raises InputValidationError: that refusal."""
    for name, value in values.items():
        refusal = parameters[name].refusal if name in parameters else None
        mismatch = None if refusal is None else _mismatch(parameters, name, value)
        if refusal is not None and mismatch is not None:
            raise InputValidationError(f"{refusal.format(value=value)} ({mismatch})") from None


def _mismatch(parameters: Mapping[str, Parameter], name: str, value: str) -> str | None:
    """How the value of the parameter ``name`` fails its schema, or ``None``."""
    try:
        validation.validate_params({name: value}, parameters)
    except InputValidationError as error:
        return str(error)
    return None


async def _read_body(endpoint: Endpoint, request: web.Request, max_body: int) -> Any:
    """The request's body, valid for the endpoint's input schema.

    :raises InputValidationError: it is missing (an empty object is a body, none is not),
        or it does not match.
    """
    assert endpoint.input is not None
    body = await read_json(request, max_bytes=max_body)
    if endpoint.confidential and body is not None:
        request[PAYLOAD] = OMITTED if not isinstance(body, dict) else dict.fromkeys(body, OMITTED)
    if body is None:
        try:
            validation.validate(endpoint.input, {})
        except InputValidationError as error:
            raise InputValidationError(f"request body is missing; {error}") from None
        raise InputValidationError(
            f"request body is missing: {endpoint.name} takes a JSON object matching the schema "
            f"{endpoint.input} (send {{}} for none of its properties)"
        )
    validation.validate(endpoint.input, body, quote=not endpoint.confidential)
    return body


def route_handler(
    endpoint: Endpoint, handlers: type[Handlers], *, max_body: int
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The aiohttp handler of an endpoint: check the parameters, parse and validate the body,
    check the declared scopes (or have the handler complete them), call the method of the same
    name on the app's instance of ``handlers``, validate the response.

    :param max_body: the largest request body (bytes) the endpoint accepts.
    """
    accepted = endpoint.query_parameters
    declares_scopes = endpoint.scopes is not None or endpoint.run_scopes is not None
    scopes_from_url = endpoint.scopes_from_url
    check_output = not endpoint.built_output

    async def handle(request: web.Request) -> web.StreamResponse:
        request[ENDPOINT] = endpoint.name
        try:
            validation.validate_params(request.match_info)
        except InputValidationError:
            _refuse(PARAMETERS, request.match_info)
            raise
        _check_query(endpoint, accepted, request)
        body: Any = None
        if endpoint.input is not None:
            body = await _read_body(endpoint, request, max_body)
        instance = request.app[HANDLERS][handlers]
        check: ScopeCheck | None = None
        if declares_scopes:
            check = request[SCOPE_CHECK] = ScopeCheck(
                endpoint=endpoint, url=url_parameters(request.match_info)
            )
            if scopes_from_url:
                await instance.authorize(request)
        method: Method = getattr(instance, endpoint.name)
        result = await method(request, body)
        if check is not None and endpoint.scopes is not None and not check.checked:
            raise RuntimeError(f"{endpoint.name} declares scopes its handler never checked")
        if isinstance(result, web.StreamResponse):  # streamed, and so already sent
            return result
        if endpoint.output is not None and (check_output or validation.CHECK_BUILT_OUTPUT):
            validation.validate_response(endpoint.output, result)
        return json_response(result)

    return handle
