"""The auth service across two ``queue-coordinator serve`` replicas on one PostgreSQL store:
a client or role changed through one replica is in force on the other within a second
(reset accessToken, disable, role change), driven through the official ``taskcluster.Auth``
and ``Queue`` clients, unmodified."""

from __future__ import annotations

import time
from typing import Any

import taskcluster
import taskcluster.aio
from taskcluster.exceptions import TaskclusterAuthFailure, TaskclusterRestFailure

from devharness.waiting import wait_until
from tests.fixtures.replicas import Cluster

PROPAGATION_S = 1.0
"""How soon a change made through one replica holds on the other."""


def auth_client(root_url: str, credentials: dict[str, str]) -> Any:
    return taskcluster.aio.Auth(
        {"rootUrl": root_url, "credentials": dict(credentials), "maxRetries": 0}
    )


async def status_of(root_url: str, credentials: dict[str, str]) -> int:
    """200 when ``credentials`` may call currentScopes on the replica, else the refusal's
    status."""
    try:
        await auth_client(root_url, credentials).currentScopes()
    except (TaskclusterRestFailure, TaskclusterAuthFailure) as error:
        return int(error.status_code)
    return 200


async def scopes_of(root_url: str, credentials: dict[str, str]) -> set[str]:
    return set((await auth_client(root_url, credentials).currentScopes())["scopes"])


async def within_propagation(what: str, check: Any) -> float:
    """Seconds until ``check()`` holds, which must be within :data:`PROPAGATION_S`."""
    started = time.monotonic()
    await wait_until(check, within=PROPAGATION_S, interval=0.02, what=what)
    return time.monotonic() - started


async def test_changes_through_one_replica_hold_on_the_other_within_a_second(
    store_cluster: Cluster,
) -> None:
    first, second = (replica.url for replica in store_cluster.replicas)
    root = {
        "clientId": store_cluster.root.client_id,
        "accessToken": store_cluster.root.access_token,
    }
    admin = auth_client(first, root)
    await admin.createRole("team:readers", {"description": "t", "scopes": ["auth:current-scopes"]})
    made = await admin.createClient(
        "team/alice",
        {
            "description": "t",
            "expires": taskcluster.fromNowJSON("1 day"),
            "scopes": ["assume:team:readers"],
        },
    )
    old = {"clientId": "team/alice", "accessToken": made["accessToken"]}

    async def usable_on_second() -> bool:
        return await status_of(second, old) == 200

    await within_propagation("the new client works on the other replica", usable_on_second)
    assert await status_of(first, old) == 200

    new = {
        "clientId": "team/alice",
        "accessToken": (await admin.resetAccessToken("team/alice"))["accessToken"],
    }

    async def old_refused_everywhere() -> bool:
        return await status_of(second, old) == 401 and await status_of(first, old) == 401

    await within_propagation("the old token is refused on both replicas", old_refused_everywhere)
    assert await status_of(second, new) == 200

    await admin.disableClient("team/alice")

    async def disabled_on_second() -> bool:
        return await status_of(second, new) == 401

    await within_propagation(
        "the disabled client is refused on the other replica", disabled_on_second
    )
    await admin.enableClient("team/alice")

    async def enabled_on_second() -> bool:
        return await status_of(second, new) == 200

    await within_propagation("the enabled client works again", enabled_on_second)

    await admin.updateRole(
        "team:readers", {"description": "t", "scopes": ["auth:current-scopes", "auth:list-roles"]}
    )

    async def role_change_on_second() -> bool:
        return "auth:list-roles" in await scopes_of(second, new)

    await within_propagation("the role change holds on the other replica", role_change_on_second)
    await auth_client(second, new).listRoles()
