"""The secrets and purge-cache parts of the store contract
(:class:`~coordinator.store.contract.secrets.SecretStore`,
:class:`~coordinator.store.contract.purge_cache.PurgeCacheStore`), run against SQLite and
PostgreSQL alike: a secret written once, replaced, read back byte for byte, listed by name
without the expired ones, deleted with its audit entry, and swept once expired; purge requests
raised (never lowered) by each purge, listed by task queue and all together, and expired.
"""

from __future__ import annotations

from coordinator.domain.clients import AuditEntry
from coordinator.domain.purge_cache import PurgeRequest
from coordinator.domain.secrets import StoredSecret
from coordinator.domain.task_queues import TaskQueue
from coordinator.store.base import Store
from tests.fixtures.records import DAY, MINUTE, NOW


def secret(name: str, value: bytes = b"\x00\xffsealed", expires: int = NOW + DAY) -> StoredSecret:
    return StoredSecret(name=name, encrypted_value=value, expires=expires)


def audit(name: str, action: str, *, by: str = "root", at: int = NOW) -> AuditEntry:
    return AuditEntry(
        entity_type="secret", entity_id=name, client_id=by, action_type=action, created=at
    )


async def history(store: Store, name: str) -> list[str]:
    entries = await store.audit_history(
        entity_type="secret", entity_id=name, client_id=None, limit=100, after=None
    )
    return [entry.action_type for entry in entries]


async def test_a_secret_is_inserted_once_updated_and_deleted_with_its_audit(store: Store) -> None:
    name = "project/a/b c"
    assert await store.get_secret(name) is None
    assert not await store.update_secret(secret(name), audit=audit(name, "updated"))
    assert await store.insert_secret(secret(name), audit=audit(name, "created"))
    assert await store.get_secret(name) == secret(name)
    assert not await store.insert_secret(secret(name, b"other"), audit=audit(name, "created"))
    assert await store.get_secret(name) == secret(name)  # nothing written
    replaced = secret(name, b"\x01new", NOW + 2 * DAY)
    assert await store.update_secret(replaced, audit=audit(name, "updated"))
    assert await store.get_secret(name) == replaced
    assert await store.delete_secret(name, audit=audit(name, "deleted"))
    assert await store.get_secret(name) is None
    assert not await store.delete_secret(name, audit=audit(name, "deleted"))
    assert await history(store, name) == ["created", "updated", "deleted"]
    # The entries are the auth service's history of the entity: also listed by who made them.
    by_root = await store.audit_history(
        entity_type=None, entity_id=None, client_id="root", limit=100, after=None
    )
    assert [(e.entity_type, e.entity_id) for e in by_root] == [("secret", name)] * 3


async def test_list_secrets_pages_by_name_without_the_expired(store: Store) -> None:
    names = ["b", "a/x", "a", "c", "a/y"]
    for name in names:
        await store.insert_secret(secret(name), audit=audit(name, "created"))
    await store.insert_secret(secret("old", expires=NOW - 1), audit=audit("old", "created"))
    first = await store.list_secrets(now=NOW, limit=3, after=None)
    assert first == ["a", "a/x", "a/y"]
    assert await store.list_secrets(now=NOW, limit=3, after=first[-1]) == ["b", "c"]
    # Expiring at NOW is not expired yet at NOW (upstream's expires >= now()).
    await store.insert_secret(secret("edge", expires=NOW), audit=audit("edge", "created"))
    assert "edge" in await store.list_secrets(now=NOW, limit=100, after=None)


async def test_expired_secrets_are_found_earliest_first_and_deleted_only_if_still_expired(
    store: Store,
) -> None:
    await store.insert_secret(secret("late", expires=NOW - MINUTE), audit=audit("late", "created"))
    await store.insert_secret(secret("early", expires=NOW - DAY), audit=audit("early", "created"))
    await store.insert_secret(secret("live"), audit=audit("live", "created"))
    assert await store.expired_secrets(NOW, 10) == ["early", "late"]
    assert await store.expired_secrets(NOW, 1) == ["early"]
    # Set again since the scan: the sweep leaves it.
    await store.update_secret(secret("late"), audit=audit("late", "updated"))
    assert not await store.delete_secret("late", audit=audit("late", "expired"), expired_before=NOW)
    assert await store.delete_secret("early", audit=audit("early", "expired"), expired_before=NOW)
    assert await store.expired_secrets(NOW, 10) == []
    assert await history(store, "late") == ["created", "updated"]
    assert await history(store, "early") == ["created", "expired"]


# --- purge-cache --------------------------------------------------------------------------------

Q = TaskQueue("prov", "wt")


def purge(cache: str, before: int, task_queue: TaskQueue = Q) -> PurgeRequest:
    return PurgeRequest(
        task_queue=task_queue, cache_name=cache, before=before, expires=before + DAY
    )


async def test_a_purge_raises_its_request_and_never_lowers_it(store: Store) -> None:
    assert await store.purge_cache(purge("cache", NOW)) == purge("cache", NOW)
    assert await store.purge_cache(purge("cache", NOW + MINUTE)) == purge("cache", NOW + MINUTE)
    # a replica whose clock is behind
    assert await store.purge_cache(purge("cache", NOW)) == purge("cache", NOW + MINUTE)
    assert await store.purge_requests(Q, since=0) == [purge("cache", NOW + MINUTE)]


async def test_purge_requests_of_a_task_queue_since_a_time(store: Store) -> None:
    await store.purge_cache(purge("b", NOW))
    await store.purge_cache(purge("a", NOW + MINUTE))
    await store.purge_cache(purge("a", NOW, TaskQueue("prov", "other")))
    assert await store.purge_requests(Q, since=0) == [purge("a", NOW + MINUTE), purge("b", NOW)]
    assert await store.purge_requests(Q, since=NOW) == [purge("a", NOW + MINUTE), purge("b", NOW)]
    assert await store.purge_requests(Q, since=NOW + 1) == [purge("a", NOW + MINUTE)]
    assert await store.purge_requests(TaskQueue("prov", "none"), since=0) == []


async def test_all_purge_requests_page_by_task_queue_and_cache(store: Store) -> None:
    made = [
        purge("z", NOW, TaskQueue("a", "b")),
        purge("a", NOW, TaskQueue("a", "c")),
        purge("b", NOW, TaskQueue("a", "c")),
        purge("a", NOW, TaskQueue("b", "a")),
    ]
    for request in reversed(made):
        await store.purge_cache(request)
    first = await store.all_purge_requests(limit=2, after=None)
    assert first == made[:2]
    last = first[-1]
    after = (last.task_queue.provisioner_id, last.task_queue.worker_type, last.cache_name)
    assert await store.all_purge_requests(limit=5, after=after) == made[2:]


async def test_expired_purge_requests_are_deleted_in_batches(store: Store) -> None:
    for index in range(3):
        await store.purge_cache(purge(f"old-{index}", NOW - 2 * DAY + index))
    await store.purge_cache(purge("fresh", NOW))
    assert await store.expire_purge_requests(NOW, 2) == 2
    assert await store.expire_purge_requests(NOW, 2) == 1
    assert await store.expire_purge_requests(NOW, 2) == 0
    assert await store.all_purge_requests(limit=10, after=None) == [purge("fresh", NOW)]
