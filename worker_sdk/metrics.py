"""The worker's Prometheus metrics, served on ``--metrics-port`` (``Worker(metrics_port=...)``)
at ``--metrics-host`` (127.0.0.1 unless given).

``worker_tasks_total{outcome}`` (runs reported: completed, failed, exception),
``worker_task_duration_seconds`` (handler run time), ``worker_running_tasks``,
``worker_hint_dequeue_warnings_total`` (hints logged by the DequeueCount alert line),
``worker_hint_delete_failures_total`` and ``worker_azure_requests_total{operation}`` (the
Azure queue requests sent: get, delete, release; what an idle worker costs). Each worker has
its own registry, so several workers in one process (tests, embedding applications) neither
share nor clash.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class WorkerMetrics:
    """The metrics of one :class:`~worker_sdk.worker.Worker`; updates are increments."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.tasks = Counter(
            "worker_tasks", "Runs reported, by outcome.", ["outcome"], registry=self.registry
        )
        self.task_duration = Histogram(
            "worker_task_duration_seconds", "How long handlers ran.", registry=self.registry
        )
        self.running = Gauge(
            "worker_running_tasks", "Handlers running now.", registry=self.registry
        )
        self.dequeue_warnings = Counter(
            "worker_hint_dequeue_warnings",
            "Hints dequeued more often than the warning threshold.",
            registry=self.registry,
        )
        self.delete_failures = Counter(
            "worker_hint_delete_failures",
            "Hint deletes Azure did not accept (the hint reappears and is deleted later).",
            registry=self.registry,
        )
        self.azure_requests = Counter(
            "worker_azure_requests",
            "Azure queue requests sent, by operation (get, delete, release).",
            ["operation"],
            registry=self.registry,
        )

    def serve(self, port: int, host: str = "127.0.0.1") -> Callable[[], None]:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread; returns what stops it."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join()

        return stop
