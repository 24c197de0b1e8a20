"""What must never appear in a log: access tokens, secrets' values, SAS signatures, bewits,
storage account keys and passwords in URLs. :func:`scan_text` finds them in a log's text and
:func:`scan_tree` in every log file under a folder; the test suite runs the latter over all
the logs of a run (tests/fixtures/log_scan.py), and a leak fails the run.

The rules look for the shapes those credentials take in text (a JSON or ``key=value`` field
named for one, a URL's query parameter or userinfo), with a value long enough to be real: a
field that is present but masked (``***``, ``<redacted>``) or empty is not a leak. Nor is an
``export TASKCLUSTER_ACCESS_TOKEN=…`` line: that is what the commands made to hand out
credentials print for their user to paste (``./scripts/dev``, ``queue-coordinator clients
add``), which the tests keep with the rest of such a command's output."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

MASKED = re.compile(r"^(\*+|x{3,}|[<\[(]?(redacted|hidden|masked)[>\])]?)$", re.I)
"""A value that only says a credential was there: ``***``, ``<redacted>``, ``[hidden]``."""

RULES: dict[str, re.Pattern[str]] = {
    # "accessToken": "…" in JSON, accessToken=… in key=value text
    "access token": re.compile(r"""access_?token["']?\s*[:=]\s*["']?([A-Za-z0-9_\-]{16,})""", re.I),
    # a secret's value as the secrets service stores it: {"secret": {...}} or "secret": "…"
    "secret value": re.compile(r""""secret"\s*:\s*(\{[^}]+\}|"[^"]{6,}")"""),
    # an Azure SAS (sig=) or a Taskcluster signed URL (bewit=) with its signature
    "SAS signature": re.compile(r"[?&]sig=([A-Za-z0-9%+/=_\-]{8,})"),
    "bewit": re.compile(r"[?&]bewit=([A-Za-z0-9%+/=_\-]{8,})"),
    # a storage connection string's key
    "account key": re.compile(r"AccountKey=([A-Za-z0-9+/=]{16,})", re.I),
    # scheme://user:password@host
    "URL password": re.compile(r"[a-z][a-z0-9+.\-]*://[^\s/:@'\"]+:([^\s/@'\"]+)@", re.I),
}


@dataclass(frozen=True)
class Leak:
    """One credential found in a log: which rule, where, and the line with the value cut."""

    rule: str
    path: Path | None
    line_number: int
    excerpt: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line_number}" if self.path else f"line {self.line_number}"
        return f"{where}: {self.rule}: {self.excerpt}"


HANDED_OUT = re.compile(r"^\s*export TASKCLUSTER_ACCESS_TOKEN=\S+$")
"""A credential printed on purpose, as a shell line for its user to paste."""


def scan_text(text: str, path: Path | None = None) -> Iterator[Leak]:
    """Every leak in ``text``, line by line."""
    for number, line in enumerate(text.splitlines(), start=1):
        if HANDED_OUT.match(line):
            continue
        for rule, pattern in RULES.items():
            for match in pattern.finditer(line):
                value = match.group(1)
                if MASKED.match(value.strip("\"'")):
                    continue
                yield Leak(rule, path, number, _excerpt(line, match.start(1)))


def scan_tree(
    root: Path, pattern: str = "*.log", *, skip_folders: Collection[str] = ()
) -> list[Leak]:
    """Every leak in the files under ``root`` whose names match ``pattern``, but for those
    under a folder named in ``skip_folders``."""
    leaks: list[Leak] = []
    for path in sorted(root.rglob(pattern)):
        if path.is_file() and set(skip_folders).isdisjoint(path.relative_to(root).parts[:-1]):
            leaks.extend(scan_text(path.read_text(errors="replace"), path))
    return leaks


def _excerpt(line: str, value_at: int) -> str:
    """The line around the value, the value itself cut after four characters: the report of
    a leak must not be one."""
    start = max(0, value_at - 60)
    return line[start : value_at + 4] + "…"
