"""The run-progress part of the store contract: the last progress report of each run, kept
while its task is (the rows go with the task, whatever deletes it)."""

from __future__ import annotations

import abc

from coordinator.domain.progress import RunProgress


class ProgressStore(abc.ABC):
    """Runs' progress."""

    @abc.abstractmethod
    async def set_run_progress(self, progress: RunProgress) -> bool:
        """Keep ``progress`` as its run's, replacing the run's last, if its task is running
        (the caller checked the run is the running one); ``False`` (nothing written) when the
        task does not exist or is not running."""

    @abc.abstractmethod
    async def run_progress(self, task_id: str) -> list[RunProgress]:
        """The task's runs' last progress reports, by runId."""
