"""The Node Taskcluster client (``taskcluster-client`` 87.1.3, pinned in package.json) reads a
private artifact from a coordinator with authentication on through a signed URL
(``buildSignedUrl``: a Hawk bewit in the query string), following the 303 to the bytes the
worker uploaded; the same URL with its bewit's MAC altered is refused with a 401.
``tests/e2e/node_signed_url.js`` makes the client's calls.

The URL is signed once with a permanent client's credentials and once with a run's temporary
credentials (the bewit then carries their certificate), as scriptworker signs the URLs of its
tasks' upstream artifacts.

The same client's ``Hooks`` drives the hooks service (docs/hooks.md) through
``tests/e2e/node_hooks.js``: create, read, trigger (with credentials and with the token), last
fires, status, remove; and its ``Auth`` the auth service (docs/auth.md) through
``tests/e2e/node_auth.js``: a role and a client assuming it, read back, used, reset, deleted;
its ``Index`` the index service (docs/index-service.md) through ``tests/e2e/node_index.js``;
and its ``Secrets`` and ``PurgeCache`` the secrets and purge-cache services (docs/secrets.md)
through ``tests/e2e/node_secrets.js``: a secret set, read, listed and removed, a cache purged.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import slugid

from devharness.processes import REPO
from devharness.tasks import task_definition
from tests.fixtures.clients import WT, Queue, start_secured, worker_scopes
from tests.fixtures.commands import run_to_end, taskcluster_env
from tests.fixtures.coordinator import WORKER, StartCoordinator

NODE_SCRIPT = Path(__file__).with_name("node_signed_url.js")
CLIENT = REPO / "node_modules" / "taskcluster-client"
PROVISIONER = "node-prov"
NAME = "private/secret.bin"
CONTENT_TYPE = "application/octet-stream"
DATA = bytes(range(256)) * 16 + b"from the worker"
NODE_TIMEOUT_S = 120.0

pytestmark = pytest.mark.skipif(
    not CLIENT.exists(),
    reason=f"{CLIENT} is missing: ./scripts/test installs it (npm ci)",
)


async def node_read(root_url: str, credentials: dict[str, str], task_id: str) -> dict[str, Any]:
    """What ``node_signed_url.js`` saw reading run 0's :data:`NAME` of ``task_id`` signed by
    ``credentials``."""
    request = {
        "rootUrl": root_url,
        "credentials": credentials,
        "taskId": task_id,
        "runId": 0,
        "name": NAME,
    }
    node = await run_to_end(
        ["node", str(NODE_SCRIPT), json.dumps(request)],
        cwd=REPO,
        env=taskcluster_env(root_url, None),
        timeout_s=NODE_TIMEOUT_S,
    )
    assert node.status == 0, node.output
    seen: dict[str, Any] = json.loads(node.stdout)
    return seen


@pytest.mark.parametrize("signer", ["permanent", "temporary"])
async def test_node_client_reads_a_private_artifact_through_a_signed_url(
    start_coordinator: StartCoordinator, tmp_path: Path, signer: str
) -> None:
    coordinator, creds = await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {"worker": worker_scopes(PROVISIONER), "reader": ["queue:get-artifact:private/*"]},
    )
    root = Queue("aio", coordinator.url, creds["root"])
    task_id = slugid.nice()
    # The task's scopes go into its runs' temporary credentials.
    definition = task_definition(
        provisionerId=PROVISIONER, workerType=WT, scopes=["queue:get-artifact:private/*"]
    )
    await root.createTask(task_id, definition)
    claim = await Queue("aio", coordinator.url, creds["worker"]).claimTask(task_id, 0, WORKER)
    run = Queue("aio", coordinator.url, claim["credentials"])
    created = await run.createArtifact(
        task_id,
        0,
        NAME,
        {"storageType": "s3", "expires": claim["task"]["expires"], "contentType": CONTENT_TYPE},
    )
    async with aiohttp.ClientSession() as http:
        async with http.put(
            created["putUrl"], data=DATA, headers={"Content-Type": CONTENT_TYPE}
        ) as response:
            assert response.status in (200, 204), await response.text()

        signing = creds["reader"] if signer == "permanent" else claim["credentials"]
        seen = await node_read(coordinator.url, dict(signing), task_id)

        signed = seen["signed"]
        assert signed["status"] == 303, seen
        assert signed["body"]["storageType"] == "s3", seen
        assert signed["location"] == signed["body"]["url"], seen
        followed = seen["followed"]
        assert followed["status"] == 200, seen
        assert followed["contentType"] == CONTENT_TYPE, seen
        assert base64.b64decode(followed["body"]) == DATA

        tampered = seen["tampered"]
        assert tampered["status"] == 401, seen
        assert tampered["body"]["code"] == "AuthenticationFailed", seen
        assert "signature does not match" in tampered["body"]["message"], seen

        # Without the bewit the caller is anonymous, whose scopes cover only public/ names:
        # a 401 (credentials are missing), as Taskcluster answers an unauthenticated call.
        unsigned = seen["signedUrl"].split("?")[0]
        async with http.get(unsigned, allow_redirects=False) as response:
            assert response.status == 401, await response.text()
            refused = await response.json()
        assert refused["code"] == "AuthenticationFailed", refused
        assert f"queue:get-artifact:{NAME}" in refused["message"], refused


HOOKS_SCRIPT = Path(__file__).with_name("node_hooks.js")


async def test_the_node_clients_hooks_drive_the_hooks_service(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await start_secured(start_coordinator, tmp_path / "clients.json", {})
    body = {
        "metadata": {"name": "from node", "description": "", "owner": "me@example.com"},
        "schedule": ["0 0 * * *"],
        "task": task_definition(
            provisionerId=PROVISIONER, workerType=WT, payload={"colour": "${payload.colour}"}
        ),
        "triggerSchema": {"type": "object", "properties": {"colour": {"type": "string"}}},
    }
    request = {
        "rootUrl": coordinator.url,
        "credentials": creds["root"],
        "hookGroupId": "node",
        "hookId": "nightly/build",
        "body": body,
    }
    node = await run_to_end(
        ["node", str(HOOKS_SCRIPT), json.dumps(request)],
        cwd=REPO,
        env=taskcluster_env(coordinator.url, None),
        timeout_s=NODE_TIMEOUT_S,
    )
    assert node.status == 0, node.output
    seen: dict[str, Any] = json.loads(node.stdout)

    assert seen["created"] == seen["hook"] == seen["listed"]["hooks"][0]
    assert seen["created"]["hookId"] == "nightly/build" and "node" in seen["groups"]["groups"]
    queue = Queue("aio", coordinator.url)
    for fired, colour in ((seen["triggered"], "blue"), (seen["byToken"], "green")):
        assert (await queue.task(fired["taskId"]))["payload"] == {"colour": colour}
    assert {f["taskId"] for f in seen["lastFires"]["lastFires"]} == {
        seen["triggered"]["taskId"],
        seen["byToken"]["taskId"],
    }
    assert seen["status"]["lastFire"]["result"] == "success"
    assert seen["status"]["nextScheduledDate"].endswith("T00:00:00.000Z")
    assert seen["afterRemove"] == 404


AUTH_SCRIPT = Path(__file__).with_name("node_auth.js")


async def test_the_node_clients_auth_manages_clients_and_roles(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await start_secured(start_coordinator, tmp_path / "clients.json", {})
    scopes = ["auth:current-scopes", f"queue:create-task:lowest:{PROVISIONER}/{WT}"]
    request = {
        "rootUrl": coordinator.url,
        "credentials": creds["root"],
        "clientId": "node/app",
        "roleId": "project:node",
        "scopes": scopes,
    }
    node = await run_to_end(
        ["node", str(AUTH_SCRIPT), json.dumps(request)],
        cwd=REPO,
        env=taskcluster_env(coordinator.url, None),
        timeout_s=NODE_TIMEOUT_S,
    )
    assert node.status == 0, node.output
    seen: dict[str, Any] = json.loads(node.stdout)
    assert seen["role"]["scopes"] == sorted(scopes)
    assert len(seen["created"]["accessToken"]) == 44
    assert "accessToken" not in seen["client"]
    assert [c["clientId"] for c in seen["clients"]["clients"]] == ["node/app"]
    assert seen["roleIds"]["roleIds"] == ["project:node"]
    assert set(scopes) <= set(seen["expanded"]["scopes"])
    assert set(scopes) | {"assume:project:node"} <= set(seen["current"]["scopes"])
    assert seen["tested"]["clientId"] == "tester"
    assert seen["oldAfterReset"] == 401
    assert seen["afterDelete"] == 404


INDEX_SCRIPT = Path(__file__).with_name("node_index.js")


async def test_the_node_clients_index_inserts_finds_lists_and_deletes(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await start_secured(
        start_coordinator, tmp_path / "clients.json", {"indexer": ["index:*"]}
    )
    task_ids = [slugid.nice(), slugid.nice()]
    request = {"rootUrl": coordinator.url, "credentials": creds["indexer"], "taskIds": task_ids}
    node = await run_to_end(
        ["node", str(INDEX_SCRIPT), json.dumps(request)],
        cwd=REPO,
        env=taskcluster_env(coordinator.url, None),
        timeout_s=NODE_TIMEOUT_S,
    )
    assert node.status == 0, node.output
    seen: dict[str, Any] = json.loads(node.stdout)
    assert (seen["inserted"]["taskId"], seen["inserted"]["rank"]) == (task_ids[0], 2)
    assert seen["outranked"]["taskId"] == task_ids[0]
    assert seen["found"]["data"] == {"from": "node"}
    assert [n["namespace"] for n in seen["top"]["namespaces"]] == ["node"]
    assert [n["namespace"] for n in seen["namespaces"]["namespaces"]] == ["node.sub"]
    assert [t["namespace"] for t in seen["tasks"]["tasks"]] == ["node.first"]
    assert "continuationToken" not in seen["tasks"]
    assert [t["namespace"] for t in seen["atIndexes"]["tasks"]] == ["node.sub.second", "node.first"]
    assert seen["deleted"] == {}
    assert seen["afterDelete"] == 404


SECRETS_SCRIPT = Path(__file__).with_name("node_secrets.js")


async def test_the_node_clients_secrets_and_purge_cache(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await start_secured(start_coordinator, tmp_path / "clients.json", {})
    value = {"token": "from node", "n": [1, 2]}
    request = {
        "rootUrl": coordinator.url,
        "credentials": creds["root"],
        "name": "project/node/secret",
        "value": value,
        "workerPoolId": f"{PROVISIONER}/{WT}",
    }
    node = await run_to_end(
        ["node", str(SECRETS_SCRIPT), json.dumps(request)],
        cwd=REPO,
        env=taskcluster_env(coordinator.url, None),
        timeout_s=NODE_TIMEOUT_S,
    )
    assert node.status == 0, node.output
    seen: dict[str, Any] = json.loads(node.stdout)
    assert seen["set"] == {}
    assert seen["got"]["secret"] == value
    assert seen["listed"]["secrets"] == ["project/node/secret"]
    assert seen["removed"] == {}
    assert seen["afterRemove"] == 404
    mine = [(PROVISIONER, WT, "node-cache")]
    for answer in (seen["requests"], seen["all"]):
        assert [
            (r["provisionerId"], r["workerType"], r["cacheName"]) for r in answer["requests"]
        ] == mine
