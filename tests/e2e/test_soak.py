"""The soak test (``scripts/soak``, issue 7): its checks catch what they claim to catch, and a
60-second soak with worker kills, two coordinator restarts, a graceful Azurite restart and an
Azurite SIGKILL ends with zero violations.

The 60-second soak takes 70-80 s when no hint gets stranded; the store-dispatch one (no
hints, no Azurite chaos) takes under a minute. Workers retry a claim that
fails while the coordinator is down for up to a minute, so restarts strand nothing; a worker
SIGKILLed between fetching a hint and claiming it leaves that hint invisible for the poll
visibility timeout, set to 30 s here (300 s by default), and the soak waits for every task
to resolve rather than excuse any. Hints the SIGKILLed Azurite lost (it saves every 5 s) come
back through the coordinator's reconciler, every 5 s in the soak.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from devharness.postgres import postgres_bindir
from devharness.processes import SCRIPTS, processes_mentioning, run_module
from devharness.rss import MIB, RssRecorder
from tests.fixtures.pulse import AMQP_URL


def _soaklib(module: str) -> Any:
    scripts = str(SCRIPTS)
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    return importlib.import_module(f"soaklib.{module}")


def _run(run_id: int, state: str, **fields: Any) -> dict[str, Any]:
    return {"runId": run_id, "state": state, **fields}


def _status(task_id: str, runs: list[dict[str, Any]], retries_left: int) -> dict[str, Any]:
    return {
        "taskId": task_id,
        "state": runs[-1]["state"] if runs else "unscheduled",
        "runs": runs,
        "retriesLeft": retries_left,
    }


def test_checks_pass_a_clean_history_and_catch_each_violation() -> None:
    checks = _soaklib("checks")
    journal = _soaklib("journal")
    processes = _soaklib("processes")
    hints = _soaklib("hints")

    def execution(task: str, run: int, worker: str, start: float, end: float | None) -> Any:
        how = "ok" if end is not None else None
        return journal.Execution(
            task_id=task, run_id=run, worker=worker, start=start, end=end, how=how
        )

    def incarnation(slot: int, worker: str, **fields: Any) -> Any:
        """A worker process of ``slot``; its journal and log are named after ``worker``."""
        path = Path(worker)
        return processes.Incarnation(slot=slot, worker_id=worker, journal=path, log=path, **fields)

    expired = {"reasonCreated": "scheduled", "reasonResolved": "claim-expired", "workerId": "a"}
    clean = {
        "T1": _status(
            "T1",
            [
                _run(0, "exception", **expired),
                _run(
                    1, "completed", reasonCreated="retry", reasonResolved="completed", workerId="b"
                ),
            ],
            retries_left=4,
        )
    }
    incarnations = [
        incarnation(0, "a", started=0.0, end="sigkill", ended=5.0),
        incarnation(1, "b", started=0.0, end="stopped", ended=50.0),
        # Slot 0 again, started after "a" was reaped.
        incarnation(0, "a2", started=5.5, end="stopped", ended=50.0),
    ]
    good = [execution("T1", 0, "a", 1.0, None), execution("T1", 1, "b", 11.0, 12.0)]
    findings = checks.merge(
        checks.check_tasks(["T1"], clean, retries=5),
        checks.check_executions(good, clean, incarnations, now=60.0),
        checks.check_hints([], clean),
        checks.check_workers(incarnations),
    )
    assert findings.violations == []
    assert findings.counts["resolved claim-expired"] == 1
    assert findings.counts["retries"] == 1

    def kinds(found: Any) -> set[str]:
        return {violation.kind for violation in found.violations}

    # Lost, unresolved (a run whose hint was lost stays pending), completed twice, and a
    # claim-expired run not retried although retries remained.
    stuck = {
        "T2": _status("T2", [_run(0, "pending", reasonCreated="scheduled")], 5),
        "T3": _status("T3", [_run(0, "exception", **expired)], 5),
        "T5": _status(
            "T5",
            [
                _run(0, "completed", reasonCreated="scheduled", reasonResolved="completed"),
                _run(1, "completed", reasonCreated="rerun", reasonResolved="completed"),
            ],
            5,
        ),
    }
    assert kinds(checks.check_tasks(["T1x", "T2", "T3", "T5"], stuck, retries=5)) == {
        "lost",
        "unresolved",
        "completed-twice",
        "no-retry",
    }
    # The same run on two workers; a run the store gave to someone else; a killed worker's
    # run still going when the retry started; a completed run nobody finished.
    bad = [
        execution("T1", 0, "a", 1.0, None),
        execution("T1", 1, "b", 3.0, None),
        execution("T1", 1, "c", 3.5, 3.6),
    ]
    assert kinds(checks.check_executions(bad, clean, incarnations, now=60.0)) == {
        "double-run",
        "foreign-run",
        "overlap",
        "completed-unrun",
    }
    # A hint of a resolved run, and garbage, left visible; a hint of a pending run is fine.
    pending = {"T4": _status("T4", [_run(0, "pending", reasonCreated="scheduled")], 5)}
    left = [
        hints.LeftHint(queue="q", message_id="1", task_id="T1", run_id=1, dequeue_count=1),
        hints.LeftHint(queue="q", message_id="2", task_id=None, run_id=None, dequeue_count=1),
        hints.LeftHint(queue="q", message_id="3", task_id="T4", run_id=0, dequeue_count=0),
    ]
    found = checks.check_hints(left, {**clean, **pending})
    assert [violation.kind for violation in found.violations] == ["hint-left", "hint-left"]
    # Slot 0's second worker started before its first was reaped; the first outlived its
    # SIGTERM and was SIGKILLed; the second was never seen exiting.
    troubled = [
        incarnation(0, "x", started=0.0, end="sigterm", ended=10.0, forced=True),
        incarnation(0, "y", started=9.0, end="stopped"),
    ]
    assert sorted(v.kind for v in checks.check_workers(troubled).violations) == [
        "process-left",
        "slot-overlap",
        "stuck-process",
    ]


def _clean_soak(tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    """Run scripts/soak with ``args``, asserting that it found no violation and left no
    process behind; its JSON summary, and the end of its output."""
    summary = tmp_path / "soak.json"
    done = run_module(
        "soaklib", *args, f"--workdir={tmp_path / 'work'}", f"--json={summary}", timeout=700
    )
    output = done.stdout[-6000:] + done.stderr[-4000:]
    # Every process the soak started (workers, coordinator, Azurite: each names the work
    # directory in its command line or environment) is gone.
    assert processes_mentioning(str(tmp_path / "work")) == {}, output
    assert done.returncode in (0, 1), output
    result: dict[str, Any] = json.loads(summary.read_text())
    assert result["violations"] == [], output
    assert done.returncode == 0, output
    return result, output


def _soak(tmp_path: Path, *args: str) -> tuple[dict[str, int], str]:
    """:func:`_clean_soak`, asserting that the chaos happened; its counts and output."""
    result, output = _clean_soak(tmp_path, *args)
    counts: dict[str, int] = result["counts"]
    # The chaos really happened.
    assert counts.get("worker sigkill", 0) + counts.get("worker sigterm", 0) >= 2, output
    assert counts.get("coordinator sigkill", 0) + counts.get("coordinator sigterm", 0) == 2
    assert counts.get("resolved claim-expired", 0) >= 1, output
    assert counts.get("state completed", 0) == counts["tasks created"], output
    return counts, output


@pytest.mark.slow(seconds=75, waits=True)
@pytest.mark.timeout(720)
def test_sixty_second_soak_has_no_violations(tmp_path: Path) -> None:
    counts, output = _soak(
        tmp_path,
        "--seconds=60",
        "--kill-interval=6",
        # bounds the wait for a hint whose worker was killed before it claimed
        "--poll-visibility=30",
    )
    assert counts["tasks created"] >= 60, output
    assert counts.get("azurite sigterm", 0) == 1, output
    assert counts.get("azurite sigkill", 0) >= 1, output


@pytest.mark.slow(seconds=40, waits=True)
@pytest.mark.timeout(300)
def test_a_store_dispatch_soak_has_no_violations(tmp_path: Path) -> None:
    """The same chaos under store dispatch (the workers claim through claimWork, which they
    find out for themselves); a claimWork answer lost with a SIGKILLed coordinator is a claim
    that expires and is retried, never a run lost or run twice."""
    counts, output = _soak(tmp_path, "--dispatch=store", "--seconds=25", "--kill-interval=4")
    assert counts["tasks created"] >= 10, output  # createTask fails while it is down
    assert "azurite sigkill" not in counts, output


@pytest.mark.slow(seconds=50, waits=True)
@pytest.mark.timeout(300)
def test_a_calm_soak_reports_every_process_s_rss(tmp_path: Path) -> None:
    """``--calm``: the load alone, no process killed or restarted; failing handlers in process
    isolation, tasks created in batches. The summary holds the coordinator's and the workers'
    RSS after warm-up and at the end, and every curve sampled."""
    result, output = _clean_soak(
        tmp_path,
        *("--calm", "--dispatch=store", "--seconds=30", "--warm-up=10", "--workers=2"),
        *("--handler=fail", "--isolation=process", "--batch=20", "--rate=40", "--retries=0"),
        "--max-rss-growth=1000",
    )
    counts = result["counts"]
    assert counts["tasks created"] >= 400, output
    assert counts.get("state failed", 0) == counts["tasks created"], output
    assert counts.get("worker sigkill", 0) + counts.get("worker sigterm", 0) == 0, output
    assert counts.get("coordinator sigkill", 0) + counts.get("coordinator sigterm", 0) == 0
    names = sorted(curve["name"] for curve in result["rss"])
    assert names == ["coordinator", "soak-w0-0", "soak-w1-0"], output
    for curve in result["rss"]:
        assert len(curve["samples"]) >= 6, curve
        # past its first sample, taken as the process started
        assert all(rss > 10 * 2**20 for _, rss in curve["samples"][1:]), curve
    for label in ("coordinator RSS after warm-up (MiB)", "coordinator RSS growth after warm-up"):
        assert label in output, output
    assert "RSS every minute (MiB):" in output, output


def test_the_rss_recorder_keeps_one_curve_per_process_and_measures_after_warm_up() -> None:
    pids = {"coordinator": 1, "soak-w0-0": 2}
    readings = {1: 100, 2: 50}
    clock = [0.0]
    recorder = RssRecorder(lambda: dict(pids), read=readings.get, clock=lambda: clock[0])
    for at in range(0, 30, 5):
        readings[1] += 10  # grows 10 a sample
        clock[0] = float(at)
        recorder.sample()
    pids["soak-w0-1"] = 3  # a new incarnation: a curve of its own, not warmed up
    readings[3] = 40
    del readings[2]  # the old one is gone: no further samples
    clock[0] = 30.0
    recorder.sample()
    names = sorted((curve.name, len(curve.samples)) for curve in recorder.curves)
    assert names == [("coordinator", 7), ("soak-w0-0", 6), ("soak-w0-1", 1)]
    coordinator = recorder.longest("coordinator")
    assert coordinator is not None
    growth = coordinator.growth(10.0)
    assert growth is not None and (growth.warm, growth.end) == (130, 160)
    assert round(growth.percent, 1) == 23.1
    assert coordinator.growth(40.0) is None  # never sampled twice after such a warm-up
    grown = recorder.largest_growth("soak-w", 10.0)
    assert grown is not None
    assert grown[0].name == "soak-w0-0" and grown[1].percent == 0.0
    assert coordinator.every(10.0) == [v / MIB for v in (110, 130, 150, 160)]


def test_the_everything_checks_pass_a_clean_history_and_catch_each_violation() -> None:
    """``--everything``'s checks: Pulse messages per task, the hook's due times, the function
    tasks' retries, each on crafted statuses."""
    checks = _soaklib("checks")
    started = {"started": "2026-11-29T09:00:00.000Z"}
    done = _status(
        "E1",
        [_run(0, "completed", reasonCreated="scheduled", reasonResolved="completed", **started)],
        5,
    )
    never_ran = _status(
        "E2",
        [_run(0, "exception", reasonCreated="scheduled", reasonResolved="deadline-exceeded")],
        5,
    )
    statuses = {"E1": done, "E2": never_ran}
    seen = {
        "E1": {"task-defined", "task-pending", "task-running", "task-completed"},
        "E2": {"task-defined", "task-pending", "task-exception"},
    }
    assert checks.check_events(statuses, seen).violations == []
    # A task-running lost while the broker was cut; a task nobody heard of.
    lossy = {"E1": seen["E1"] - {"task-running"}}
    found = checks.check_events(statuses, lossy)
    assert sorted(v.detail.split(":")[0] for v in found.violations) == [
        "task E1 (completed)",
        "task E2 (exception)",
    ]
    assert all(v.kind == "event-missing" for v in found.violations)

    # Due every 5 s from 100 to 130; PostgreSQL was down from 111 to 121.
    due = [float(t) for t in range(100, 131, 5)]
    outages = [(111.0, 121.0)]
    fired = {f"H{t}": float(t) for t in (100, 105, 110, 115, 125, 130)}  # 120 skipped
    found = checks.check_hook_fires(fired, due, outages)
    assert found.violations == []
    assert found.counts["hook fires"] == 6
    assert found.counts["hook due times skipped (store down)"] == 1
    twice = {**fired, "H105b": 105.0}
    missed = {k: v for k, v in fired.items() if v != 105.0}
    assert [v.kind for v in checks.check_hook_fires(twice, due, outages).violations] == [
        "hook-fired-twice"
    ]
    assert [v.kind for v in checks.check_hook_fires(missed, due, outages).violations] == [
        "hook-missed"
    ]

    def runs(*shapes: str) -> dict[str, Any]:
        made = []
        for index, shape in enumerate(shapes):
            state, reason = shape.split("/")
            made.append(_run(index, state, reasonResolved=reason))
        return _status("F", made, 0)

    retried = "exception/intermittent-task"
    expired = "exception/claim-expired"
    good = {
        "R1": runs(retried, retried, "completed/completed"),
        "R2": runs(expired, retried, expired, "completed/completed"),  # a kill costs a run
        "G1": runs(retried, "failed/failed"),
        "G2": runs(retried, expired),  # killed on its last run
    }
    kinds = {"R1": "recovers", "R2": "recovers", "G1": "gives-up", "G2": "gives-up"}
    limits = {"recovers": 6, "gives-up": 1}
    found = checks.check_functions(kinds, good, failures=2, retries=limits)
    assert found.violations == []
    assert found.counts["function recovers in failures + 1 runs"] == 1
    assert found.counts["function gives-up failed on its last run"] == 1
    bad = {
        "R1": runs(retried, "completed/completed"),  # succeeded on its second attempt
        "R2": runs(retried, retried, retried, "completed/completed"),  # a third failure
        "R3": runs(retried, "failed/failed"),  # not retried although retries remained
        "G1": runs(retried, retried, "failed/failed"),  # more runs than its retries allow
        "G2": runs(retried, "completed/completed"),
    }
    kinds = {**kinds, "R3": "recovers"}
    found = checks.check_functions(kinds, bad, failures=2, retries=limits)
    assert sorted(v.detail.split(":")[0] for v in found.violations) == [
        "gives-up task G1",
        "gives-up task G2",
        "recovers task R1",
        "recovers task R2",
        "recovers task R3",
    ]
    assert {v.kind for v in found.violations} == {"retries-not-honoured"}


@pytest.mark.skipif(
    postgres_bindir() is None,
    reason="PostgreSQL's server programs (initdb, pg_ctl) are not installed: --everything "
    "runs a cluster of its own",
)
@pytest.mark.slow(seconds=80, waits=True)
@pytest.mark.timeout(720)
def test_an_everything_soak_has_no_violations(tmp_path: Path) -> None:
    """``--everything``: two coordinators on a private PostgreSQL that is restarted and
    crashed, Pulse through a proxy that is cut, a hook every 2 s, function tasks, artifacts;
    worker and coordinator SIGKILLs. Nothing lost or run twice, every message delivered,
    every due time fired once, every retry as the functions' ``retries`` say."""
    result, output = _clean_soak(
        tmp_path,
        *("--everything", "--seconds=50", "--rate=2", "--kill-interval=6"),
        *("--hook-interval=2", f"--pulse-url={AMQP_URL}", f"--markdown={tmp_path / 'soak.md'}"),
    )
    counts = result["counts"]
    assert counts.get("coordinator sigkill", 0) == 2, output
    assert counts.get("broker cuts", 0) == 2, output
    assert counts.get("postgres restarts", 0) == 1, output
    assert counts.get("postgres crashes", 0) == 1, output
    assert counts.get("worker sigkill", 0) + counts.get("worker sigterm", 0) >= 2, output
    assert counts["tasks created"] >= 50, output
    assert counts.get("hook fires", 0) >= 10, output
    assert counts.get("function recovers", 0) >= 1, output
    assert counts.get("artifacts and run logs read back", 0) >= 20, output
    # every task, the hook's included, was heard of on the broker
    tasks = sum(counts.get(f"state {state}", 0) for state in ("completed", "failed", "exception"))
    assert counts.get("tasks with events", 0) == tasks > counts["tasks created"], output
    markdown = (tmp_path / "soak.md").read_text()
    for row in ("broker connections cut (proxy)", "fired exactly once", "completed in 3 runs"):
        assert row in markdown, markdown
