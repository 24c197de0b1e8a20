"""Unit tests of what releasing hints and failing over between coordinators are made of: the
``signedReleaseUrl`` the response schema requires, and the root URLs ``Worker``,
``CoordinatorClient`` and ``queue-worker`` accept (issue 24). The release URL a worker fills
in is tested beside the delete URL, in tests/unit/test_sdk_units.py.

The behaviour itself (a claim meeting no coordinator, a release reaching Azure, a worker
switching replicas) is tested in tests/integration/test_sdk_release.py and
tests/e2e/test_failover.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from coordinator.api.validation import ResponseSchemaError, validate_response
from worker_sdk import Worker, cli
from worker_sdk.client import root_urls_of

REQUIRED = ["--provisioner-id", "prov", "--worker-type", "wt", "examples.hello:handle"]

QUEUE = {
    "signedPollUrl": "http://127.0.0.1:10001/devstoreaccount1/q/messages?sp=p&sig=x",
    "signedDeleteUrl": "http://127.0.0.1:10001/devstoreaccount1/q/messages/{{messageId}}"
    "?popreceipt={{popReceipt}}&sp=p&sig=x",
    "signedReleaseUrl": "http://127.0.0.1:10001/devstoreaccount1/q/messages/{{messageId}}"
    "?popreceipt={{popReceipt}}&visibilitytimeout=1&sp=u&sig=y",
}


def test_poll_task_urls_answers_must_carry_a_release_url() -> None:
    validate_response(
        "poll-task-urls-response", {"queues": [QUEUE], "expires": "2026-05-01T12:30:00.000Z"}
    )
    without = {key: url for key, url in QUEUE.items() if key != "signedReleaseUrl"}
    with pytest.raises(ResponseSchemaError, match="signedReleaseUrl"):
        validate_response(
            "poll-task-urls-response", {"queues": [without], "expires": "2026-05-01T12:30:00.000Z"}
        )


def test_root_urls_are_one_root_url_or_several_distinct_ones_without_trailing_slashes() -> None:
    assert root_urls_of("http://a/", ()) == ("http://a",)
    assert root_urls_of(None, ["http://a", "http://b/"]) == ("http://a", "http://b")
    for root_url, root_urls, problem in [
        (None, (), "give root_url, or root_urls"),
        ("http://a", ["http://b"], "not both"),
        (None, ["http://a", "http://a/"], "given twice"),
        (None, ["http://a", "/"], "empty"),
    ]:
        with pytest.raises(ValueError, match=problem):
            root_urls_of(root_url, root_urls)


def test_a_worker_takes_several_root_urls_but_not_with_root_url_too() -> None:
    def handle(run: object) -> None:
        return None

    Worker(
        root_urls=["http://a", "http://b"], credentials=None, handler=handle, task_queues=["p/w"]
    )
    with pytest.raises(ValueError, match="not both"):
        Worker(
            root_url="http://a",
            root_urls=["http://b"],
            credentials=None,
            handler=handle,
            task_queues=["p/w"],
        )


def options(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> cli.Options:
    return cli.parse_options([*argv, *REQUIRED], environ or {})


def test_queue_worker_takes_root_url_repeated_for_replicas_in_order() -> None:
    parsed = options(["--root-url", "http://b:8080/", "--root-url", "https://a"])
    assert parsed.worker.root_urls == ("http://b:8080", "https://a")
    from_flags = options(["--root-url", "http://b"], {"TASKCLUSTER_ROOT_URL": "http://env"})
    assert from_flags.worker.root_urls == ("http://b",), "the flags win over the environment"
    assert options([], {"TASKCLUSTER_ROOT_URL": "http://env/"}).worker.root_urls == ("http://env",)


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        ([], {}, "give --root-url or set TASKCLUSTER_ROOT_URL"),
        (["--root-url", "coordinator:8080"], {}, "'coordinator:8080' is not an http(s) URL"),
        ([], {"TASKCLUSTER_ROOT_URL": "ftp://c"}, "TASKCLUSTER_ROOT_URL: 'ftp://c' is not an"),
        (
            ["--root-url", "http://a", "--root-url", "http://a/"],
            {},
            "a --root-url is given twice: give each replica once",
        ),
    ],
)
def test_bad_root_urls_exit_2_with_one_line_naming_them(
    argv: list[str], environ: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        options(argv, environ)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
