"""Releases, as ``CHANGELOG.md`` records them, and the rule that lets replicas of two releases
share one database during a rolling upgrade: the migrations added after the last release only
expand the schema (docs/operations.md, Upgrading). The released migrations are those the last
release's store records as applied (``tests/fixtures/data/releases/<version>/``).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection
from pathlib import Path

import pytest

from coordinator.store import sqlfiles
from tests.fixtures.releases import CHANGELOG, RELEASES, ReleaseStore, previous_release, released

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = ("sqlite", "postgres")

_CONTRACTING = (
    (re.compile(r"\bDROP\b"), "drops"),
    (re.compile(r"\bRENAME\b"), "renames"),
    (re.compile(r"\bTRUNCATE\b"), "empties a table"),
    (re.compile(r"\bALTER\s+COLUMN\s+\w+\s+(SET\s+DATA\s+)?TYPE\b"), "changes a column's type"),
    (re.compile(r"\bSET\s+NOT\s+NULL\b"), "makes a column NOT NULL"),
    (
        re.compile(r"\bADD\s+(CONSTRAINT|PRIMARY\s+KEY|UNIQUE|CHECK|FOREIGN\s+KEY)\b"),
        "adds a constraint to a table",
    ),
)
"""Statements that break the previous release's code on the migrated schema, and why."""

_ADD_COLUMN = re.compile(r"\bADD\s+(COLUMN\s+)?(?!CONSTRAINT\b)\w+\s+[^,]*")
_UNIQUE_INDEX_ON = re.compile(r"\bCREATE\s+UNIQUE\s+INDEX\b.*?\bON\s+(\w+)")
_CREATE_TABLE = re.compile(r"\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.IGNORECASE)


def _statements(sql: str) -> list[str]:
    """The statements of a migration, upper-cased, without comments, whitespace collapsed."""
    text = re.sub(r"--[^\n]*|/\*.*?\*/", "", sql, flags=re.DOTALL)
    return [" ".join(part.split()).upper() for part in text.split(";") if part.strip()]


_UNUSED_SINCE = re.compile(r"^-- unused since (?P<version>\S+): (?P<names>.+)$", re.MULTILINE)
_DROP_INDEX = re.compile(r"^DROP INDEX (?:IF EXISTS )?(\w+)$")


def unused_indexes(sql: str, cut: Collection[str]) -> set[str]:
    """The indexes (upper-cased) a migration declares no longer read by the code of a release
    already cut (``-- unused since <version>: <index>, ...``, ``<version>`` among ``cut``),
    which it may therefore drop: the previous release's replicas do not need them."""
    return {
        name.strip().upper()
        for match in _UNUSED_SINCE.finditer(sql)
        if match["version"] in cut
        for name in match["names"].split(",")
    }


def contracting(sql: str, tables: set[str], cut: Collection[str] = ()) -> list[str]:
    """Why each statement of ``sql`` that is not expand-only would break code that knows only
    ``tables`` (upper-cased names) as they were: empty when the migration only expands, or
    drops only indexes it declares unused since a release of ``cut`` (:func:`unused_indexes`)."""
    found = []
    unused = unused_indexes(sql, cut)
    for statement in _statements(sql):
        dropped = _DROP_INDEX.match(statement)
        if dropped and dropped[1] in unused:
            continue
        found += [
            f"{why}: {statement}" for pattern, why in _CONTRACTING if pattern.search(statement)
        ]
        for column in _ADD_COLUMN.finditer(statement):
            if "NOT NULL" in column[0] and "DEFAULT" not in column[0]:
                found.append(f"adds a NOT NULL column without a default: {statement}")
        unique = _UNIQUE_INDEX_ON.search(statement)
        if unique and unique[1] in tables:
            found.append(f"adds a uniqueness rule to an existing table: {statement}")
    return found


def _released_migrations(driver: str) -> set[int]:
    store = ReleaseStore(RELEASES / previous_release().version)
    return set(store.expected()["schema_versions"][driver])


@pytest.mark.parametrize("driver", DRIVERS)
def test_the_migrations_since_the_last_release_only_expand_the_schema(driver: str) -> None:
    every = sqlfiles.migrations(driver)
    released_versions = _released_migrations(driver)
    assert released_versions <= {m.version for m in every}, "a released migration is gone"
    tables = {
        name.upper()
        for migration in every
        if migration.version in released_versions
        for name in _CREATE_TABLE.findall(migration.sql)
    }
    assert "TASKS" in tables
    cut = {release.version for release in released()}
    problems = {
        f"{m.version:04d}_{m.name}": contracting(m.sql, tables, cut)
        for m in every
        if m.version not in released_versions
    }
    assert not {name: why for name, why in problems.items() if why}, (
        "contracting changes wait for the release after next (docs/operations.md, Upgrading)"
    )


OLD_TABLES = {"TASKS", "ARTIFACTS"}


@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE artifacts",
        "ALTER TABLE tasks DROP COLUMN project_id",
        "DROP INDEX tasks_by_group",
        "ALTER TABLE tasks RENAME COLUMN runs TO run_list",
        "ALTER TABLE tasks RENAME TO jobs",
        "ALTER TABLE tasks ALTER COLUMN expires TYPE TEXT",
        "ALTER TABLE tasks ALTER COLUMN expires SET DATA TYPE TEXT",
        "ALTER TABLE tasks ALTER COLUMN project_id SET NOT NULL",
        "ALTER TABLE tasks ADD COLUMN owner TEXT NOT NULL",
        "ALTER TABLE tasks ADD owner TEXT NOT NULL",
        "ALTER TABLE tasks ADD CONSTRAINT positive CHECK (expires > 0)",
        "ALTER TABLE tasks ADD UNIQUE (project_id)",
        "CREATE UNIQUE INDEX tasks_project ON tasks (project_id)",
        "TRUNCATE artifacts",
        "CREATE TABLE extra (id INTEGER); -- fine\nDROP TABLE tasks",
    ],
)
def test_the_rule_refuses_a_contracting_statement(sql: str) -> None:
    assert contracting(sql, OLD_TABLES)


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE extra (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
        "CREATE UNIQUE INDEX extra_name ON extra (name)",
        "CREATE INDEX tasks_project ON tasks (project_id)",
        "ALTER TABLE tasks ADD COLUMN owner TEXT",
        "ALTER TABLE tasks ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE tasks ADD owner TEXT, ADD attempts INTEGER NOT NULL DEFAULT 0",
        "-- the old DROP of a comment is no statement\nCREATE INDEX a ON tasks (expires)",
        "UPDATE tasks SET project_id = 'none' WHERE project_id IS NULL",
    ],
)
def test_the_rule_admits_an_expanding_statement(sql: str) -> None:
    assert contracting(sql, OLD_TABLES) == []


DROPPING = "-- unused since 0.1.0: tasks_by_project, tasks_by_scheduler\n"


@pytest.mark.parametrize(
    ("sql", "admitted"),
    [
        (DROPPING + "DROP INDEX tasks_by_project;\nDROP INDEX IF EXISTS tasks_by_scheduler", True),
        (DROPPING + "DROP INDEX tasks_by_group", False),
        (DROPPING.replace("0.1.0", "0.9.0") + "DROP INDEX tasks_by_project", False),
        (DROPPING.replace("tasks_by_project", "tasks") + "DROP TABLE tasks", False),
        ("-- unused since 0.1.0 tasks_by_project\nDROP INDEX tasks_by_project", False),
    ],
)
def test_an_index_declared_unused_since_a_release_cut_may_be_dropped(
    sql: str, admitted: bool
) -> None:
    assert (contracting(sql, OLD_TABLES, {"0.1.0"}) == []) == admitted


def test_the_version_being_built_is_the_changelogs_unreleased_section() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["version"]
    assert f"\n## {version} (unreleased)\n" in CHANGELOG.read_text("utf-8")
    assert version not in {release.version for release in released()}


def test_every_release_keeps_the_store_its_own_code_wrote() -> None:
    assert released(), "CHANGELOG.md records no release with its commit"
    for release in released():
        store = ReleaseStore(RELEASES / release.version)
        assert store.expected()["release"] == release.commit, release.version
        assert store.sqlite_file.is_file() and store.dump_file.is_file(), release.version
        # a release's store holds every part of the sample (older snapshots only some)
        assert "purges" in store.expected()["read_back"], release.version
