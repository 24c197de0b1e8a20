"""Authentication rows: ``auth-clients-file`` and ``auth-api-clients``, the rate of requests
a coordinator authenticates for a client of its clients file against one the auth API made
(its scopes through a role, among 100 other roles): the cost of looking the client up and of
its expanded scopes, which the second must keep within 10 % of the first.

One ``queue-coordinator serve`` process (SQLite, authentication on) serves both; the phases
alternate (file, API, file, API) so that the machine's noise falls on both alike, and each
row sums its two phases. Each request is ``expandScopes`` of no scopes: a signed POST whose
answer is the same for both clients and reads nothing from the store, so what differs is
authentication alone.

:func:`deployment_clients` gives the end-to-end rows run with authentication on the clients a
deployment has: a producer and a worker pool holding only their own scopes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import aiohttp

from benchlib.common import CpuMeter, Row, Settings, metered_window, own_process, pids
from benchlib.coordproc import Coordinator, coordinator
from coordinator.service.clients_file import add_client
from devharness.api import call
from hawk_signing import Credentials

AUTH_API = "/api/auth/v1"
OTHER_ROLES = 100
"""Roles besides the client's, so its expansion searches a realistic set."""
PHASES = 2
"""Phases per row, alternating between the rows."""


async def run(settings: Settings) -> list[Row]:
    rows = {
        kind: Row(
            key=f"auth-{kind}",
            title=f"authenticated requests (expandScopes), a client of the {label}",
            unit="requests/s",
        )
        for kind, label in (("clients-file", "clients file"), ("api-clients", "auth API"))
    }
    measured: dict[str, list[Row]] = {kind: [] for kind in rows}
    authenticated = dataclasses.replace(settings, auth=True)
    async with (
        coordinator(
            authenticated,
            store="sqlite",
            workdir=settings.workdir / "auth",
            azure_connection_string=None,
        ) as running,
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=settings.producers + 4)
        ) as session,
    ):
        assert running.credentials is not None
        root = running.credentials
        clients = {
            "clients-file": root,
            "api-clients": await _api_client(session, running.url, root),
        }
        for _ in range(PHASES):
            for kind, credentials in clients.items():
                measured[kind].append(await _phase(session, running, credentials, settings))
    for kind, row in rows.items():
        phases = measured[kind]
        row.count = sum(phase.count for phase in phases)
        row.window = sum(phase.window for phase in phases)
        row.rate = row.count / row.window if row.window else None
        # CPU per request over all phases: each phase's weighted by its requests.
        row.cpu_ms = {
            name: sum(p.cpu_ms.get(name, 0.0) * p.count for p in phases) / max(row.count, 1)
            for name in phases[0].cpu_ms
        }
        row.busy_cores = max((p.busy_cores or 0.0) for p in phases)
        # RSS after the first phase's warm-up and at the last phase's end
        row.rss_mib = {
            name: (start, phases[-1].rss_mib.get(name, (start, start))[1])
            for name, (start, _) in phases[0].rss_mib.items()
        }
        row.notes.append(
            f"{settings.producers} concurrent clients, {PHASES} alternating phases of "
            f"{settings.duration:.0f} s; CPU ms per request"
        )
    return list(rows.values())


async def _api_client(session: aiohttp.ClientSession, url: str, root: Credentials) -> Credentials:
    """A client made through the auth API, holding what it needs through a role."""
    for index in range(OTHER_ROLES):
        role = {"description": "bench", "scopes": [f"other:{index}:*", "assume:bench-x"]}
        await _ok(session, "PUT", f"{url}{AUTH_API}/roles/bench-other-{index}", root, role)
    expander = {"description": "bench", "scopes": ["auth:expand-scopes"]}
    await _ok(session, "PUT", f"{url}{AUTH_API}/roles/bench-expander", root, expander)
    made = await _ok(
        session,
        "PUT",
        f"{url}{AUTH_API}/clients/bench-api",
        root,
        {
            "description": "bench",
            "expires": "2999-01-01T00:00:00.000Z",
            "scopes": ["assume:bench-expander"],
        },
    )
    return Credentials(client_id="bench-api", access_token=made["accessToken"])


async def _ok(
    session: aiohttp.ClientSession, method: str, url: str, credentials: Credentials, body: object
) -> dict[str, str]:
    response = await call(session, method, url, body, credentials=credentials)
    if response.status != 200:
        raise RuntimeError(f"{method} {url} -> {response.status}: {str(response.body)[:300]}")
    answer: dict[str, str] = response.body
    return answer


async def _phase(
    session: aiohttp.ClientSession,
    running: Coordinator,
    credentials: Credentials,
    settings: Settings,
) -> Row:
    """One measured window of requests signed with ``credentials``: its count, length and
    CPU per request."""
    meter = CpuMeter({"coordinator": pids(running.process), "client": own_process})
    window_start = time.monotonic() + settings.warmup
    stop_at = window_start + settings.duration
    answered: list[float] = []
    target = f"{running.url}{AUTH_API}/scopes/expand"

    async def client() -> None:
        while time.monotonic() < stop_at:
            response = await call(session, "POST", target, {"scopes": []}, credentials=credentials)
            if response.status != 200:
                raise RuntimeError(f"expandScopes -> {response.status}: {response.body}")
            answered.append(time.time())

    metering = asyncio.create_task(metered_window(meter, window_start, stop_at))
    await asyncio.gather(*(client() for _ in range(settings.producers)))
    wall_start, wall_end = await metering
    phase = Row(key="phase", title="phase", unit="requests/s")
    phase.count = sum(1 for moment in answered if wall_start <= moment < wall_end)
    phase.window = wall_end - wall_start
    meter.fill(phase)
    return phase


def deployment_clients(
    clients_file: Path, provisioner_id: str, worker_type: str, worker_group: str
) -> tuple[Credentials, Credentials]:
    """A producer's and a worker pool's clients, added to a running coordinator's clients
    file as an operator adds them (it re-reads the file): the producer creates tasks in any
    queue, the workers claim from their pool only, as ``worker_group`` (they resolve and
    upload with the credentials each claim brings). ``(producer, workers)``."""
    producer = add_client(
        clients_file,
        "bench-producer",
        scopes=["queue:create-task:*", "queue:scheduler-id:*"],
        description="scripts/bench's producer",
    )
    pool = f"{provisioner_id}/{worker_type}"
    workers = add_client(
        clients_file,
        "bench-workers",
        scopes=[
            f"queue:claim-work:{pool}",
            f"queue:claim-task:{pool}",
            f"queue:poll-task-urls:{pool}",
            f"queue:worker-id:{worker_group}/*",
        ],
        description="scripts/bench's workers",
    )
    return producer, workers
