"""The auth part of the store contract
(:class:`~coordinator.store.contract.auth.AuthStore`), run against SQLite and PostgreSQL
alike: clients written once and changed by compare-and-set, the roles written as one set by
compare-and-set on their version, the auth generation, the audit history, and the events each
write puts in the outbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import pytest

from coordinator.domain.clients import AuditEntry, EntityType, Role, StoredClient
from coordinator.domain.events import BrokerReply, OutboxEntry, QueueEvent, auth_event
from coordinator.store.base import Store
from tests.fixtures.records import DAY, MINUTE, NOW


def new_client(client_id: str, **fields: object) -> StoredClient:
    """A client as createClient stores it; ``fields`` override."""
    client = StoredClient(
        client_id=client_id,
        description=f"the client {client_id}",
        encrypted_access_token=b"\x00\xffsealed " + client_id.encode(),
        scopes=("queue:create-task:*", f"assume:project:{client_id}"),
        expires=NOW + DAY,
        delete_on_expiration=True,
        disabled=False,
        created=NOW,
        last_modified=NOW,
        last_date_used=NOW,
        last_rotated=NOW,
    )
    return dataclasses.replace(client, **fields)  # type: ignore[arg-type]


def audit(
    entity_id: str,
    action: str = "created",
    *,
    by: str = "root",
    at: int = NOW,
    entity_type: EntityType = "client",
) -> AuditEntry:
    return AuditEntry(
        entity_type=entity_type, entity_id=entity_id, client_id=by, action_type=action, created=at
    )


def new_role(role_id: str, *scopes: str, at: int = NOW) -> Role:
    return Role(
        role_id=role_id,
        scopes=scopes or (f"scope-of:{role_id}",),
        description=f"the role {role_id}",
        created=at,
        last_modified=at,
    )


async def history(store: Store, entity_id: str, entity_type: EntityType = "client") -> list[str]:
    """The action types of the entity's audit entries, in order."""
    entries = await store.audit_history(
        entity_type=entity_type, entity_id=entity_id, client_id=None, limit=100, after=None
    )
    return [entry.action_type for entry in entries]


async def drain(store: Store) -> list[QueueEvent]:
    """Every event in the outbox, in order, handed out and confirmed."""
    seen: list[QueueEvent] = []

    async def publish(entries: Sequence[OutboxEntry]) -> BrokerReply:
        seen.extend(entry.event for entry in entries)
        return BrokerReply(confirmed=frozenset(entry.id for entry in entries))

    while (await store.publish_outbox(100, publish, now=NOW)).published:
        pass
    return seen


# --- clients ----------------------------------------------------------------------------------


async def test_a_client_is_written_once_read_back_exactly_and_deleted_once(store: Store) -> None:
    client = new_client("project/a")
    assert await store.get_client("project/a") is None
    assert await store.insert_client(client, audit=audit("project/a"))
    assert await store.get_client("project/a") == client
    generation = await store.auth_generation()

    other = new_client("project/a", description="another", encrypted_access_token=b"other")
    assert not await store.insert_client(other, audit=audit("project/a", by="intruder"))
    assert await store.get_client("project/a") == client  # nothing written
    assert await store.auth_generation() == generation
    assert await history(store, "project/a") == ["created"]

    assert await store.delete_client("project/a", audit=audit("project/a", "deleted"))
    assert await store.get_client("project/a") is None
    assert not await store.delete_client("project/a", audit=audit("project/a", "deleted"))
    assert await store.auth_generation() == generation + 1
    assert await history(store, "project/a") == ["created", "deleted"]  # it outlives the client


async def test_update_client_is_a_compare_and_set_on_the_version(store: Store) -> None:
    client = new_client("c")
    await store.insert_client(client, audit=audit("c"))
    changed = dataclasses.replace(
        client,
        description="changed",
        encrypted_access_token=b"rotated",
        scopes=("a", "b"),
        expires=NOW + 2 * DAY,
        delete_on_expiration=False,
        disabled=True,
        created=NOW + 5,  # created never changes
        last_modified=NOW + MINUTE,
        last_rotated=NOW + MINUTE,
    )
    stored = await store.update_client(changed, audit=audit("c", "updated"))
    assert stored == dataclasses.replace(changed, created=NOW, version=2)
    assert await store.get_client("c") == stored
    generation = await store.auth_generation()

    stale = dataclasses.replace(changed, description="stale")  # still version 1
    assert await store.update_client(stale, audit=audit("c", "updated")) is None
    assert await store.get_client("c") == stored  # nothing written
    assert await store.auth_generation() == generation
    assert await history(store, "c") == ["created", "updated"]
    gone = new_client("gone", version=1)
    assert await store.update_client(gone, audit=audit("gone", "updated")) is None
    assert await history(store, "gone") == []

    assert stored is not None
    racers = [dataclasses.replace(stored, description=f"racer {i}") for i in range(5)]
    won = await asyncio.gather(
        *(store.update_client(r, audit=audit("c", "updated")) for r in racers)
    )
    winners = [result for result in won if result is not None]
    assert len(winners) == 1 and winners[0].version == 3
    assert await store.get_client("c") == winners[0]
    assert await history(store, "c") == ["created", "updated", "updated"]
    assert await store.auth_generation() == generation + 1


async def test_update_client_never_lowers_the_last_date_used(store: Store) -> None:
    client = new_client("c", last_date_used=NOW)
    await store.insert_client(client, audit=audit("c"))
    await store.mark_clients_used({"c": NOW + DAY})  # after the updater read the client
    stored = await store.update_client(
        dataclasses.replace(client, disabled=True), audit=audit("c", "client disabled")
    )
    assert stored is not None and stored.disabled and stored.last_date_used == NOW + DAY
    later = dataclasses.replace(stored, last_date_used=NOW + 2 * DAY)
    again = await store.update_client(later, audit=audit("c", "updated"))
    assert again is not None and again.last_date_used == NOW + 2 * DAY


async def test_list_clients_pages_by_client_id_within_a_prefix_that_is_no_pattern(
    store: Store,
) -> None:
    ids = ["a_b", "aXb", "a%b", "a%", "ab", "a_", "a", "b", "B", "a_b/c", "a\\b", "a_c"]
    for client_id in ids:
        await store.insert_client(new_client(client_id), audit=audit(client_id))
    in_order = sorted(ids)  # code points: "B" before "a", "%" before "X" before "\\" before "_"

    async def listed(prefix: str | None, *, limit: int = 99, after: str | None = None) -> list[str]:
        clients = await store.list_clients(prefix=prefix, limit=limit, after=after)
        return [client.client_id for client in clients]

    assert await listed(None) == in_order
    assert [c.client_id for c in await store.all_clients()] == in_order
    assert await store.all_clients() == [new_client(client_id) for client_id in in_order]
    assert await listed("") == in_order
    assert await listed("a_") == ["a_", "a_b", "a_b/c", "a_c"]
    assert await listed("a%") == ["a%", "a%b"]
    assert await listed("a\\") == ["a\\b"]
    assert await listed("a_b") == ["a_b", "a_b/c"]
    assert await listed("a_b/c") == ["a_b/c"]
    assert await listed("c") == []
    assert await listed("a") == [i for i in in_order if i.startswith("a")]
    assert await listed("\U0010ffff") == []

    pages, after = [], None
    while page := await listed("a", limit=3, after=after):
        pages.append(page)
        after = page[-1]
    assert pages == [["a", "a%", "a%b"], ["aXb", "a\\b", "a_"], ["a_b", "a_b/c", "a_c"], ["ab"]]
    assert await listed(None, limit=2, after="a_c") == ["ab", "b"]
    assert await listed("a_", limit=10, after="a_b") == ["a_b/c", "a_c"]
    assert await listed("a_", limit=10, after="a_c") == []
    assert await listed("a_", limit=10, after="A") == ["a_", "a_b", "a_b/c", "a_c"]


async def test_expired_clients_are_those_to_delete_that_expired_the_earliest_first(
    store: Store,
) -> None:
    for client_id, expires, delete in [
        ("late", NOW - MINUTE, True),
        ("early", NOW - DAY, True),
        ("kept", NOW - 2 * DAY, False),  # not deleted on expiration
        ("now", NOW, True),  # expires at now: not before it
        ("later", NOW + DAY, True),
        ("tie-b", NOW - 2 * MINUTE, True),
        ("tie-a", NOW - 2 * MINUTE, True),
    ]:
        client = new_client(client_id, expires=expires, delete_on_expiration=delete)
        await store.insert_client(client, audit=audit(client_id))

    expired = await store.expired_clients(NOW, 10)
    assert [c.client_id for c in expired] == ["early", "tie-a", "tie-b", "late"]
    assert expired[0] == new_client("early", expires=NOW - DAY)
    assert [c.client_id for c in await store.expired_clients(NOW, 2)] == ["early", "tie-a"]
    assert [c.client_id for c in await store.expired_clients(NOW - DAY, 10)] == []
    assert [c.client_id for c in await store.expired_clients(NOW + 1, 10)][-1] == "now"


async def test_mark_clients_used_only_raises_and_is_no_write_of_the_client(store: Store) -> None:
    await store.insert_client(new_client("a", last_date_used=NOW), audit=audit("a"))
    await store.insert_client(new_client("b_", last_date_used=NOW), audit=audit("b_"))
    generation = await store.auth_generation()

    await store.mark_clients_used({"a": NOW + MINUTE, "b_": NOW - MINUTE, "unknown": NOW})
    await store.mark_clients_used({})
    a, b = await store.get_client("a"), await store.get_client("b_")
    assert a == new_client("a", last_date_used=NOW + MINUTE)  # version 1 still
    assert b == new_client("b_", last_date_used=NOW)  # never lowered
    await store.mark_clients_used({"a": NOW})
    assert (await store.get_client("a")) == a
    assert await store.get_client("unknown") is None
    assert await store.auth_generation() == generation
    assert await history(store, "a") == ["created"]

    # replicas marking the same clients at once, each in its own order
    many = {f"client-{i:03d}": NOW for i in range(50)}
    for client_id in many:
        await store.insert_client(new_client(client_id, last_date_used=0), audit=audit(client_id))
    marks = [
        dict(sorted(many.items(), reverse=bool(n % 2))) | {client_id: NOW + n for client_id in many}
        for n in range(6)
    ]
    await asyncio.gather(*(store.mark_clients_used(mark) for mark in marks))
    assert {c.last_date_used for c in await store.all_clients() if c.client_id in many} == {NOW + 5}


# --- roles ------------------------------------------------------------------------------------


async def test_roles_are_written_as_one_set_by_compare_and_set_on_their_version(
    store: Store,
) -> None:
    empty = await store.get_roles()
    assert empty.roles == () and empty.version == 0
    first = [new_role("repo:b"), new_role("A"), new_role("repo:a_*", "x", "y")]
    written = await store.write_roles(
        first, expected_version=0, audit=[audit(r.role_id, entity_type="role") for r in first]
    )
    assert written is not None and written.version == 1
    assert [r.role_id for r in written.roles] == ["A", "repo:a_*", "repo:b"]
    assert await store.get_roles() == written

    stale = await store.write_roles([new_role("stale")], expected_version=0, audit=[])
    assert stale is None
    assert await store.get_roles() == written  # nothing written

    second = [
        new_role("repo:a_*", "x", "z", at=NOW + MINUTE),  # changed
        new_role("repo:b"),  # as it was
        new_role("new"),  # A goes
    ]
    rewritten = await store.write_roles(
        second,
        expected_version=1,
        audit=[
            audit("A", "deleted", entity_type="role"),
            audit("repo:a_*", "updated", entity_type="role"),
            audit("new", entity_type="role"),
        ],
    )
    assert rewritten is not None and rewritten.version == 2
    assert rewritten.roles == (second[2], second[0], second[1])
    assert await store.get_roles() == rewritten

    cleared = await store.write_roles([], expected_version=2, audit=[])
    assert cleared is not None and cleared.roles == () and cleared.version == 3
    assert await store.get_roles() == cleared
    assert await history(store, "A", "role") == ["created", "deleted"]
    assert await history(store, "repo:a_*", "role") == ["created", "updated"]
    assert await history(store, "A") == []  # a client of that id has no history

    with pytest.raises(ValueError, match="two roles have one roleId"):
        await store.write_roles([new_role("x"), new_role("x", "y")], expected_version=3, audit=[])
    assert await store.get_roles() == cleared


async def test_of_roles_written_at_once_from_one_version_exactly_one_wins(store: Store) -> None:
    base = await store.write_roles([new_role("base")], expected_version=0, audit=[])
    assert base is not None
    generation = await store.auth_generation()
    sets = [[new_role("base"), new_role(f"writer-{n}")] for n in range(6)]
    results = await asyncio.gather(
        *(
            store.write_roles(
                roles,
                expected_version=base.version,
                audit=[audit(f"writer-{n}", entity_type="role")],
                events=[auth_event("role-created", f"writer-{n}")],
            )
            for n, roles in enumerate(sets)
        )
    )
    winners = [(n, result) for n, result in enumerate(results) if result is not None]
    assert len(winners) == 1
    n, won = winners[0]
    assert won.version == 2 and [r.role_id for r in won.roles] == ["base", f"writer-{n}"]
    assert await store.get_roles() == won
    assert await store.auth_generation() == generation + 1
    assert [
        (e.entity_id, e.action_type)
        for e in await store.audit_history(
            entity_type=None, entity_id=None, client_id="root", limit=100, after=None
        )
    ] == [(f"writer-{n}", "created")]
    assert await drain(store) == [auth_event("role-created", f"writer-{n}")]


# --- the generation and the events ------------------------------------------------------------


async def test_the_generation_counts_the_writes_of_clients_and_roles_only(store: Store) -> None:
    assert await store.auth_generation() == 0
    client = new_client("c")
    await store.insert_client(client, audit=audit("c"))
    assert await store.auth_generation() == 1
    await store.insert_client(client, audit=audit("c"))  # refused
    await store.mark_clients_used({"c": NOW + DAY})
    assert await store.auth_generation() == 1
    await store.update_client(client, audit=audit("c", "updated"))
    await store.update_client(client, audit=audit("c", "updated"))  # stale
    assert await store.auth_generation() == 2
    await store.write_roles([new_role("r")], expected_version=0, audit=[])
    await store.write_roles([new_role("r")], expected_version=0, audit=[])  # stale
    assert await store.auth_generation() == 3
    await store.write_roles([new_role("r")], expected_version=1, audit=[])  # the same set
    assert await store.auth_generation() == 4
    await store.delete_client("c", audit=audit("c", "deleted"))
    await store.delete_client("c", audit=audit("c", "deleted"))  # gone
    assert await store.auth_generation() == 5


async def test_auth_writes_write_their_events_only_when_they_write(store: Store) -> None:
    client = new_client("c")
    created, updated, deleted = (
        auth_event(f"client-{word}", "c") for word in ("created", "updated", "deleted")
    )
    role_created = auth_event("role-created", "r")
    assert await store.insert_client(client, audit=audit("c"), events=[created])
    assert not await store.insert_client(client, audit=audit("c"), events=[created])
    stored = await store.update_client(client, audit=audit("c", "updated"), events=[updated])
    assert stored is not None
    assert await store.update_client(client, audit=audit("c", "updated"), events=[updated]) is None
    roles = [new_role("r")]
    assert await store.write_roles(roles, expected_version=0, audit=[], events=[role_created])
    assert not await store.write_roles(roles, expected_version=0, audit=[], events=[role_created])
    assert await store.delete_client("c", audit=audit("c", "deleted"), events=[deleted])
    assert not await store.delete_client("c", audit=audit("c", "deleted"), events=[deleted])
    await store.mark_clients_used({"c": NOW})
    assert await drain(store) == [created, updated, role_created, deleted]


# --- the audit history ------------------------------------------------------------------------


async def test_the_audit_history_pages_by_time_then_sequence_per_entity_or_per_client(
    store: Store,
) -> None:
    # entries of one millisecond keep the order they were written in
    await store.insert_client(new_client("a"), audit=audit("a", by="alice", at=NOW + 2))
    await store.insert_client(new_client("b"), audit=audit("b", by="bob", at=NOW + 2))
    stored = await store.get_client("a")
    assert stored is not None
    for n in range(3):
        changed = await store.update_client(
            stored, audit=audit("a", f"update {n}", by="bob", at=NOW + 2)
        )
        assert changed is not None
        stored = changed
    await store.write_roles(
        [new_role("a")],
        expected_version=0,
        audit=[audit("a", by="alice", at=NOW + 1, entity_type="role")],
    )
    await store.delete_client("a", audit=audit("a", "deleted", by="alice", at=NOW + 3))
    # a clock that went back: ordered by created, not by when it was written
    await store.delete_client("b", audit=audit("b", "deleted", by="alice", at=NOW))

    of_a = await store.audit_history(
        entity_type="client", entity_id="a", client_id=None, limit=100, after=None
    )
    assert [(e.action_type, e.client_id, e.created) for e in of_a] == [
        ("created", "alice", NOW + 2),
        ("update 0", "bob", NOW + 2),
        ("update 1", "bob", NOW + 2),
        ("update 2", "bob", NOW + 2),
        ("deleted", "alice", NOW + 3),
    ]
    assert all(e.entity_type == "client" and e.entity_id == "a" for e in of_a)
    sequences = [e.sequence for e in of_a]
    assert sequences == sorted(set(sequences)) and sequences[0] > 0

    # pages: each after the last of the one before
    pages, after = [], None
    while page := await store.audit_history(
        entity_type="client", entity_id="a", client_id=None, limit=2, after=after
    ):
        pages.append(page)
        after = (page[-1].created, page[-1].sequence)
    assert pages == [of_a[0:2], of_a[2:4], of_a[4:]]

    by_alice = await store.audit_history(
        entity_type=None, entity_id=None, client_id="alice", limit=100, after=None
    )
    assert [(e.entity_type, e.entity_id, e.action_type) for e in by_alice] == [
        ("client", "b", "deleted"),
        ("role", "a", "created"),
        ("client", "a", "created"),
        ("client", "a", "deleted"),
    ]
    second = await store.audit_history(
        entity_type=None,
        entity_id=None,
        client_id="alice",
        limit=2,
        after=(by_alice[1].created, by_alice[1].sequence),
    )
    assert second == by_alice[2:]

    # a filter besides the one that selects narrows it
    alice_on_clients = await store.audit_history(
        entity_type="client", entity_id=None, client_id="alice", limit=100, after=None
    )
    assert alice_on_clients == [e for e in by_alice if e.entity_type == "client"]
    bob_on_a = await store.audit_history(
        entity_type="client", entity_id="a", client_id="bob", limit=100, after=None
    )
    assert bob_on_a == of_a[1:4]
    role_a = await store.audit_history(
        entity_type="role", entity_id="a", client_id=None, limit=100, after=None
    )
    assert [(e.action_type, e.client_id) for e in role_a] == [("created", "alice")]
    assert (
        await store.audit_history(
            entity_type=None, entity_id=None, client_id="nobody", limit=100, after=None
        )
        == []
    )

    with pytest.raises(ValueError, match="neither an entity nor a client"):
        await store.audit_history(
            entity_type="client", entity_id=None, client_id=None, limit=10, after=None
        )
    with pytest.raises(ValueError, match="needs its entity_type"):
        await store.audit_history(
            entity_type=None, entity_id="a", client_id=None, limit=10, after=None
        )
