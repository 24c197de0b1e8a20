"""What ``pg_dump`` and ``pg_restore`` are given for a store URL (coordinator/store/backups.py):
libpq's form of the URL, its password only in the child's environment."""

from __future__ import annotations

import pytest

from coordinator.store.backups import libpq_url


def test_the_password_goes_to_the_environment_and_never_on_the_command_line() -> None:
    url, env = libpq_url("postgresql://qc:p%40ss@db.internal:5433/queue?sslmode=require")
    assert url == "postgresql://qc@db.internal:5433/queue?sslmode=require"
    assert env["PGPASSWORD"] == "p@ss"


@pytest.mark.parametrize(
    ("store_url", "expected"),
    [
        # asyncpg's server settings (search_path selects the schema) are not libpq's
        (
            "postgresql://qc@db/queue?search_path=coordinator&application_name=qc",
            "postgresql://qc@db/queue?application_name=qc",
        ),
        ("postgres://db/queue?search_path=a,b", "postgres://db/queue"),
    ],
)
def test_what_libpq_does_not_know_is_left_out(
    store_url: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    url, env = libpq_url(store_url)
    assert url == expected
    assert "PGPASSWORD" not in env
