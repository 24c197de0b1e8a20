"""Unit tests of the worker SDK's pure parts: hints, Azure XML and URLs, timing, resolutions,
Hawk signing, and the command line's arguments and environment."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import math
import random
import re
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import mohawk
import pytest
from mohawk.util import parse_authorization_header
from taskcluster import Queue

from hawk_signing import Credentials, authorization, hawk_ext
from worker_sdk import TaskRun, Worker, azure, cli, timing
from worker_sdk.client import Resolution, _Answer
from worker_sdk.errors import (
    InternalError,
    MalformedPayload,
    RequestFailed,
    ResourceUnavailable,
    RetryTask,
    missing_scopes,
)
from worker_sdk.options import WorkerOptions, flag_of
from worker_sdk.priorities import DEFAULT_WEIGHTS, LEVELS, PRIORITIES, PollOrder, TaskQueue
from worker_sdk.run_log import RunLogFormatter
from worker_sdk.supervisor import slot_worker_id
from worker_sdk.worker import default_worker_group, default_worker_id, resolution_for


def b64json(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


# -- hints -------------------------------------------------------------------------------


def test_a_hint_decodes_to_task_run_and_hint_ids() -> None:
    text = b64json({"taskId": "fN1SbArXTPSVFNUvaOlinQ", "runId": 3, "hintId": "h1"})
    assert azure.parse_hint(text) == azure.AzureHint(
        task_id="fN1SbArXTPSVFNUvaOlinQ", run_id=3, hint_id="h1"
    )


@pytest.mark.parametrize(
    "text",
    [
        "not base64!",
        base64.b64encode(b"not json").decode(),
        b64json(["taskId", "runId"]),
        b64json({"runId": 0, "hintId": "h"}),
        b64json({"taskId": "", "runId": 0, "hintId": "h"}),
        b64json({"taskId": "t", "hintId": "h"}),
        b64json({"taskId": "t", "runId": "0", "hintId": "h"}),
        b64json({"taskId": "t", "runId": True, "hintId": "h"}),
        b64json({"taskId": "t", "runId": -1, "hintId": "h"}),
        b64json({"taskId": "t", "runId": 0}),
        "",
    ],
)
def test_anything_else_is_a_poison_hint(text: str) -> None:
    with pytest.raises(azure.PoisonHint):
        azure.parse_hint(text)


# -- Azure XML and URLs ------------------------------------------------------------------

AZURE_XML = """<?xml version="1.0" encoding="utf-8"?>
<QueueMessagesList>
  <QueueMessage>
    <MessageId>5974b586-0df3-4e2d-ad0c-18e3892bfca2</MessageId>
    <InsertionTime>Fri, 09 Oct 2009 21:04:30 GMT</InsertionTime>
    <ExpirationTime>Fri, 16 Oct 2009 21:04:30 GMT</ExpirationTime>
    <PopReceipt>YzQ4Yzg1MDItYTc0Ny00OWNjLTkxYTUtZGM0MDFiZDAwYzEw+/=</PopReceipt>
    <TimeNextVisible>Fri, 09 Oct 2009 23:29:20 GMT</TimeNextVisible>
    <DequeueCount>11</DequeueCount>
    <MessageText>PHRlc3Q+dGhpcyBpcyBhIHRlc3QgbWVzc2FnZTwvdGVzdD4=</MessageText>
  </QueueMessage>
  <QueueMessage>
    <MessageId>second</MessageId>
    <PopReceipt>r2</PopReceipt>
    <DequeueCount>1</DequeueCount>
    <MessageText></MessageText>
  </QueueMessage>
</QueueMessagesList>"""


def test_get_messages_xml_parses_into_messages() -> None:
    assert azure.parse_messages(AZURE_XML) == [
        azure.QueueMessage(
            message_id="5974b586-0df3-4e2d-ad0c-18e3892bfca2",
            pop_receipt="YzQ4Yzg1MDItYTc0Ny00OWNjLTkxYTUtZGM0MDFiZDAwYzEw+/=",
            dequeue_count=11,
            text="PHRlc3Q+dGhpcyBpcyBhIHRlc3QgbWVzc2FnZTwvdGVzdD4=",
        ),
        azure.QueueMessage(message_id="second", pop_receipt="r2", dequeue_count=1, text=""),
    ]


def test_an_empty_queue_is_an_empty_list() -> None:
    xml = '<?xml version="1.0" encoding="utf-8"?><QueueMessagesList />'
    assert azure.parse_messages(xml) == []


@pytest.mark.parametrize(
    "xml",
    [
        "<html>proxy error</html",
        "<Error><Code>ServerBusy</Code></Error>",
        "<QueueMessagesList><QueueMessage><MessageId>m</MessageId></QueueMessage>"
        "</QueueMessagesList>",
        "<QueueMessagesList><QueueMessage><MessageId>m</MessageId><PopReceipt>p</PopReceipt>"
        "<DequeueCount>many</DequeueCount><MessageText>t</MessageText></QueueMessage>"
        "</QueueMessagesList>",
    ],
)
def test_anything_but_a_message_list_is_rejected(xml: str) -> None:
    with pytest.raises(ValueError):
        azure.parse_messages(xml)


def test_poll_url_asks_for_n_messages_and_keeps_the_sas_as_is() -> None:
    signed = "https://acct.queue.core.windows.net/q7/messages?visibilitytimeout=300&sig=a%2Bb%3D"
    assert azure.poll_url(signed, 5) == signed + "&numofmessages=5"
    assert azure.poll_url("http://h/q/messages", 32).endswith("/q/messages?numofmessages=32")
    for bad in (0, 33):
        with pytest.raises(ValueError):
            azure.poll_url(signed, bad)


@pytest.mark.parametrize(
    ("fill", "rest"),
    [
        (azure.delete_url, "&sv=2023&sig=a%2Bb%3D"),
        (azure.release_url, "&visibilitytimeout=1&sv=2023&sp=u&sig=a%2Bb%3D"),
    ],
    ids=["delete", "release"],
)
def test_delete_and_release_urls_substitute_percent_encoded_id_and_receipt_and_keep_the_rest(
    fill: Callable[[str, azure.QueueMessage], str], rest: str
) -> None:
    template = "https://acct.queue.core.windows.net/q7/messages/{{messageId}}"
    message = azure.QueueMessage(
        message_id="id/with space", pop_receipt="AgAA+/x==&y", dequeue_count=1, text=""
    )
    assert fill(template + "?popreceipt={{popReceipt}}" + rest, message) == (
        "https://acct.queue.core.windows.net/q7/messages/id%2Fwith%20space"
        "?popreceipt=AgAA%2B%2Fx%3D%3D%26y" + rest
    )


def test_queue_name_is_the_segment_before_messages() -> None:
    assert azure.queue_name_of_url("https://acct.queue.core.windows.net/q7/messages?sig=x") == "q7"
    assert azure.queue_name_of_url("http://127.0.0.1:10001/devstoreaccount1/q1/messages") == "q1"


# -- timing ------------------------------------------------------------------------------


@pytest.mark.parametrize("attempt", range(40))
def test_backoff_grows_exponentially_within_jitter_bounds_up_to_the_cap(attempt: int) -> None:
    backoff = timing.Backoff(base=0.5, cap=20.0)
    ceiling = min(20.0, 0.5 * 2**attempt)
    rng = random.Random(attempt)
    delays = [backoff.delay(attempt, rng) for _ in range(200)]
    assert all(ceiling / 2 <= delay <= ceiling for delay in delays)
    assert max(delays) - min(delays) > ceiling / 10, "jitter must spread the delays"


def test_backoff_survives_absurd_attempt_counts() -> None:
    assert 30.0 <= timing.Backoff(base=1.0, cap=60.0).delay(10_000, random.Random(0)) <= 60.0


def test_idle_pause_is_jittered_around_the_delay() -> None:
    rng = random.Random(1)
    pauses = [timing.jittered(1.0, rng) for _ in range(500)]
    assert all(0.5 <= pause <= 1.5 for pause in pauses)
    assert min(pauses) < 0.6 and max(pauses) > 1.4


def test_an_idle_pause_doubles_while_nothing_is_found_up_to_the_idle_rate() -> None:
    class Middle(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return (a + b) / 2  # the jitter's mean

    def pause(empty_passes: int, gets: int = 7) -> float:
        return timing.idle_pause(empty_passes, gets, idle_delay=1.0, idle_rate=1.0, rng=Middle())

    assert [pause(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 7.0, 7.0]
    assert pause(10_000) == 7.0, "the gets of a pass over the pause: one request a second"
    assert pause(5, gets=14) == 14.0, "two task queues' queues: twice the pause"
    assert pause(5, gets=0) == 1.0, "never below the idle delay"
    rng = random.Random(3)
    spread = [timing.idle_pause(9, 7, idle_delay=1.0, idle_rate=1.0, rng=rng) for _ in range(400)]
    assert all(3.5 <= value <= 10.5 for value in spread) and max(spread) - min(spread) > 5
    # on average the pause is the gets of a pass divided by the idle rate
    assert 6.0 < sum(spread) / len(spread) < 8.0


def test_a_server_deadline_becomes_a_monotonic_one_measured_on_the_server_clock() -> None:
    server_now = datetime(2026, 11, 22, 5, 0, 0, tzinfo=UTC)
    # The worker's own wall clock plays no part, so a skewed worker still meets the deadline.
    expires_at = timing.deadline(
        stamped_after=1000.0, until=server_now + timedelta(seconds=1200), server_time=server_now
    )
    assert expires_at == 1000.0 + 1200 - timing.DATE_RESOLUTION


def test_a_long_poll_measures_the_server_clock_from_its_answer_not_its_request() -> None:
    def answer(*, answered_at: float, long_poll: bool) -> _Answer:
        return _Answer(
            method="POST",
            url="u",
            body={},
            sent_at=100.0,
            answered_at=answered_at,
            long_poll=long_poll,
            date=None,
        )

    # claimWork waited 20 s for work: the server stamped its Date at the end of the wait
    assert answer(answered_at=120.0, long_poll=True).stamped_after == 120.0 - 1.0
    # answered at once: never earlier than the request was sent
    assert answer(answered_at=100.2, long_poll=True).stamped_after == 100.0
    # any other request: its sending, before the server could stamp anything
    assert answer(answered_at=120.0, long_poll=False).stamped_after == 100.0


def test_reclaim_is_scheduled_with_a_third_of_the_claim_left() -> None:
    # An injected clock: claimed at t=100 with 1200 s to go.
    assert timing.reclaim_at(now=100.0, expires_at=1300.0) == pytest.approx(900.0)
    # After a reclaim at t=900 that extends the claim to t=2100.
    assert timing.reclaim_at(now=900.0, expires_at=2100.0) == pytest.approx(1700.0)
    # Already past the deadline: reclaim at once rather than never.
    assert timing.reclaim_at(now=50.0, expires_at=40.0) == 50.0


def test_signed_urls_are_refreshed_five_minutes_early_or_halfway_if_short_lived() -> None:
    assert timing.refresh_at(sent_at=0.0, expires_at=1800.0) == 1500.0
    assert timing.refresh_at(sent_at=10.0, expires_at=70.0) == 40.0
    assert timing.refresh_at(sent_at=10.0, expires_at=5.0) == 5.0


# -- poll order --------------------------------------------------------------------------


def test_default_weights_double_with_each_level() -> None:
    assert [LEVELS[p] for p in PRIORITIES] == [7, 6, 5, 4, 3, 2, 1]
    assert [DEFAULT_WEIGHTS[p] for p in PRIORITIES] == [64, 32, 16, 8, 4, 2, 1]


def test_strict_order_is_by_priority_then_by_task_queue_as_given() -> None:
    queues = [("a", "lowest"), ("a", "highest"), ("b", "lowest"), ("b", "highest"), ("a", "low")]
    arranged = PollOrder().arrange(queues, lambda q: q[1], random.Random(0))
    assert arranged == [
        ("a", "highest"),
        ("b", "highest"),
        ("a", "low"),
        ("a", "lowest"),
        ("b", "lowest"),
    ]


def test_weighted_order_puts_each_priority_first_in_its_share_of_rounds() -> None:
    rng = random.Random(20260101)
    order = PollOrder(polling="weighted")
    rounds = 100_000
    firsts = Counter(order.arrange(PRIORITIES, str, rng)[0] for _ in range(rounds))
    total = sum(DEFAULT_WEIGHTS.values())
    for priority in PRIORITIES:
        share = firsts[priority] / rounds
        assert share == pytest.approx(DEFAULT_WEIGHTS[priority] / total, rel=0.05), priority


@pytest.mark.parametrize("polling", ["strict", "weighted"])
def test_only_weighted_polling_serves_the_lowest_priority_while_higher_ones_stay_full(
    polling: str,
) -> None:
    """Each round claims from the first queue in the order that has work; highest and high
    never run dry. Strict order starves lowest; weighted gives it 1/(64 + 16 + 1) of the
    claims, the share of its weight among the priorities with work."""
    rng = random.Random(11)
    order = PollOrder(polling="weighted") if polling == "weighted" else PollOrder()
    full = {"highest", "high", "lowest"}
    rounds = 50_000
    served = Counter(
        next(p for p in order.arrange(PRIORITIES, str, rng) if p in full) for _ in range(rounds)
    )
    if polling == "strict":
        assert served == {"highest": rounds}
    else:
        total = sum(DEFAULT_WEIGHTS[p] for p in full)
        for priority in full:
            expected = DEFAULT_WEIGHTS[priority] / total
            assert served[priority] / rounds == pytest.approx(expected, rel=0.1), priority


# -- resolutions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (None, Resolution(kind="completed")),
        (MalformedPayload("no command"), Resolution(kind="exception", reason="malformed-payload")),
        (ResourceUnavailable("gone"), Resolution(kind="exception", reason="resource-unavailable")),
        (InternalError("disk full"), Resolution(kind="exception", reason="internal-error")),
        (RuntimeError("boom"), Resolution(kind="failed")),
        (KeyError("payload"), Resolution(kind="failed")),
    ],
)
def test_handler_results_map_to_reports(error: BaseException | None, expected: Resolution) -> None:
    assert resolution_for(error) == expected


INTERMITTENT = Resolution(kind="exception", reason="intermittent-task")


@pytest.mark.parametrize(
    ("error", "retry_failures", "with_retries_left"),
    [
        (RetryTask("flaky"), False, INTERMITTENT),
        (RuntimeError("boom"), False, Resolution(kind="failed")),
        (RuntimeError("boom"), True, INTERMITTENT),
        (MalformedPayload("bad"), True, Resolution(kind="exception", reason="malformed-payload")),
    ],
)
def test_retries_are_asked_for_only_while_the_task_has_some_left(
    error: BaseException, retry_failures: bool, with_retries_left: Resolution
) -> None:
    assert resolution_for(error, retries_left=2, retry_failures=retry_failures) == with_retries_left
    on_the_last_run = resolution_for(error, retries_left=0, retry_failures=retry_failures)
    if with_retries_left == INTERMITTENT:
        assert on_the_last_run == Resolution(kind="failed")
    else:
        assert on_the_last_run == with_retries_left


def test_retry_after_of_a_retry_task_goes_into_the_report_body() -> None:
    resolution = resolution_for(RetryTask("later", retry_after=600), retries_left=1)
    assert resolution == Resolution(kind="exception", reason="intermittent-task", retry_after=600)
    assert resolution.exception_body() == {"reason": "intermittent-task", "retryAfter": 600}
    assert INTERMITTENT.exception_body() == {"reason": "intermittent-task"}
    # on the last run there is nothing to delay: failed, as without retry_after
    assert resolution_for(RetryTask("later", retry_after=600)) == Resolution(kind="failed")
    for bad in (-1, math.inf, math.nan):
        with pytest.raises(ValueError, match="retry_after"):
            RetryTask("later", retry_after=bad)
    with pytest.raises(ValueError, match="retry_after"):
        Resolution(kind="exception", reason="internal-error", retry_after=1)


def test_a_resolution_has_a_reason_exactly_when_it_is_an_exception() -> None:
    with pytest.raises(ValueError):
        Resolution(kind="exception")
    with pytest.raises(ValueError):
        Resolution(kind="failed", reason="internal-error")


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "transient"),
    [(None, True), (500, True), (503, True), (429, True), (400, False), (404, False), (409, False)],
)
def test_only_missing_answers_server_errors_and_throttling_are_transient(
    status: int | None, transient: bool
) -> None:
    error = RequestFailed(method="GET", url="http://h/x", status=status, code="C", message="m")
    assert error.transient is transient


def test_missing_scopes_are_read_from_the_coordinator_s_403_message() -> None:
    message = (
        "Client ID w does not have sufficient scopes and is missing the following scopes:\n\n"
        "```\nqueue:claim-task:prov/wt\n```\n\nYou have the scopes:\n\n```\nq:a\n```"
    )
    error = RequestFailed(method="POST", url="u", status=403, code="C", message=message)
    assert missing_scopes(error) == "queue:claim-task:prov/wt"
    expression = message.replace(
        "queue:claim-task:prov/wt", '{\n  "AnyOf": [\n    "a",\n "b"\n  ]\n}'
    )
    error = RequestFailed(method="POST", url="u", status=403, code="C", message=expression)
    assert missing_scopes(error) == '{ "AnyOf": [ "a", "b" ] }'
    other = RequestFailed(method="POST", url="u", status=403, code="C", message="no\nway")
    assert missing_scopes(other) == "no"


def test_request_failures_never_carry_the_sas_signature() -> None:
    error = RequestFailed(
        method="GET", url="https://a/q/messages?sig=SECRET", status=403, code="Auth", message=""
    )
    assert "SECRET" not in str(error) and "SECRET" not in error.url


# -- Hawk --------------------------------------------------------------------------------

CERTIFICATE = {
    "version": 1,
    "scopes": ["queue:reclaim-task:abc/0"],
    "start": 1_700_000_000_000,
    "expiry": 1_700_001_200_000,
    "seed": "seed+/seed",
    "signature": "c2ln",
    "issuer": "root",
}


@pytest.mark.parametrize(
    "certificate", [None, json.dumps(CERTIFICATE), json.dumps(CERTIFICATE, indent=2)]
)
def test_hawk_ext_matches_the_official_client_byte_for_byte(certificate: str | None) -> None:
    raw: dict[str, Any] = {"clientId": "c", "accessToken": "t"}
    if certificate is not None:
        raw["certificate"] = certificate
    ours = hawk_ext(Credentials.from_json(raw))
    # The official client turns the values of the dict it is given into bytes: give a copy.
    official = Queue({"rootUrl": "http://x", "credentials": dict(raw)}).makeHawkExt()
    assert ours.encode() == official


def test_signed_requests_verify_and_carry_the_certificate() -> None:
    credentials = Credentials(
        client_id="task-client", access_token="secret", certificate=json.dumps(CERTIFICATE)
    )
    url = "http://127.0.0.1:8080/api/queue/v1/task/abc/runs/0/exception"
    body = '{"reason":"worker-shutdown"}'
    header = authorization(
        credentials, method="POST", url=url, content=body, content_type="application/json"
    )
    mohawk.Receiver(
        lambda client_id: {"id": client_id, "key": "secret", "algorithm": "sha256"},
        header,
        url,
        "POST",
        content=body,
        content_type="application/json",
    )
    ext = parse_authorization_header(header)["ext"]
    assert json.loads(base64.urlsafe_b64decode(ext)) == {"certificate": CERTIFICATE}


def test_credentials_accept_a_parsed_certificate() -> None:
    credentials = Credentials.from_json(
        {"clientId": "c", "accessToken": "t", "certificate": CERTIFICATE}
    )
    assert credentials.certificate is not None
    assert json.loads(credentials.certificate) == CERTIFICATE


# -- command line ------------------------------------------------------------------------

REQUIRED = ["--provisioner-id", "prov", "--worker-type", "wt", "examples.hello:handle"]


def test_root_url_and_credentials_come_from_the_taskcluster_environment() -> None:
    options = cli.parse_options(
        REQUIRED,
        {
            "TASKCLUSTER_ROOT_URL": "http://127.0.0.1:8080/",
            "TASKCLUSTER_CLIENT_ID": "worker",
            "TASKCLUSTER_ACCESS_TOKEN": "token",
        },
    )
    assert options.worker.root_urls == ("http://127.0.0.1:8080",)
    assert options.worker.credentials == Credentials(client_id="worker", access_token="token")
    assert options.worker.task_queues == (TaskQueue("prov", "wt"),)
    assert options.command.handler == "examples.hello:handle"
    assert (options.worker.capacity, options.worker.claim_work, options.worker.grace_period) == (
        1,
        None,
        60.0,
    )
    assert options.worker.dequeue_warning == 10
    assert (options.worker.polling, options.worker.weights) == ("strict", DEFAULT_WEIGHTS)
    assert options.worker.retry_failures is False


def test_flags_win_over_the_environment_and_certificates_make_temporary_credentials() -> None:
    options = cli.parse_options(
        [
            "--root-url",
            "http://coordinator:9000",
            "--worker-group",
            "grp",
            "--worker-id",
            "w7",
            "--capacity",
            "8",
            "--claim-work",
            "--grace-period",
            "5",
            "--dequeue-warning",
            "3",
            *REQUIRED,
        ],
        {
            "TASKCLUSTER_ROOT_URL": "http://elsewhere",
            "TASKCLUSTER_CLIENT_ID": "worker",
            "TASKCLUSTER_ACCESS_TOKEN": "token",
            "TASKCLUSTER_CERTIFICATE": '{"version":1}',
        },
    )
    assert options.worker.root_urls == ("http://coordinator:9000",)
    assert (options.worker.worker_group, options.worker.worker_id) == ("grp", "w7")
    assert (options.worker.capacity, options.worker.claim_work, options.worker.grace_period) == (
        8,
        True,
        5.0,
    )
    assert options.worker.dequeue_warning == 3
    assert isinstance(options.worker.credentials, Credentials)
    assert options.worker.credentials.certificate == '{"version":1}'


def test_several_task_queues_weighted_polling_and_retries_from_the_command_line() -> None:
    options = cli.parse_options(
        [
            "--root-url",
            "http://c",
            "--task-queue",
            "proj/linux",
            "--polling",
            "weighted",
            "--weight",
            "lowest=3",
            "--weight",
            "highest=0.5",
            "--retry-failures",
            *REQUIRED,
            "--task-queue",
            "proj/windows",
        ],
        {},
    )
    assert options.worker.task_queues == (
        TaskQueue("prov", "wt"),
        TaskQueue("proj", "linux"),
        TaskQueue("proj", "windows"),
    )
    assert options.worker.polling == "weighted"
    assert options.worker.weights == {**DEFAULT_WEIGHTS, "lowest": 3.0, "highest": 0.5}
    assert options.worker.retry_failures is True
    assert (options.worker.isolation, options.command.processes) == ("none", 1)
    only_task_queues = cli.parse_options(
        ["--root-url", "http://c", "--task-queue", "a/b", "m:f"], {}
    )
    assert only_task_queues.worker.task_queues == (TaskQueue("a", "b"),)


def test_isolation_and_processes_from_the_command_line() -> None:
    argv = ["--root-url", "http://c", "--isolation", "process", "--processes", "3", *REQUIRED]
    options = cli.parse_options(argv, {})
    assert (options.worker.isolation, options.command.processes) == ("process", 3)
    assert options.worker.max_runs_per_child is None
    argv = ["--root-url", "http://c", "--isolation", "process", "--max-runs-per-child", "50"]
    assert cli.parse_options([*argv, *REQUIRED], {}).worker.max_runs_per_child == 50
    assert options.worker.max_run_time is None
    argv = ["--root-url", "http://c", "--max-run-time", "90.5", *REQUIRED]
    assert cli.parse_options(argv, {}).worker.max_run_time == 90.5


def test_each_supervised_worker_gets_a_legal_worker_id_of_its_own() -> None:
    assert slot_worker_id("host-123", 0) == "host-123-0"
    long = "w" * 38
    ids = [slot_worker_id(long, slot) for slot in (1, 12)]
    assert ids == ["w" * 36 + "-1", "w" * 35 + "-12"]


@pytest.mark.parametrize(
    "options",
    [
        {"task_queues": []},
        {"task_queues": ["no-slash"]},
        {"task_queues": ["p/w"], "provisioner_id": "p"},
        {"task_queues": ["p/w"], "polling": "weighted", "weights": {"lowest": 0}},
        {"task_queues": ["p/w"], "isolation": "thread"},
        {"task_queues": ["p/w"], "max_runs_per_child": 10},
        {"task_queues": ["p/w"], "max_run_time": 0},
        {"task_queues": ["p/w"], "max_run_time": -5},
        {"task_queues": ["p/w"], "max_run_time": math.inf},
    ],
)
def test_a_worker_refuses_options_that_cannot_work(options: dict[str, Any]) -> None:
    def handle(run: TaskRun) -> None:
        pass

    with pytest.raises(ValueError):
        Worker(root_url="http://c", credentials=None, handler=handle, **options)


def test_a_worker_takes_an_options_object_that_its_keywords_override() -> None:
    def handle(run: TaskRun) -> None:
        pass

    given = WorkerOptions(root_url="http://c", credentials=None, task_queues=["p/w"], capacity=2)
    assert Worker(handler=handle, options=given).options == given
    overridden = Worker(handler=handle, options=given, capacity=5).options
    assert (overridden.capacity, overridden.task_queues) == (5, ["p/w"])
    with pytest.raises(TypeError, match="capacty"):
        Worker(handler=handle, options=given, capacty=5)


def _documented_options() -> tuple[set[str], set[str]]:
    """The keywords and flags the options table of docs/worker-sdk.md names."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "worker-sdk.md").read_text()
    table = text.split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| `")]
    spans = [span for cell in first_cells for span in re.findall(r"`([^`]*)`", cell)]
    keywords = {match[1] for span in spans if (match := re.fullmatch(r"([a-z_]+)(=.*)?", span))}
    flags = {flag for span in spans for flag in re.findall(r"--[a-z][a-z-]*", span)}
    return keywords, flags


def test_the_docs_options_table_names_every_option_and_no_other() -> None:
    keywords, flags = _documented_options()
    assert keywords == {f.name for f in dataclasses.fields(WorkerOptions)} | {"handler"}
    every_flag = [
        flag_of(f)
        for options in (WorkerOptions, cli.CommandOptions)
        for f in dataclasses.fields(options)
    ]
    assert flags == {flag.name for flag in every_flag if flag and flag.name.startswith("--")}


def test_without_credentials_in_the_environment_requests_go_unsigned() -> None:
    options = cli.parse_options(["--root-url", "http://c", *REQUIRED], {})
    assert options.worker.credentials is None


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (REQUIRED, {}),
        (["--root-url", "http://c", *REQUIRED], {"TASKCLUSTER_CLIENT_ID": "only-the-id"}),
        (["--root-url", "http://c", "--capacity", "0", *REQUIRED], {}),
        (["--root-url", "http://c", "--provisioner-id", "p", "--worker-type", "w", "nocolon"], {}),
        (["--root-url", "http://c", "examples.hello:handle"], {}),
        (["--root-url", "http://c", "--provisioner-id", "p", "m:f"], {}),
        (["--root-url", "http://c", "--task-queue", "no-slash", "m:f"], {}),
        (["--root-url", "http://c", "--task-queue", "a/b/c", "m:f"], {}),
        (["--root-url", "http://c", "--weight", "lowest=2", *REQUIRED], {}),
        (["--root-url", "http://c", "--polling", "random", *REQUIRED], {}),
        (["--root-url", "http://c", "--isolation", "thread", *REQUIRED], {}),
        (["--root-url", "http://c", "--processes", "0", *REQUIRED], {}),
        (["--root-url", "http://c", "--max-runs-per-child", "5", *REQUIRED], {}),
        (["--root-url", "http://c", "--max-run-time", "-1", *REQUIRED], {}),
        (["--root-url", "http://c", "--max-run-time", "inf", *REQUIRED], {}),
        (
            [
                "--root-url",
                "http://c",
                "--isolation",
                "process",
                "--max-runs-per-child",
                "0",
                *REQUIRED,
            ],
            {},
        ),
        *(
            (["--root-url", "http://c", "--polling", "weighted", "--weight", bad, *REQUIRED], {})
            for bad in ("lowest=0", "lowest=-1", "lowest=x", "normal=2", "lowest")
        ),
    ],
)
def test_bad_arguments_exit_with_status_2(argv: list[str], environ: dict[str, str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_options(argv, environ)
    assert exit_info.value.code == 2


def test_worker_group_and_id_default_to_legal_identifiers_unique_per_process() -> None:
    options = cli.parse_options(["--root-url", "http://c", *REQUIRED], {})
    identifier = re.compile(r"^[a-zA-Z0-9_-]{1,38}$")
    assert identifier.match(options.worker.worker_group or "")
    assert identifier.match(options.worker.worker_id or "")
    assert options.worker.worker_group == default_worker_group()
    assert options.worker.worker_id == default_worker_id()
    assert re.search(r"-\d+$", options.worker.worker_id or ""), "ends with the process id"


def test_handlers_load_from_module_colon_attribute() -> None:
    loaded: list[object] = [
        cli.load_handler("worker_sdk.timing:jittered"),
        cli.load_handler("worker_sdk.timing:Backoff.delay"),
    ]
    assert loaded == [timing.jittered, timing.Backoff.delay]
    with pytest.raises(TypeError):
        cli.load_handler("worker_sdk.timing:DATE_RESOLUTION")
    with pytest.raises(ImportError):
        cli.load_handler("no_such_module_here:handle")


@pytest.mark.parametrize(
    "created",
    [1_700_000_000.0, 1_700_000_000.0004, 1_700_000_000.0005, 1_700_000_000.123456]
    + [1_700_000_000.999 + n * 1e-7 for n in range(11)],
)
def test_a_run_log_line_shows_its_time_as_datetime_does(created: float) -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 0, "m", None, None)
    record.created = created
    moment = datetime.fromtimestamp(created, UTC)
    expected = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    assert RunLogFormatter().formatTime(record) == expected
