"""The workers' journals: what each handler really ran, and when.

Every worker process (one *incarnation*: a fresh workerId per start) appends JSON lines to
its own file, ``<journal dir>/<workerId>.jsonl``: a ``start`` record before the handler does
anything and an ``end`` record when it returns, raises or is cancelled. Records are written
with one ``os.write`` on an ``O_APPEND`` descriptor, so they reach the kernel at once and a
SIGKILL can lose at most the record being written, never earlier ones; a torn last line is
ignored when reading.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

End = Literal["ok", "cancelled", "error"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Execution:
    """One handler call: ``worker`` ran run ``run_id`` of ``task_id`` from ``start`` to ``end``
    (epoch seconds). ``end`` is ``None`` when the journal has no end record (the process was
    killed); ``how`` says how the handler finished."""

    task_id: str
    run_id: int
    worker: str
    start: float
    end: float | None
    how: End | None


class Journal:
    """An append-only journal file, opened once per process."""

    def __init__(self, path: Path, worker: str) -> None:
        self.worker = worker
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, event: str, task_id: str, run_id: int, t: float, how: str = "") -> None:
        record = {"e": event, "task": task_id, "run": run_id, "worker": self.worker, "t": t}
        if how:
            record["how"] = how
        os.write(self._fd, (json.dumps(record) + "\n").encode())


def _records(path: Path) -> Iterator[dict[str, object]]:
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line torn by SIGKILL
        if isinstance(record, dict):
            yield record


def _end(value: object) -> End | None:
    if value == "ok":
        return "ok"
    if value == "cancelled":
        return "cancelled"
    if value == "error":
        return "error"
    return None


def read_journals(directory: Path) -> list[Execution]:
    """Every execution in every journal of ``directory``, start records paired with the next
    end record of the same (task, run) in the same file."""
    executions: list[Execution] = []
    for path in sorted(directory.glob("*.jsonl")):
        open_runs: dict[tuple[str, int], list[dict[str, object]]] = {}
        finished: list[tuple[dict[str, object], dict[str, object] | None]] = []
        for record in _records(path):
            key = (str(record["task"]), int(str(record["run"])))
            if record["e"] == "start":
                open_runs.setdefault(key, []).append(record)
            elif record["e"] == "end" and open_runs.get(key):
                finished.append((open_runs[key].pop(0), record))
        finished += [(start, None) for starts in open_runs.values() for start in starts]
        for start, end in finished:
            executions.append(
                Execution(
                    task_id=str(start["task"]),
                    run_id=int(str(start["run"])),
                    worker=str(start["worker"]),
                    start=float(str(start["t"])),
                    end=float(str(end["t"])) if end is not None else None,
                    how=_end(end.get("how")) if end is not None else None,
                )
            )
    return executions
