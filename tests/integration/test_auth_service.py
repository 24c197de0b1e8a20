"""The auth service (docs/auth.md) through the official ``taskcluster.Auth`` client, unmodified,
against an in-process coordinator with authentication on: clients and roles made through the
API and then used against the queue with exactly their expanded scopes, every clients and
roles method, static clients left alone, disabled and expired clients refused, the audit
history, testAuthenticate's upstream cases, authenticateHawk, and the bad input that is a 4xx
with nothing stored. Replicas are tests/e2e/test_auth_replicas.py's."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
import mohawk
import mohawk.base
import pytest
import slugid
import taskcluster

from coordinator.api.endpoints import Endpoint
from coordinator.api.services import SERVICES
from coordinator.resolvers import client_sweeper
from devharness.tasks import task_definition
from tests.fixtures.clients import (
    Auth,
    Credentials,
    Queue,
    missing_scopes,
    rejected,
    start_secured,
)
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator

PROV, WT = "auth-prov", "wt"
CREATE_SCOPES = [
    f"queue:create-task:lowest:{PROV}/{WT}",
    "queue:scheduler-id:-",
    "queue:create-task:project:none",
]
AUTH = "/api/auth/v1"


def client_body(**fields: Any) -> dict[str, Any]:
    return {"description": "made by a test", "expires": taskcluster.fromNowJSON("1 day"), **fields}


def role_body(*scopes: str, description: str = "a test role") -> dict[str, Any]:
    return {"description": description, "scopes": list(scopes)}


async def secured(
    start_coordinator: StartCoordinator, tmp_path: Path, **overrides: Any
) -> tuple[RunningCoordinator, dict[str, Credentials]]:
    return await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {
            # manages clients and roles but holds no queue scopes itself
            "admin": ["auth:*"],
            "nobody": [],
        },
        **overrides,
    )


async def create_in(queue: Queue, worker_type: str = WT) -> str:
    task_id: str = slugid.nice()
    await queue.createTask(task_id, task_definition(provisionerId=PROV, workerType=worker_type))
    return task_id


@pytest.mark.parametrize("kind", ["sync", "aio"])
async def test_a_client_made_with_a_role_works_with_exactly_its_expanded_scopes(
    kind: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Auth(kind, coordinator.url, creds["root"])
    role = await root.createRole("project:ci", role_body(*CREATE_SCOPES))
    assert set(CREATE_SCOPES) <= set(role["expandedScopes"])
    made = await root.createClient(
        "ci/builder", client_body(scopes=["assume:project:ci", "auth:current-scopes"])
    )
    assert made["scopes"] == ["assume:project:ci", "auth:current-scopes"]
    assert set(CREATE_SCOPES) <= set(made["expandedScopes"])
    assert len(made["accessToken"]) == 44
    builder = {"clientId": "ci/builder", "accessToken": made["accessToken"]}

    current = await Auth(kind, coordinator.url, builder).currentScopes()
    assert set(CREATE_SCOPES) | {"assume:project:ci", "assume:client-id:ci/builder"} <= set(
        current["scopes"]
    )
    queue = Queue(kind, coordinator.url, builder)
    task_id = await create_in(queue)
    assert (await queue.status(task_id))["status"]["state"] == "pending"
    status, body = await rejected(create_in(queue, worker_type="other"))
    assert status == 403
    assert "queue:create-task:lowest:auth-prov/other" in missing_scopes(body)

    # The role changes, and the client's scopes with it: no restart, no new credentials.
    await root.updateRole("project:ci", role_body("queue:scheduler-id:-"))
    status, body = await rejected(create_in(queue))
    assert status == 403


async def test_temporary_credentials_of_an_api_client_expand_through_roles(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Auth("aio", coordinator.url, creds["root"])
    await root.createRole("project:ci", role_body(*CREATE_SCOPES))
    made = await root.createClient("ci/issuer", client_body(scopes=["assume:project:ci"]))
    temporary = taskcluster.createTemporaryCredentials(
        "ci/issuer",
        made["accessToken"],
        taskcluster.fromNow("-1 minute"),
        taskcluster.fromNow("1 hour"),
        ["assume:project:ci"],
    )
    task_id = await create_in(Queue("aio", coordinator.url, temporary))
    assert (await Queue("aio", coordinator.url).status(task_id))["status"]["taskId"] == task_id
    # Scopes the issuer lacks cannot go into a certificate.
    forged = taskcluster.createTemporaryCredentials(
        "ci/issuer",
        made["accessToken"],
        taskcluster.fromNow("-1 minute"),
        taskcluster.fromNow("1 hour"),
        ["queue:*"],
    )
    status, _ = await rejected(create_in(Queue("aio", coordinator.url, forged)))
    assert status == 401


async def test_a_certificate_in_use_follows_its_issuer_and_the_roles(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    """The coordinator remembers verified certificates; each write of the auth API through
    it is in force on the next request all the same."""
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Auth("aio", coordinator.url, creds["root"])
    await root.createRole("project:ci", role_body(*CREATE_SCOPES))
    issuer = client_body(scopes=["assume:project:ci"])
    made = await root.createClient("ci/issuer", issuer)

    def certificate_of(access_token: str) -> Queue:
        return Queue(
            "aio",
            coordinator.url,
            taskcluster.createTemporaryCredentials(
                "ci/issuer",
                access_token,
                taskcluster.fromNow("-1 minute"),
                taskcluster.fromNow("1 hour"),
                ["assume:project:ci"],
            ),
        )

    queue = certificate_of(made["accessToken"])
    await create_in(queue)
    await create_in(queue)
    await root.updateRole("project:ci", role_body("queue:scheduler-id:-"))
    status, _ = await rejected(create_in(queue))
    assert status == 403
    await root.updateRole("project:ci", role_body(*CREATE_SCOPES))
    await create_in(queue)
    # the issuer no longer holds what its certificate names
    await root.updateClient("ci/issuer", client_body(scopes=[]))
    status, body = await rejected(create_in(queue))
    assert status == 401 and "doesn't satisfy all certificate scopes" in body["message"]
    await root.updateClient("ci/issuer", issuer)
    await create_in(queue)
    await root.disableClient("ci/issuer")
    status, body = await rejected(create_in(queue))
    assert status == 401 and "disabled" in body["message"]
    await root.enableClient("ci/issuer")
    reset = await root.resetAccessToken("ci/issuer")
    status, body = await rejected(create_in(queue))
    assert status == 401 and "signature is not valid" in body["message"]
    queue = certificate_of(reset["accessToken"])
    await create_in(queue)
    await root.deleteClient("ci/issuer")
    status, _ = await rejected(create_in(queue))
    assert status == 401


async def test_every_clients_method(start_coordinator: StartCoordinator, tmp_path: Path) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    admin = Auth("aio", coordinator.url, creds["admin"])
    for client_id in ("team/a", "team/b", "team_c", "other"):
        await admin.createClient(client_id, client_body(scopes=["auth:current-scopes"]))
    listed = await admin.listClients()
    assert [c["clientId"] for c in listed["clients"]] == ["other", "team/a", "team/b", "team_c"]
    assert all("accessToken" not in c for c in listed["clients"])
    first = await admin.listClients(query={"prefix": "team", "limit": 2})
    assert [c["clientId"] for c in first["clients"]] == ["team/a", "team/b"]
    rest = await admin.listClients(
        query={"prefix": "team", "limit": 2, "continuationToken": first["continuationToken"]}
    )
    assert [c["clientId"] for c in rest["clients"]] == ["team_c"]
    assert "continuationToken" not in rest
    assert (await admin.listClients(query={"prefix": "team/"}))["clients"][1]["clientId"] == (
        "team/b"
    )

    got = await admin.client("team/a")
    assert got["scopes"] == ["auth:current-scopes"] and "accessToken" not in got
    status, _ = await rejected(admin.client("missing"))
    assert status == 404
    status, body = await rejected(admin.createClient("team/a", client_body()))
    assert status == 409, body

    updated = await admin.updateClient(
        "team/a", client_body(description="renamed", scopes=["auth:current-scopes", "auth:x"])
    )
    assert updated["description"] == "renamed"
    assert updated["scopes"] == ["auth:current-scopes", "auth:x"]
    # Without scopes the scopes stay.
    kept = await admin.updateClient("team/a", client_body(description="again"))
    assert kept["scopes"] == ["auth:current-scopes", "auth:x"]

    assert (await admin.disableClient("team/b"))["disabled"] is True
    assert (await admin.enableClient("team/b"))["disabled"] is False
    reset = await admin.resetAccessToken("team/b")
    assert len(reset["accessToken"]) == 44

    await admin.deleteClient("team/b")
    await admin.deleteClient("team/b")  # nothing to delete: still fine
    status, _ = await rejected(admin.client("team/b"))
    assert status == 404


async def test_static_clients_are_neither_shown_nor_changed(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Auth("aio", coordinator.url, creds["root"])
    assert (await root.listClients())["clients"] == []
    for call in (
        root.createClient("admin", client_body()),
        root.createClient("static/new", client_body()),
        root.updateClient("root", client_body()),
        root.resetAccessToken("admin"),
        root.disableClient("root"),
        root.deleteClient("admin"),
    ):
        status, body = await rejected(call)
        assert status == 400 and "static client" in body["message"], body
    # The file's clients still work as they did.
    assert (await Auth("aio", coordinator.url, creds["admin"]).currentScopes())["scopes"]


async def test_a_caller_grants_only_scopes_it_holds(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    admin = Auth("aio", coordinator.url, creds["admin"])
    status, body = await rejected(admin.createClient("c", client_body(scopes=["queue:*"])))
    assert status == 403 and missing_scopes(body) == "queue:*"
    status, body = await rejected(admin.createRole("r", role_body("queue:*")))
    assert status == 403 and missing_scopes(body) == "queue:*"
    root = Auth("aio", coordinator.url, creds["root"])
    await root.createClient("c", client_body(scopes=["queue:*"]))
    # Scopes the client already has need not be held to keep them; new ones do.
    await admin.updateClient("c", client_body(scopes=["queue:*"]))
    status, body = await rejected(
        admin.updateClient("c", client_body(scopes=["queue:*", "hooks:*"]))
    )
    assert status == 403 and missing_scopes(body) == "hooks:*"
    await root.createRole("r", role_body("queue:*"))
    await admin.updateRole("r", role_body("queue:create-task:*"))  # narrower: granted before
    status, body = await rejected(admin.updateRole("r", role_body("hooks:*")))
    assert status == 403 and missing_scopes(body) == "hooks:*"
    assert (await root.client("c"))["scopes"] == ["queue:*"]
    assert (await root.role("r"))["scopes"] == ["queue:create-task:*"]


async def test_roles_expand_as_taskcluster_s(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Auth("aio", coordinator.url, creds["root"])
    await root.createRole("repo:github.com/org/*", role_body("secrets:get:repo/<..>", "hooks:x"))
    await root.createRole("a", role_body("assume:b", "a-scope"))
    await root.createRole("b", role_body("b-scope"))
    expanded = await root.expandScopes({"scopes": ["assume:repo:github.com/org/app", "assume:a"]})
    assert set(expanded["scopes"]) == {
        "assume:repo:github.com/org/app",
        "secrets:get:repo/app",
        "hooks:x",
        "assume:a",
        "assume:b",
        "a-scope",
        "b-scope",
    }
    # Repeating a create with the same role is fine; with another, a 409.
    await root.createRole("b", role_body("b-scope"))
    status, _ = await rejected(root.createRole("b", role_body("other")))
    assert status == 409
    # A cycle is refused and nothing is stored.
    status, body = await rejected(root.updateRole("b", role_body("assume:a")))
    assert status == 400, body
    assert (await root.role("b"))["scopes"] == ["b-scope"]

    ids = [await root.listRoleIds(query={"limit": 1})]
    while "continuationToken" in ids[-1]:
        ids.append(
            await root.listRoleIds(
                query={"limit": 1, "continuationToken": ids[-1]["continuationToken"]}
            )
        )
    assert [page["roleIds"] for page in ids] == [["a"], ["b"], ["repo:github.com/org/*"]]
    assert [r["roleId"] for r in await root.listRoles()] == ["a", "b", "repo:github.com/org/*"]
    assert len((await root.listRoles2(query={"limit": 2}))["roles"]) == 2
    await root.deleteRole("a")
    await root.deleteRole("a")
    status, _ = await rejected(root.role("a"))
    assert status == 404


async def test_disabled_and_expired_clients_get_401(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Auth("aio", coordinator.url, creds["root"])
    made = await root.createClient("c", client_body(scopes=["auth:current-scopes"]))
    own = Auth("aio", coordinator.url, {"clientId": "c", "accessToken": made["accessToken"]})
    await own.currentScopes()
    await root.disableClient("c")
    status, body = await rejected(own.currentScopes())
    assert status == 401 and "disabled" in body["message"]
    await root.enableClient("c")
    await own.currentScopes()

    expired = await root.createClient(
        "gone", client_body(expires=taskcluster.fromNowJSON("-1 minute"), deleteOnExpiration=True)
    )
    gone = Auth("aio", coordinator.url, {"clientId": "gone", "accessToken": expired["accessToken"]})
    status, body = await rejected(gone.currentScopes())
    assert status == 401 and "expired" in body["message"]
    assert await client_sweeper.run_once(coordinator.parts.auth) == 1
    status, _ = await rejected(root.client("gone"))
    assert status == 404
    history = await root.getEntityHistory("client", "gone")
    assert [e["actionType"] for e in history["auditHistory"]] == ["created", "expired"]


async def test_a_reset_token_replaces_the_old_one(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Auth("aio", coordinator.url, creds["root"])
    made = await root.createClient("c", client_body(scopes=["auth:current-scopes"]))
    old = {"clientId": "c", "accessToken": made["accessToken"]}
    new = {"clientId": "c", "accessToken": (await root.resetAccessToken("c"))["accessToken"]}
    status, _ = await rejected(Auth("aio", coordinator.url, old).currentScopes())
    assert status == 401
    await Auth("aio", coordinator.url, new).currentScopes()


async def test_the_audit_history_says_who_did_what(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    admin = Auth("aio", coordinator.url, creds["admin"])
    await admin.createClient("c", client_body())
    await admin.updateClient("c", client_body())
    await admin.disableClient("c")
    await admin.enableClient("c")
    await admin.resetAccessToken("c")
    await admin.deleteClient("c")
    await admin.createRole("r", role_body())
    history = await admin.getEntityHistory("client", "c")
    assert [(e["actionType"], e["clientId"]) for e in history["auditHistory"]] == [
        ("created", "admin"),
        ("updated", "admin"),
        ("client disabled", "admin"),
        ("client enabled", "admin"),
        ("access token reset", "admin"),
        ("deleted", "admin"),
    ]
    paged = await admin.listAuditHistory("admin", query={"limit": 4})
    assert len(paged["auditHistory"]) == 4
    rest = await admin.listAuditHistory(
        "admin", query={"limit": 4, "continuationToken": paged["continuationToken"]}
    )
    assert [(e["entityType"], e["actionType"]) for e in rest["auditHistory"]] == [
        ("client", "access token reset"),
        ("client", "deleted"),
        ("role", "created"),
    ]
    assert (await admin.getEntityHistory("secret", "x"))["auditHistory"] == []


TESTER = {"clientId": "tester", "accessToken": "no-secret"}
WRONG = {"clientId": "tester", "accessToken": "wrong"}


@pytest.mark.parametrize(
    ("credentials", "authorized", "required", "client_scopes", "outcome"),
    [
        (TESTER, None, ["test-scope:test"], ["test-scope:test"], 200),
        (TESTER, None, ["test-scope:test"], ["test-scope:*"], 200),
        (TESTER, None, ["test-scope:test2"], ["test-scope:test1", "test-scope:test2"], 200),
        (WRONG, None, ["test-scope"], ["test-scope"], 401),
        (TESTER, None, ["test-scope:*"], ["test-scope"], 403),
        (TESTER, ["test-scope:test"], ["test-scope:test"], ["test-scope:*"], 200),
        (TESTER, ["test-scope:test1"], ["test-scope:test2"], ["test-scope:*"], 403),
        (TESTER, ["test-scope:*"], ["test-scope:test2"], ["test-scope:test2"], 401),
        (WRONG, ["test-scope:test"], ["test-scope:test"], ["test-scope:*"], 401),
    ],
    ids=[
        "valid creds",
        "valid creds (star scope)",
        "valid creds (scope subset)",
        "invalid creds",
        "insufficientScopes",
        "authorizedScopes",
        "authorizedScopes InsufficientScopes",
        "authorizedScopes over-scoped",
        "authorizedScopes badcreds",
    ],
)
async def test_test_authenticate_as_upstream(
    credentials: Credentials,
    authorized: list[str] | None,
    required: list[str],
    client_scopes: list[str],
    outcome: int,
    start_coordinator: StartCoordinator,
    tmp_path: Path,
) -> None:
    coordinator, _ = await secured(start_coordinator, tmp_path)
    options: dict[str, Any] = {"rootUrl": coordinator.url, "credentials": dict(credentials)}
    if authorized is not None:
        options["authorizedScopes"] = authorized
    auth = taskcluster.aio.Auth({**options, "maxRetries": 0})
    call = auth.testAuthenticate({"requiredScopes": required, "clientScopes": client_scopes})
    if outcome == 200:
        answer = await call
        assert answer["clientId"] == "tester"
        assert set(required) <= set(answer["scopes"]) or any(
            s.endswith("*") for s in answer["scopes"]
        )
    else:
        status, _ = await rejected(call)
        assert status == outcome
    get = taskcluster.aio.Auth({**options, "maxRetries": 0}).testAuthenticateGet
    if credentials is WRONG:
        assert (await rejected(get()))[0] == 401
    elif authorized is None:  # tester holds test:* there, which testAuthenticateGet needs
        assert (await get())["clientId"] == "tester"


def _hawk_header(credentials: Credentials, url: str, method: str = "GET", content: str = "") -> str:
    sender = mohawk.Sender(
        {"id": credentials["clientId"], "key": credentials["accessToken"], "algorithm": "sha256"},
        url,
        method,
        content=content,
        content_type="application/json" if content else "",
    )
    header: str = sender.request_header
    return header


async def test_authenticate_hawk_answers_for_another_service(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    auth = Auth("aio", coordinator.url)
    request = {"method": "get", "resource": "/api/other/v1/thing?x=1", "host": "svc", "port": 443}
    header = _hawk_header(creds["admin"], "https://svc:443/api/other/v1/thing?x=1")
    ok = await auth.authenticateHawk({**request, "authorization": header})
    assert ok["status"] == "auth-success" and ok["clientId"] == "admin", ok
    assert "auth:*" in ok["scopes"] and ok["scheme"] == "hawk"
    replayed = await auth.authenticateHawk({**request, "authorization": header})
    assert replayed["status"] == "auth-failed" and "replayed" in replayed["message"]
    wrong = _hawk_header(
        {"clientId": "admin", "accessToken": "wrong"}, "https://svc:443/api/other/v1/thing?x=1"
    )
    failed = await auth.authenticateHawk({**request, "authorization": wrong})
    assert failed["status"] == "auth-failed"
    anonymous = await auth.authenticateHawk(request)
    assert anonymous["status"] == "no-auth" and anonymous["scheme"] == "none"
    other_port = await auth.authenticateHawk(
        {**request, "port": 8443, "authorization": _hawk_header(creds["admin"], request_url())}
    )
    assert other_port["status"] == "auth-failed"


def request_url() -> str:
    return "https://svc:443/api/other/v1/thing?x=1"


@pytest.mark.parametrize(
    ("method", "path", "body", "why"),
    [
        ("PUT", "/clients/" + "c" * 257, client_body(), "clientId"),
        ("PUT", "/clients/bad%20id", client_body(), "clientId"),
        ("PUT", "/roles/" + "r" * 257, role_body(), "roleId"),
        ("PUT", "/roles/r%0A", role_body(), "roleId"),
        ("PUT", "/clients/c", client_body(scopes=["a\nb"]), "scopes"),
        ("PUT", "/clients/c", client_body(scopes=["a\x07"]), "scopes"),
        ("PUT", "/clients/c", client_body(scopes=["a**"]), "**"),
        ("PUT", "/roles/r", role_body("a\nb"), "scopes"),
        ("PUT", "/roles/r", role_body(*[f"s{i}" for i in range(1001)]), "1001 scopes"),
        ("PUT", "/clients/c", {"description": "x"}, "expires"),
        ("POST", "/scopes/expand", {"scopes": ["\t"]}, "scopes"),
    ],
    ids=[
        "long clientId",
        "clientId with a space",
        "long roleId",
        "roleId with a newline",
        "scope with a newline",
        "scope with a bell",
        "scope ending in **",
        "role scope with a newline",
        "too many scopes",
        "no expires",
        "expand a tab",
    ],
)
async def test_bad_input_is_a_clear_400_and_stores_nothing(
    method: str,
    path: str,
    body: Any,
    why: str,
    start_coordinator: StartCoordinator,
    tmp_path: Path,
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    url = coordinator.url + AUTH + path
    content = json.dumps(body)
    header = _hawk_header(creds["root"], url, method, content)
    headers = {"Authorization": header, "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=content, headers=headers) as response,
    ):
        answer = await response.json()
    assert response.status == 400, answer
    assert answer["code"] in ("InputError", "InputValidationError"), answer
    assert why in answer["message"], answer
    root = Auth("aio", coordinator.url, creds["root"])
    assert (await root.listClients())["clients"] == []
    assert await root.listRoles() == []


async def test_a_role_expansion_past_the_bound_is_refused(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Auth("aio", coordinator.url, creds["root"])
    for index in range(11):
        await root.createRole(f"part{index}", role_body(*[f"p{index}:{i}" for i in range(1000)]))
    status, body = await rejected(
        root.createRole("all", role_body(*[f"assume:part{i}" for i in range(11)]))
    )
    assert status == 400 and "10,000" in body["message"].replace("10000", "10,000"), body
    status, _ = await rejected(root.role("all"))
    assert status == 404


async def test_access_tokens_are_encrypted_at_rest_and_never_logged(
    start_coordinator: StartCoordinator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="coordinator")
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Auth("aio", coordinator.url, creds["root"])
    token = (await root.createClient("c", client_body()))["accessToken"]
    reset = (await root.resetAccessToken("c"))["accessToken"]
    stored = await coordinator.parts.store.get_client("c")
    assert stored is not None
    for secret in (token, reset):
        assert secret.encode() not in stored.encrypted_access_token
        # The official client logs its answers at DEBUG; the coordinator's own lines only.
        assert not [
            r
            for r in caplog.records
            if r.name.startswith("coordinator") and secret in r.getMessage()
        ]
    assert secret not in (tmp_path / "coordinator.db").read_bytes().decode("latin-1")


async def test_last_use_is_recorded(start_coordinator: StartCoordinator, tmp_path: Path) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Auth("aio", coordinator.url, creds["root"])
    made = await root.createClient("c", client_body(scopes=["auth:current-scopes"]))
    # lastDateUsed starts at creation; a use within the resolution does not write it.
    assert made["lastDateUsed"] == made["created"]
    own = Auth("aio", coordinator.url, {"clientId": "c", "accessToken": made["accessToken"]})
    await own.currentScopes()
    assert await coordinator.parts.auth.directory.flush_used() == 0


SAMPLE_PARAMETERS = {
    "taskId": "fN1SbArXTPSVFNUvaOlinQ",
    "runId": "0",
    "provisionerId": "p",
    "workerType": "w",
    "taskQueueId": "p%2Fw",
    "name": "public/x",
    "hookGroupId": "g",
    "hookId": "h",
    "clientId": "sample-client",
    "roleId": "sample-role",
    "entityType": "client",
    "entityId": "sample-client",
    "workerGroup": "wg",
    "workerId": "wi",
    "indexPath": "sample.path",
    "namespace": "sample.namespace",
    "secretName": "project/sample",
    "rowId": "1",
}
"""A value for each path parameter of the endpoints :func:`url_checked` selects."""


def url_checked() -> list[Endpoint]:
    """Every endpoint, of every service, whose scopes the request pipeline checks from the
    path alone before anything else: the one check all of them pass through."""
    return [
        endpoint
        for service in SERVICES
        for endpoint in service.endpoints
        if endpoint.scopes is not None
        and endpoint.scopes_from_url
        and endpoint.input is None
        and not any(parameter.required for parameter in endpoint.query)
    ]


def _granting(template: Any) -> set[str]:
    """A scope granting each scope of ``template``: its text up to the first placeholder,
    then ``*`` (none for a scope that is all placeholder: one the caller delegates)."""
    if isinstance(template, str):
        literal = template.split("<", 1)[0]
        return {literal + "*"} if literal else set()
    found: set[str] = set()
    for operand in next(iter(template.values())):
        if isinstance(operand, dict) and ("for" in operand or "if" in operand):
            found |= _granting(operand.get("each", operand.get("then")))
        else:
            found |= _granting(operand)
    return found


async def test_every_route_s_scope_check_sees_roles_and_temporary_credentials(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Auth("aio", coordinator.url, creds["root"])
    # Every declared scope, granted through a role (which cannot grant `*`).
    granted = sorted(
        {
            scope
            for service in SERVICES
            for endpoint in service.endpoints
            if endpoint.scopes is not None
            for scope in _granting(endpoint.scopes)
        }
    )
    await root.createRole("everything", role_body(*granted))
    holder = await root.createClient("holder", client_body(scopes=["assume:everything"]))
    empty = await root.createClient("empty", client_body())
    temporary = taskcluster.createTemporaryCredentials(
        "holder",
        holder["accessToken"],
        taskcluster.fromNow("-1 minute"),
        taskcluster.fromNow("1 hour"),
        ["assume:everything"],
    )
    callers = {
        "role": {"clientId": "holder", "accessToken": holder["accessToken"]},
        "temporary": temporary,
        "none": {"clientId": "empty", "accessToken": empty["accessToken"]},
    }
    endpoints = url_checked()
    assert {e.prefix for e in endpoints} == {s.prefix for s in SERVICES}
    async with aiohttp.ClientSession() as session:
        for endpoint in endpoints:
            path = endpoint.route
            for name in endpoint.path_parameters:
                path = path.replace(f"{{{name}}}", SAMPLE_PARAMETERS[name])
            url = coordinator.url + endpoint.prefix + path
            if endpoint.filters == "required":
                url += "?taskQueueId=p/w"
            for who, credentials in callers.items():
                header = _signed(credentials, url, endpoint.method)
                async with session.request(
                    endpoint.method, url, headers={"Authorization": header}
                ) as response:
                    answer = await response.text()
                if who == "none":
                    assert response.status == 403, (endpoint.name, answer)
                else:
                    assert response.status not in (401, 403), (endpoint.name, who, answer)


def _signed(credentials: Credentials, url: str, method: str) -> str:
    """A Hawk header as the official clients make it, certificate included."""
    ext = None
    if "certificate" in credentials:
        certificate = json.loads(credentials["certificate"])
        ext = base64.b64encode(json.dumps({"certificate": certificate}).encode()).decode()
    sender = mohawk.Sender(
        {"id": credentials["clientId"], "key": credentials["accessToken"], "algorithm": "sha256"},
        url,
        method,
        content=mohawk.base.EmptyValue,
        content_type=mohawk.base.EmptyValue,
        ext=ext,
        always_hash_content=False,  # no body, no payload hash
    )
    header: str = sender.request_header
    return header
