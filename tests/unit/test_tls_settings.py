"""The TLS settings (docs/operations.md, TLS): ``COORDINATOR_TLS_CERT`` and
``COORDINATOR_TLS_KEY`` both or neither, an https public URL by default with them, a server
context of TLS 1.2 and later, and every file that cannot be used stopping ``serve`` with one
line naming it and exit status 2; the clients' ``SSL_CERT_FILE`` (the SDK's and the command
line's), and the worker's metrics address (127.0.0.1 unless ``--metrics-host``)."""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import pytest
from cryptography.hazmat.primitives import serialization

from coordinator.cli import rest
from coordinator.cli.main import main
from coordinator.config import Config, ConfigurationError
from tests.fixtures.tls import PrivateCA, make_private_ca
from worker_sdk import cli
from worker_sdk.client import ca_context
from worker_sdk.options import WorkerOptions

REQUIRED = ["--root-url", "https://c", "--provisioner-id", "p", "--worker-type", "w", "m:f"]


def test_with_both_files_the_public_url_is_https_and_the_context_tls_1_2_or_later(
    private_ca: PrivateCA,
) -> None:
    env = {
        "COORDINATOR_TLS_CERT": str(private_ca.cert_file),
        "COORDINATOR_TLS_KEY": str(private_ca.key_file),
    }
    config = Config.from_env(env)
    assert config.public_url == "https://127.0.0.1:8080"
    context = config.tls_context()
    assert context is not None
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert Config.from_env(env | {"COORDINATOR_PUBLIC_URL": "https://q.example"}).public_url == (
        "https://q.example"
    )
    plain = Config.from_env({})
    assert plain.public_url == "http://127.0.0.1:8080"
    assert plain.tls_context() is None


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("COORDINATOR_TLS_CERT", "COORDINATOR_TLS_CERT is set but COORDINATOR_TLS_KEY is not"),
        ("COORDINATOR_TLS_KEY", "COORDINATOR_TLS_KEY is set but COORDINATOR_TLS_CERT is not"),
    ],
)
def test_one_file_without_the_other_is_one_line_and_exit_status_2(
    given: str,
    message: str,
    private_ca: PrivateCA,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = private_ca.cert_file if given == "COORDINATOR_TLS_CERT" else private_ca.key_file
    with pytest.raises(ConfigurationError, match=message):
        Config.from_env({given: str(path)})
    _serve_refuses({given: str(path)}, monkeypatch, tmp_path)
    said = _one_line(capsys)
    assert said.startswith(f"queue-coordinator: {message}"), said
    assert "set both" in said and "or neither" in said


def _encrypted(ca: PrivateCA) -> Path:
    key = serialization.load_pem_private_key(ca.key_file.read_bytes(), password=None)
    path = ca.key_file.with_suffix(".encrypted")
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    return path


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        ("missing certificate", "COORDINATOR_TLS_CERT='{cert}' cannot be read"),
        ("key is a directory", "COORDINATOR_TLS_KEY='{key}' cannot be read"),
        ("certificate not PEM", "do not load as a certificate and its private key"),
        ("key of another certificate", "do not load as a certificate and its private key"),
        ("encrypted key", "COORDINATOR_TLS_KEY='{key}' is encrypted"),
    ],
)
def test_files_that_do_not_load_are_one_line_naming_them_and_exit_status_2(
    problem: str,
    expected: str,
    private_ca: PrivateCA,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cert, key = private_ca.cert_file, private_ca.key_file
    if problem == "missing certificate":
        cert = tmp_path / "nowhere.pem"
    elif problem == "key is a directory":
        key = tmp_path / "key-dir"
        key.mkdir()
    elif problem == "certificate not PEM":
        cert = tmp_path / "garbage.pem"
        cert.write_text("not a certificate\n")
    elif problem == "key of another certificate":
        key = make_private_ca(tmp_path / "other").key_file
    else:
        key = _encrypted(private_ca)
    env = {"COORDINATOR_TLS_CERT": str(cert), "COORDINATOR_TLS_KEY": str(key)}
    with pytest.raises(ConfigurationError):
        Config.from_env(env).tls_context()
    _serve_refuses(env, monkeypatch, tmp_path)
    said = _one_line(capsys)
    assert expected.format(cert=cert, key=key) in said, said
    assert not (tmp_path / "data").exists(), "serve went on after the TLS settings failed"


def _serve_refuses(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``queue-coordinator serve`` with ``env``'s settings exits 2 before serving."""
    for name in ("COORDINATOR_TLS_CERT", "COORDINATOR_TLS_KEY", "COORDINATOR_PUBLIC_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COORDINATOR_DATA_DIR", str(tmp_path / "data"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", "--port", "0"]) == 2


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``queue-coordinator`` wrote to stderr (log lines aside), no traceback."""
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "level=" not in line]
    assert len(said) == 1, err
    assert "Traceback" not in err
    return said[0]


def test_the_clients_trust_the_ca_file_ssl_cert_file_names_and_name_one_that_fails(
    private_ca: PrivateCA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    assert ca_context() is True  # aiohttp's default: the system's CAs
    monkeypatch.setenv("SSL_CERT_FILE", str(private_ca.ca_file))
    context = ca_context()
    assert isinstance(context, ssl.SSLContext)
    [trusted] = context.get_ca_certs()
    assert trusted["subject"] == ((("commonName", "queue-coordinator test CA"),),)

    missing = tmp_path / "no-ca.pem"
    monkeypatch.setenv("SSL_CERT_FILE", str(missing))
    with pytest.raises(ValueError, match=f"SSL_CERT_FILE='{missing}' cannot be loaded"):
        ca_context()
    with pytest.raises(rest.CommandFailed, match=f"SSL_CERT_FILE='{missing}' cannot be loaded"):
        rest.new_session(aiohttp.ClientTimeout(total=1))


def test_the_worker_serves_its_metrics_on_127_0_0_1_unless_metrics_host_says_otherwise() -> None:
    assert WorkerOptions(credentials=None).metrics_host == "127.0.0.1"
    assert cli.parse_options(REQUIRED, {}).worker.metrics_host == "127.0.0.1"
    given = cli.parse_options(["--metrics-host", "0.0.0.0", *REQUIRED], {})
    assert given.worker.metrics_host == "0.0.0.0"
