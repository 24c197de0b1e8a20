"""Loads the SQL a driver runs: numbered migrations and named queries, kept in ``.sql`` files.

Layout, per driver (``sqlite``, ``postgres``) under ``coordinator/store/sql/<driver>/``:

* ``NNNN_<name>.sql``: migration ``NNNN``, applied once, in order, in one transaction.
* ``queries.sql``: statements separated by ``-- name: <query name>`` lines.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

_NAME_LINE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True, kw_only=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def _directory(driver: str) -> resources.abc.Traversable:
    return resources.files("coordinator.store").joinpath("sql", driver)


@functools.cache
def migrations(driver: str) -> tuple[Migration, ...]:
    """Every migration of ``driver``, ordered by version."""
    found = []
    for entry in _directory(driver).iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(
                Migration(version=int(match[1]), name=match[2], sql=entry.read_text("utf-8"))
            )
    return tuple(sorted(found, key=lambda m: m.version))


@functools.cache
def queries(driver: str) -> dict[str, str]:
    """Named statements of ``driver``'s ``queries.sql``."""
    text = _directory(driver).joinpath("queries.sql").read_text("utf-8")
    parts = _NAME_LINE.split(text)
    # split() yields [preamble, name1, body1, name2, body2, ...]
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}
