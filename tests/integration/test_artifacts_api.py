"""Artifacts through the official Python client (``taskcluster.Queue`` 113.x) against an
in-process coordinator with authentication on, on both blob backends: files under a directory,
and Azure Blob Storage on a real Azurite.

A worker creates artifacts with the temporary credentials of its claim and uploads the bytes
to the ``putUrl`` with aiohttp, as scriptworker does (Content-Type, Content-Length,
Content-Encoding gzip); readers get them back through getArtifact's 303, anonymously for
``public/`` names, with their own scopes, or through a signed URL (``buildSignedUrl``). Every
refusal of issue 25 is checked with its status and words, and artifacts leave nothing behind
when their tasks are deleted or expire.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiohttp
import pytest
import slugid
from yarl import URL

from coordinator.blobs import blob_key
from coordinator.domain.records import from_iso, to_iso
from coordinator.resolvers import expiry_sweeper
from coordinator.service.clients_file import ClientRegistry, ClientsFileError, ensure_root_client
from devharness.api import call
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from hawk_signing import Credentials as HawkCredentials
from tests.fixtures.clients import Credentials, Queue, rejected, start_secured, worker_scopes
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator

PROV, WT = "art-prov", "wt"
MAX_BYTES = 1 << 20
"""The coordinator's COORDINATOR_ARTIFACT_MAX_BYTES in these tests."""
HOUR_MS = 3_600_000
LOG = b"line one\nline two\n" * 500
"""A log, uploaded gzipped."""

SCOPES = {
    "producer": [
        f"queue:create-task:lowest:{PROV}/{WT}",
        "queue:scheduler-id:-",
        "queue:create-task:project:none",
    ],
    "worker": worker_scopes(PROV, WT),
    "reader": ["queue:get-artifact:*", "queue:list-artifacts:*"],
    "lister": ["queue:list-artifacts:*"],
    "public-reader": ["queue:get-artifact:public/*"],
    "manager": ["queue:manage:delete-tasks"],
}


@dataclass(kw_only=True)
class Setup:
    """A secured coordinator on one blob backend and the official clients of its clients."""

    c: RunningCoordinator
    clock: FakeClock
    backend: str
    credentials: dict[str, Credentials]

    def client(self, who: str | None) -> Queue:
        """The sync official client of ``who`` (a clientId of :data:`SCOPES`), anonymous for
        ``None``."""
        return Queue("sync", self.c.url, None if who is None else self.credentials[who])

    async def task(self, **fields: Any) -> str:
        """A new task of the test's pool, created by the producer."""
        task_id: str = slugid.nice()
        definition = task_definition(self.clock.now, provisionerId=PROV, workerType=WT, **fields)
        await self.client("producer").createTask(task_id, definition)
        return task_id

    async def running(self, **fields: Any) -> tuple[str, Queue]:
        """A new task whose run 0 the worker claimed, and the client with the claim's
        temporary credentials (what a worker creates artifacts with)."""
        task_id = await self.task(**fields)
        claim = await self.client("worker").claimTask(
            task_id, 0, {"workerGroup": "wg", "workerId": "w1"}
        )
        return task_id, Queue("sync", self.c.url, claim["credentials"])

    def expires(self, hours: float = 1) -> str:
        """An artifact ``expires`` ``hours`` after the test's now."""
        return to_iso(self.clock.now + int(hours * HOUR_MS))

    async def s3(
        self,
        run: Queue,
        task_id: str,
        name: str,
        data: bytes,
        *,
        content_type: str = "text/plain",
        encoding: str | None = None,
    ) -> dict[str, Any]:
        """createArtifact of an s3 artifact and the upload of ``data`` to its putUrl,
        asserting both succeed; createArtifact's answer."""
        created: dict[str, Any] = await run.createArtifact(
            task_id,
            0,
            name,
            {"storageType": "s3", "expires": self.expires(), "contentType": content_type},
        )
        status, body = await put(self.c.session, created["putUrl"], data, content_type, encoding)
        assert (status, body) == (200, {}), body
        return created

    async def stored(self, task_id: str, name: str) -> bytes | None:
        """The bytes the blob store holds for run 0's ``name``, ``None`` if none."""
        reader = await self.c.parts.artifacts.blobs.open(blob_key(task_id, 0, name))
        if reader is None:
            return None
        async with reader:
            return await reader.read_all()


async def put(
    session: aiohttp.ClientSession,
    url: str,
    data: bytes,
    content_type: str,
    encoding: str | None = None,
) -> tuple[int, Any]:
    """PUT ``data`` to a putUrl as a worker does: no Authorization, its Content-Type, the
    exact Content-Length, and Content-Encoding when the bytes are encoded."""
    headers = {"Content-Type": content_type}
    if encoding is not None:
        headers["Content-Encoding"] = encoding
    async with session.put(URL(url, encoded=True), data=data, headers=headers) as response:
        return response.status, await response.json(content_type=None)


async def fetch(session: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, str], bytes]:
    """GET ``url`` as it is, without following redirects or decoding the body: the status,
    the headers and the raw bytes."""
    async with session.get(
        URL(url, encoded=True), allow_redirects=False, auto_decompress=False
    ) as response:
        return response.status, dict(response.headers), await response.read()


def with_query(url: str, **changes: str) -> str:
    """``url`` with query parameters replaced."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(changes)
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest.fixture(params=["directory", "azure"])
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The configuration of one blob backend (Azurite started for ``azure`` only)."""
    if request.param == "directory":
        return {"artifacts": "directory"}
    azurite = request.getfixturevalue("azurite")
    namespace = request.getfixturevalue("azure_namespace")
    return {
        "artifacts": "azure",
        "azure_connection_string": azurite.connection_string,
        "queue_prefix": namespace.queue_prefix,
    }


@pytest.fixture
async def setup(
    backend: dict[str, Any], start_coordinator: StartCoordinator, tmp_path: Path
) -> Setup:
    """A coordinator with authentication on and the test's clients, its artifacts on the
    backend of the parameter, its clock a :class:`FakeClock` and no background actors."""
    clock = FakeClock()
    c, credentials = await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        SCOPES,
        clock=clock,
        run_resolvers=False,
        artifact_max_bytes=MAX_BYTES,
        **backend,
    )
    return Setup(c=c, clock=clock, backend=backend["artifacts"], credentials=credentials)


# --- s3: createArtifact, the upload, and every way to read it back --------------------------


async def test_an_s3_artifact_round_trips_with_its_headers(setup: Setup) -> None:
    task_id, run = await setup.running()
    reader = setup.client("reader")
    name = "public/logs/live_backing.log"
    body = gzip.compress(LOG)

    created = await run.createArtifact(
        task_id,
        0,
        name,
        {"storageType": "s3", "expires": setup.expires(), "contentType": "text/plain"},
    )
    assert created["storageType"] == "s3"
    assert created["contentType"] == "text/plain"
    assert from_iso(created["expires"]) == setup.clock.now + 45 * 60_000
    # created, not uploaded: listed and described, but nothing to redirect to
    info = await reader.artifactInfo(task_id, 0, name)
    assert info == {
        "storageType": "s3",
        "name": name,
        "expires": setup.expires(),
        "contentType": "text/plain",
    }
    status, error = await rejected(reader.getArtifact(task_id, 0, name))
    assert status == 404 and "Artifact not uploaded yet" in error["message"]

    status, answer = await put(setup.c.session, created["putUrl"], body, "text/plain", "gzip")
    assert (status, answer) == (200, {})
    assert await setup.stored(task_id, name) is not None  # its bytes: read below, as sent

    for got in (
        await reader.getArtifact(task_id, 0, name),
        await reader.getLatestArtifact(task_id, name),
        await reader.artifact(task_id, 0, name),
        await reader.latestArtifact(task_id, name),
    ):
        assert got["storageType"] == "s3"
        status, headers, data = await fetch(setup.c.session, got["url"])
        assert status == 200
        assert data == body
        assert headers["Content-Type"] == "text/plain"
        assert headers["Content-Encoding"] == "gzip"
        assert int(headers["Content-Length"]) == len(body)
        # Azure serves its own blobs; the coordinator serves the directory's
        assert ("/api/queue/v1/" in got["url"]) == (setup.backend == "directory")
    # what a consumer sees through a decoding client: the log itself
    async with setup.c.session.get(URL(got["url"], encoded=True)) as response:
        assert await response.read() == LOG
    info = await reader.latestArtifactInfo(task_id, name)
    assert info["contentLength"] == len(body)

    # the same request again: a fresh putUrl, whose upload replaces the bytes
    again = await run.createArtifact(
        task_id,
        0,
        name,
        {"storageType": "s3", "expires": setup.expires(), "contentType": "text/plain"},
    )
    assert again["putUrl"] and again["contentType"] == "text/plain"
    status, _ = await put(setup.c.session, again["putUrl"], b"plain now", "text/plain")
    assert status == 200
    got = await reader.getArtifact(task_id, 0, name)
    status, headers, data = await fetch(setup.c.session, got["url"])
    assert (status, data) == (200, b"plain now")
    assert "Content-Encoding" not in headers
    assert (await reader.artifactInfo(task_id, 0, name))["contentLength"] == len(b"plain now")


async def test_get_artifact_answers_a_303_with_location_and_storage_type(setup: Setup) -> None:
    task_id, run = await setup.running()
    await setup.s3(run, task_id, "public/a.json", b'{"a": 1}', content_type="application/json")
    url = f"{setup.c.api}/task/{task_id}/runs/0/artifacts/public%2Fa.json"
    for target in (url, url.replace("public%2Fa.json", "public/a.json")):  # either form
        status, headers, data = await fetch(setup.c.session, target)
        assert status == 303
        body = json.loads(data)
        assert body["storageType"] == "s3"
        assert headers["Location"] == body["url"]
        assert headers["x-taskcluster-artifact-storage-type"] == "s3"
        assert (await fetch(setup.c.session, body["url"]))[2] == b'{"a": 1}'


# --- reference, link, error ------------------------------------------------------------------


async def test_references_links_and_errors(setup: Setup) -> None:
    task_id, run = await setup.running()
    reader = setup.client("reader")
    expires = setup.expires()
    elsewhere = "https://example.com/build/target.tar.gz"
    answer = await run.createArtifact(
        task_id,
        0,
        "public/ref",
        {"storageType": "reference", "expires": expires, "url": elsewhere, "contentType": "x/y"},
    )
    assert answer == {"storageType": "reference"}
    # a chain of links ends at the reference; every name visited is in the 303's resolution
    for name, target in (("public/l1", "public/l2"), ("public/l2", "public/ref")):
        answer = await run.createArtifact(
            task_id, 0, name, {"storageType": "link", "expires": expires, "artifact": target}
        )
        assert answer == {"storageType": "link"}
    assert await reader.getArtifact(task_id, 0, "public/l1") == {
        "storageType": "reference",
        "url": elsewhere,
    }
    assert await reader.latestArtifact(task_id, "public/l1") == {
        "storageType": "reference",
        "url": elsewhere,
    }
    info = await reader.artifactInfo(task_id, 0, "public/l1")
    assert (info["storageType"], info["contentType"]) == ("link", "application/binary")

    # a cycle
    for name, target in (("public/c1", "public/c2"), ("public/c2", "public/c1")):
        await run.createArtifact(
            task_id, 0, name, {"storageType": "link", "expires": expires, "artifact": target}
        )
    status, error = await rejected(reader.getArtifact(task_id, 0, "public/c1"))
    assert (status, error["code"]) == (400, "InputError")
    assert "Artifact leads to a link cycle" in error["message"]

    # an error artifact: 424 {reason, message} from getArtifact, 200 from artifact
    message = "the worker found no file"
    await run.createArtifact(
        task_id,
        0,
        "public/missing",
        {
            "storageType": "error",
            "expires": expires,
            "reason": "file-missing-on-worker",
            "message": message,
        },
    )
    status, error = await rejected(reader.getArtifact(task_id, 0, "public/missing"))
    assert (status, error) == (424, {"reason": "file-missing-on-worker", "message": message})
    status, headers, data = await fetch(
        setup.c.session, f"{setup.c.api}/task/{task_id}/runs/0/artifacts/public/missing"
    )
    assert status == 424 and headers["x-taskcluster-artifact-storage-type"] == "error"
    assert json.loads(data) == {"reason": "file-missing-on-worker", "message": message}
    assert await reader.artifact(task_id, 0, "public/missing") == {
        "storageType": "error",
        "reason": "file-missing-on-worker",
        "message": message,
    }

    # a reference may become a link, not the other way round
    await run.createArtifact(
        task_id,
        0,
        "public/ref",
        {"storageType": "link", "expires": expires, "artifact": "public/missing"},
    )
    status, error = await rejected(
        run.createArtifact(
            task_id,
            0,
            "public/ref",
            {
                "storageType": "reference",
                "expires": expires,
                "url": elsewhere,
                "contentType": "x/y",
            },
        )
    )
    assert (status, error["code"]) == (409, "RequestConflict")


async def test_links_need_the_scope_of_every_name_they_visit(setup: Setup) -> None:
    task_id, run = await setup.running()
    await setup.s3(run, task_id, "private/target", b"secret")
    await run.createArtifact(
        task_id,
        0,
        "public/pointer",
        {"storageType": "link", "expires": setup.expires(), "artifact": "private/target"},
    )
    status, error = await rejected(
        setup.client("public-reader").getArtifact(task_id, 0, "public/pointer")
    )
    assert (status, error["code"]) == (403, "InsufficientScopes")
    assert "queue:get-artifact:private/target" in error["message"]
    got = await setup.client("reader").getArtifact(task_id, 0, "public/pointer")
    assert (await fetch(setup.c.session, got["url"]))[2] == b"secret"


# --- listings --------------------------------------------------------------------------------


async def test_listings_page_through_a_runs_artifacts_in_name_order(setup: Setup) -> None:
    task_id, run = await setup.running()
    lister = setup.client("lister")
    names = ["public/b", "public/a/1", "z", "public/a/2", "private/x"]
    for name in names:
        await run.createArtifact(
            task_id,
            0,
            name,
            {
                "storageType": "reference",
                "expires": setup.expires(),
                "url": "https://e.x/" + name,
                "contentType": "text/plain",
            },
        )
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while pages < 10:
        query: dict[str, Any] = {"limit": 2}
        if token is not None:
            query["continuationToken"] = token
        page = await lister.listArtifacts(task_id, 0, query=query)
        pages += 1
        assert len(page["artifacts"]) <= 2
        seen += [artifact["name"] for artifact in page["artifacts"]]
        token = page.get("continuationToken")
        if token is None:
            break
    assert seen == sorted(names)
    assert pages == 3
    latest = await lister.listLatestArtifacts(task_id)
    assert [a["name"] for a in latest["artifacts"]] == sorted(names)
    assert "continuationToken" not in latest
    # info is a listing scope; content is not
    assert (await lister.artifactInfo(task_id, 0, "z"))["storageType"] == "reference"
    status, _ = await rejected(lister.getArtifact(task_id, 0, "z"))
    assert status == 403
    # a pending run lists none; a run the task does not have is a 404
    pending = await setup.task()
    assert (await lister.listArtifacts(pending, 0))["artifacts"] == []
    status, error = await rejected(lister.listArtifacts(task_id, 1))
    assert status == 404 and "has no run with runId: 1" in error["message"]
    status, error = await rejected(lister.listLatestArtifacts(slugid.nice()))
    assert status == 404 and "Task not found" in error["message"]
    status, error = await rejected(
        lister.listArtifacts(task_id, 0, query={"continuationToken": "x"})
    )
    assert status == 400


# --- refusals --------------------------------------------------------------------------------


async def test_create_artifact_refusals(setup: Setup) -> None:
    task_id, run = await setup.running()

    def body(**changes: Any) -> dict[str, Any]:
        return {
            "storageType": "s3",
            "expires": setup.expires(),
            "contentType": "text/plain",
            **changes,
        }

    status, error = await rejected(run.createArtifact(task_id, 0, "café", body()))
    assert (status, error["code"]) == (400, "InputValidationError")
    assert "name" in error["message"]
    status, error = await rejected(run.createArtifact(task_id, 0, "a\tb", body()))
    assert status == 400

    task = await setup.client(None).task(task_id)
    late = to_iso(from_iso(task["expires"]) + 1)
    status, error = await rejected(run.createArtifact(task_id, 0, "late", body(expires=late)))
    assert (status, error["code"]) == (400, "InputError")
    assert "after the task expiration" in error["message"]

    status, error = await rejected(
        run.createArtifact(task_id, 0, "obj", body(storageType="object"))
    )
    assert (status, error["code"]) == (400, "InputError")
    assert "use s3" in error["message"]

    await run.createArtifact(task_id, 0, "kept", body())
    status, error = await rejected(
        run.createArtifact(task_id, 0, "kept", body(contentType="application/json"))
    )
    assert (status, error["code"]) == (409, "RequestConflict")
    assert "Artifact already exists with different properties" in error["message"]

    status, error = await rejected(
        run.finishArtifact(task_id, 0, "kept", {"uploadId": slugid.nice()})
    )
    assert status == 400 and "Only object artifacts can be finished" in error["message"]
    status, error = await rejected(
        run.finishArtifact(task_id, 0, "none", {"uploadId": slugid.nice()})
    )
    assert status == 404

    # another run's credentials create nothing here
    _, other_run = await setup.running()
    status, error = await rejected(other_run.createArtifact(task_id, 0, "x", body()))
    assert (status, error["code"]) == (403, "InsufficientScopes")

    await run.reportCompleted(task_id, 0)
    status, error = await rejected(run.createArtifact(task_id, 0, "after", body()))
    assert (status, error["code"]) == (409, "RequestConflict")
    assert "Artifacts cannot be created for a task after it is resolved" in error["message"]


async def test_upload_refusals(setup: Setup) -> None:
    task_id, run = await setup.running()
    name = "public/data.bin"
    created = await run.createArtifact(
        task_id,
        0,
        name,
        {"storageType": "s3", "expires": setup.expires(), "contentType": "application/x-tar"},
    )
    url = created["putUrl"]
    session = setup.c.session

    status, error = await put(session, url, b"bytes", "application/octet-stream")
    assert (status, error["code"]) == (400, "InputError")
    assert "'application/octet-stream'" in error["message"]
    assert "'application/x-tar'" in error["message"]

    status, error = await put(session, with_query(url, sig="0" * 64), b"bytes", "application/x-tar")
    assert (status, error["code"]) == (403, "SignedUrlRefused")
    later = str(int(dict(parse_qsl(urlsplit(url).query))["expires"]) + 1)
    status, error = await put(
        session, with_query(url, expires=later), b"bytes", "application/x-tar"
    )
    assert (status, error["code"]) == (403, "SignedUrlRefused")

    async def chunked() -> AsyncIterator[bytes]:
        yield b"no length"

    async with session.put(
        URL(url, encoded=True), data=chunked(), headers={"Content-Type": "application/x-tar"}
    ) as response:
        assert response.status == 411
        assert (await response.json())["code"] == "LengthRequired"

    # too large: refused from the header, before a byte of the body is read
    too_large, head = await raw_put(setup, url, length=MAX_BYTES + 1, body=b"")
    assert too_large == 413, head

    # a body that ends early: nothing stored (not even a temporary file), nothing to download
    refused = await upload_answers(setup, 400)
    await raw_put(setup, url, length=100, body=b"x" * 40, hang_up=True)

    async def answered() -> bool:
        return await upload_answers(setup, 400) > refused

    await wait_until(answered, what="the upload cut short answered 400")
    assert await setup.stored(task_id, name) is None
    run_directory = setup.c.config.artifacts_dir / task_id / "0"
    assert not run_directory.exists() or not any(run_directory.iterdir())
    status, error = await rejected(setup.client("reader").getArtifact(task_id, 0, name))
    assert status == 404 and "not uploaded yet" in error["message"]

    # expired: 45 minutes on
    setup.clock.advance(45 * 60 + 1)
    status, error = await put(session, url, b"bytes", "application/x-tar")
    assert (status, error["code"]) == (403, "SignedUrlRefused")
    assert "expired" in error["message"]
    assert await setup.stored(task_id, name) is None


async def upload_answers(setup: Setup, status: int) -> float:
    """How many uploads the coordinator answered with ``status`` (its request metrics)."""
    async with setup.c.session.get(f"{setup.c.url}/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith("http_requests_total{") and (
            f'name="uploadArtifact",status="{status}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def raw_put(
    setup: Setup, url: str, *, length: int, body: bytes, hang_up: bool = False
) -> tuple[int | None, bytes]:
    """A PUT written on a socket: headers claiming ``length`` bytes, then ``body``; with
    ``hang_up`` the socket closes right after (no answer is read). The status and the head of
    the answer otherwise."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(
            (
                f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                f"Content-Type: application/x-tar\r\nContent-Length: {length}\r\n\r\n"
            ).encode()
            + body
        )
        await writer.drain()
        if hang_up:
            return None, b""
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        return int(head.split(b" ")[1]), head
    finally:
        writer.close()


async def test_download_url_refusals(setup: Setup) -> None:
    task_id, run = await setup.running()
    await setup.s3(run, task_id, "private/d", b"download me")
    got = await setup.client("reader").getArtifact(task_id, 0, "private/d")
    session = setup.c.session
    assert (await fetch(session, got["url"]))[0] == 200
    assert (await fetch(session, with_query(got["url"], sig="0" * 64)))[0] == 403
    if setup.backend == "directory":  # Azure's own URLs expire on Azure's clock
        setup.clock.advance(30 * 60 + 1)
        status, _, data = await fetch(session, got["url"])
        assert status == 403 and b"expired" in data


# --- who may read ----------------------------------------------------------------------------


async def test_anonymous_public_reads_and_signed_urls(setup: Setup) -> None:
    task_id, run = await setup.running()
    await setup.s3(run, task_id, "public/open", b"for everyone")
    await setup.s3(run, task_id, "private/closed", b"for some")
    anonymous = setup.client(None)

    got = await anonymous.getArtifact(task_id, 0, "public/open")
    assert (await fetch(setup.c.session, got["url"]))[2] == b"for everyone"
    status, error = await rejected(anonymous.getArtifact(task_id, 0, "private/closed"))
    assert (status, error["code"]) == (401, "AuthenticationFailed")
    status, error = await rejected(anonymous.listArtifacts(task_id, 0))
    assert status == 401
    status, error = await rejected(
        setup.client("public-reader").getArtifact(task_id, 0, "private/closed")
    )
    assert (status, error["code"]) == (403, "InsufficientScopes")

    # a signed URL carries the signer's scopes to whoever holds it
    signed = setup.client("reader").official.buildSignedUrl(
        "getArtifact", task_id, 0, "private/closed"
    )
    status, headers, data = await fetch(setup.c.session, signed)
    assert status == 303
    assert (await fetch(setup.c.session, headers["Location"]))[2] == b"for some"
    status, _, data = await fetch(setup.c.session, signed.replace("bewit=", "bewit=A"))
    assert status == 401
    # and so does the listing, signed
    listed = setup.client("reader").official.buildSignedUrl("listArtifacts", task_id, 0)
    status, _, data = await fetch(setup.c.session, listed)
    assert status == 200
    assert [a["name"] for a in json.loads(data)["artifacts"]] == ["private/closed", "public/open"]


# --- artifacts carried in a report (resolveRuns ``artifacts``) ------------------------------


async def resolve_runs(setup: Setup, reports: list[dict[str, Any]]) -> tuple[int, Any]:
    """resolveRuns signed by the worker's own credentials: the status and the body."""
    worker = setup.credentials["worker"]
    answer = await call(
        setup.c.session,
        "POST",
        f"{setup.c.api}/resolve-runs",
        {"reports": reports},
        credentials=HawkCredentials(
            client_id=worker["clientId"], access_token=worker["accessToken"]
        ),
    )
    return answer.status, answer.body


def inline(name: str, data: bytes, **fields: str) -> dict[str, str]:
    """An item of a report's ``artifacts``."""
    return {"name": name, "contentType": "text/plain", "content": b64(data), **fields}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_a_report_stores_its_artifacts_with_the_resolution(setup: Setup) -> None:
    task_id, _ = await setup.running()
    log_name = "public/logs/live_backing.log"
    body = gzip.compress(LOG)
    status, answer = await resolve_runs(
        setup,
        [
            {
                "taskId": task_id,
                "runId": 0,
                "resolution": "completed",
                "artifacts": [
                    inline(log_name, body, contentEncoding="gzip"),
                    inline("public/empty.txt", b"", contentEncoding="identity"),
                ],
            }
        ],
    )
    assert status == 200, answer
    assert answer["reports"][0]["status"]["state"] == "completed"
    reader = setup.client("reader")
    listed = await reader.listArtifacts(task_id, 0)
    assert [(a["name"], a["storageType"], a.get("contentLength")) for a in listed["artifacts"]] == [
        ("public/empty.txt", "s3", 0),
        (log_name, "s3", len(body)),
    ]
    assert listed["artifacts"][1]["expires"] == (await setup.client(None).task(task_id))["expires"]
    got = await reader.getArtifact(task_id, 0, log_name)
    # the coordinator serves them from the store on either blob backend
    assert "/api/queue/v1/" in got["url"]
    status, headers, data = await fetch(setup.c.session, got["url"])
    assert (status, data) == (200, body)
    assert (headers["Content-Type"], headers["Content-Encoding"]) == ("text/plain", "gzip")
    got = await reader.getArtifact(task_id, 0, "public/empty.txt")
    status, headers, data = await fetch(setup.c.session, got["url"])
    assert (status, data) == (200, b"")
    assert "Content-Encoding" not in headers
    assert await setup.stored(task_id, log_name) is None, "nothing in the blob store"


async def test_a_refused_report_stores_no_artifact_and_a_kept_name_stays(setup: Setup) -> None:
    task_id, run = await setup.running()
    await setup.s3(run, task_id, "public/kept.txt", b"uploaded")
    pending = await setup.task()
    status, answer = await resolve_runs(
        setup,
        [
            {
                "taskId": task_id,
                "runId": 0,
                "resolution": "failed",
                "artifacts": [inline("public/kept.txt", b"inline"), inline("public/new", b"n")],
            },
            {
                "taskId": pending,
                "runId": 0,
                "resolution": "completed",
                "artifacts": [inline("public/log", b"never")],
            },
        ],
    )
    assert status == 200, answer
    assert answer["reports"][0]["status"]["state"] == "failed"
    assert answer["reports"][1]["error"]["status"] == 403  # a run this worker does not hold
    assert await setup.c.parts.store.get_artifact(pending, 0, "public/log") is None
    reader = setup.client("reader")
    kept = await reader.getArtifact(task_id, 0, "public/kept.txt")
    assert (await fetch(setup.c.session, kept["url"]))[2] == b"uploaded"
    new = await reader.getArtifact(task_id, 0, "public/new")
    assert (await fetch(setup.c.session, new["url"]))[2] == b"n"
    # a report repeated after it was accepted is answered again and changes nothing
    status, answer = await resolve_runs(
        setup,
        [
            {
                "taskId": task_id,
                "runId": 0,
                "resolution": "failed",
                "artifacts": [inline("public/later", b"l")],
            }
        ],
    )
    assert status == 200 and answer["reports"][0]["status"]["state"] == "failed"
    assert await setup.c.parts.store.get_artifact(task_id, 0, "public/later") is None


@pytest.mark.parametrize(
    ("artifacts", "words"),
    [
        ([{"name": "a", "contentType": "text/plain", "content": "not base64!"}], "does not match"),
        ([{"name": "a", "contentType": "text/plain", "content": "QQ"}], "is not base64"),
        ([inline("a", b"x" * (64 * 1024 + 1))], "past the 65536 a report may carry"),
        ([inline("a", b"1"), inline("a", b"2")], "'a' is given twice"),
        ([inline(f"a{n}", b"") for n in range(5)], "is too long"),
        ([inline("a", b"", contentEncoding="br")], "is not one of"),
        ([{"name": "a", "content": ""}], "'contentType' is a required property"),
    ],
)
async def test_bad_report_artifacts_are_400_with_nothing_written(
    setup: Setup, artifacts: list[dict[str, str]], words: str
) -> None:
    task_id, _ = await setup.running()
    report = {"taskId": task_id, "runId": 0, "resolution": "completed", "artifacts": artifacts}
    status, answer = await resolve_runs(setup, [report])
    assert status == 400 and answer["code"] == "InputValidationError", answer
    assert words in answer["message"]
    assert (await setup.client(None).status(task_id))["status"]["state"] == "running"
    assert await setup.c.parts.store.get_artifact(task_id, 0, "a") is None


async def test_an_inline_artifact_expires_and_goes_with_its_task(setup: Setup) -> None:
    start = setup.clock.now
    task_id, _ = await setup.running(expires=to_iso(start + 3 * HOUR_MS))
    report = {
        "taskId": task_id,
        "runId": 0,
        "resolution": "completed",
        "artifacts": [inline("public/log", b"logged")],
    }
    assert (await resolve_runs(setup, [report]))[0] == 200
    management = setup.c.parts.management
    assert await expiry_sweeper.run_once(management) == 0
    setup.clock.now = start + 3 * HOUR_MS
    assert await expiry_sweeper.run_once(management) == 2  # the artifact, then its task
    assert await setup.c.parts.store.get(task_id) is None


# --- deletion --------------------------------------------------------------------------------


async def test_delete_tasks_deletes_their_artifacts_and_bytes(setup: Setup) -> None:
    group = slugid.nice()
    task_id, run = await setup.running(taskGroupId=group)
    kept, kept_run = await setup.running()
    await setup.s3(run, task_id, "public/a", b"a")
    await setup.s3(run, task_id, "public/b/c", b"bc")
    await setup.s3(kept_run, kept, "public/a", b"kept")
    manager = setup.credentials["manager"]
    answer = await call(
        setup.c.session,
        "DELETE",
        f"{setup.c.api}/tasks?taskGroupId={group}",
        credentials=HawkCredentials(
            client_id=manager["clientId"], access_token=manager["accessToken"]
        ),
    )
    assert (answer.status, answer.body) == (200, {"deleted": 1})
    assert await setup.stored(task_id, "public/a") is None
    assert await setup.stored(task_id, "public/b/c") is None
    assert await setup.c.parts.store.get_artifact(task_id, 0, "public/a") is None
    assert await setup.stored(kept, "public/a") == b"kept"
    if setup.backend == "directory":
        assert not (setup.c.config.artifacts_dir / task_id).exists()


async def test_expired_artifacts_and_tasks_leave_nothing_behind(setup: Setup) -> None:
    start = setup.clock.now
    task_expires = start + 3 * HOUR_MS
    task_id, run = await setup.running(expires=to_iso(task_expires))
    short = await run.createArtifact(
        task_id,
        0,
        "public/short",
        {"storageType": "s3", "expires": to_iso(start + HOUR_MS), "contentType": "text/plain"},
    )
    assert (await put(setup.c.session, short["putUrl"], b"short", "text/plain"))[0] == 200
    long = await run.createArtifact(
        task_id,
        0,
        "public/long",
        {"storageType": "s3", "expires": to_iso(task_expires), "contentType": "text/plain"},
    )
    assert (await put(setup.c.session, long["putUrl"], b"long", "text/plain"))[0] == 200
    management = setup.c.parts.management
    assert await expiry_sweeper.run_once(management) == 0

    # expired, not yet swept: 410 (anonymous reads need no Hawk timestamp near this clock)
    setup.clock.now = start + HOUR_MS + 1
    status, error = await rejected(setup.client(None).getArtifact(task_id, 0, "public/short"))
    assert (status, error["code"]) == (410, "ResourceExpired")
    assert await expiry_sweeper.run_once(management) == 1
    assert await setup.stored(task_id, "public/short") is None
    assert await setup.c.parts.store.get_artifact(task_id, 0, "public/short") is None
    assert await setup.stored(task_id, "public/long") == b"long"

    setup.clock.now = task_expires
    assert await expiry_sweeper.run_once(management) == 2  # the artifact, then its task
    assert await setup.stored(task_id, "public/long") is None
    assert await setup.c.parts.store.get(task_id) is None
    assert await expiry_sweeper.run_once(management) == 0


async def test_the_clients_file_says_what_anonymous_callers_hold(setup: Setup) -> None:
    task_id, run = await setup.running()
    await setup.s3(run, task_id, "public/p", b"p")
    anonymous = setup.client(None)
    assert (await anonymous.getArtifact(task_id, 0, "public/p"))["storageType"] == "s3"
    path = setup.c.config.clients_file
    document = json.loads(path.read_text())
    for scopes, read in (([], False), (["queue:list-artifacts:*"], False), (None, True)):
        if scopes is None:
            document.pop("anonymousScopes")
        else:
            document["anonymousScopes"] = scopes
        replacement = path.with_suffix(".new")
        replacement.write_text(json.dumps(document))
        replacement.chmod(0o600)
        replacement.replace(path)  # the registry reloads a replaced file on the next request
        listed = await anonymous.listArtifacts(task_id, 0) if scopes else None
        assert listed is None or [a["name"] for a in listed["artifacts"]] == ["public/p"]
        if read:
            assert (await anonymous.getArtifact(task_id, 0, "public/p"))["storageType"] == "s3"
        else:
            status, _ = await rejected(anonymous.getArtifact(task_id, 0, "public/p"))
            assert status == 401


async def test_request_bodies_are_taken_as_sent(setup: Setup) -> None:
    """The server never decodes a body: an upload's gzip bytes are stored as they came, and a
    JSON body sent encoded is refused with a 400 that says so."""
    task_id = await setup.task()
    url = f"{setup.c.api}/task/{task_id}/runs/0/claim"
    content = gzip.compress(b'{"workerGroup": "wg", "workerId": "w1"}')
    async with setup.c.session.post(
        URL(url, encoded=True),
        data=content,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    ) as response:
        body = await response.json()
    assert response.status == 400, body
    assert "Content-Encoding gzip" in body["message"]


def test_anonymous_scopes_must_be_a_list_of_scopes(tmp_path: Path) -> None:
    path = tmp_path / "clients.json"
    ensure_root_client(path)
    assert ClientRegistry(path).anonymous_scopes == ("queue:get-artifact:public/*",)
    document = json.loads(path.read_text())
    for wrong in ("queue:get-artifact:*", ["queue:get-artifact:é"], [1]):
        path.write_text(json.dumps({**document, "anonymousScopes": wrong}))
        with pytest.raises(ClientsFileError, match="anonymousScopes must be a list"):
            ClientRegistry(path)
