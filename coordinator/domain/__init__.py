"""The domain: task records, the pure lifecycle, definition checks and task-queue ids.

Nothing here does I/O or reads a clock (``now`` is always a parameter), and nothing knows
HTTP: failures are the errors of :mod:`coordinator.domain.errors`, which the API maps to
Taskcluster error bodies.
"""
