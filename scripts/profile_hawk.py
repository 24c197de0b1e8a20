"""What one Hawk verification costs the coordinator and one signature a worker, in µs, and
where the time goes.

Verifies ``--requests`` signed requests of each kind a worker sends, in process (no HTTP), with
the coordinator's own :class:`~coordinator.api.auth.Authenticator` over a clients file:

- ``permanent``: claimWork as a worker signs it, its permanent credentials and a JSON body
  whose hash the header carries;
- ``run-credentials``: createArtifact signed with the temporary credentials a claim hands
  out (a named certificate of the clients file's issuer, the task's scopes in it);
- ``taskcluster-certificate``: the same request with credentials
  ``taskcluster.createTemporaryCredentials`` made (an unnamed certificate of the worker's
  client).

Every request is signed beforehand with a nonce of its own (as :mod:`hawk_signing`, which the
worker SDK uses, signs them, byte for byte the official client's header), so what is timed is
verification alone, each request accepted once. Prints the mean µs per verification of each
kind, then with ``--profile`` cProfile's top functions by own time over all kinds. Then the
mean µs per signature of each kind, :func:`hawk_signing.authorization`'s and that of
``mohawk.Sender`` (which it replaced, and which writes the same header) for comparison.

    .venv/bin/python scripts/profile_hawk.py
    .venv/bin/python scripts/profile_hawk.py --requests 20000 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import mohawk
import taskcluster

from coordinator.api.auth import Auth, Authenticator, Authorizer
from coordinator.domain import lifecycle
from coordinator.domain.definitions import normalise
from coordinator.domain.records import record_from_definition
from coordinator.service.clients_file import ISSUER_CLIENT_ID, ClientRegistry
from devharness.tasks import task_definition
from hawk_signing import Credentials, authorization, hawk_ext

ORIGIN = "http://127.0.0.1:8080"
POOL = "proj/workers"
WORKER_SCOPES = [
    f"queue:claim-work:{POOL}",
    f"queue:claim-task:{POOL}",
    "queue:worker-id:wg/*",
]
TASK_SCOPES = ["secrets:get:project/build", "docker-worker:cache:build-*"]
TASK_ID = "fN1SbArXTPSVFNUvaOlinQ"

Request = tuple[str, str, bytes]
"""(method, resource, body) with its Authorization header."""


def _clients_file(directory: Path) -> tuple[Path, Credentials]:
    worker = Credentials(client_id="proj/worker", access_token="w" * 44)
    path = directory / "clients.json"
    path.write_text(
        json.dumps(
            {
                "issuer": ISSUER_CLIENT_ID,
                "clients": [
                    {"clientId": ISSUER_CLIENT_ID, "accessToken": "i" * 44, "scopes": ["*"]},
                    {
                        "clientId": worker.client_id,
                        "accessToken": worker.access_token,
                        "scopes": WORKER_SCOPES,
                    },
                ],
            }
        )
    )
    path.chmod(0o600)
    return path, worker


def _run_credentials(authorizer: Authorizer) -> Credentials:
    """A claim's temporary credentials, for a task built and claimed as the coordinator does."""
    now = int(time.time() * 1000)
    body = task_definition(now, provisionerId="proj", workerType="workers", scopes=TASK_SCOPES)
    definition = normalise(TASK_ID, body, now=now, max_deadline_ms=86_400_000)
    created = lifecycle.create(record_from_definition(TASK_ID, definition), now=now).record
    claimed = lifecycle.claim(
        created, run_id=0, worker_group="wg", worker_id="w1", now=now, timing=lifecycle.Timing()
    ).record
    return Credentials.from_json(authorizer.run_credentials(claimed, claimed.runs[0]))


def _signed(
    credentials: Credentials, method: str, resource: str, body: bytes, count: int
) -> list[tuple[str, bytes, str, str]]:
    content_type = "application/json"
    return [
        (
            method,
            body,
            resource,
            authorization(
                credentials,
                method=method,
                url=ORIGIN + resource,
                content=body.decode(),
                content_type=content_type,
            ),
        )
        for _ in range(count)
    ]


def _mohawk_authorization(
    credentials: Credentials, *, method: str, url: str, content: str, content_type: str
) -> str:
    """The header as ``mohawk.Sender`` writes it: what :func:`authorization` did before."""
    sender = mohawk.Sender(
        {"id": credentials.client_id, "key": credentials.access_token, "algorithm": "sha256"},
        url,
        method,
        content=content,
        content_type=content_type,
        ext=hawk_ext(credentials),
    )
    return str(sender.request_header)


def _signing_us(
    sign: Callable[..., str], credentials: Credentials, resource: str, body: bytes, count: int
) -> float:
    """Mean µs of ``count`` signatures of a POST of ``body`` to ``resource``."""
    content = body.decode()
    began = time.perf_counter()
    for _ in range(count):
        sign(
            credentials,
            method="POST",
            url=ORIGIN + resource,
            content=content,
            content_type="application/json",
        )
    return (time.perf_counter() - began) / count * 1e6


def _verify_all(authenticator: Authenticator, requests: list[tuple[str, bytes, str, str]]) -> None:
    for method, body, resource, header in requests:
        auth = authenticator.verify(
            authorization=header,
            method=method,
            resource=resource,
            origins=[ORIGIN],
            content=body,
            content_type="application/json",
        )
        assert isinstance(auth, Auth)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000, help="per kind (default 5000)")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions")
    parser.add_argument(
        "--no-credentials-cache", action="store_true", help="derive credentials every time"
    )
    parser.add_argument("--sort", default="tottime", help="cProfile's order (default tottime)")
    parser.add_argument("--top", type=int, default=25, help="functions printed (default 25)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path, worker = _clients_file(Path(directory))
        authorizer = Authorizer(clients=ClientRegistry(path))
        # --no-credentials-cache: verify each as the first of its credentials (the cache's bound
        # at 0); the option is absent before the cache was.
        cache: dict[str, Any] = {}
        if args.no_credentials_cache:
            cache["credentials_cache_entries"] = 0
        authenticator = Authenticator(
            clients=authorizer.directory, nonce_cache_entries=10**7, **cache
        )
        start = datetime.now(UTC) - timedelta(minutes=1)
        made = taskcluster.createTemporaryCredentials(
            worker.client_id,
            worker.access_token,
            start,
            start + timedelta(hours=1),
            ["queue:claim-task:" + POOL],
        )
        # the official client hands the accessToken out as bytes
        official = Credentials.from_json({**made, "accessToken": made["accessToken"].decode()})
        claim = json.dumps({"tasks": 4, "workerGroup": "wg", "workerId": "w1"}).encode()
        artifact = json.dumps(
            {"storageType": "s3", "expires": "2027-01-01T00:00:00.000Z", "contentType": "x/y"}
        ).encode()
        artifact_path = f"/api/queue/v1/task/{TASK_ID}/runs/0/artifacts/public%2Flogs%2Flog.txt"
        signers = {
            "permanent": (worker, f"/api/queue/v1/claim-work/{POOL}", claim),
            "run-credentials": (_run_credentials(authorizer), artifact_path, artifact),
            "taskcluster-certificate": (official, f"/api/queue/v1/claim-work/{POOL}", claim),
        }
        kinds: dict[str, list[tuple[str, bytes, str, str]]] = {
            kind: _signed(credentials, "POST", resource, body, args.requests)
            for kind, (credentials, resource, body) in signers.items()
        }
        profiler = cProfile.Profile() if args.profile else None
        for kind, requests in kinds.items():
            _verify_all(authenticator, requests[:50])  # warm: first lookups, caches
            measured = requests[50:]
            run = functools.partial(_verify_all, authenticator, measured)
            began = time.perf_counter()
            if profiler is not None:
                profiler.runcall(run)
            else:
                run()
            elapsed = time.perf_counter() - began
            print(f"{kind:24s} {elapsed / len(measured) * 1e6:7.1f} µs per verification")
        if profiler is not None:
            stats = pstats.Stats(profiler, stream=sys.stdout)
            stats.sort_stats(args.sort).print_stats(args.top)
        for kind, (credentials, resource, body) in signers.items():
            ours, theirs = (
                _signing_us(sign, credentials, resource, body, args.requests)
                for sign in (authorization, _mohawk_authorization)
            )
            print(
                f"{kind:24s} {ours:7.1f} µs per signature "
                f"(mohawk.Sender {theirs:.1f} µs, {theirs / ours:.1f} times)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
