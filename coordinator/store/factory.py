"""Choosing a store driver from ``COORDINATOR_STORE_URL``.

* ``sqlite:///<path>``: :class:`~coordinator.store.sqlite.SQLiteStore` on the file ``<path>``.
  The path after ``sqlite://`` is absolute (``sqlite:///var/lib/qc.db`` is ``/var/lib/qc.db``;
  the four-slash form ``sqlite:////var/lib/qc.db`` is accepted too) unless it begins with
  ``/./`` or ``/../``, which make it relative to the working directory
  (``sqlite:///./.data/coordinator.db`` is ``.data/coordinator.db``).
* ``postgresql://...`` or ``postgres://...``: :class:`~coordinator.store.postgres.PostgresStore`,
  with the URL passed to asyncpg as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from coordinator.config import ConfigurationError

if TYPE_CHECKING:
    from coordinator.store.base import Store


def store_from_url(url: str) -> Store:
    """A store, not yet opened, for ``url``.

    :raises ConfigurationError: for a scheme other than ``sqlite``, ``postgresql`` or
        ``postgres``, or a SQLite URL with a host, query, fragment or no path.
    """
    # The drivers are imported here, when a store is made: what only reads a store URL (the
    # backup command's checks, the command line's API clients) starts without them.
    if store_kind(url) == POSTGRESQL:
        from coordinator.store.postgres import PostgresStore

        return PostgresStore(url)
    from coordinator.store.sqlite import SQLiteStore

    return SQLiteStore(sqlite_path(url))


SQLITE = "sqlite"
POSTGRESQL = "postgresql"


def store_kind(url: str) -> str:
    """:data:`SQLITE` or :data:`POSTGRESQL`, by the store URL's scheme.

    :raises ConfigurationError: any other scheme.
    """
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        return SQLITE
    if scheme in ("postgresql", "postgres"):
        return POSTGRESQL
    # only the scheme: the rest of a database URL may hold a password
    raise ConfigurationError(
        f"unsupported store URL scheme {scheme!r}: expected sqlite:///<path>, "
        "postgresql://... or postgres://..."
    )


async def open_store(url: str) -> Store:
    """The store for ``url``, opened (connected, migrations applied).

    :raises ConfigurationError: the URL is malformed, or the database cannot be opened
        (unreachable server, missing database, unwritable file, ...).
    """
    store = store_from_url(url)
    try:
        await store.open()
    except Exception as error:
        # Whatever the driver raises, the way out is the same: fix the URL or the database.
        shown = url.split("@")[-1]  # never print a password
        raise ConfigurationError(
            f"cannot open the store at {shown}: {type(error).__name__}: {error}; "
            "check COORDINATOR_STORE_URL and that the database is reachable"
        ) from error
    return store


def sqlite_path(url: str) -> Path:
    parts = urlsplit(url)
    if parts.netloc or parts.query or parts.fragment or not parts.path.strip("/"):
        raise ConfigurationError(
            f"SQLite store URL {url!r} must be sqlite:///<path> "
            "(no host, query or fragment; sqlite:///./<path> for a relative path)"
        )
    path = unquote(parts.path)
    if path.startswith(("/./", "/../")):
        return Path(path[1:])
    return Path("/" + path.lstrip("/"))
