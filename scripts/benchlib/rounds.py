"""The rounds of one ``scripts/bench`` run (``--rounds N``): the order each round runs its
rows in, the row of each key that the table shows, and a ratio over the rounds.

The machine's speed moves over minutes (other users, its own thermals), so two rows run one
after the other in a single round can differ by more than what they compare
(docs/performance.md, store dispatch as deployed). Rounds run every row again, the odd ones in
reverse order so that each of two rows runs first as often as the other; a ratio is then the
median of the rounds' own ratios (each of two rows run close in time), and a row's figures
are those of its round with the median rate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from benchlib.common import Row


def round_order(selected: Sequence[str], n: int) -> list[str]:
    """The rows of round ``n`` (from 0) in the order it runs them: as given in even rounds,
    reversed in odd ones."""
    return list(selected) if n % 2 == 0 else list(reversed(selected))


def median_rows(rounds: Sequence[Sequence[Row]]) -> list[Row]:
    """Per row key, in the first round's order, the row of the round with the median rate (the
    lower of the middle two of an even number), or the first round's failure if it failed in
    every round. With more than one round, the row notes each round's rate and failure."""
    if len(rounds) == 1:
        return list(rounds[0])
    by_key: dict[str, list[Row]] = {}
    for rows in rounds:
        for row in rows:
            by_key.setdefault(row.key, []).append(row)
    chosen = []
    for runs in by_key.values():
        done = sorted((row for row in runs if row.error is None and row.rate), key=_rate)
        row = done[(len(done) - 1) // 2] if done else runs[0]
        rates = ", ".join("failed" if r.error else f"{r.rate or 0:,.0f}" for r in runs)
        note = f"rate in each of the {len(runs)} rounds: {rates} {row.unit} (shown: the median)"
        chosen.append(dataclasses.replace(row, notes=[*row.notes, note]))
    return chosen


def _rate(row: Row) -> float:
    return row.rate or 0.0


def ratios(
    rounds: Sequence[Sequence[Row]], top: str, bottom: str, figure: str
) -> tuple[list[float], list[float]]:
    """``figure`` of row ``top`` over that of row ``bottom`` in each round that has both (and
    both non-zero), and the ratio of their CPU ceilings in each round that has both."""
    values: list[float] = []
    ceilings: list[float] = []
    for rows in rounds:
        by_key = {row.key: row for row in rows}
        a, b = by_key.get(top), by_key.get(bottom)
        if a is None or b is None or a.error or b.error:
            continue
        over, under = getattr(a, figure), getattr(b, figure)
        if over and under:
            values.append(over / under)
        if a.ceiling and b.ceiling:
            ceilings.append(a.ceiling / b.ceiling)
    return values, ceilings
