"""Loads the SQL a driver runs: numbered migrations and named queries, kept in ``.sql`` files.

Layout, per driver (``sqlite``, ``postgres``) under ``coordinator/store/sql/<driver>/``:

* ``NNNN_<name>.sql``: migration ``NNNN``, applied once, in order, in one transaction.
* ``queries.sql``: statements separated by ``-- name: <query name>`` lines.

``coordinator/store/sql/common/queries.sql`` holds, in the same form, the statements whose text
is the same in both dialects; every driver gets them besides its own, so each such statement is
written once. A name in both the common file and a driver's is a mistake, refused on loading.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from importlib import resources

_NAME_LINE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")

COMMON = "common"
"""The folder of the statements every driver shares."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def _directory(folder: str) -> resources.abc.Traversable:
    return resources.files("coordinator.store").joinpath("sql", folder)


@functools.cache
def migrations(driver: str) -> tuple[Migration, ...]:
    """Every migration of ``driver``, ordered by version.

    :raises ValueError: two files have one version (branches that each added the next number):
        a store that applied one would skip the other.
    """
    found = []
    for entry in _directory(driver).iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(
                Migration(version=int(match[1]), name=match[2], sql=entry.read_text("utf-8"))
            )
    found.sort(key=lambda m: (m.version, m.name))
    twice = sorted(
        f"{a.version:04d}_{a.name} and {b.version:04d}_{b.name}"
        for a, b in itertools.pairwise(found)
        if a.version == b.version
    )
    if twice:
        raise ValueError(f"{driver} migrations share a version: {', '.join(twice)}; renumber one")
    return tuple(found)


@functools.cache
def queries(driver: str) -> dict[str, str]:
    """Named statements of ``driver``: the common ``queries.sql`` and the driver's own.

    :raises ValueError: a name is defined twice (in one file, or in both).
    """
    common, own = _named(COMMON), _named(driver)
    twice = common.keys() & own.keys()
    if twice:
        raise ValueError(f"{driver}/queries.sql redefines common statements: {sorted(twice)}")
    return {**common, **own}


def _named(folder: str) -> dict[str, str]:
    """The statements of ``sql/<folder>/queries.sql`` by name."""
    text = _directory(folder).joinpath("queries.sql").read_text("utf-8")
    parts = _NAME_LINE.split(text)
    # split() yields [preamble, name1, body1, name2, body2, ...]
    names = parts[1::2]
    repeated = {name for name in names if names.count(name) > 1}
    if repeated:
        raise ValueError(f"{folder}/queries.sql names statements twice: {sorted(repeated)}")
    return {name: body.strip() for name, body in zip(names, parts[2::2], strict=True)}
