"""How long a supervisor waits before starting again a child process that exited on its own:
the serve processes of ``COORDINATOR_PROCESSES`` (:mod:`coordinator.cli.processes`) and the
event publisher's (:mod:`coordinator.cli.publish_events`) follow the same rule."""

from __future__ import annotations

RESTART_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds before each restart of a child that keeps exiting, the last repeated."""

STEADY_S = 60.0
"""A child that ran this long before it exited counts as a first failure again."""


class RestartDelays:
    """The delays of one child, across its restarts."""

    def __init__(self) -> None:
        self._failures = 0

    def after(self, ran_for: float) -> float:
        """Seconds to wait before starting the child again, which exited after ``ran_for``
        seconds."""
        self._failures = 1 if ran_for >= STEADY_S else self._failures + 1
        return RESTART_DELAYS[min(self._failures, len(RESTART_DELAYS)) - 1]
