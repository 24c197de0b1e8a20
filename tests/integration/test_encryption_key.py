"""The key that encrypts the auth API's accessTokens at rest (docs/auth.md): created once in
its file and reused, given as a setting instead, refused with one line when malformed, and a
replica started with another key than the store's stops at start-up with one line and exit
status 2 instead of failing to read every token."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from coordinator.config import ConfigurationError
from coordinator.service.encryption import Cipher, UndecryptableValue, load_key, new_key_text
from devharness.ports import free_port
from devharness.processes import REPO
from tests.fixtures.commands import run_to_end
from tests.fixtures.coordinator import StartCoordinator


def test_the_key_file_is_created_once_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "encryption.key"
    first = load_key(value=None, path=path)
    assert len(first) == 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_key(value=None, path=path) == first
    given = new_key_text()
    assert load_key(value=given, path=path) == base64.b64decode(given)


@pytest.mark.parametrize("text", ["not base64!", base64.b64encode(b"short").decode()])
def test_a_malformed_key_is_a_configuration_error_naming_it(text: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="COORDINATOR_ENCRYPTION_KEY is not base64"):
        load_key(value=text, path=tmp_path / "unused")
    (tmp_path / "bad.key").write_text(text)
    with pytest.raises(ConfigurationError, match=r"bad\.key is not base64"):
        load_key(value=None, path=tmp_path / "bad.key")


def test_a_ciphertext_opens_only_with_its_key_and_for_its_client() -> None:
    cipher = Cipher(os.urandom(32))
    sealed = cipher.encrypt(b"token", bound_to="alice")
    assert cipher.decrypt(sealed, bound_to="alice") == b"token"
    with pytest.raises(UndecryptableValue):
        cipher.decrypt(sealed, bound_to="bob")  # copied onto another client's row
    with pytest.raises(UndecryptableValue):
        Cipher(os.urandom(32)).decrypt(sealed, bound_to="alice")


async def test_a_replica_with_another_key_stops_with_one_line(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    first = await start_coordinator()  # records the tests' key's fingerprint in the store
    env = {name: value for name, value in os.environ.items() if not name.startswith("COORDINATOR_")}
    env |= {
        "COORDINATOR_STORE_URL": first.config.store_url,
        "COORDINATOR_DATA_DIR": str(tmp_path / "other"),
        "COORDINATOR_ENCRYPTION_KEY": new_key_text(),
        "COORDINATOR_AUTH": "false",
        "COORDINATOR_PORT": str(free_port()),
    }
    second = await run_to_end(
        [str(REPO / ".venv" / "bin" / "queue-coordinator"), "serve"],
        cwd=tmp_path,
        env=env,
        timeout_s=60,
    )
    assert second.status == 2, second.output
    # Besides the log (authentication is off here, which it warns about), one line.
    said = [line for line in second.stderr.splitlines() if "level=" not in line]
    assert len(said) == 1, second.stderr
    assert said[0].startswith("queue-coordinator: the encryption key differs")
    assert "COORDINATOR_ENCRYPTION_KEY" in said[0]
    assert "Traceback" not in second.stderr


@pytest.mark.parametrize("problem", ["malformed", "unreadable"])
async def test_a_key_that_cannot_be_used_stops_serve_with_one_line(
    tmp_path: Path, problem: str
) -> None:
    """The key encrypts the secrets service's values too: a coordinator that cannot use it
    serves neither, and says so in one line (docs/secrets.md, docs/operations.md)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("COORDINATOR_")}
    env |= {
        "COORDINATOR_STORE_URL": f"sqlite:///{tmp_path / 'coordinator.db'}",
        "COORDINATOR_DATA_DIR": str(tmp_path / "data"),
        "COORDINATOR_AUTH": "false",
        "COORDINATOR_PORT": str(free_port()),
    }
    if problem == "malformed":
        env["COORDINATOR_ENCRYPTION_KEY"] = "not a key"
        expected = "queue-coordinator: COORDINATOR_ENCRYPTION_KEY is not base64"
    else:  # a directory where the key file should be
        (tmp_path / "key-dir").mkdir()
        env["COORDINATOR_ENCRYPTION_KEY_FILE"] = str(tmp_path / "key-dir")
        expected = "queue-coordinator: cannot read or create the encryption key file"
    served = await run_to_end(
        [str(REPO / ".venv" / "bin" / "queue-coordinator"), "serve"],
        cwd=tmp_path,
        env=env,
        timeout_s=60,
    )
    assert served.status == 2, served.output
    said = [line for line in served.stderr.splitlines() if "level=" not in line]
    assert len(said) == 1, served.stderr
    assert said[0].startswith(expected), said[0]
    assert "Traceback" not in served.stderr
