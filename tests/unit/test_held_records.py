"""What :class:`~coordinator.service.held_records.HeldRecords` keeps: records whose last run is
running, each once (the newest write), at most its bound (the oldest written go first), and
each handed out once."""

from __future__ import annotations

from coordinator.service.held_records import HeldRecords
from tests.fixtures.records import claimed, new_record


def test_only_running_records_are_kept_and_a_later_write_replaces_or_drops_one() -> None:
    held = HeldRecords()
    pending = new_record("pending")
    running = claimed(new_record("running")).record
    held.written(pending)
    held.written(running)
    assert held.take(["pending", "running"]) == {"running": running}

    held.written(running)
    held.written(pending.replace(task_id="running"))  # the run resolved, say: nothing held
    assert held.take(["running"]) == {}


def test_a_record_is_handed_out_once() -> None:
    held = HeldRecords()
    running = claimed(new_record("a")).record
    held.written(running)
    assert held.take(["a"]) == {"a": running}
    assert held.take(["a"]) == {}
    assert len(held) == 0


def test_past_its_bound_the_oldest_written_go_first() -> None:
    held = HeldRecords(kept=2)
    records = {t: claimed(new_record(t)).record for t in "abc"}
    held.written(records["a"])
    held.written(records["b"])
    held.written(records["a"])  # written again: now the newest
    held.written(records["c"])
    assert len(held) == 2
    assert held.take("abc") == {"a": records["a"], "c": records["c"]}
