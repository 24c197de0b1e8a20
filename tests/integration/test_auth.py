"""Hawk authentication, scopes and temporary credentials, end to end over real HTTP.

A small aiohttp app (not the coordinator's routes) guards a few Taskcluster-named endpoints
with :class:`Authorizer`; the official ``taskcluster`` client signs the requests, so these
tests pin wire compatibility, not just our own round trip. Server time is moved with the
authorizer's injected clock; the client always signs with the real time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import stat
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import mohawk
import pytest
import taskcluster
import taskcluster.aio
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.test_utils import TestServer
from aiohttp.typedefs import Handler

from coordinator.api.auth import (
    Auth,
    Authenticator,
    Authorizer,
    CredentialsCache,
    NonceCache,
    Rejected,
    RequestAuth,
    Verified,
)
from coordinator.api.credentials import certificate_signature, temporary_credentials
from coordinator.api.errors import ApiError, AuthenticationFailed
from coordinator.domain.records import Run, TaskRecord
from coordinator.domain.scopes import (
    Expression,
    create_task_expression,
    create_task_requirement,
    normalize_scope_set,
    render,
    satisfies,
    unsatisfied,
)
from coordinator.service.client_directory import ClientDirectory, KnownClient
from coordinator.service.clients_file import (
    DEFAULT_ANONYMOUS_SCOPES,
    DEV_ANONYMOUS_SCOPES,
    ISSUER_CLIENT_ID,
    ROOT_CLIENT_ID,
    ClientRegistry,
    ClientsFileError,
    ensure_root_client,
)
from hawk_signing import Credentials, authorization

TASK_ID = "fN1SbArXTPSVFNUvaOlinQ"
TASK_SCOPES = ["secrets:get:project/build"]
ROOT = {"clientId": "root", "accessToken": "root-token-" + "r" * 33}
WORKER = {"clientId": "project/worker", "accessToken": "worker-token-" + "w" * 31}
ISSUER = {"clientId": ISSUER_CLIENT_ID, "accessToken": "issuer-token-" + "i" * 31}
WORKER_SCOPES = [
    f"queue:resolve-task:{TASK_ID}/0",
    "queue:claim-task:prov/wt",
    "queue:worker-id:wg/*",
]
DEFINITION = {"provisionerId": "prov", "workerType": "wt", "priority": "high", "routes": ["r1"]}


def now_ms() -> int:
    return int(time.time() * 1000)


def write_clients(path: Path, clients: list[dict[str, Any]], issuer: str) -> None:
    """Replace the clients file atomically, as operators are told to."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"issuer": issuer, "clients": clients}))
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


def corrupt(path: Path) -> None:
    """An edit saved half-way."""
    path.write_text('{"clients": [')


@pytest.fixture
def clients_file(tmp_path: Path) -> Path:
    path = tmp_path / "clients.json"
    write_clients(
        path,
        [
            {**ROOT, "scopes": ["*"]},
            {**WORKER, "scopes": WORKER_SCOPES},
            {**ISSUER, "scopes": ["*"]},
        ],
        issuer=ISSUER_CLIENT_ID,
    )
    return path


def describe(auth: RequestAuth) -> dict[str, Any]:
    if isinstance(auth, Auth):
        return {"clientId": auth.client_id, "scopes": list(auth.scopes)}
    if isinstance(auth, Rejected):
        return {"rejected": auth.message}
    return {"anonymous": True}


def build_app(authorizer: Authorizer) -> web.Application:
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as error:
            return web.json_response(
                {"code": error.code, "message": str(error)}, status=error.status
            )

    async def ping(request: web.Request) -> web.Response:
        caller = await authorizer.caller(request)
        return web.json_response({"alive": True, "uptime": 0, "caller": describe(caller)})

    async def create_task(request: web.Request) -> web.Response:
        body = await request.json()
        caller = await authorizer.require(
            request,
            create_task_requirement(
                priority=body.get("priority", "lowest"),
                provisioner_id=body["provisionerId"],
                worker_type=body["workerType"],
                scheduler_id=body.get("schedulerId", "-"),
                project_id=body.get("projectId", "none"),
                routes=body.get("routes", []),
                scopes=body.get("scopes", []),
            ),
        )
        return web.json_response({"status": describe(caller)})

    async def claim_task(request: web.Request) -> web.Response:
        body = await request.json()
        task_id, run_id = request.match_info["taskId"], int(request.match_info["runId"])
        await authorizer.require(
            request,
            {
                "AllOf": [
                    "queue:claim-task:prov/wt",
                    f"queue:worker-id:{body['workerGroup']}/{body['workerId']}",
                ]
            },
        )
        started = now_ms()
        run = Run(
            run_id=run_id,
            state="running",
            reason_created="scheduled",
            scheduled=started,
            visible_at=started,
            worker_group=body["workerGroup"],
            worker_id=body["workerId"],
            started=started,
            taken_until=started + 1_200_000,
        )
        record = TaskRecord(
            task_id=task_id,
            definition={"scopes": TASK_SCOPES},
            provisioner_id="prov",
            worker_type="wt",
            scheduler_id="-",
            task_group_id=task_id,
            priority="lowest",
            retries_left=5,
            deadline=started + 3_600_000,
            expires=started + 7_200_000,
            runs=(run,),
        )
        return web.json_response({"credentials": authorizer.run_credentials(record, run)})

    async def report_completed(request: web.Request) -> web.Response:
        task_id, run_id = request.match_info["taskId"], request.match_info["runId"]
        caller = await authorizer.require(request, f"queue:resolve-task:{task_id}/{run_id}")
        return web.json_response({"status": describe(caller)})

    app = web.Application(middlewares=[errors])
    prefix = "/api/queue/v1"
    app.router.add_get(f"{prefix}/ping", ping)
    app.router.add_put(f"{prefix}/task/{{taskId}}", create_task)
    app.router.add_post(f"{prefix}/task/{{taskId}}/runs/{{runId}}/claim", claim_task)
    app.router.add_post(f"{prefix}/task/{{taskId}}/runs/{{runId}}/completed", report_completed)
    return app


def authorizer_for(path: Path, *, public_url: str | None = None, skew: float = 0.0) -> Authorizer:
    """An authorizer whose clock runs ``skew`` seconds ahead of the real one."""

    def clock() -> float:
        return time.time() + skew

    return Authorizer(clients=ClientRegistry(path), public_url=public_url, clock=clock)


@asynccontextmanager
async def serve(authorizer: Authorizer) -> AsyncIterator[str]:
    """Run the test app on 127.0.0.1 and yield its root URL."""
    server = TestServer(build_app(authorizer), host="127.0.0.1")
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


def queue(root_url: str, credentials: dict[str, str] | None = None, **options: Any) -> Any:
    config: dict[str, Any] = {"rootUrl": root_url, "maxRetries": 0, **options}
    if credentials is not None:
        # A copy: the client rewrites its credentials in place (to bytes).
        config["credentials"] = dict(credentials)
    return taskcluster.aio.Queue(config)


def hawk_header(
    *,
    credentials: dict[str, str],
    method: str,
    url: str,
    body: bytes,
    content_type: str,
) -> str:
    """An Authorization header made as the taskcluster client makes it (same ext, same
    mohawk call), for requests the client itself cannot be made to send."""
    ext = taskcluster.Queue({"rootUrl": url, "credentials": dict(credentials)}).makeHawkExt()
    sender = mohawk.Sender(
        {"id": credentials["clientId"], "key": credentials["accessToken"], "algorithm": "sha256"},
        url,
        method,
        content=body,
        content_type=content_type,
        ext=ext,
    )
    return str(sender.request_header)


# --- scopes (pure) -------------------------------------------------------------------------


def test_scope_wildcards_and_expressions() -> None:
    assert satisfies(["queue:*"], "queue:create-task:high:p/w")
    assert satisfies(["queue:create-task:high:p/w"], "queue:create-task:high:p/w")
    assert not satisfies(["queue:create-task:high:p/w"], "queue:create-task:high:p/w2")
    assert not satisfies(["queue:cre*te"], "queue:create")  # only a trailing * is a wildcard
    assert satisfies(["queue:route:a*"], "queue:route:a*")
    assert not satisfies(["queue:route:a"], "queue:route:a*")
    assert satisfies([], {"AllOf": []})
    assert not satisfies(["*"], {"AnyOf": []})
    assert satisfies(["a", "b"], {"AllOf": ["a", {"AnyOf": ["x", "b"]}]})
    assert not satisfies(["a"], {"AllOf": ["a", {"AnyOf": ["x", "b"]}]})
    with pytest.raises(ValueError):
        satisfies(["a"], {"OneOf": ["a"]})


def test_unsatisfied_names_only_what_is_missing() -> None:
    expression: Expression = {"AllOf": ["a", "b", {"AnyOf": ["c", "d"]}]}
    assert unsatisfied(["a", "c"], expression) == "b"
    assert unsatisfied(["a"], expression) == {"AllOf": ["b", {"AnyOf": ["c", "d"]}]}
    assert unsatisfied(["*"], expression) is None
    assert render("a") == "a"
    assert json.loads(render(expression)) == expression


def test_create_task_priority_ladder() -> None:
    assert create_task_expression("high", "p", "w") == {
        "AnyOf": [
            "queue:create-task:highest:p/w",
            "queue:create-task:very-high:p/w",
            "queue:create-task:high:p/w",
        ]
    }
    lowest = create_task_expression("normal", "p", "w")
    assert satisfies(["queue:create-task:highest:p/w"], lowest)
    assert not satisfies(["queue:create-task:lowest:p/w"], create_task_expression("low", "p", "w"))
    # Current Taskcluster no longer accepts the priority-less legacy scope.
    assert not satisfies(["queue:create-task:p/w"], lowest)
    with pytest.raises(ValueError):
        create_task_expression("urgent", "p", "w")


# --- Hawk ------------------------------------------------------------------------------------


async def test_official_client_signatures_are_accepted(clients_file: Path) -> None:
    async with serve(authorizer_for(clients_file)) as root_url:
        created = await queue(root_url, ROOT).createTask(TASK_ID, DEFINITION)
        assert created["status"] == {"clientId": "root", "scopes": ["*"]}
        completed = await queue(root_url, WORKER).reportCompleted(TASK_ID, "0")
        assert completed["status"]["clientId"] == WORKER["clientId"]
        assert (await queue(root_url).ping())["caller"] == {"anonymous": True}


async def test_wrong_key_or_unknown_client_is_401(clients_file: Path) -> None:
    async with serve(authorizer_for(clients_file)) as root_url:
        wrong_key = {**ROOT, "accessToken": "not-the-token"}
        with pytest.raises(taskcluster.exceptions.TaskclusterAuthFailure) as failure:
            await queue(root_url, wrong_key).createTask(TASK_ID, DEFINITION)
        assert failure.value.status_code == 401
        assert "signature does not match" in str(failure.value)
        unknown = {"clientId": "nobody", "accessToken": "x" * 44}
        with pytest.raises(taskcluster.exceptions.TaskclusterAuthFailure) as unknown_failure:
            await queue(root_url, unknown).createTask(TASK_ID, DEFINITION)
        # the same answer either way, so nobody can probe which clientIds exist
        assert str(unknown_failure.value).replace("nobody", "root") == str(failure.value)


async def test_bad_credentials_do_not_block_open_endpoints(clients_file: Path) -> None:
    async with serve(authorizer_for(clients_file)) as root_url:
        pong = await queue(root_url, {**ROOT, "accessToken": "stale"}).ping()
        assert "signature does not match" in pong["caller"]["rejected"]


async def test_no_credentials_on_protected_endpoint_is_401(clients_file: Path) -> None:
    async with serve(authorizer_for(clients_file)) as root_url:
        with pytest.raises(taskcluster.exceptions.TaskclusterAuthFailure) as failure:
            await queue(root_url).reportCompleted(TASK_ID, "0")
        assert failure.value.status_code == 401
        assert f"queue:resolve-task:{TASK_ID}/0" in str(failure.value)


async def test_missing_scope_is_403_naming_client_and_expression(clients_file: Path) -> None:
    async with serve(authorizer_for(clients_file)) as root_url:
        with pytest.raises(taskcluster.exceptions.TaskclusterRestFailure) as failure:
            await queue(root_url, WORKER).createTask(TASK_ID, DEFINITION)
        assert failure.value.status_code == 403
        assert failure.value.body["code"] == "InsufficientScopes"
        message = str(failure.value)
        assert f"Client ID {WORKER['clientId']}" in message
        assert "queue:create-task:very-high:prov/wt" in message
        assert "queue:route:r1" in message
        with pytest.raises(taskcluster.exceptions.TaskclusterRestFailure) as failure:
            await queue(root_url, WORKER).reportCompleted(TASK_ID, "1")
        assert failure.value.status_code == 403
        assert f"queue:resolve-task:{TASK_ID}/1" in str(failure.value)


async def test_tampered_body_is_401_and_unhashed_body_is_accepted(clients_file: Path) -> None:
    async with serve(authorizer_for(clients_file)) as root_url:
        url = f"{root_url}/api/queue/v1/task/{TASK_ID}"
        signed = json.dumps({**DEFINITION, "priority": "lowest"}).encode()
        sent = json.dumps({**DEFINITION, "priority": "highest"}).encode()
        header = hawk_header(
            credentials=ROOT, method="PUT", url=url, body=signed, content_type="application/json"
        )
        headers = {"Authorization": header, "Content-Type": "application/json"}
        async with aiohttp.ClientSession() as session:
            async with session.put(url, data=sent, headers=headers) as response:
                assert response.status == 401
                assert "payload hash" in (await response.json())["message"]
            # Taskcluster accepts a request that did not hash its payload at all.
            unhashed = mohawk.Sender(
                {"id": ROOT["clientId"], "key": ROOT["accessToken"], "algorithm": "sha256"},
                url,
                "PUT",
                always_hash_content=False,
            )
            headers["Authorization"] = unhashed.request_header
            async with session.put(url, data=sent, headers=headers) as response:
                assert response.status == 200


async def test_a_replayed_request_is_401(clients_file: Path) -> None:
    async with serve(authorizer_for(clients_file)) as root_url:
        url = f"{root_url}/api/queue/v1/task/{TASK_ID}"
        body = json.dumps(DEFINITION).encode()
        header = hawk_header(
            credentials=ROOT, method="PUT", url=url, body=body, content_type="application/json"
        )
        headers = {"Authorization": header, "Content-Type": "application/json"}
        async with aiohttp.ClientSession() as session:
            async with session.put(url, data=body, headers=headers) as response:
                assert response.status == 200
            async with session.put(url, data=body, headers=headers) as response:
                assert response.status == 401
                assert "already used" in (await response.json())["message"]
            # a request signed afresh, as every client does for each attempt, is fine
            headers["Authorization"] = hawk_header(
                credentials=ROOT, method="PUT", url=url, body=body, content_type="application/json"
            )
            async with session.put(url, data=body, headers=headers) as response:
                assert response.status == 200


def test_the_nonce_cache_forgets_timestamps_out_of_the_window_and_stays_bounded() -> None:
    cache = NonceCache(window_s=900, max_entries=3)
    assert not cache.seen("c", "n1", "1000", now=1000)
    assert cache.seen("c", "n1", "1000", now=1500)
    assert not cache.seen("other", "n1", "1000", now=1500)
    assert not cache.seen("c", "n1", "1000", now=1901)  # out of the window: forgotten
    for n in range(10):
        cache.seen("c", f"m{n}", "2000", now=2000)
    assert 1 <= len(cache) <= 3
    # full: the oldest second goes first, a newer one stays
    assert not cache.seen("c", "x", "2001", now=2001)
    assert not cache.seen("c", "y", "2002", now=2002)
    assert not cache.seen("c", "z", "2003", now=2003)
    assert cache.seen("c", "z", "2003", now=2003)
    assert not cache.seen("c", "x", "2001", now=2003)  # forgotten to make room
    assert len(cache) <= 3


async def test_timestamp_skew_of_15_minutes(clients_file: Path) -> None:
    async with serve(authorizer_for(clients_file, skew=14 * 60)) as root_url:
        await queue(root_url, ROOT).createTask(TASK_ID, DEFINITION)
    async with serve(authorizer_for(clients_file, skew=-16 * 60)) as root_url:
        with pytest.raises(taskcluster.exceptions.TaskclusterAuthFailure) as failure:
            await queue(root_url, ROOT).createTask(TASK_ID, DEFINITION)
        assert "check the client's clock" in str(failure.value)


def with_anonymous(scopes: list[str]) -> list[str]:
    """What credentials holding ``scopes`` hold: them, and what every caller holds (the role
    ``anonymous`` and the clients file's anonymousScopes, by default)."""
    return list(normalize_scope_set([*scopes, "assume:anonymous", *DEFAULT_ANONYMOUS_SCOPES]))


async def test_authorized_scopes_narrow_but_cannot_widen(clients_file: Path) -> None:
    narrowed = [f"queue:resolve-task:{TASK_ID}/0"]
    async with serve(authorizer_for(clients_file)) as root_url:
        root = queue(root_url, ROOT, authorizedScopes=narrowed)
        completed = await root.reportCompleted(TASK_ID, "0")
        assert completed["status"] == {"clientId": "root", "scopes": with_anonymous(narrowed)}
        with pytest.raises(taskcluster.exceptions.TaskclusterRestFailure) as failure:
            await root.createTask(TASK_ID, DEFINITION)
        assert failure.value.status_code == 403
        with pytest.raises(taskcluster.exceptions.TaskclusterAuthFailure) as failure:
            await queue(root_url, WORKER, authorizedScopes=["*"]).reportCompleted(TASK_ID, "0")
        assert "do not satisfy authorizedScopes" in str(failure.value)


async def test_public_url_is_what_clients_sign_for(clients_file: Path) -> None:
    """Behind a proxy: the client signs for http://public.example:443 while the request
    reaches 127.0.0.1:<port> with the proxy's own Host header."""

    async def call(authorizer: Authorizer) -> Any:
        async with serve(authorizer) as root_url:
            port = int(root_url.rsplit(":", 1)[1])
            connector = aiohttp.TCPConnector(resolver=ProxyResolver(port))
            headers = {"Host": f"127.0.0.1:{port}"}
            async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
                client = taskcluster.aio.Queue(
                    {
                        "rootUrl": "http://public.example:443",
                        "credentials": dict(ROOT),
                        "maxRetries": 0,
                    },
                    session=session,
                )
                return await client.createTask(TASK_ID, DEFINITION)

    proxied = await call(authorizer_for(clients_file, public_url="http://public.example:443/"))
    assert proxied["status"]["clientId"] == "root"
    with pytest.raises(taskcluster.exceptions.TaskclusterAuthFailure) as failure:
        await call(authorizer_for(clients_file))
    assert "COORDINATOR_PUBLIC_URL" in str(failure.value)


class ProxyResolver(AbstractResolver):
    """Sends every connection to 127.0.0.1:<port>, as a proxy in front of the server would."""

    def __init__(self, port: int) -> None:
        self._port = port

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host,
                host="127.0.0.1",
                port=self._port,
                family=socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        return None


# --- temporary credentials ------------------------------------------------------------------


async def test_temporary_credentials_are_accepted_until_they_expire(clients_file: Path) -> None:
    scopes = [f"queue:resolve-task:{TASK_ID}/*"]
    root = Credentials(client_id=ROOT["clientId"], access_token=ROOT["accessToken"])
    start, expiry = now_ms(), now_ms() + 60_000
    unnamed = temporary_credentials(
        issuer=root, client_id=root.client_id, scopes=scopes, start=start, expiry=expiry
    )
    named = temporary_credentials(
        issuer=root, client_id="my-temporary", scopes=scopes, start=start, expiry=expiry
    )
    async with serve(authorizer_for(clients_file)) as root_url:
        for credentials in (unnamed, named):
            completed = await queue(root_url, credentials).reportCompleted(TASK_ID, "3")
            assert completed["status"] == {
                "clientId": credentials["clientId"],
                "scopes": with_anonymous(scopes),
            }
            with pytest.raises(taskcluster.exceptions.TaskclusterRestFailure) as failure:
                await queue(root_url, credentials).createTask(TASK_ID, DEFINITION)
            assert failure.value.status_code == 403
    # Taskcluster tolerates 5 minutes past the expiry, and not one second more.
    async with serve(authorizer_for(clients_file, skew=60 + 299)) as root_url:
        await queue(root_url, named).reportCompleted(TASK_ID, "3")
    async with serve(authorizer_for(clients_file, skew=60 + 301)) as root_url:
        with pytest.raises(taskcluster.exceptions.TaskclusterAuthFailure) as failure:
            await queue(root_url, named).reportCompleted(TASK_ID, "3")
        assert "expired" in str(failure.value)


async def test_certificates_from_the_taskcluster_client_are_accepted(clients_file: Path) -> None:
    start = datetime.now(UTC) - timedelta(minutes=1)
    expiry = start + timedelta(hours=1)
    scopes = [f"queue:resolve-task:{TASK_ID}/0"]
    unnamed = taskcluster.createTemporaryCredentials(
        ROOT["clientId"], ROOT["accessToken"], start, expiry, scopes
    )
    named = taskcluster.createTemporaryCredentials(
        ROOT["clientId"], ROOT["accessToken"], start, expiry, scopes, name="tc-named"
    )
    async with serve(authorizer_for(clients_file)) as root_url:
        for credentials in (unnamed, named):
            completed = await queue(root_url, credentials).reportCompleted(TASK_ID, "0")
            assert completed["status"]["scopes"] == with_anonymous(scopes)
        assert completed["status"]["clientId"] == "tc-named"


async def test_invalid_certificates_are_401(clients_file: Path) -> None:
    worker = Credentials(client_id=WORKER["clientId"], access_token=WORKER["accessToken"])
    root = Credentials(client_id=ROOT["clientId"], access_token=ROOT["accessToken"])
    start, expiry = now_ms(), now_ms() + 60_000

    tampered = temporary_credentials(
        issuer=root, client_id="t", scopes=["queue:resolve-task:x/0"], start=start, expiry=expiry
    )
    certificate = json.loads(tampered["certificate"])
    certificate["scopes"] = ["*"]
    tampered["certificate"] = json.dumps(certificate)

    future = dict(
        temporary_credentials(
            issuer=root, client_id="f", scopes=[], start=start + 600_000, expiry=expiry + 600_000
        )
    )
    cases = {
        "signature is not valid": tampered,
        "doesn't satisfy all certificate scopes": temporary_credentials(
            issuer=worker, client_id=worker.client_id, scopes=["*"], start=start, expiry=expiry
        ),
        "auth:create-client:worker-child": temporary_credentials(
            issuer=worker, client_id="worker-child", scopes=[], start=start, expiry=expiry
        ),
        "not valid yet": future,
    }
    async with serve(authorizer_for(clients_file)) as root_url:
        for reason, credentials in cases.items():
            with pytest.raises(taskcluster.exceptions.TaskclusterAuthFailure) as failure:
                await queue(root_url, credentials).reportCompleted(TASK_ID, "0")
            assert reason in str(failure.value)


def test_certificate_signature_matches_taskcluster() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    made = taskcluster.createTemporaryCredentials(
        "issuer", "secret", start, start + timedelta(hours=1), ["a", "b*"], name="named"
    )
    certificate = json.loads(made["certificate"])
    assert certificate["signature"] == certificate_signature("secret", certificate, "named")


async def test_claim_credentials_are_valid_on_every_replica(clients_file: Path) -> None:
    """Credentials a claim hands out are signed by the file's issuer, so another replica (or
    the same one after a restart) sharing the clients file accepts them."""
    async with (
        serve(authorizer_for(clients_file)) as replica_a,
        serve(authorizer_for(clients_file)) as replica_b,
    ):
        claim = {"workerGroup": "wg", "workerId": "w1"}
        claimed = await queue(replica_a, WORKER).claimTask(TASK_ID, "0", claim)
        credentials = claimed["credentials"]
        assert credentials["clientId"].startswith(f"task-client/{TASK_ID}/0/on/wg/w1/until/")
        assert json.loads(credentials["certificate"])["issuer"] == ISSUER_CLIENT_ID
        completed = await queue(replica_b, credentials).reportCompleted(TASK_ID, "0")
        assert TASK_SCOPES[0] in completed["status"]["scopes"]
        with pytest.raises(taskcluster.exceptions.TaskclusterRestFailure) as failure:
            await queue(replica_b, credentials).reportCompleted(TASK_ID, "1")
        assert failure.value.status_code == 403


async def test_auth_disabled_allows_everything(clients_file: Path) -> None:
    async with serve(Authorizer(clients=None)) as root_url:
        created = await queue(root_url).createTask(TASK_ID, DEFINITION)
        assert created["status"] == {"clientId": "auth-disabled", "scopes": ["*"]}
        claimed = await queue(root_url).claimTask(
            TASK_ID, "0", {"workerGroup": "g", "workerId": "w"}
        )
        assert set(claimed["credentials"]) == {"clientId", "accessToken", "certificate"}


# --- clients file ----------------------------------------------------------------------------


async def test_clients_file_is_reloaded_when_it_changes(clients_file: Path) -> None:
    newcomer = {"clientId": "newcomer", "accessToken": "n" * 44}
    async with serve(authorizer_for(clients_file)) as root_url:
        with pytest.raises(taskcluster.exceptions.TaskclusterAuthFailure):
            await queue(root_url, newcomer).reportCompleted(TASK_ID, "0")
        write_clients(
            clients_file,
            [
                {**ROOT, "scopes": ["*"]},
                {**newcomer, "scopes": ["queue:*"]},
                {**ISSUER, "scopes": ["*"]},
            ],
            issuer=ISSUER_CLIENT_ID,
        )
        await queue(root_url, newcomer).reportCompleted(TASK_ID, "0")
        # A broken edit is ignored: the last good contents stay in force.
        corrupt(clients_file)
        await queue(root_url, newcomer).reportCompleted(TASK_ID, "0")


def test_ensure_root_client_creates_a_private_file_once(tmp_path: Path) -> None:
    path = tmp_path / "data" / "clients.json"
    first = ensure_root_client(path)
    assert first.client_id == ROOT_CLIENT_ID and len(first.access_token) == 44
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_root_client(path) == first
    registry = ClientRegistry(path)
    root = registry.lookup(ROOT_CLIENT_ID)
    assert root is not None and root.scopes == ("*",)
    assert registry.issuer.client_id == ISSUER_CLIENT_ID
    assert registry.issuer.access_token != first.access_token
    assert [p.name for p in path.parent.iterdir()] == ["clients.json"]


def test_ensure_root_client_gives_only_a_new_file_its_anonymous_scopes(tmp_path: Path) -> None:
    """scripts/dev's new file lets anybody list artifacts; a file from an earlier run (here
    one without anonymousScopes) is left as it is."""
    new, earlier = tmp_path / "new.json", tmp_path / "earlier.json"
    ensure_root_client(new, anonymous_scopes=DEV_ANONYMOUS_SCOPES)
    assert ClientRegistry(new).anonymous_scopes == DEV_ANONYMOUS_SCOPES
    ensure_root_client(earlier)
    contents = earlier.read_bytes()
    ensure_root_client(earlier, anonymous_scopes=DEV_ANONYMOUS_SCOPES)
    assert earlier.read_bytes() == contents
    assert ClientRegistry(earlier).anonymous_scopes == DEFAULT_ANONYMOUS_SCOPES


def test_malformed_clients_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "clients.json"
    path.write_text(json.dumps({"clients": [{**ROOT, "scopes": ["*"]}]}))
    with pytest.raises(ClientsFileError, match="issuer"):
        ClientRegistry(path)
    path.write_text(json.dumps({"issuer": "root", "clients": [{**ROOT, "scope": ["*"]}]}))
    with pytest.raises(ClientsFileError, match="unknown keys"):
        ClientRegistry(path)
    with pytest.raises(ClientsFileError, match="cannot read"):
        ClientRegistry(tmp_path / "missing.json")


# --- the credentials cache -----------------------------------------------------------------

ORIGIN = "http://127.0.0.1:8080"
RESOLVE = f"/api/queue/v1/task/{TASK_ID}/runs/0/completed"


class Verifier:
    """An Authenticator over a clients file, its clock ``offset`` seconds ahead of the real
    one (clients sign with the real time), verifying requests as the app would."""

    def __init__(self, path: Path, **options: Any) -> None:
        self.offset = 0.0
        directory = ClientDirectory(ClientRegistry(path), clock=lambda: int(self.clock() * 1000))
        self.authenticator = Authenticator(clients=directory, clock=self.clock, **options)

    def clock(self) -> float:
        return time.time() + self.offset

    def verify(self, header: str, body: bytes = b"{}", resource: str = RESOLVE) -> Auth:
        return self.authenticator.verify(
            authorization=header,
            method="POST",
            resource=resource,
            origins=[ORIGIN],
            content=body,
            content_type="application/json",
        )

    def refusal(self, header: str, body: bytes = b"{}") -> str:
        with pytest.raises(AuthenticationFailed) as refused:
            self.verify(header, body)
        return str(refused.value)


def signed(credentials: Credentials, body: bytes = b"{}", resource: str = RESOLVE) -> str:
    """A fresh header (its own nonce) as the worker SDK signs it."""
    return authorization(
        credentials,
        method="POST",
        url=ORIGIN + resource,
        content=body.decode(),
        content_type="application/json",
    )


def run_credentials(*, lasting_ms: int = 3_600_000) -> Credentials:
    """Named temporary credentials from the clients file's issuer, as a claim hands out."""
    issuer = Credentials(client_id=ISSUER["clientId"], access_token=ISSUER["accessToken"])
    start = now_ms()
    return Credentials.from_json(
        temporary_credentials(
            issuer=issuer,
            client_id=f"task-client/{TASK_ID}/0",
            scopes=[f"queue:resolve-task:{TASK_ID}/0"],
            start=start,
            expiry=start + lasting_ms,
        )
    )


def test_remembered_credentials_still_check_every_request_s_signature(clients_file: Path) -> None:
    verifier = Verifier(clients_file)
    temporary = run_credentials()
    worker = Credentials(client_id=WORKER["clientId"], access_token=WORKER["accessToken"])
    for credentials in (temporary, worker):
        header = signed(credentials)
        assert verifier.verify(header).client_id == credentials.client_id
        assert verifier.verify(signed(credentials)).client_id == credentials.client_id
        # the same clientId and ext (so the same cache entry), the wrong key
        forged = dataclasses.replace(credentials, access_token="x" * 43)
        assert "does not match" in verifier.refusal(signed(forged))
        # the right key, another body than the one signed
        assert "payload hash" in verifier.refusal(signed(credentials), body=b'{"x":1}')
        assert "already used" in verifier.refusal(header)
    # and the timestamp: 16 minutes on, a fresh signature with the real time is too old
    verifier.offset = 16 * 60
    assert "check the client's clock" in verifier.refusal(signed(worker))
    assert "check the client's clock" in verifier.refusal(signed(temporary))


def test_a_remembered_certificate_is_refused_once_it_expires(clients_file: Path) -> None:
    verifier = Verifier(clients_file)
    temporary = run_credentials(lasting_ms=60_000)
    assert verifier.verify(signed(temporary)).expires is not None
    verifier.offset = 60 + 299  # within the 5 minutes' skew
    verifier.verify(signed(temporary))
    verifier.offset = 60 + 301
    assert "the credentials expired" in verifier.refusal(signed(temporary))


def test_remembered_credentials_follow_the_clients_file(clients_file: Path) -> None:
    verifier = Verifier(clients_file)
    worker = Credentials(client_id=WORKER["clientId"], access_token=WORKER["accessToken"])
    temporary = run_credentials()
    assert set(WORKER_SCOPES) <= set(verifier.verify(signed(worker)).scopes)
    verifier.verify(signed(temporary))
    # the worker's accessToken and scopes change, and so does the issuer's accessToken
    renewed = dataclasses.replace(worker, access_token="renewed-" + "n" * 36)
    write_clients(
        clients_file,
        [
            {**ROOT, "scopes": ["*"]},
            {**WORKER, "accessToken": renewed.access_token, "scopes": ["queue:claim-task:p/w"]},
            {**ISSUER, "accessToken": "rotated-" + "i" * 36, "scopes": ["*"]},
        ],
        issuer=ISSUER_CLIENT_ID,
    )
    assert "does not match" in verifier.refusal(signed(worker))
    scopes = verifier.verify(signed(renewed)).scopes
    assert "queue:claim-task:p/w" in scopes and WORKER_SCOPES[0] not in scopes
    assert "signature is not valid" in verifier.refusal(signed(temporary))
    # gone from the file: unknown
    write_clients(clients_file, [{**ROOT, "scopes": ["*"]}], issuer=ROOT["clientId"])
    assert "does not match" in verifier.refusal(signed(renewed))


def test_the_credentials_cache_keeps_the_entries_used_last() -> None:
    cache = CredentialsCache(max_entries=3)
    client = KnownClient(
        client_id="c", access_token="t", scopes=("a",), expires=None, disabled=False
    )
    entry = Verified(key="k", scopes=("a",), expires=None, issuer=client, state=(0, 0))
    for n in range(10):
        cache.put("c", f"ext{n}", entry)
        assert cache.get("c", "ext0", (0, 0)) is entry  # used each time, so it stays
    assert len(cache) == 3
    assert cache.get("c", "ext9", (0, 0)) is entry
    assert cache.get("c", "ext5", (0, 0)) is None
    # the directory moved on: the entry is dropped, not answered
    assert cache.get("c", "ext9", (1, 0)) is None
    assert cache.get("c", "ext9", (0, 0)) is None
    assert len(cache) == 2


def test_many_certificates_verify_with_a_small_cache(clients_file: Path) -> None:
    verifier = Verifier(clients_file, credentials_cache_entries=2)
    many = [run_credentials() for _ in range(5)]
    for _ in range(2):
        for credentials in many:
            assert verifier.verify(signed(credentials)).client_id == credentials.client_id
