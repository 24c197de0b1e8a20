"""Where a long-running process's memory goes: run a module under :mod:`tracemalloc`, writing
a snapshot (and a census of live objects by type) every few seconds, and diff two of them.

    python -m devharness.memtrace run DIR [--every S] [--frames N] -m MODULE [ARGS...]
    python -m devharness.memtrace diff OLD.snapshot NEW.snapshot [--top N] [--traceback]

``run`` is ``python -m MODULE ARGS`` with tracemalloc started first (``--frames`` deep; 0: not
at all) and a daemon thread writing, every ``--every`` seconds until the process ends,
``DIR/NNNN.snapshot`` (tracemalloc's) and ``DIR/NNNN.types.json`` (the RSS, glibc's heap
account and the live objects by type). ``diff`` prints how the RSS, the heap's bytes in use
and free, and Python's traced bytes moved between two of them, then what grew by line (or
by whole traceback) and the object types whose count grew.

RSS growing while malloc's bytes in use and Python's traced bytes hold still is fragmentation
(free space the heap keeps), not a leak: that is how the coordinator's growth was found
(docs/performance.md, Memory). The soak runs the coordinator so with ``--memtrace``;
tracemalloc makes it several times slower, so rates under it are not the product's.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gc
import json
import pickle
import runpy
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

import glibc_malloc

IGNORED = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
)
"""Frames that are the measurement's own or the import system's, not the program's."""


def _census() -> dict[str, int]:
    """Live objects tracked by the garbage collector, counted by type name."""
    counts = collections.Counter(type(thing).__qualname__ for thing in gc.get_objects())
    return dict(counts.most_common())


def _write(directory: Path, number: int) -> None:
    heap = glibc_malloc.heap()
    record: dict[str, object] = {
        "time": time.time(),
        "rss": psutil.Process().memory_info().rss,
        "malloc": dataclasses.asdict(heap) if heap else None,
    }
    snapshot = None
    if tracemalloc.is_tracing():
        # Filtered when read (filtering takes a second, while the program waits)
        snapshot = tracemalloc.take_snapshot()
        record["traced"] = tracemalloc.get_traced_memory()[0]
    record["types"] = _census()
    # Each file whole or not at all: the program may end while they are written.
    _replace(directory / f"{number:04d}.types.json", json.dumps(record).encode())
    if snapshot is not None:
        data = pickle.dumps(snapshot, pickle.HIGHEST_PROTOCOL)
        _replace(directory / f"{number:04d}.snapshot", data)


def _replace(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    partial.replace(path)


def _snapshots(directory: Path, every: float) -> None:
    number = 0
    while True:
        time.sleep(every)
        _write(directory, number)
        number += 1


def run(directory: Path, every: float, frames: int, module: str, args: Sequence[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if frames:
        tracemalloc.start(frames)
    threading.Thread(target=_snapshots, args=(directory, every), daemon=True).start()
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _load(path: Path) -> tracemalloc.Snapshot:
    with path.open("rb") as source:
        snapshot: tracemalloc.Snapshot = pickle.load(source)
    return snapshot.filter_traces(IGNORED)


def diff(old: Path, new: Path, *, top: int, traceback: bool) -> str:
    """What grew from ``old`` to ``new``: the ``top`` largest growths by line (or traceback),
    then the object types whose count grew most."""
    key = "traceback" if traceback else "lineno"
    before, after = _record(old), _record(new)
    lines = [f"# {old.name} -> {new.name}: {_moves(before, after)}"]
    stats = _load(new).compare_to(_load(old), key) if old.exists() and new.exists() else []
    if stats:
        lines.append(f"# traced allocations, by {key}")
    for stat in stats[:top]:
        lines.append(f"{stat.size_diff / 1024:+10.1f} KiB {stat.count_diff:+8d} objects")
        frames = stat.traceback.format() if traceback else stat.traceback.format()[:1]
        lines.extend("    " + frame.strip() for frame in frames if frame.strip())
    types_old = before.get("types", {})
    types_new = after.get("types", {})
    grown = sorted(
        ((count - types_old.get(name, 0), name) for name, count in types_new.items()),
        reverse=True,
    )
    lines.append("# object counts that grew")
    lines.extend(f"{change:+10d} {name}" for change, name in grown[:top] if change > 0)
    return "\n".join(lines)


def _record(snapshot: Path) -> dict[str, Any]:
    """The ``.types.json`` beside a snapshot (named either way)."""
    census = snapshot.with_suffix("").with_suffix(".types.json")
    if not census.exists():
        return {}
    record: dict[str, Any] = json.loads(census.read_text())
    return record


def _moves(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """How the RSS, the heap and the traced bytes moved, in MiB."""

    def change(name: str, read: Callable[[Mapping[str, Any]], Any]) -> str | None:
        try:
            return f"{name} {(read(after) - read(before)) / 2**20:+.1f} MiB"
        except (KeyError, TypeError):
            return None

    moves = [
        change("RSS", lambda record: record["rss"]),
        change("malloc in use", lambda record: record["malloc"]["in_use"]),
        change("malloc free", lambda record: record["malloc"]["free"]),
        change("traced", lambda record: record["traced"]),
    ]
    return ", ".join(move for move in moves if move) or "no records"


def main(argv: Sequence[str] | None = None) -> None:
    arguments = list(sys.argv[1:] if argv is None else argv)
    # Everything after ``-m MODULE`` is the module's own; argparse would read it as ours.
    program: list[str] = []
    if arguments[:1] == ["run"] and "-m" in arguments:
        at = arguments.index("-m")
        arguments, program = arguments[:at], arguments[at + 1 :]
    parser = argparse.ArgumentParser(prog="python -m devharness.memtrace")
    commands = parser.add_subparsers(dest="command", required=True)
    running = commands.add_parser("run", help="run -m MODULE [ARGS...], writing snapshots")
    running.add_argument("directory", type=Path)
    running.add_argument("--every", type=float, default=60.0, help="seconds between snapshots")
    running.add_argument(
        "--frames",
        type=int,
        default=8,
        help="traceback depth kept (0: no tracemalloc; RSS, malloc and census only)",
    )
    diffing = commands.add_parser("diff", help="what grew between two snapshots")
    diffing.add_argument("old", type=Path)
    diffing.add_argument("new", type=Path)
    diffing.add_argument("--top", type=int, default=25)
    diffing.add_argument("--traceback", action="store_true", help="group by whole traceback")
    options = parser.parse_args(arguments)
    if options.command == "run":
        if not program:
            parser.error("run needs -m MODULE")
        run(options.directory, options.every, options.frames, program[0], program[1:])
    else:
        print(diff(options.old, options.new, top=options.top, traceback=options.traceback))


if __name__ == "__main__":
    main()
