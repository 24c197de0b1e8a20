"""The store's SQL files: a statement both dialects write the same lives once, in
``sql/common/queries.sql``; each driver loads it with its own; the wheel ships every folder."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from coordinator.store import sqlfiles

ROOT = Path(__file__).resolve().parents[2]
SQL = ROOT / "coordinator" / "store" / "sql"
DRIVERS = ("sqlite", "postgres")


def _text(sql: str) -> str:
    """The statement without comments, its whitespace collapsed."""
    return " ".join(re.sub(r"--[^\n]*", "", sql).split())


def test_each_driver_runs_the_common_statements_besides_its_own() -> None:
    common = sqlfiles._named(sqlfiles.COMMON)
    assert len(common) >= 25, sorted(common)
    for driver in DRIVERS:
        every = sqlfiles.queries(driver)
        own = sqlfiles._named(driver)
        assert every == {**common, **own}, driver
        assert not common.keys() & own.keys(), driver


def test_no_statement_is_written_the_same_in_both_driver_files() -> None:
    sqlite, postgres = sqlfiles._named("sqlite"), sqlfiles._named("postgres")
    same = sorted(
        name
        for name in sqlite.keys() & postgres.keys()
        if _text(sqlite[name]) == _text(postgres[name])
    )
    assert not same, f"move to sql/common/queries.sql: {same}"


def test_a_name_defined_twice_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for folder, text in {
        "common": "-- name: a\nSELECT 1\n",
        "clash": "-- name: a\nSELECT 2\n",
        "twice": "-- name: b\nSELECT 1\n-- name: b\nSELECT 2\n",
    }.items():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "queries.sql").write_text(text)
    monkeypatch.setattr(sqlfiles, "_directory", lambda folder: tmp_path / folder)

    with pytest.raises(ValueError, match=r"clash/queries.sql redefines common statements: \['a'\]"):
        sqlfiles.queries.__wrapped__("clash")
    with pytest.raises(ValueError, match=r"twice/queries.sql names statements twice: \['b'\]"):
        sqlfiles.queries.__wrapped__("twice")


def test_two_migrations_of_one_version_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for driver in DRIVERS:  # the real ones are all distinct
        versions = [m.version for m in sqlfiles.migrations.__wrapped__(driver)]
        assert len(versions) == len(set(versions)), driver
    (tmp_path / "clash").mkdir()
    for name in ("0001_a.sql", "0002_b.sql", "0002_c.sql"):
        (tmp_path / "clash" / name).write_text("SELECT 1;\n")
    monkeypatch.setattr(sqlfiles, "_directory", lambda folder: tmp_path / folder)

    with pytest.raises(ValueError, match=r"share a version: 0002_b and 0002_c; renumber one"):
        sqlfiles.migrations.__wrapped__("clash")


def test_the_wheel_ships_every_sql_folder() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for folder in sorted(path.name for path in SQL.iterdir() if path.is_dir()):
        package = f"coordinator.store.sql.{folder}"
        assert package in setuptools["packages"], package
        assert setuptools["package-data"][package] == ["*.sql"], package
