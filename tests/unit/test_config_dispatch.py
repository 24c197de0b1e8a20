"""``COORDINATOR_DISPATCH``: its default follows the storage account, and a mistake is one
line naming the setting and exit status 2 (docs/dispatch.md). Also the Azure queue layer's
request timeout, which only Azure dispatch uses."""

from __future__ import annotations

import pytest

from coordinator.app import _queue_service
from coordinator.cli.main import main
from coordinator.config import Config, ConfigurationError

ACCOUNT = "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=a2V5;QueueEndpoint=http://h/a;"


@pytest.mark.parametrize(
    ("env", "mode"),
    [
        ({}, "store"),
        ({"AZURE_STORAGE_CONNECTION_STRING": ACCOUNT}, "azure"),
        ({"AZURE_STORAGE_CONNECTION_STRING": ACCOUNT, "COORDINATOR_DISPATCH": "store"}, "store"),
        ({"COORDINATOR_DISPATCH": "store"}, "store"),
    ],
)
def test_the_dispatch_defaults_to_azure_only_with_a_storage_account(
    env: dict[str, str], mode: str
) -> None:
    assert Config.from_env(env).dispatch_mode == mode


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"COORDINATOR_DISPATCH": "redis"}, "COORDINATOR_DISPATCH='redis' is not a dispatch"),
        ({"COORDINATOR_DISPATCH": "azure"}, "COORDINATOR_DISPATCH=azure needs AZURE_STORAGE"),
    ],
)
def test_a_wrong_dispatch_is_one_line_and_exit_status_2(
    env: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Config.from_env(env)
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    assert main(["migrate"]) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_the_queue_request_timeout_reaches_the_queue_layer() -> None:
    env = {"AZURE_STORAGE_CONNECTION_STRING": ACCOUNT}
    default = _queue_service(Config.from_env(env))
    longer = _queue_service(Config.from_env(env | {"COORDINATOR_QUEUE_REQUEST_TIMEOUT": "30"}))
    assert default is not None and default.settings.request_timeout_s == 10.0
    assert longer is not None and longer.settings.request_timeout_s == 30.0

    with pytest.raises(ConfigurationError, match="COORDINATOR_QUEUE_REQUEST_TIMEOUT=0 must be"):
        Config.from_env(env | {"COORDINATOR_QUEUE_REQUEST_TIMEOUT": "0"})
