"""Copies of a store, for ``queue-coordinator backup`` and ``restore`` (docs/operations.md):
taking one while coordinators write to the store, telling whether a store holds tasks, and
putting a copy back in place of a store.

* SQLite: SQLite's online backup (Python's ``Connection.backup``) into a single file. It copies
  every page in one step inside one read transaction, so the copy is the database as of one
  commit: every write committed before it began, WAL included, and nothing half-written. The
  copy is switched to a rollback journal so that it is one self-contained file.
* PostgreSQL: ``pg_dump --format=custom`` of the store's schema (the first of the URL's
  ``search_path``, else the connection's current schema), which reads one snapshot, and
  ``pg_restore`` in one transaction. Both run as child processes: the URL is rewritten for
  libpq (asyncpg's ``search_path`` and other server settings dropped, the password handed over
  in ``PGPASSWORD`` so that it never shows in a process listing). A copy restored into a schema
  of another name is renamed after ``pg_restore`` has created it.

A copy records the highest migration it holds, read from the copy itself rather than from the
live store, which could migrate meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import asyncpg

from coordinator.domain.urls import without_credentials
from coordinator.store.factory import POSTGRESQL, SQLITE, sqlite_path, store_kind
from coordinator.store.sqlfiles import migrations

STORE_FILES = {SQLITE: "store.sqlite", POSTGRESQL: "store.pgdump"}
"""The file a backup keeps the store's copy in, by store kind."""

_DRIVERS = {SQLITE: "sqlite", POSTGRESQL: "postgres"}
"""The folder of each kind's migrations (coordinator/store/sql/<driver>)."""

_LIBPQ_PARAMETERS = frozenset(
    {
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "channel_binding",
        "connect_timeout",
        "client_encoding",
        "options",
        "application_name",
        "fallback_application_name",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "sslmode",
        "requiressl",
        "sslcompression",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslrootcert",
        "sslcrl",
        "sslcrldir",
        "sslsni",
        "requirepeer",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "gssencmode",
        "krbsrvname",
        "gsslib",
        "service",
        "target_session_attrs",
    }
)
"""The URL parameters libpq knows; asyncpg passes any other as a server setting, which
``pg_dump`` and ``pg_restore`` would refuse."""


class BackupError(Exception):
    """A backup or restore cannot be done; the message is one line naming why and the way
    out."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreCopy:
    """A store's copy in a backup.

    :param kind: :data:`SQLITE` or :data:`POSTGRESQL`.
    :param migration: the highest migration the copy holds.
    :param schema: PostgreSQL: the schema it was taken from (``None`` for SQLite).
    """

    kind: str
    migration: int
    schema: str | None = None

    @property
    def file(self) -> str:
        """The copy's file name in the backup."""
        return STORE_FILES[self.kind]


def shown(url: str) -> str:
    """The store URL as messages show it: a PostgreSQL one without its credentials (a
    SQLite one has none, and its path is kept exactly)."""
    return url if store_kind(url) == SQLITE else without_credentials(url)


def latest_migration(kind: str) -> int:
    """The highest migration this code knows for stores of ``kind``."""
    return migrations(_DRIVERS[kind])[-1].version


async def copy_store(url: str, directory: Path) -> StoreCopy:
    """Copy the store at ``url`` into ``directory`` (as :attr:`StoreCopy.file`) while it may
    be in use."""
    if store_kind(url) == SQLITE:
        return await asyncio.to_thread(_copy_sqlite, sqlite_path(url), directory)
    return await _dump_postgres(url, directory)


async def holds_tasks(url: str) -> bool:
    """Whether the store at ``url`` holds at least one task (a missing store holds none)."""
    if store_kind(url) == SQLITE:
        return await asyncio.to_thread(_sqlite_holds_tasks, sqlite_path(url))
    conn = await _connect(url)
    try:
        schema = await _schema(conn, url)
        table = await conn.fetchval("SELECT to_regclass(quote_ident($1) || '.tasks')", schema)
        return table is not None and bool(
            await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {_ident(schema)}.tasks)")
        )
    finally:
        await conn.close()


async def restore_store(url: str, directory: Path, copy: StoreCopy) -> None:
    """Replace the store at ``url`` with ``copy``, kept in ``directory``. No coordinator may
    use the store meanwhile; its migrations are not applied here."""
    if store_kind(url) != copy.kind:
        raise BackupError(
            f"the backup holds a {copy.kind} store but COORDINATOR_STORE_URL names a "
            f"{store_kind(url)} one; restore it into a {copy.kind} store"
        )
    if copy.kind == SQLITE:
        await asyncio.to_thread(_restore_sqlite, directory / copy.file, sqlite_path(url))
    else:
        await _restore_postgres(url, directory / copy.file, copy)


# --- SQLite ----------------------------------------------------------------------------------


def _copy_sqlite(path: Path, directory: Path) -> StoreCopy:
    if not path.is_file():
        raise BackupError(f"no SQLite store at {path}: check COORDINATOR_STORE_URL (--store-url)")
    target = directory / STORE_FILES[SQLITE]
    try:
        source = sqlite3.connect(path, timeout=30)
        try:
            copy = sqlite3.connect(target)
            try:
                source.backup(copy)  # every page in one step: one read transaction
                copy.execute("PRAGMA journal_mode=DELETE")
                migration = _sqlite_migration(copy, path)
            finally:
                copy.close()
        finally:
            source.close()
    except sqlite3.Error as error:
        raise BackupError(f"cannot copy the SQLite store at {path}: {error}") from None
    return StoreCopy(kind=SQLITE, migration=migration)


def _sqlite_migration(conn: sqlite3.Connection, path: Path) -> int:
    try:
        row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    except sqlite3.OperationalError:
        row = None
    if row is None or row[0] is None:
        raise BackupError(f"{path} is not a coordinator store: it has no applied migrations")
    return int(row[0])


def _sqlite_holds_tasks(path: Path) -> bool:
    if not path.exists():
        return False
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'tasks'").fetchall()
            return (
                bool(tables) and conn.execute("SELECT 1 FROM tasks LIMIT 1").fetchone() is not None
            )
        finally:
            conn.close()
    except sqlite3.Error as error:
        raise BackupError(f"cannot read the SQLite store at {path}: {error}") from None


def _restore_sqlite(copy: Path, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        source = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
        try:
            target = sqlite3.connect(path, timeout=5)
            try:
                # Through SQLite rather than a file copy: the target's WAL and shared-memory
                # files, if any, are replaced with it, never left to be replayed over the copy.
                source.backup(target)
            finally:
                target.close()
        finally:
            source.close()
    except sqlite3.Error as error:
        raise BackupError(
            f"cannot restore into the SQLite store at {path}: {error}; stop every coordinator "
            "using it first"
        ) from None


# --- PostgreSQL ------------------------------------------------------------------------------


async def _connect(url: str) -> asyncpg.Connection:
    try:
        return await asyncpg.connect(url)
    except Exception as error:
        raise BackupError(
            f"cannot connect to the store at {shown(url)}: "
            f"{type(error).__name__}: {error}; check COORDINATOR_STORE_URL"
        ) from None


async def _schema(conn: asyncpg.Connection, url: str) -> str:
    """The schema the store at ``url`` keeps its tables in: the first of the URL's
    ``search_path``, else the connection's current schema (``public`` when it has none)."""
    query = dict(parse_qsl(urlsplit(url).query))
    first = query.get("search_path", "").split(",")[0].strip()
    if first and first != '"$user"' and first != "$user":
        return first[1:-1] if first.startswith('"') else first.lower()
    return str(await conn.fetchval("SELECT current_schema()") or "public")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def libpq_url(url: str) -> tuple[str, dict[str, str]]:
    """``url`` as libpq takes it, without its password and without what libpq does not know,
    and the environment that gives the password (``PGPASSWORD``) to a child."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    query = [(k, v) for k, v in parse_qsl(parts.query) if k in _LIBPQ_PARAMETERS]
    netloc = f"{user}{at}{hosts}" if user else hosts
    env = dict(os.environ)
    if password:
        env["PGPASSWORD"] = unquote(password)
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query))), env


def _program(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise BackupError(
            f"{name} is not on PATH: install PostgreSQL's client programs (Debian and Ubuntu: "
            f"postgresql-client), of the server's major version or newer"
        )
    return found


async def _run(name: str, *args: str, env: dict[str, str]) -> str:
    """Run PostgreSQL's program ``name`` to its end; its standard output.

    :raises BackupError: it is missing or failed (with the last line of what it said).
    """
    process = await asyncio.create_subprocess_exec(
        _program(name),
        *args,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        said = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
        last = said[-1].strip() if said else "no message"
        raise BackupError(f"{name} failed (exit status {process.returncode}): {last}")
    return out.decode(errors="replace")


async def _dump_postgres(url: str, directory: Path) -> StoreCopy:
    conn = await _connect(url)
    try:
        schema = await _schema(conn, url)
    finally:
        await conn.close()
    target = directory / STORE_FILES[POSTGRESQL]
    dsn, env = libpq_url(url)
    await _run(
        "pg_dump",
        "--format=custom",
        f"--schema={_ident(schema)}",
        f"--file={target}",
        f"--dbname={dsn}",
        env=env,
    )
    # What the dump holds, not the live store: the store may have migrated since.
    applied = await _run(
        "pg_restore",
        "--data-only",
        f"--schema={schema}",
        "--table=schema_migrations",
        "--file=-",
        str(target),
        env=env,
    )
    versions = [int(line.split("\t", 1)[0]) for line in _copy_rows(applied)]
    if not versions:
        raise BackupError(
            f"schema {schema!r} at {shown(url)} is not a coordinator store: it "
            "has no applied migrations; check the URL's search_path"
        )
    return StoreCopy(kind=POSTGRESQL, migration=max(versions), schema=schema)


def _copy_rows(script: str) -> list[str]:
    """The data lines of the ``COPY ... FROM stdin`` blocks of a SQL script."""
    rows: list[str] = []
    inside = False
    for line in script.splitlines():
        if inside and line == "\\.":
            inside = False
        elif inside:
            rows.append(line)
        elif line.startswith("COPY ") and line.endswith("FROM stdin;"):
            inside = True
    return rows


async def _restore_postgres(url: str, dump: Path, copy: StoreCopy) -> None:
    assert copy.schema is not None, "a PostgreSQL copy names its schema"
    conn = await _connect(url)
    try:
        schema = await _schema(conn, url)
        if copy.schema != schema and await _schema_exists(conn, copy.schema):
            raise BackupError(
                f"the backup's schema {copy.schema!r} already exists in the target database, "
                f"so it cannot be restored there as {schema!r}; restore into another database "
                f"or into search_path={copy.schema} there"
            )
        await conn.execute(f"DROP SCHEMA IF EXISTS {_ident(schema)} CASCADE")
        dsn, env = libpq_url(url)
        await _run(
            "pg_restore",
            "--single-transaction",
            "--exit-on-error",
            "--no-owner",
            "--no-privileges",
            f"--dbname={dsn}",
            str(dump),
            env=env,
        )
        if copy.schema != schema:
            await conn.execute(f"ALTER SCHEMA {_ident(copy.schema)} RENAME TO {_ident(schema)}")
    finally:
        await conn.close()


async def _schema_exists(conn: asyncpg.Connection, schema: str) -> bool:
    found = await conn.fetchval("SELECT 1 FROM pg_namespace WHERE nspname = $1", schema)
    return found is not None
