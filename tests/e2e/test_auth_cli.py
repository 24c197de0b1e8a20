"""``queue-coordinator clients`` (all but ``add``), ``roles`` and ``encryption-key`` as real child
processes against a real coordinator (in this process, auth on, the root client of its clients
file): a role and a client made from the shell whose printed exports then work (through the
official ``taskcluster.Auth`` client and ``queue-coordinator tasks``), clients listed, shown,
updated keeping what is not given, disabled (then refused) and enabled, reset (the old token
refused, the new one working), their history, deleted; roles listed, shown, updated, expanded,
deleted; and the one-line failures: bad input and a refusal (exit 1, nothing stored), no root
URL or an unreachable coordinator (exit 2). ``clients add`` still edits the clients file.

The coordinator serves from this test's event loop, so the CLI runs through asyncio's
subprocesses (:func:`tests.fixtures.commands.run_to_end`), never a blocking ``subprocess.run``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import slugid

from coordinator.api.keyset import LIST_LIMIT
from coordinator.service.clock import wall_clock
from devharness.ports import free_port
from devharness.processes import REPO
from tests.fixtures.clients import Auth, Credentials, rejected, start_secured
from tests.fixtures.commands import Finished, run_to_end, taskcluster_env
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator

COMMAND = str(Path(sys.executable).parent / "queue-coordinator")
ROLE = "cli:ops team"
"""A roleId with a colon and a space, percent-encoded in the path."""
CLIENT = "cli/ops|1"
"""A clientId with a slash (percent-encoded in the path) and a ``|`` (quoted in the exports)."""
ROLE_SCOPES = ["queue:manage:cancel-tasks", "auth:current-scopes"]


async def cli(
    *args: str, root_url: str | None, client: Mapping[str, str] | None = None
) -> Finished:
    """``queue-coordinator <args>`` with only the ``TASKCLUSTER_*`` variables given."""
    env = taskcluster_env(root_url or "", client)
    if root_url is None:
        del env["TASKCLUSTER_ROOT_URL"]
    finished = await run_to_end([COMMAND, *args], cwd=REPO, env=env, timeout_s=60)
    assert "Traceback" not in finished.stderr, finished.stderr
    return finished


def succeeded(finished: Finished) -> str:
    """The stdout of a command that exited 0."""
    assert finished.status == 0, finished.output
    return finished.stdout


def refused(finished: Finished, status: int = 1) -> str:
    """The one stderr line of a failure with ``status``, with nothing on stdout."""
    assert finished.status == status, finished.output
    assert finished.stdout == "", finished.stdout
    lines = finished.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("queue-coordinator: "), finished.stderr
    return lines[0]


def exported(stdout: str) -> Credentials:
    """The credentials of the ``export`` lines printed, read as the shell would."""
    values = {}
    for line in stdout.splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            (values[name],) = shlex.split(value)
    return {
        "clientId": values["TASKCLUSTER_CLIENT_ID"],
        "accessToken": values["TASKCLUSTER_ACCESS_TOKEN"],
    }


@dataclass(frozen=True, kw_only=True)
class Secured:
    """A coordinator with auth on, root's credentials and a client holding nothing."""

    coordinator: RunningCoordinator
    root: Credentials
    nobody: Credentials

    @property
    def root_url(self) -> str:
        return self.coordinator.url

    async def cli(self, *args: str, client: Mapping[str, str] | None = None) -> Finished:
        """As root unless ``client`` is given."""
        return await cli(*args, root_url=self.root_url, client=client or self.root)

    def auth(self, credentials: Mapping[str, str] | None = None) -> Auth:
        """The official client, as root unless ``credentials`` are given."""
        return Auth("aio", self.root_url, credentials or self.root)


@pytest.fixture
async def secured(start_coordinator: StartCoordinator, tmp_path: Path) -> Secured:
    coordinator, creds = await start_secured(
        start_coordinator, tmp_path / "clients.json", {"nobody": []}
    )
    return Secured(coordinator=coordinator, root=creds["root"], nobody=creds["nobody"])


async def make_client(secured: Secured, client_id: str, *flags: str) -> Credentials:
    made = await secured.cli("clients", "create", client_id, *flags)
    return exported(succeeded(made))


async def test_a_role_and_a_client_made_from_the_shell_work(secured: Secured) -> None:
    created = await secured.cli(
        "roles", "create", ROLE, *(f"--scope={s}" for s in ROLE_SCOPES), "--description", "ops"
    )
    assert succeeded(created) == f"created role {ROLE}: 2 scopes, expanding to 3\n"
    made = await secured.cli("clients", "create", CLIENT, "--scope", f"assume:{ROLE}")
    stdout = succeeded(made)
    comment, client_line, token_line = stdout.splitlines()
    assert comment.startswith(f"# created {CLIENT} through the auth API, expires ")
    assert client_line == f"export TASKCLUSTER_CLIENT_ID='{CLIENT}'"
    assert token_line.startswith("export TASKCLUSTER_ACCESS_TOKEN=")
    credentials = exported(stdout)
    assert len(credentials["accessToken"]) == 44

    current = await secured.auth(credentials).currentScopes()
    assert {*ROLE_SCOPES, f"assume:{ROLE}"} <= set(current["scopes"])
    # The exports as pasted into a shell: the tasks commands then run with the role's scopes.
    script = f'eval "$EXPORTS"\nexec {COMMAND} tasks cancel --task-group-id {slugid.nice()}'
    env = taskcluster_env(secured.root_url, None) | {"EXPORTS": stdout}
    cancelled = await run_to_end(["bash", "-c", script], cwd=REPO, env=env, timeout_s=60)
    assert cancelled.status == 0 and cancelled.stdout == "cancelled 0 tasks\n", cancelled.output

    client = json.loads(succeeded(await secured.cli("clients", "show", CLIENT, "--json")))
    assert client["scopes"] == [f"assume:{ROLE}"]
    assert set(ROLE_SCOPES) <= set(client["expandedScopes"])
    # A year from now by default.
    expires = datetime.fromisoformat(client["expires"]).timestamp() * 1000
    assert abs(expires - (wall_clock() + 365 * 86_400_000)) < 60_000
    shown = succeeded(await secured.cli("clients", "show", CLIENT)).splitlines()
    assert shown[0].split() == ["clientId", CLIENT]
    assert shown[shown.index("scopes (1):") + 1] == f"  assume:{ROLE}"
    expanded = shown[shown.index("scopes (1):") + 2 :]
    assert expanded[0].startswith("expandedScopes (")
    assert {f"  {scope}" for scope in ROLE_SCOPES} <= set(expanded[1:])


async def test_clients_list_as_a_table_or_json_with_a_prefix(secured: Secured) -> None:
    ids = [f"cli/list-{n:02}" for n in range(3)]
    for client_id in ids:
        await make_client(secured, client_id, "--scope", "auth:current-scopes")
    await make_client(secured, "other/one", "--scope", "auth:current-scopes")
    await secured.cli("clients", "disable", ids[1])

    header, *rows = succeeded(await secured.cli("clients", "list")).splitlines()
    assert header.split() == ["CLIENT", "ID", "EXPIRES", "DISABLED", "SCOPES", "LAST", "USED"]
    by_id = {row.split()[0]: row.split() for row in rows}
    # The clients file's (root, nobody, the issuer) are not the API's.
    assert set(by_id) == {*ids, "other/one"}
    assert by_id[ids[0]][2:4] == ["no", "1"]
    assert by_id[ids[1]][2] == "yes"
    assert all(by_id[ids[0]][column].endswith("Z") for column in (1, 4))

    prefixed = await secured.cli("clients", "list", "--prefix", "cli/", "--json")
    listed = [json.loads(line) for line in succeeded(prefixed).splitlines()]
    assert [client["clientId"] for client in listed] == ids
    assert "accessToken" not in listed[0]

    empty = await secured.cli("clients", "list", "--prefix", "nothing/")
    assert empty.status == 0 and len(empty.stdout.splitlines()) == 1, empty.output
    assert "no clients" in empty.stderr


async def test_clients_list_reads_every_page(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = secured.coordinator.parts.auth
    expires = wall_clock() + 86_400_000
    ids = [f"cli/page-{n:04}" for n in range(LIST_LIMIT + 1)]

    async def create(client_id: str) -> None:
        await auth.create_client(
            client_id, description="", expires=expires, scopes=(), delete_on_expiration=False,
            by="test",
        )  # fmt: skip

    async def not_yet(*, force: bool = False) -> bool:
        return False

    # Straight into the service, a batch at a time, the directory reloading once at the end
    # rather than after each (the listing reads the store): seconds, not half a minute.
    with monkeypatch.context() as seeding:
        seeding.setattr(auth.directory, "refresh", not_yet)
        for start in range(0, len(ids), 100):
            await asyncio.gather(*(create(client_id) for client_id in ids[start : start + 100]))
    await auth.directory.refresh()
    listed = await secured.cli("clients", "list", "--prefix", "cli/page-", "--json")
    assert [json.loads(line)["clientId"] for line in succeeded(listed).splitlines()] == ids
    table = succeeded(await secured.cli("clients", "list")).splitlines()
    assert [row.split()[0] for row in table[1:]] == ids


async def test_update_keeps_what_is_not_given(secured: Secured) -> None:
    client_id = "cli/updated"
    await make_client(
        secured, client_id, "--scope", "auth:current-scopes", "--description", "first words",
        "--expires", "30 days", "--delete-on-expiration",
    )  # fmt: skip

    async def shown() -> dict[str, Any]:
        answer: dict[str, Any] = await secured.auth().client(client_id)
        return answer

    before = await shown()
    assert before["description"] == "first words" and before["deleteOnExpiration"]

    updated = await secured.cli("clients", "update", client_id, "--scope", "queue:ping")
    assert succeeded(updated).startswith(f"updated client {client_id}: expires ")
    after = await shown()
    assert after["scopes"] == ["queue:ping"]
    assert {k: after[k] for k in ("description", "expires", "deleteOnExpiration")} == {
        k: before[k] for k in ("description", "expires", "deleteOnExpiration")
    }

    await secured.cli("clients", "update", client_id, "--description", "second words")
    await secured.cli("clients", "update", client_id, "--expires", "2031-01-02T03:04:05Z")
    await secured.cli("clients", "update", client_id, "--no-delete-on-expiration")
    after = await shown()
    assert after["description"] == "second words"
    assert after["expires"] == "2031-01-02T03:04:05.000Z"
    assert not after["deleteOnExpiration"]
    assert after["scopes"] == ["queue:ping"]

    nothing = await secured.cli("clients", "update", client_id)
    assert "nothing to update" in refused(nothing, status=2)
    missing = await secured.cli("clients", "update", "cli/none", "--description", "x")
    assert refused(missing).startswith("queue-coordinator: ResourceNotFound: ")


async def test_disable_enable_reset_history_and_delete(secured: Secured) -> None:
    client_id = "cli/lifecycle"
    first = await make_client(secured, client_id, "--scope", "auth:current-scopes")
    assert (await secured.auth(first).currentScopes())["scopes"]

    assert succeeded(await secured.cli("clients", "disable", client_id)) == (
        f"disabled client {client_id}\n"
    )
    status, body = await rejected(secured.auth(first).currentScopes())
    assert status == 401, body
    own = await secured.cli("clients", "show", client_id, client=first)
    assert refused(own).startswith("queue-coordinator: AuthenticationFailed: ")
    assert succeeded(await secured.cli("clients", "enable", client_id)) == (
        f"enabled client {client_id}\n"
    )
    assert (await secured.auth(first).currentScopes())["scopes"]

    reset = succeeded(await secured.cli("clients", "reset", client_id))
    assert reset.startswith(f"# new accessToken of {client_id}")
    second = exported(reset)
    assert second["clientId"] == client_id and second["accessToken"] != first["accessToken"]
    status, _ = await rejected(secured.auth(first).currentScopes())
    assert status == 401
    assert (await secured.auth(second).currentScopes())["scopes"]

    history = succeeded(await secured.cli("clients", "history", client_id)).splitlines()
    assert history[0].split() == ["WHEN", "ACTION", "BY"]
    actions = [row.split("  ")[1].strip() for row in history[1:]]
    assert actions == ["created", "client disabled", "client enabled", "access token reset"]
    assert all(row.rstrip().endswith("root") for row in history[1:])

    deleted = await secured.cli("clients", "delete", client_id)
    assert succeeded(deleted) == f"deleted client {client_id}\n"
    gone = await secured.cli("clients", "show", client_id)
    assert refused(gone).startswith("queue-coordinator: ResourceNotFound: ")
    status, _ = await rejected(secured.auth(second).currentScopes())
    assert status == 401
    kept = await secured.cli("clients", "history", client_id, "--json")
    entries = [json.loads(line) for line in succeeded(kept).splitlines()]
    assert entries[-1]["actionType"] == "deleted" and entries[-1]["clientId"] == "root"


async def test_roles_list_show_update_expand_and_delete(secured: Secured) -> None:
    parameterized = "cli:repo/*"
    await secured.cli("roles", "create", parameterized, "--scope", "secrets:get:<..>")
    made = await secured.cli(
        "roles", "create", ROLE, "--scope", "queue:ping", "--scope", "assume:cli:repo/app",
        "--description", "the ops team",
    )  # fmt: skip
    assert succeeded(made) == f"created role {ROLE}: 2 scopes, expanding to 4\n"

    header, *rows = succeeded(await secured.cli("roles", "list")).splitlines()
    assert header.split() == ["ROLE", "ID", "SCOPES", "EXPANDED", "DESCRIPTION"]
    by_id = {row[: header.index("SCOPES")].strip(): row for row in rows}
    assert set(by_id) == {parameterized, ROLE}
    assert by_id[ROLE].split()[-5:] == ["2", "4", "the", "ops", "team"]
    listed = [json.loads(line) for line in succeeded(await secured.cli("roles", "list", "--json"))
              .splitlines()]  # fmt: skip
    assert [role["roleId"] for role in listed] == [ROLE, parameterized]

    role = json.loads(succeeded(await secured.cli("roles", "show", ROLE, "--json")))
    assert "secrets:get:app" in role["expandedScopes"]
    shown = succeeded(await secured.cli("roles", "show", ROLE)).splitlines()
    assert shown[0].split(maxsplit=1) == ["roleId", ROLE]
    assert "  secrets:get:app" in shown

    updated = await secured.cli("roles", "update", ROLE, "--scope", "queue:ping")
    assert succeeded(updated) == f"updated role {ROLE}: 1 scope, expanding to 2\n"
    role = await secured.auth().role(ROLE)
    assert role["scopes"] == ["queue:ping"] and role["description"] == "the ops team"
    await secured.cli("roles", "update", ROLE, "--scope", "queue:ping", "--description", "new")
    assert (await secured.auth().role(ROLE))["description"] == "new"

    expanded = await secured.cli("roles", "expand", "assume:cli:repo/one", "assume:cli:repo/two")
    assert succeeded(expanded).splitlines() == [
        "assume:cli:repo/one",
        "assume:cli:repo/two",
        "secrets:get:one",
        "secrets:get:two",
    ]

    assert succeeded(await secured.cli("roles", "delete", ROLE)) == f"deleted role {ROLE}\n"
    gone = await secured.cli("roles", "show", ROLE)
    assert refused(gone).startswith("queue-coordinator: ResourceNotFound: ")
    remaining = succeeded(await secured.cli("roles", "list", "--json")).splitlines()
    assert [json.loads(line)["roleId"] for line in remaining] == [parameterized]


async def test_bad_input_and_refusals_are_one_line_and_exit_1_with_nothing_stored(
    secured: Secured,
) -> None:
    newline = await secured.cli("clients", "create", "cli/bad", "--scope", "queue:a\nb")
    line = refused(newline)
    assert line.startswith("queue-coordinator: InputValidationError: ") and "scopes[0]" in line
    long_id = "c" * 300
    too_long = await secured.cli("clients", "create", long_id, "--scope", "queue:ping")
    line = refused(too_long)
    assert line.startswith("queue-coordinator: InputValidationError: ") and "too long" in line
    listed = await secured.cli("clients", "list", "--json")
    assert succeeded(listed) == ""

    bad_role = await secured.cli("roles", "create", "cli:bad", "--scope", "queue:a\nb")
    assert refused(bad_role).startswith("queue-coordinator: InputValidationError: ")
    starred = await secured.cli("roles", "create", "cli:bad", "--scope", "queue:**")
    assert refused(starred) == "queue-coordinator: InputError: scopes must not end with `**`: " + (
        "'queue:**'"
    )
    assert succeeded(await secured.cli("roles", "list", "--json")) == ""

    # A static client (the clients file's) is not the API's to change.
    static = await secured.cli("clients", "disable", "root")
    line = refused(static)
    assert line.startswith("queue-coordinator: InputError: ") and "static client" in line
    # A caller without the scopes: a 403 naming them.
    lacking = await secured.cli(
        "roles", "create", "cli:x", "--scope", "queue:ping", client=secured.nobody
    )
    line = refused(lacking)
    assert line.startswith("queue-coordinator: InsufficientScopes: ") and "auth:create-role" in line
    assert succeeded(await secured.cli("roles", "list", "--json")) == ""
    # A flag the command cannot read is argparse's usage error, exit 2.
    bad_expiry = await secured.cli(
        "clients", "create", "cli/x", "--scope", "a", "--expires", "soon"
    )
    assert bad_expiry.status == 2 and "--expires" in bad_expiry.stderr, bad_expiry.output


@pytest.mark.parametrize(
    "args", [("clients", "list"), ("clients", "reset", "x"), ("roles", "expand", "x")]
)
async def test_no_root_url_is_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    missing = await cli(*args, root_url=None)
    assert "TASKCLUSTER_ROOT_URL is not set" in refused(missing, status=2)


async def test_an_unreachable_coordinator_is_one_line_and_exit_2() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    unreachable = await cli("roles", "list", root_url=nowhere)
    assert f"cannot reach the coordinator at {nowhere}/api/auth/v1" in refused(unreachable, 2)


async def test_encryption_key_prints_base64_of_32_random_bytes() -> None:
    keys = [succeeded(await cli("encryption-key", root_url=None)) for _ in range(2)]
    assert all(key.endswith("\n") and len(key.splitlines()) == 1 for key in keys)
    assert all(len(base64.b64decode(key.strip(), validate=True)) == 32 for key in keys)
    assert keys[0] != keys[1]


async def test_clients_add_still_edits_the_clients_file(tmp_path: Path) -> None:
    clients_file = tmp_path / "clients.json"
    added = await cli(
        "clients", "add", "builder", "--scope", "queue:ping", "--clients-file", str(clients_file),
        root_url=None,
    )  # fmt: skip
    comment, client_line, token_line = succeeded(added).splitlines()
    assert comment == f"# added to {clients_file}"
    assert client_line == "export TASKCLUSTER_CLIENT_ID=builder"
    written = {c["clientId"]: c for c in json.loads(clients_file.read_text())["clients"]}
    assert written["builder"]["scopes"] == ["queue:ping"]
    assert token_line == f"export TASKCLUSTER_ACCESS_TOKEN={written['builder']['accessToken']}"
