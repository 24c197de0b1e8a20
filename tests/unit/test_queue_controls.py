"""The pure rule of a task queue's pause and limits (coordinator.domain.queue_controls.admit,
room_of) and the release URL the SDK makes for a claim answered 429 with ``Retry-After``."""

from __future__ import annotations

from coordinator.domain.queue_controls import (
    FULL_RETRY_AFTER_MS,
    PAUSED_RETRY_AFTER_MS,
    Limits,
    Pause,
    QueueControls,
    admit,
    burst,
    room_of,
)
from coordinator.domain.task_queues import TaskQueue
from worker_sdk import azure

QUEUE = TaskQueue("proj", "wt")
NOW = 1_700_000_000_000


def limited(**limits: float | None) -> QueueControls:
    return QueueControls(task_queue=QUEUE, limits=Limits(**limits))  # type: ignore[arg-type]


def test_a_paused_queue_admits_nothing_and_says_why() -> None:
    controls = QueueControls(task_queue=QUEUE, pause=Pause(since=NOW, reason="incident"))
    admission = admit(controls, running=0, wanted=3, now=NOW)
    assert (admission.granted, admission.retry_after_ms) == (0, PAUSED_RETRY_AFTER_MS)
    error = admission.refused()
    assert "paused" in str(error) and "incident" in str(error)
    assert error.retry_after_s == 5


def test_max_running_admits_the_room_left() -> None:
    controls = limited(max_running=3)
    assert admit(controls, running=0, wanted=2, now=NOW).granted == 2
    partial = admit(controls, running=1, wanted=5, now=NOW)
    assert (partial.granted, partial.retry_after_ms) == (2, FULL_RETRY_AFTER_MS)
    assert "maxRunning is 3" in partial.refusal
    assert admit(controls, running=3, wanted=1, now=NOW).granted == 0
    assert admit(controls, running=4, wanted=1, now=NOW).granted == 0
    assert admit(limited(max_running=0), running=0, wanted=1, now=NOW).granted == 0


def test_the_rate_admits_a_burst_then_one_claim_per_interval() -> None:
    assert (burst(20), burst(2), burst(0.5), burst(1000)) == (10, 1, 1, 500)
    controls = limited(max_claims_per_second=4)  # 250 ms apart, 2 at once
    first = admit(controls, running=0, wanted=5, now=NOW)
    assert first.granted == 2
    assert (first.retry_after_ms, first.by_rate) == (250, True)  # the next room
    controls = QueueControls(
        task_queue=QUEUE, limits=controls.limits, claims_tat_us=first.claims_tat_us
    )
    refused = admit(controls, running=0, wanted=1, now=NOW)
    assert (refused.granted, refused.retry_after_ms) == (0, 250)
    assert refused.refused().retry_after_s == 1  # Retry-After is whole seconds
    later = admit(controls, running=0, wanted=5, now=NOW + 250)
    assert later.granted == 1
    # claims over a long window stay within rate * T + burst
    tat, granted = 0, 0
    rate = limited(max_claims_per_second=20).limits
    for ms in range(0, 10_000, 7):
        step = admit(
            QueueControls(task_queue=QUEUE, limits=rate, claims_tat_us=tat),
            running=0,
            wanted=32,
            now=NOW + ms,
        )
        tat, granted = step.claims_tat_us, granted + step.granted
    assert 200 <= granted <= 210


def test_both_limits_admit_the_smaller() -> None:
    controls = limited(max_running=10, max_claims_per_second=2)
    assert admit(controls, running=9, wanted=5, now=NOW).granted == 1
    assert admit(controls, running=0, wanted=5, now=NOW).granted == 1
    assert (
        admit(
            limited(max_running=3, max_claims_per_second=20), running=0, wanted=9, now=NOW
        ).granted
        == 3
    )


def test_an_unused_admission_gives_its_room_back() -> None:
    controls = limited(max_claims_per_second=2)
    admission = admit(controls, running=0, wanted=1, now=NOW)
    assert (
        admit(
            QueueControls(
                task_queue=QUEUE, limits=controls.limits, claims_tat_us=admission.claims_tat_us
            ),
            running=0,
            wanted=1,
            now=NOW,
        ).granted
        == 0
    )
    back = admission.claims_tat_us - room_of(controls, 1)
    again = QueueControls(task_queue=QUEUE, limits=controls.limits, claims_tat_us=back)
    assert admit(again, running=0, wanted=1, now=NOW).granted == 1
    assert room_of(limited(max_running=2), 1) == 0


def test_a_release_url_waits_for_retry_after() -> None:
    message = azure.QueueMessage(message_id="m1", pop_receipt="p+/=", text="", dequeue_count=1)
    template = (
        "https://a/q/messages/{{messageId}}?popreceipt={{popReceipt}}&visibilitytimeout=1&sig=s"
    )
    assert azure.release_url(template, message) == (
        "https://a/q/messages/m1?popreceipt=p%2B%2F%3D&visibilitytimeout=1&sig=s"
    )
    assert azure.release_url(template, message, after_s=5) == (
        "https://a/q/messages/m1?popreceipt=p%2B%2F%3D&visibilitytimeout=5&sig=s"
    )
    assert "visibilitytimeout=3600&" in azure.release_url(template, message, after_s=10**6)
    bare = "https://a/q/messages/{{messageId}}?popreceipt={{popReceipt}}&sig=s"
    assert azure.release_url(bare, message, after_s=2).endswith("&sig=s&visibilitytimeout=2")
