"""The soak's summary: one table (text or Markdown) and a JSON document."""

from __future__ import annotations

from collections import Counter
from typing import Any

from devharness.rss import MIB, Curve
from soaklib.soak import COORDINATOR, Result, watched_growths

ROWS: tuple[tuple[str, str], ...] = (
    ("tasks created", "tasks created (createTask answered 200)"),
    ("state completed", "tasks completed"),
    ("state failed", "tasks failed"),
    ("state exception", "tasks exception"),
    ("runs", "runs"),
    ("executions", "handler executions (journals)"),
    ("executions killed", "  cut short by SIGKILL"),
    ("executions cancelled", "  cancelled (claim lost / shutdown)"),
    ("worker starts", "worker processes started"),
    ("worker sigkill", "worker SIGKILLs"),
    ("worker sigterm", "worker SIGTERMs"),
    ("coordinator sigkill", "coordinator restarts by SIGKILL"),
    ("coordinator sigterm", "coordinator restarts by SIGTERM"),
    ("azurite sigterm", "Azurite restarts by SIGTERM (persistent)"),
    ("azurite sigkill", "Azurite SIGKILLs + restarts (persistent)"),
    ("pending at azurite sigkill", "  runs pending (hint put) at the SIGKILL"),
    ("resolved claim-expired", "runs claim-expired"),
    ("resolved worker-shutdown", "runs worker-shutdown"),
    ("retries", "retry runs"),
    ("noise duplicate hints", "injected duplicate hints"),
    ("noise garbage hints", "injected garbage messages"),
    ("hints left", "visible hints left at the end"),
    ("hints in flight", "invisible hints at the end (in flight)"),
    ("log hints kept", "log: hints kept after a failed claim"),
    ("log duplicate claims ignored", "log: duplicate claims ignored"),
    ("log stale hints refused", "log: stale hints fetched, claim refused"),
    ("log claim lost", "log: claims lost (worker side)"),
    ("log report not accepted", "log: reports not accepted"),
    ("log dequeue warnings", "log: DequeueCount warnings"),
    ("log hints not put", "log: hint puts failed (Azurite down)"),
    ("log reconciler passes", "log: reconciler passes that put hints"),
    ("log reconciler hints missing", "log: hints missing in Azure (reconciler)"),
    ("log 500 incidents", "log: coordinator 500 incidents"),
)
EVERYTHING_ROWS: tuple[tuple[str, str], ...] = (
    ("broker cuts", "broker connections cut (proxy)"),
    ("postgres restarts", "PostgreSQL restarts (-m fast)"),
    ("postgres crashes", "PostgreSQL crashes (-m immediate) + starts"),
    ("pulse messages received", "Pulse messages received (soak route)"),
    ("tasks with events", "tasks with Pulse messages"),
    ("hook due times", "hook due times in the chaos phase"),
    ("hook fires", "  fired exactly once"),
    ("hook due times skipped (store down)", "  skipped while PostgreSQL was down"),
    ("function recovers", "function tasks recovers (fail 2, then succeed)"),
    ("function recovers in failures + 1 runs", "  completed in 3 runs"),
    ("function gives-up", "function tasks gives-up (always fail, retries 1)"),
    ("function gives-up failed on its last run", "  failed on run 2 of 2"),
    ("artifacts and run logs read back", "artifacts and run logs read back (a sample)"),
    ("run logs the worker gave up on", "  of which run logs the worker did not upload in time"),
)
"""The rows of ``--everything`` alone."""


def rows(result: Result) -> list[tuple[str, str]]:
    counts = result.findings.counts
    shown = ROWS + EVERYTHING_ROWS if result.settings.everything else ROWS
    table = [(label, str(counts.get(key, 0))) for key, label in shown]
    for phase in ("chaos", "drain", "settle"):
        if phase in result.timings:
            table.append((f"{phase} phase (s)", f"{result.timings[phase]:.1f}"))
    table += _memory_rows(result)
    by_kind = Counter(violation.kind for violation in result.findings.violations)
    table.append(("violations", str(len(result.findings.violations))))
    table += [(f"  {kind}", str(number)) for kind, number in sorted(by_kind.items())]
    return table


def _memory_rows(result: Result) -> list[tuple[str, str]]:
    """The longest-lived coordinator's RSS and the worker that grew most, after warm-up and at
    the end."""
    if result.rss is None:
        return []
    table: list[tuple[str, str]] = []
    for label, (_, growth) in watched_growths(result.rss, result.settings.warm_up).items():
        if growth is None:
            table.append((f"{label} RSS after warm-up", "-"))
            continue
        table += [
            (f"{label} RSS after warm-up (MiB)", f"{growth.warm / MIB:.1f}"),
            (f"{label} RSS at the end (MiB)", f"{growth.end / MIB:.1f}"),
            (f"{label} RSS growth after warm-up (%)", f"{growth.percent:.1f}"),
        ]
    return table


def _curves(result: Result) -> list[Curve]:
    """The curves the summary shows: the longest-lived coordinator and each worker slot's
    longest-lived incarnation."""
    if result.rss is None:
        return []
    shown = [result.rss.longest(COORDINATOR)]
    slots = {curve.name.rsplit("-", 1)[0] for curve in result.rss.curves}
    shown += [result.rss.longest(slot + "-") for slot in sorted(slots) if slot != COORDINATOR]
    return [curve for curve in shown if curve is not None]


def text(result: Result) -> str:
    table = rows(result)
    width = max(len(label) for label, _ in table)
    lines = [f"soak summary (seed {result.seed}, workdir {result.workdir})"]
    lines += [f"  {label:<{width}}  {value:>8}" for label, value in table]
    curves = _curves(result)
    if curves:
        lines.append("RSS every minute (MiB):")
        lines += [
            f"  {curve.name}: " + " ".join(f"{mib:.0f}" for mib in curve.every(60.0))
            for curve in curves
        ]
    if result.findings.violations:
        lines.append("violations:")
        shown = result.findings.violations[:50]
        lines += [f"  [{violation.kind}] {violation.detail}" for violation in shown]
        if len(result.findings.violations) > len(shown):
            lines.append(f"  ... and {len(result.findings.violations) - len(shown)} more")
    return "\n".join(lines)


def markdown(result: Result) -> str:
    settings = result.settings
    lines = [
        f"Soak of {settings.seconds:g} s: {settings.workers} workers x capacity "
        f"{settings.capacity}, {settings.rate:g} tasks/s, claim timeout "
        f"{settings.claim_timeout:g} s, seed {result.seed}.",
        "",
        "| | |",
        "|---|---:|",
    ]
    lines += [f"| {label.strip()} | {value} |" for label, value in rows(result)]
    return "\n".join(lines) + "\n"


def document(result: Result) -> dict[str, Any]:
    return {
        "seed": result.seed,
        "settings": {
            key: str(value) if value is not None else None
            for key, value in vars(result.settings).items()
        },
        "counts": result.findings.counts,
        "timings": result.timings,
        "violations": [
            {"kind": violation.kind, "detail": violation.detail}
            for violation in result.findings.violations
        ],
        "events": result.events,
        "rss": [
            {"name": curve.name, "pid": curve.pid, "samples": curve.samples}
            for curve in (result.rss.curves if result.rss else [])
        ],
    }
