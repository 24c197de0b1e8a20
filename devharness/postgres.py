"""Throwaway PostgreSQL databases: created on the server of an admin DSN, dropped on exit."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ADMIN_DSN = os.environ.get(
    "COORDINATOR_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
"""A DSN of any database on a server where the user may create databases."""


@contextlib.asynccontextmanager
async def throwaway_database(
    admin_dsn: str, prefix: str, *, options: str = ""
) -> AsyncIterator[str]:
    """The DSN of a new database ``<prefix>_<pid>_<random>`` on the server of ``admin_dsn``
    (``options`` go to ``CREATE DATABASE``); dropped, with whatever is still connected to
    it, on exit."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" {options}')
    finally:
        await admin.close()
    try:
        yield urlunsplit(urlsplit(admin_dsn)._replace(path=f"/{name}"))
    finally:
        admin = await asyncpg.connect(admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
