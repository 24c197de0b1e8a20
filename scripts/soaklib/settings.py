"""The soak's knobs and its command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLL_VISIBILITY = 300.0
"""The coordinator's default poll visibility timeout (docs/protocol.md, Defaults): a hint a
worker fetched but neither claimed nor deleted (it was killed in between) stays invisible this
long."""
EVERYTHING_AMQP = "amqp://guest:guest@127.0.0.1:5672/"
"""The broker ``--everything`` publishes to when ``--pulse-url`` names none."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """One soak run.

    :param seconds: the chaos phase: tasks are created and processes killed for this long.
    :param workers: worker processes kept running (each restarted after being killed).
    :param capacity: runs each worker holds at once.
    :param rate: tasks created per second.
    :param retries: each task's ``retries``; far more than the kills can use up.
    :param claim_timeout: the coordinator's claim timeout (seconds), short so that claims of
        killed workers expire within the soak.
    :param kill_interval: mean seconds between two worker kills; 0: none.
    :param term_share: share of worker kills that are SIGTERM (graceful, reported
        ``worker-shutdown``) instead of SIGKILL.
    :param coordinator_restarts / azurite_restarts: how often each is restarted (the
        coordinator by SIGKILL and SIGTERM in turn, Azurite gracefully by SIGTERM).
    :param azurite_kills: how often Azurite is SIGKILLed and restarted on its data
        directory, as a crash: it persists its queues on a 5-second timer, so hints put and
        deletions made since its last save are lost (the reconciler puts lost hints again;
        the workers delete resurrected ones).
    :param noise_interval: mean seconds between two injected duplicate hints (a garbage
        hint every third time); 0 turns the noise off.
    :param poll_visibility: ``COORDINATOR_POLL_VISIBILITY`` (seconds).
    :param reconcile_interval: ``COORDINATOR_RECONCILE_INTERVAL`` (seconds): how soon the
        coordinator puts again a hint Azurite lost.
    :param drain: the longest the soak waits after the chaos phase for every task to
        resolve. A hint fetched by a worker that was killed before claiming stays invisible
        for ``poll_visibility``, and while it does it counts in Azure's message count, which
        can hide a hint Azurite lost from the reconciler until it reappears and is deleted;
        so this must exceed both for the soak to tell "late" from "lost"; ``None`` means
        ``poll_visibility + 2 * reconcile_interval + 60``.
    :param settle: the longest the soak waits, once everything is resolved, for the still
        running workers to fetch and delete the stale hints that are visible.
    :param dispatch: ``COORDINATOR_DISPATCH``: ``azure`` (hints in Azurite) or ``store``
        (claimWork from the store; the workers find that out themselves). Under ``store``
        there are no hints to lose or to fake, so Azurite is neither restarted nor killed and
        no noise is put (Azurite still runs, empty, for the final census of the queues).
    :param calm: no kills, restarts or noise: the load alone, for the memory figures.
    :param handler: what each run does: ``sleep`` (mostly under a second, some past the claim
        timeout), ``noop`` (returns at once) or ``fail`` (raises: every run fails).
    :param isolation: ``queue-worker --isolation``.
    :param batch: tasks created per request (createTasks when more than 1).
    :param warm_up: seconds after a process starts before its RSS counts as warmed up.
    :param max_rss_growth: a ``memory-growth`` violation when the coordinator's or a worker's
        RSS grows more than this (percent) from its warm-up to the end; ``None``: reported only.
    :param pulse_url: ``COORDINATOR_PULSE_URL``: publish Pulse events to this broker.
    :param memtrace: run the coordinator under ``devharness.memtrace`` (snapshots in the
        workdir's ``memtrace/`` every this many seconds).
    :param everything: the whole product at once (``--everything``): a private PostgreSQL
        cluster under ``replicas`` coordinators (store dispatch), Pulse events through a
        severable proxy in front of ``pulse_url``, a hook every ``hook_interval`` seconds,
        function tasks with retries (``function_share`` of the tasks), artifacts and run
        logs; the chaos adds ``broker_cuts`` broker cuts and ``postgres_restarts`` PostgreSQL
        restarts (a fast restart and a crash in turn), and the coordinator restarts are
        SIGKILLs of one replica at a time.
    :param replicas: coordinator processes on the one store (PostgreSQL when more than 1).
    :param broker_cuts: how often the coordinators' connections to the broker are cut (the
        proxy stops listening for a few seconds).
    :param postgres_restarts: how often the private PostgreSQL cluster is restarted.
    :param hook_interval: seconds between two fires of the soak's hook; 0: no hook.
    :param function_share: share of the created tasks that are calls of the soak's
        :mod:`soaklib.functions` (retried by their ``retries``).
    :param artifacts: every run uploads an artifact (and its run log), checked at the end.
    """

    seconds: float = 600.0
    workers: int = 3
    capacity: int = 4
    rate: float = 2.0
    retries: int = 30
    claim_timeout: float = 5.0
    kill_interval: float = 10.0
    term_share: float = 0.25
    coordinator_restarts: int = 2
    azurite_restarts: int = 1
    azurite_kills: int = 1
    noise_interval: float = 5.0
    poll_visibility: float = POLL_VISIBILITY
    reconcile_interval: float = 5.0
    drain: float | None = None
    settle: float = 30.0
    seed: int | None = None
    auth: bool = True
    store_url: str | None = None
    workdir: Path | None = None
    keep: bool = False
    json_path: Path | None = None
    markdown_path: Path | None = None
    verbose: bool = False
    dispatch: str = "azure"
    calm: bool = False
    handler: str = "sleep"
    isolation: str = "none"
    batch: int = 1
    warm_up: float = 60.0
    max_rss_growth: float | None = None
    memtrace: float | None = None
    pulse_url: str | None = None
    everything: bool = False
    replicas: int = 1
    broker_cuts: int = 0
    postgres_restarts: int = 0
    hook_interval: float = 0.0
    function_share: float = 0.0
    artifacts: bool = False

    @property
    def drain_limit(self) -> float:
        if self.drain is not None:
            return self.drain
        return self.poll_visibility + 2 * self.reconcile_interval + 60.0


def parse_args(argv: Sequence[str]) -> Settings:
    defaults = Settings()
    parser = argparse.ArgumentParser(
        prog="scripts/soak",
        description="Run the coordinator, Azurite and K workers under random kills and "
        "restarts for a bounded time, then check that nothing was lost or run twice.",
    )
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="chaos phase length (default: 10)")
    length.add_argument("--seconds", type=float, help="chaos phase length in seconds")
    parser.add_argument("--workers", type=int, default=defaults.workers, help="worker processes")
    parser.add_argument("--capacity", type=int, default=defaults.capacity, help="runs per worker")
    parser.add_argument("--rate", type=float, default=defaults.rate, help="tasks per second")
    parser.add_argument("--retries", type=int, default=defaults.retries, help="task retries")
    parser.add_argument(
        "--claim-timeout", type=float, default=defaults.claim_timeout, help="seconds"
    )
    parser.add_argument(
        "--kill-interval",
        type=float,
        default=defaults.kill_interval,
        help="mean seconds between worker kills",
    )
    parser.add_argument(
        "--term-share", type=float, default=defaults.term_share, help="share of kills by SIGTERM"
    )
    parser.add_argument(
        "--poll-visibility",
        type=float,
        default=defaults.poll_visibility,
        help="seconds a fetched hint stays hidden (COORDINATOR_POLL_VISIBILITY)",
    )
    parser.add_argument(
        "--coordinator-restarts",
        type=int,
        help=f"default: {defaults.coordinator_restarts}; under --everything one every 3 minutes",
    )
    parser.add_argument(
        "--azurite-restarts",
        type=int,
        default=defaults.azurite_restarts,
        help="graceful Azurite restarts (SIGTERM)",
    )
    parser.add_argument(
        "--azurite-kills",
        type=int,
        default=defaults.azurite_kills,
        help="Azurite crashes (SIGKILL, then restart on the same data directory)",
    )
    parser.add_argument(
        "--reconcile-interval",
        type=float,
        default=defaults.reconcile_interval,
        help="seconds between reconciler passes (COORDINATOR_RECONCILE_INTERVAL)",
    )
    parser.add_argument(
        "--noise-interval",
        type=float,
        default=defaults.noise_interval,
        help="mean seconds between injected duplicate hints (0: none)",
    )
    parser.add_argument(
        "--drain",
        type=float,
        default=defaults.drain,
        help="max seconds to wait for every task to resolve after the chaos phase",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=defaults.settle,
        help="max seconds to wait for visible stale hints to be deleted",
    )
    parser.add_argument(
        "--dispatch",
        choices=("azure", "store"),
        help=f"COORDINATOR_DISPATCH (default: {defaults.dispatch}; store under --everything): "
        "store turns the Azurite restarts, kills and noise off",
    )
    parser.add_argument(
        "--calm", action="store_true", help="no kills, restarts or noise: the load alone"
    )
    parser.add_argument(
        "--handler",
        choices=("sleep", "noop", "fail"),
        default=defaults.handler,
        help="each run sleeps (default), returns at once, or raises",
    )
    parser.add_argument(
        "--isolation",
        choices=("none", "process"),
        default=defaults.isolation,
        help="queue-worker --isolation",
    )
    parser.add_argument(
        "--batch", type=int, default=defaults.batch, help="tasks per createTasks request"
    )
    parser.add_argument(
        "--warm-up",
        type=float,
        default=defaults.warm_up,
        help="seconds before a process's RSS counts as warmed up (default: 60)",
    )
    parser.add_argument(
        "--max-rss-growth",
        type=float,
        help="percent of RSS growth after warm-up that is a violation (default: report only)",
    )
    parser.add_argument(
        "--memtrace",
        type=float,
        metavar="SECONDS",
        help="run the coordinator under tracemalloc, a snapshot every SECONDS (slow)",
    )
    parser.add_argument("--seed", type=int, help="random seed (default: random, printed)")
    parser.add_argument("--no-auth", action="store_true", help="run the coordinator without Hawk")
    parser.add_argument("--store-url", help="coordinator store (default: SQLite in the workdir)")
    parser.add_argument("--pulse-url", help="publish Pulse events to this AMQP broker")
    parser.add_argument(
        "--everything",
        action="store_true",
        help="the whole product at once: a private PostgreSQL under 2 coordinators, Pulse "
        f"(--pulse-url, default {EVERYTHING_AMQP}) through a proxy that is cut, a hook, "
        "function tasks with retries, artifacts; PostgreSQL is restarted too",
    )
    parser.add_argument(
        "--broker-cuts", type=int, help="under --everything (default: one every 2 minutes)"
    )
    parser.add_argument(
        "--postgres-restarts",
        type=int,
        help="under --everything (default: one every 5 minutes, at least 2)",
    )
    parser.add_argument(
        "--hook-interval",
        type=int,
        default=5,
        choices=(1, 2, 3, 4, 5, 6, 10, 15, 20, 30),
        help="under --everything: seconds between the hook's fires (default: 5)",
    )
    parser.add_argument("--workdir", type=Path, help="logs, journals, data (default: temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the workdir afterwards")
    parser.add_argument("--json", type=Path, help="also write the summary as JSON here")
    parser.add_argument("--markdown", type=Path, help="also write the summary as Markdown here")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every chaos event")
    args = parser.parse_args(argv)
    if args.seconds is not None:
        seconds = float(args.seconds)
    elif args.minutes is not None:
        seconds = float(args.minutes) * 60
    else:
        seconds = defaults.seconds
    if seconds <= 0:
        parser.error("the soak must last more than 0 seconds")
    if args.workers < 1 or args.capacity < 1:
        parser.error("--workers and --capacity must be at least 1")
    if args.reconcile_interval <= 0:
        parser.error("--reconcile-interval must be more than 0")
    if not 0 <= args.retries <= 49:
        parser.error("--retries must be 0..49")
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    everything = args.everything
    if everything and (args.no_auth or args.store_url or args.calm):
        parser.error(
            "--everything runs its own PostgreSQL with Hawk auth and chaos: leave out "
            "--no-auth, --store-url and --calm"
        )
    if everything and args.dispatch == "azure":
        parser.error("--everything runs store dispatch: leave out --dispatch azure")
    dispatch = "store" if everything else args.dispatch or defaults.dispatch
    store = dispatch == "store"
    calm = args.calm
    coordinator_restarts = args.coordinator_restarts
    if coordinator_restarts is None:
        coordinator_restarts = (
            max(2, round(seconds / 180)) if everything else defaults.coordinator_restarts
        )
    extra: dict[str, Any] = {}
    if everything:
        extra = {
            "everything": True,
            "replicas": 2,
            "broker_cuts": max(2, round(seconds / 120))
            if args.broker_cuts is None
            else args.broker_cuts,
            "postgres_restarts": max(2, round(seconds / 300))
            if args.postgres_restarts is None
            else args.postgres_restarts,
            "hook_interval": float(args.hook_interval),
            "function_share": 0.1,
            "artifacts": True,
        }
    return Settings(
        dispatch=dispatch,
        seconds=seconds,
        workers=args.workers,
        capacity=args.capacity,
        rate=args.rate,
        retries=args.retries,
        claim_timeout=args.claim_timeout,
        poll_visibility=args.poll_visibility,
        kill_interval=0.0 if calm else args.kill_interval,
        term_share=args.term_share,
        coordinator_restarts=0 if calm else coordinator_restarts,
        azurite_restarts=0 if store or calm else args.azurite_restarts,
        azurite_kills=0 if store or calm else args.azurite_kills,
        reconcile_interval=args.reconcile_interval,
        noise_interval=0.0 if store or calm else args.noise_interval,
        calm=calm,
        handler=args.handler,
        isolation=args.isolation,
        batch=args.batch,
        warm_up=args.warm_up,
        max_rss_growth=args.max_rss_growth,
        memtrace=args.memtrace,
        drain=args.drain,
        settle=args.settle,
        seed=args.seed,
        auth=not args.no_auth,
        store_url=args.store_url,
        pulse_url=args.pulse_url or (EVERYTHING_AMQP if everything else None),
        workdir=args.workdir,
        keep=args.keep,
        json_path=args.json,
        markdown_path=args.markdown,
        verbose=args.verbose,
        **extra,
    )
