"""The secrets service (docs/secrets.md) through the official ``taskcluster.Secrets`` client,
sync and aio, unmodified, against an in-process coordinator with authentication on: set, get,
list and remove, names with ``/`` either way, exactly the scopes each method declares (a
task's temporary credentials included), expiry (a 404 at once, the sweep with its audit
entry), the value encrypted at rest and never in a log line or an error body, and the bad
input that is a 400 with nothing changed."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import slugid
import taskcluster

import hawk_signing
from coordinator.api.endpoints import SECRETS_PREFIX
from coordinator.domain.clients import AuditEntry
from coordinator.domain.records import to_iso
from coordinator.domain.secrets import StoredSecret
from coordinator.resolvers import secret_sweeper
from coordinator.service.secrets import SecretUnreadable
from devharness.api import call
from devharness.tasks import task_definition
from tests.fixtures.clients import (
    Auth,
    Credentials,
    Queue,
    Secrets,
    missing_scopes,
    rejected,
    start_secured,
    worker_scopes,
)
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator

PROV = "secrets-prov"
VALUE = {"password": "hunter2-do-not-log", "nested": {"n": [1, 2.5, None, True]}}
MINUTE_MS = 60_000


async def secured(
    start_coordinator: StartCoordinator, tmp_path: Path, **overrides: Any
) -> tuple[RunningCoordinator, dict[str, Credentials]]:
    return await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {
            "reader": ["secrets:get:project/a"],
            "writer": ["secrets:set:project/*"],
            "lister": ["secrets:list-secrets"],
            "producer": [
                f"queue:create-task:lowest:{PROV}/wt",
                "queue:scheduler-id:-",
                "queue:create-task:project:none",
                "secrets:get:project/a",  # what the task's scopes may hold
            ],
            "worker": worker_scopes(PROV),
        },
        **overrides,
    )


def body(value: Any = VALUE, expires: str | None = None) -> dict[str, Any]:
    return {"secret": value, "expires": expires or taskcluster.fromNowJSON("1 day")}


async def names(secrets: Secrets, **query: Any) -> list[str]:
    """Every secret's name, page by page."""
    found: list[str] = []
    while True:
        page = await secrets.list(query=query)
        found += page["secrets"]
        if "continuationToken" not in page:
            return found
        query = {**query, "continuationToken": page["continuationToken"]}


@pytest.mark.parametrize("kind", ["sync", "aio"])
async def test_set_get_list_remove_through_the_official_client(
    kind: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Secrets(kind, coordinator.url, creds["root"])
    assert (await root.ping())["alive"] is True
    expires = taskcluster.fromNowJSON("2 days")
    assert await root.set("project/a", body(expires=expires)) == {}
    got = await root.get("project/a")
    assert got["secret"] == VALUE
    assert got["expires"][:19] == expires[:19]

    await root.set("project/a", body({"replaced": True}))
    assert (await root.get("project/a"))["secret"] == {"replaced": True}
    for name in ["b", "project/c d", "a/b/c/"]:
        await root.set(name, body({"name": name}))
        assert (await root.get(name))["secret"] == {"name": name}
    assert await names(root) == ["a/b/c/", "b", "project/a", "project/c d"]
    assert await names(root, limit=1) == ["a/b/c/", "b", "project/a", "project/c d"]

    assert await root.remove("project/a") == {}
    assert await root.remove("project/a") == {}  # whether or not it exists
    status, error = await rejected(root.get("project/a"))
    assert (status, error["code"], error["message"]) == (
        404,
        "ResourceNotFound",
        "Secret not found",
    )

    # The changes are in the auth service's audit history of the secret, as upstream's.
    history = await Auth(kind, coordinator.url, creds["root"]).getEntityHistory(
        "secret", "project/a"
    )
    assert [e["actionType"] for e in history["auditHistory"]] == ["created", "updated", "deleted"]
    assert {e["clientId"] for e in history["auditHistory"]} == {"root"}


async def test_a_name_s_slashes_are_one_name_sent_raw_or_encoded(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    url = coordinator.url + SECRETS_PREFIX + "/secret/"
    raw = await call(
        coordinator.session,
        "PUT",
        url + "x/y/z",
        body(),
        credentials=hawk_signing.Credentials.from_json(creds["root"]),
    )
    assert raw.status == 200, raw.body
    encoded = await call(
        coordinator.session,
        "GET",
        url + quote("x/y/z", safe=""),
        credentials=hawk_signing.Credentials.from_json(creds["root"]),
    )
    assert (encoded.status, encoded.body["secret"]) == (200, VALUE)


async def test_each_method_needs_exactly_its_scope(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Secrets("aio", coordinator.url, creds["root"])
    await root.set("project/a", body())
    await root.set("project/b", body())
    reader = Secrets("aio", coordinator.url, creds["reader"])
    assert (await reader.get("project/a"))["secret"] == VALUE
    status, error = await rejected(reader.get("project/b"))
    assert status == 403 and missing_scopes(error) == "secrets:get:project/b"
    # 403 whether or not the secret exists: a name is not confirmed to who may not read it.
    status, error = await rejected(reader.get("project/none"))
    assert status == 403
    status, error = await rejected(reader.list())
    assert status == 403 and missing_scopes(error) == "secrets:list-secrets"
    status, error = await rejected(reader.remove("project/a"))
    assert status == 403 and missing_scopes(error) == "secrets:set:project/a"

    writer = Secrets("aio", coordinator.url, creds["writer"])
    await writer.set("project/new", body())
    status, error = await rejected(writer.set("other", body()))
    assert status == 403 and missing_scopes(error) == "secrets:set:other"
    status, _ = await rejected(writer.get("project/new"))  # set does not grant get
    assert status == 403
    await writer.remove("project/new")
    lister = Secrets("aio", coordinator.url, creds["lister"])
    assert await names(lister) == ["project/a", "project/b"]
    status, _ = await rejected(Secrets("aio", coordinator.url).get("project/a"))
    assert status == 401  # anonymous: the queue's answer to a request without credentials


@pytest.mark.parametrize("kind", ["sync", "aio"])
async def test_a_task_reads_the_secrets_its_scopes_grant_with_its_claim_s_credentials(
    kind: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Secrets(kind, coordinator.url, creds["root"])
    await root.set("project/a", body({"for": "the task"}))
    await root.set("project/b", body({"for": "nobody"}))
    task_id = slugid.nice()
    await Queue(kind, coordinator.url, creds["producer"]).createTask(
        task_id,
        task_definition(provisionerId=PROV, workerType="wt", scopes=["secrets:get:project/a"]),
    )
    claim = await Queue(kind, coordinator.url, creds["worker"]).claimTask(
        task_id, 0, {"workerGroup": "wg", "workerId": "w1"}
    )
    as_task = Secrets(kind, coordinator.url, claim["credentials"])
    assert (await as_task.get("project/a"))["secret"] == {"for": "the task"}
    status, error = await rejected(as_task.get("project/b"))
    assert status == 403 and missing_scopes(error) == "secrets:get:project/b"


async def test_an_expired_secret_is_not_found_at_once_and_swept_with_an_audit_entry(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    clock = FakeClock()
    coordinator, creds = await secured(
        start_coordinator, tmp_path, clock=clock, run_resolvers=False
    )
    root = Secrets("aio", coordinator.url, creds["root"])
    # Minutes, not hours: Hawk checks the requests' timestamps on the same clock.
    await root.set("short", body(expires=to_iso(clock.now + MINUTE_MS)))
    await root.set("long", body(expires=to_iso(clock.now + 10 * MINUTE_MS)))
    clock.advance(120)
    status, error = await rejected(root.get("short"))
    assert (status, error["message"]) == (404, "Secret not found")
    assert await names(root) == ["long"]
    assert await secret_sweeper.run_once(coordinator.parts.secrets) == 1
    assert await secret_sweeper.run_once(coordinator.parts.secrets) == 0
    assert await coordinator.parts.store.get_secret("short") is None
    assert (await root.get("long"))["secret"] == VALUE
    history = await Auth("aio", coordinator.url, creds["root"]).getEntityHistory("secret", "short")
    assert [(e["actionType"], e["clientId"]) for e in history["auditHistory"]] == [
        ("created", "root"),
        ("expired", "static/taskcluster/secrets"),
    ]
    # Set again after expiring: a new secret.
    await root.set("short", body(expires=to_iso(clock.now + MINUTE_MS)))
    assert (await root.get("short"))["secret"] == VALUE


async def test_the_value_is_encrypted_at_rest_bound_to_its_name_and_never_logged(
    start_coordinator: StartCoordinator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Secrets("aio", coordinator.url, creds["root"])
    await root.set("project/a", body())
    await root.get("project/a")
    store = coordinator.parts.store
    stored = await store.get_secret("project/a")
    assert stored is not None
    assert b"hunter2" not in stored.encrypted_value
    # The row's ciphertext moved onto another name does not decrypt there.
    moved = StoredSecret(
        name="project/b", encrypted_value=stored.encrypted_value, expires=stored.expires
    )
    assert await store.insert_secret(moved, audit=_audit("project/b"))
    with pytest.raises(SecretUnreadable):
        await coordinator.parts.secrets.get_secret("project/b")
    # The coordinator's own lines: the official client in this process signs with mohawk,
    # whose DEBUG lines quote the bodies it hashes.
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("coordinator"))
    assert "hunter2" not in ours
    assert "secret created name='project/a' by=root" in ours


def _audit(name: str) -> AuditEntry:
    return AuditEntry(
        entity_type="secret", entity_id=name, client_id="test", action_type="created", created=0
    )


async def test_bad_names_and_bodies_are_a_400_that_never_echoes_the_value(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    root = Secrets("aio", coordinator.url, creds["root"])
    await root.set("kept", body())
    url = coordinator.url + SECRETS_PREFIX

    async def answer(method: str, path: str, sent: Any = None) -> tuple[int, Any]:
        response = await call(
            coordinator.session,
            method,
            url + path,
            sent,
            credentials=hawk_signing.Credentials.from_json(creds["root"]),
        )
        return response.status, response.body

    for name in ["", quote("a\x01b"), quote("caf\u00e9"), "x" * 1025]:
        for method, sent in [("PUT", body()), ("GET", None), ("DELETE", None)]:
            status, error = await answer(method, "/secret/" + name, sent)
            assert status == 400, (method, name, error)
            assert "secretName" in error["message"], error
    assert await names(root) == ["kept"]
    assert len("x" * 1024) == 1024
    await root.set("x" * 1024, body())  # the longest name

    bad_bodies: list[Any] = [
        {"secret": "hunter2-do-not-log", "expires": taskcluster.fromNowJSON("1 day")},
        {"secret": ["hunter2-do-not-log"], "expires": taskcluster.fromNowJSON("1 day")},
        {"secret": VALUE},
        {"secret": VALUE, "expires": "tomorrow"},
        {
            "secret": VALUE,
            "expires": taskcluster.fromNowJSON("1 day"),
            "extra": "hunter2-do-not-log",
        },
        {"expires": taskcluster.fromNowJSON("1 day"), "value": VALUE},
        ["hunter2-do-not-log"],
        "hunter2-do-not-log",
    ]
    for bad in bad_bodies:
        status, error = await answer("PUT", "/secret/kept", bad)
        assert status == 400, (bad, error)
        assert error["code"] == "InputValidationError"
        assert "hunter2" not in str(error), error
    status, error = await answer("PUT", "/secret/kept", bad_bodies[0])
    assert "body.secret: must be of type 'object'" in error["message"]
    assert error["requestInfo"]["payload"] == {"secret": "(OMITTED)", "expires": "(OMITTED)"}
    assert (await root.get("kept"))["secret"] == VALUE  # nothing changed

    # Refused for its scopes, the error body shows no value either.
    writer = Secrets("aio", coordinator.url, creds["writer"])
    status, error = await rejected(writer.set("other", body()))
    assert status == 403 and "hunter2" not in str(error)
