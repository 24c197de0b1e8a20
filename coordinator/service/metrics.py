"""The coordinator's domain metrics, on one per-app Prometheus registry.

:class:`ServiceMetrics` is the observer the service layer calls when something worth counting
happens: a run resolved (``queue_completed_tasks_total``, ``queue_failed_tasks_total``,
``queue_exception_tasks_total{reasonResolved}``), a hint put or not
(``queue_hints_put_total``, ``queue_hint_put_failures_total``), a background pass that acted
(``queue_resolver_actions_total{resolver}``), a hook fired
(``hooks_fires_total{hookGroupId,result}``), runs a task queue's pause or limits held back
(``queue_limited_claims_total{provisionerId,workerType}``), index entries a completion
stored or could not (``index_completion_entries_total{result}``), which queues are paused
(``queue_paused{provisionerId,workerType}``), and how long each run waited, visible, before a
worker claimed it (``queue_pending_seconds{provisionerId,workerType}``, whichever dispatch).
It also holds the per-task-queue gauges (``queue_pending_tasks``, ``queue_claimed_tasks``)
that the queue-gauges actor (:mod:`coordinator.resolvers.queue_gauges`) refreshes from exact
store counts, so a scrape never queries the store. Names follow Taskcluster's queue monitor
where it has one.

Each app has its own :class:`~prometheus_client.CollectorRegistry` (tests run several apps in
one process); the api layer adds its request metrics to the same registry and serves it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from coordinator.domain.listings import RunCounts
from coordinator.domain.records import Run, TaskRecord
from coordinator.domain.task_queues import TaskQueue

_TASK_QUEUE_LABELS = ("provisionerId", "workerType")

PENDING_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 1800.0, 3600.0,
)  # fmt: skip
"""Seconds: milliseconds apart where store dispatch hands work out, up to an hour's queue."""


class ServiceMetrics:
    """Counters and gauges of the task lifecycle. Every method is an increment or a set, cheap
    enough for the request path.

    :param registry: where the metrics are registered; a private one by default (a service
        built without an app, in tests, counts into a registry nobody scrapes).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self._completed = Counter(
            "queue_completed_tasks", "Runs resolved as completed.", registry=reg
        )
        self._failed = Counter("queue_failed_tasks", "Runs resolved as failed.", registry=reg)
        self._exception = Counter(
            "queue_exception_tasks",
            "Runs resolved as exception, by reasonResolved.",
            ["reasonResolved"],
            registry=reg,
        )
        self._hints_put = Counter(
            "queue_hints_put", "Hint messages put into Azure queues.", registry=reg
        )
        self._hint_failures = Counter(
            "queue_hint_put_failures",
            "Hint puts that failed (the hint keeper puts them again).",
            registry=reg,
        )
        self._events_published = Counter(
            "queue_events_published",
            "Pulse messages the broker confirmed, by exchange.",
            ["exchange"],
            registry=reg,
        )
        self._events_parked = Counter(
            "queue_events_parked",
            "Pulse messages the broker refused every time, set aside in "
            "queue_event_outbox_parked, by exchange.",
            ["exchange"],
            registry=reg,
        )
        self._outbox_depth = Gauge(
            "queue_event_outbox_depth",
            "Pulse messages waiting in the outbox.",
            registry=reg,
        )
        self._inbox_rows = Counter(
            "queue_inbox_rows",
            "Task inbox rows ingested, by result (created, rejected).",
            ["result"],
            registry=reg,
        )
        self._inbox_rejected = Gauge(
            "queue_inbox_rejected_rows",
            "Task inbox rows refused and kept for an operator (docs/operations.md).",
            registry=reg,
        )
        self._resolver_actions = Counter(
            "queue_resolver_actions",
            "Tasks a background actor acted on, by actor.",
            ["resolver"],
            registry=reg,
        )
        self._pending = Gauge(
            "queue_pending_tasks",
            "Claimable pending runs per task queue (exact, refreshed every few seconds).",
            _TASK_QUEUE_LABELS,
            registry=reg,
        )
        self._claimed = Gauge(
            "queue_claimed_tasks",
            "Running runs per task queue (exact, refreshed every few seconds).",
            _TASK_QUEUE_LABELS,
            registry=reg,
        )
        self._hook_fires = Counter(
            "hooks_fires",
            "Hook fires that reached createTask, by hookGroupId and result (success, error).",
            ["hookGroupId", "result"],
            registry=reg,
        )
        self._pending_seconds = Histogram(
            "queue_pending_seconds",
            "How long runs waited to be claimed once visible (visible to claimed), per task queue.",
            _TASK_QUEUE_LABELS,
            buckets=PENDING_BUCKETS,
            registry=reg,
        )
        self._gauged: set[TaskQueue] = set()
        self._paused = Gauge(
            "queue_paused",
            "1 while an operator has the task queue paused (this process's copy).",
            _TASK_QUEUE_LABELS,
            registry=reg,
        )
        self._paused_queues: set[TaskQueue] = set()
        self._index_entries = Counter(
            "index_completion_entries",
            "Index entries of completed tasks' index routes, by result: written (the rank "
            "rule then decides whether it replaces what was there), or refused (a completion "
            "whose extra.index is not what the indexer takes; none of its routes is indexed).",
            ["result"],
            registry=reg,
        )
        self._limited_claims = Counter(
            "queue_limited_claims",
            "Runs a claim asked for that a task queue's pause or limits held back.",
            _TASK_QUEUE_LABELS,
            registry=reg,
        )

    def runs_resolved(self, runs: Iterable[Run]) -> None:
        """Count runs that just became completed, failed or exception."""
        for run in runs:
            if run.state == "completed":
                self._completed.inc()
            elif run.state == "failed":
                self._failed.inc()
            elif run.state == "exception":
                self._exception.labels(run.reason_resolved or "unknown").inc()

    def runs_claimed(self, record: TaskRecord, runs: Iterable[Run]) -> None:
        """Observe the pending time (visible to claimed) of the runs of ``record`` that just
        became running."""
        for run in runs:
            if run.state == "running" and run.started is not None:
                self._pending_seconds.labels(record.provisioner_id, record.worker_type).observe(
                    max(0, run.started - run.visible_at) / 1000
                )

    def hint_put(self) -> None:
        self._hints_put.inc()

    def hint_put_failed(self) -> None:
        self._hint_failures.inc()

    def resolver_acted(self, resolver: str, count: int) -> None:
        if count:
            self._resolver_actions.labels(resolver).inc(count)

    def set_task_queue_counts(self, counts: Mapping[TaskQueue, RunCounts]) -> None:
        """Set the gauges of every task queue in ``counts``; a queue gauged before but absent
        now (expired, or no longer listed) reads 0 rather than vanishing, so a graph shows it
        drain."""
        none = RunCounts(pending=0, delayed=0, running=0)
        self._gauged |= counts.keys()
        for task_queue in self._gauged:
            found = counts.get(task_queue, none)
            labels = (task_queue.provisioner_id, task_queue.worker_type)
            self._pending.labels(*labels).set(found.pending)
            self._claimed.labels(*labels).set(found.running)

    def set_paused_queues(self, paused: Iterable[TaskQueue]) -> None:
        """``queue_paused`` 1 for these queues; 0 for any paused before and not now."""
        now_paused = set(paused)
        for task_queue in self._paused_queues | now_paused:
            labels = (task_queue.provisioner_id, task_queue.worker_type)
            self._paused.labels(*labels).set(1 if task_queue in now_paused else 0)
        self._paused_queues |= now_paused

    def claims_limited(self, task_queue: TaskQueue, runs: int) -> None:
        """A claim of ``runs`` runs of the queue was held back by its pause or limits."""
        self._limited_claims.labels(task_queue.provisioner_id, task_queue.worker_type).inc(runs)

    def event_published(self, exchange: str, count: int = 1) -> None:
        """The broker confirmed ``count`` messages of ``exchange``."""
        self._events_published.labels(exchange=exchange).inc(count)

    def event_parked(self, exchange: str, count: int = 1) -> None:
        """The broker refused ``count`` messages of ``exchange`` too often: they were
        parked."""
        self._events_parked.labels(exchange=exchange).inc(count)

    def set_outbox_depth(self, depth: int) -> None:
        self._outbox_depth.set(depth)

    def inbox_ingested(self, *, created: int, rejected: int) -> None:
        self._inbox_rows.labels(result="created").inc(created)
        self._inbox_rows.labels(result="rejected").inc(rejected)

    def set_inbox_rejected(self, rows: int) -> None:
        self._inbox_rejected.set(rows)

    def hook_fired(self, hook_group_id: str, result: str) -> None:
        self._hook_fires.labels(hookGroupId=hook_group_id, result=result).inc()

    def completion_indexed(self, entries: int) -> None:
        self._index_entries.labels(result="written").inc(entries)

    def completion_not_indexed(self) -> None:
        self._index_entries.labels(result="refused").inc()
