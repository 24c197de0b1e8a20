"""The dashboard at ``/ui/``, used as a person would: headless Chromium (Debian's binary,
driven by Playwright) against a coordinator with authentication on and tasks in several states,
a task page's artifacts and log (for a signed-out visitor too, under the anonymousScopes of
./scripts/dev's clients file), and API errors shown as text, not markdown.

Set ``QC_SCREENSHOT=1`` to write ``docs/dashboard.png`` from the queue list and
``docs/dashboard-queue.png`` from a paused, limited queue's page.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import slugid
import taskcluster.aio
from playwright.async_api import Browser, Locator, expect
from yarl import URL

from coordinator.service.clients_file import DEV_ANONYMOUS_SCOPES, ensure_root_client
from devharness.api import call
from devharness.tasks import task_definition
from hawk_signing import Credentials
from tests.fixtures.browser import WAIT_MS, needs_chromium, open_page, sign_in
from tests.fixtures.clients import start_secured, write_clients
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator
from tests.fixtures.sdk import running
from worker_sdk import TaskRun, Worker

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"
QUEUE_SCREENSHOT = SCREENSHOT.with_name("dashboard-queue.png")
LOG = "public/logs/live_backing.log"

pytestmark = [needs_chromium, pytest.mark.timeout(180)]


class Seed:
    """Creates tasks in one group with the root client (the official Python client)."""

    def __init__(self, coordinator: RunningCoordinator, root: dict[str, str]) -> None:
        self.queue = taskcluster.aio.Queue(
            {"rootUrl": coordinator.url, "credentials": dict(root), "maxRetries": 0},
            session=coordinator.session,
        )
        self.session = coordinator.session
        self.group = slugid.nice()
        self.ids: dict[str, str] = {}

    async def create(self, name: str, worker_type: str = "builder", **fields: Any) -> str:
        task_id: str = slugid.nice()
        fields = {"taskGroupId": self.group, **fields}
        body = task_definition(
            provisionerId="dash", workerType=worker_type, metadata={"name": name}, **fields
        )
        await self.queue.createTask(task_id, body)
        self.ids[name] = task_id
        return task_id

    async def claim(self, task_id: str, run_id: int = 0) -> None:
        worker = {"workerGroup": "dash", "workerId": "w1"}
        await self.queue.claimTask(task_id, str(run_id), worker)

    async def upload(
        self, task_id: str, run_id: int, name: str, content: bytes, content_type: str,
        *, gzipped: bool = False,
    ) -> None:  # fmt: skip
        """createArtifact (s3) and the PUT to its putUrl, as a worker uploads a file."""
        expires = (await self.queue.task(task_id))["expires"]
        body = {"storageType": "s3", "expires": expires, "contentType": content_type}
        created = await self.queue.createArtifact(task_id, str(run_id), name, body)
        headers = {"Content-Type": content_type}
        if gzipped:
            content = gzip.compress(content)
            headers["Content-Encoding"] = "gzip"
        put_url = URL(created["putUrl"], encoded=True)  # sent as signed
        async with self.session.put(put_url, data=content, headers=headers) as answer:
            assert answer.status == 200, await answer.text()

    async def failed_with_log(self, name: str, log: str, *, gzipped: bool = False) -> str:
        """A task whose run 0 uploaded ``log`` as its log and failed."""
        task_id = await self.create(name)
        await self.claim(task_id)
        await self.upload(task_id, 0, LOG, log.encode(), "text/plain", gzipped=gzipped)
        await self.queue.reportFailed(task_id, "0")
        return task_id

    async def populate(self) -> None:
        """Two queues: completed, failed, running, pending and unscheduled tasks."""
        for name in ("build-a", "build-b"):
            await self.claim(await self.create(name))
        await self.queue.reportCompleted(self.ids["build-a"], "0")
        await self.queue.reportFailed(self.ids["build-b"], "0")
        await self.claim(await self.create("test-running"))
        for n in range(3):
            await self.create(f"lint-{n}", worker_type="linter")
        await self.create("deploy", dependencies=[self.ids["lint-0"]])


def replace_anonymous_scopes(clients_file: Path, scopes: list[str]) -> None:
    """What an operator does: edit anonymousScopes and replace the file (it is re-read)."""
    document = json.loads(clients_file.read_text())
    document["anonymousScopes"] = scopes
    replacement = clients_file.with_suffix(".new")
    replacement.write_text(json.dumps(document))
    replacement.chmod(0o600)
    replacement.replace(clients_file)


async def test_dashboard_as_a_person_uses_it(
    start_coordinator: StartCoordinator, browser: Browser, tmp_path: Path
) -> None:
    started = time.monotonic()
    coordinator, creds = await start_secured(start_coordinator, tmp_path / "clients.json", {})
    seed = Seed(coordinator, creds["root"])
    await seed.populate()
    ids = seed.ids
    page, errors = await open_page(browser)

    # The queue page: each queue's pending, delayed and running counts, its tasks resolved in
    # the last hour and their rate a minute (2 / 60), and the depth chart.
    await page.goto(f"{coordinator.url}/ui/", timeout=WAIT_MS)
    builder = page.locator('tr[data-queue="dash/builder"]')
    linter = page.locator('tr[data-queue="dash/linter"]')
    await expect(builder.locator("td.pending")).to_have_text("0", timeout=WAIT_MS)
    await expect(builder.locator("td.running")).to_have_text("1", timeout=WAIT_MS)
    for cell, text in (("completed", "1"), ("failed", "1"), ("exception", "0")):
        await expect(builder.locator(f"td.{cell}")).to_have_text(text, timeout=WAIT_MS)
    await expect(builder.locator("td.throughput")).to_have_text("0.03", timeout=WAIT_MS)
    await expect(linter.locator("td.completed")).to_have_text("0", timeout=WAIT_MS)
    await expect(linter.locator("td.limits")).to_have_text("", timeout=WAIT_MS)
    await expect(linter.locator("td.pending")).to_have_text("3", timeout=WAIT_MS)
    await expect(linter.locator("td.delayed")).to_have_text("0", timeout=WAIT_MS)
    await expect(page.locator("svg.chart polyline.pending")).to_have_count(1, timeout=WAIT_MS)
    if os.environ.get("QC_SCREENSHOT") == "1":
        for n in range(6):  # some movement on the chart, in another queue
            await page.wait_for_timeout(3_000)
            if n < 4:
                other = {"worker_type": "prober", "taskGroupId": slugid.nice()}
                await seed.claim(await seed.create(f"probe-{n}", **other))
                await seed.create(f"probe-{n}-next", **other)
        await page.screenshot(path=str(SCREENSHOT), full_page=True)

    # The group's task list, narrowed by the state filter.
    await page.goto(f"{coordinator.url}/ui/#/tasks?group={seed.group}", timeout=WAIT_MS)
    rows = page.locator("#tasks tbody tr")
    await expect(rows).to_have_count(7, timeout=WAIT_MS)
    await page.select_option("#state-filter", "pending")
    await expect(rows).to_have_count(3, timeout=WAIT_MS)
    await expect(page.locator('#tasks tr[data-task="' + ids["lint-1"] + '"]')).to_be_visible()
    await page.select_option("#state-filter", "unscheduled")
    await expect(rows).to_have_count(1, timeout=WAIT_MS)

    # A queue's page lists its tasks of every state through the management API; a failed
    # one links to its log on the task page.
    await page.goto(f"{coordinator.url}/ui/#/tasks?queue=dash%2Fbuilder", timeout=WAIT_MS)
    await expect(rows).to_have_count(4, timeout=WAIT_MS)  # and the unscheduled deploy
    failed = page.locator(f'#tasks tr[data-task="{ids["build-b"]}"]')
    await expect(failed).to_have_attribute("data-state", "failed", timeout=WAIT_MS)
    await expect(failed.locator("a.log-link")).to_have_attribute(
        "href", f"#/task/{ids['build-b']}", timeout=WAIT_MS
    )
    await page.select_option("#state-filter", "running")
    await expect(rows).to_have_count(1, timeout=WAIT_MS)
    await expect(rows.first).to_have_attribute("data-task", ids["test-running"], timeout=WAIT_MS)

    # The group page's progress bar.
    await page.goto(f"{coordinator.url}/ui/#/group/{seed.group}", timeout=WAIT_MS)
    await expect(page.locator("#progress .segment")).to_have_count(5, timeout=WAIT_MS)

    # A task page shows its runs; without credentials cancel is disabled and says why.
    await page.goto(f"{coordinator.url}/ui/#/task/{ids['build-b']}", timeout=WAIT_MS)
    await expect(page.locator('#runs li[data-run="0"]')).to_have_attribute(
        "data-state", "failed", timeout=WAIT_MS
    )
    await page.goto(f"{coordinator.url}/ui/#/task/{ids['lint-2']}", timeout=WAIT_MS)
    cancel = page.locator("button.action.cancel")
    await expect(cancel).to_be_disabled(timeout=WAIT_MS)
    await expect(cancel).to_have_attribute("title", re.compile("Sign in"), timeout=WAIT_MS)
    await expect(page.locator("#why-disabled")).to_contain_text("Sign in", timeout=WAIT_MS)

    # With the root client's credentials, kept for this browser session, cancel works.
    await sign_in(page, creds["root"])
    await expect(cancel).to_be_enabled(timeout=WAIT_MS)
    await cancel.click()
    await expect(page.locator('#runs li[data-run="0"]')).to_have_attribute(
        "data-state", "exception", timeout=WAIT_MS
    )
    status = await coordinator.call("GET", f"/task/{ids['lint-2']}/status")
    assert status.body["status"]["state"] == "exception"
    assert await page.evaluate("Object.keys(sessionStorage)") == ["queue-dashboard-credentials"]
    assert not errors, errors
    print(f"dashboard test took {time.monotonic() - started:.1f} s")


LOG_LINES = [f"log line {n:05}: compiling module {n % 97}" for n in range(8_000)]
"""About 320 KB: more than the 200 KB the page shows inline."""
REPORT = "all 12 checks passed"


async def test_task_page_shows_each_runs_artifacts_and_its_log(
    start_coordinator: StartCoordinator, browser: Browser, tmp_path: Path
) -> None:
    clients_file = tmp_path / "clients.json"
    creds = write_clients(clients_file, {})
    coordinator = await start_coordinator(auth_enabled=True, clients_file=clients_file)
    seed = Seed(coordinator, creds["root"])
    task_id = await seed.create("build-with-artifacts")
    # run 0 uploads its log and is cut short (worker-shutdown: retried at once as run 1)
    await seed.claim(task_id)
    await seed.upload(
        task_id, 0, LOG, b"run 0 started\nrun 0 shut down\n", "text/plain", gzipped=True
    )
    await seed.queue.reportException(task_id, "0", {"reason": "worker-shutdown"})
    await seed.claim(task_id, 1)
    log_text = "\n".join(LOG_LINES) + "\n"
    await seed.upload(task_id, 1, LOG, log_text.encode(), "text/plain", gzipped=True)
    await seed.upload(task_id, 1, "private/report.txt", REPORT.encode(), "text/plain")
    missing = {
        "storageType": "error",
        "expires": (await seed.queue.task(task_id))["expires"],
        "reason": "file-missing-on-worker",
        "message": "no such file: dist/app.tar.gz",
    }
    await seed.queue.createArtifact(task_id, "1", "public/app.tar.gz", missing)
    await seed.queue.reportCompleted(task_id, "1")

    page, errors = await open_page(browser, height=900)

    # Anonymous callers may read public/ artifacts but, by default, not list them.
    await page.goto(f"{coordinator.url}/ui/#/task/{task_id}", timeout=WAIT_MS)
    await expect(page.locator("#why-no-artifacts")).to_contain_text("Sign in", timeout=WAIT_MS)

    # The operator opens listings to everybody (the clients file is re-read on change).
    replace_anonymous_scopes(
        clients_file, ["queue:get-artifact:public/*", "queue:list-artifacts:*"]
    )
    await page.reload(timeout=WAIT_MS)

    # The latest run's artifacts: the log linked, the private report named but not linked
    # (and why), the error artifact with its reason and message.
    rows = page.locator("#artifacts tbody tr")
    await expect(rows).to_have_count(3, timeout=WAIT_MS)
    await expect(page.locator("#artifact-run")).to_have_value("1", timeout=WAIT_MS)
    log_row = page.locator(f'#artifacts tr[data-name="{LOG}"]')
    await expect(log_row.locator("a.artifact-link")).to_have_text(LOG, timeout=WAIT_MS)
    await expect(log_row).to_contain_text("text/plain", timeout=WAIT_MS)
    await expect(log_row).to_contain_text("s3", timeout=WAIT_MS)
    report_row = page.locator('#artifacts tr[data-name="private/report.txt"]')
    await expect(report_row.locator("a")).to_have_count(0, timeout=WAIT_MS)
    await expect(report_row.locator(".why-no-link")).to_contain_text("Sign in", timeout=WAIT_MS)
    error_row = page.locator('#artifacts tr[data-name="public/app.tar.gz"]')
    await expect(error_row.locator(".artifact-error")).to_have_text(
        "file-missing-on-worker: no such file: dist/app.tar.gz", timeout=WAIT_MS
    )
    await expect(error_row).to_contain_text("error", timeout=WAIT_MS)

    # The log inline: its last 200 KB (gzip decoded by the browser), from a whole line.
    log = page.locator("#log")
    await expect(log).to_contain_text(LOG_LINES[-1], timeout=WAIT_MS)
    shown = await log.text_content()
    assert shown is not None and LOG_LINES[0] not in shown
    assert shown.splitlines()[0] in LOG_LINES
    await expect(page.locator("#log-note")).to_contain_text("The last 200.0 KB of", timeout=WAIT_MS)
    whole = await page.locator("#whole-log").get_attribute("href")
    assert whole is not None
    whole_log = await browser.new_page()
    await whole_log.goto(whole, timeout=WAIT_MS)
    await expect(whole_log.locator("body")).to_contain_text(LOG_LINES[0], timeout=WAIT_MS)
    await whole_log.close()

    # Signed in, the private report gets a signed link that the browser can follow.
    await sign_in(page, creds["root"])
    report_link = report_row.locator("a.artifact-link")
    await expect(report_link).to_have_text("private/report.txt", timeout=WAIT_MS)
    href = await report_link.get_attribute("href")
    assert href is not None and "bewit=" in href
    report = await browser.new_page()
    await report.goto(href, timeout=WAIT_MS)
    await expect(report.locator("body")).to_have_text(REPORT, timeout=WAIT_MS)
    await report.close()

    # An earlier run: its own artifacts and log.
    await page.select_option("#artifact-run", "0")
    await expect(rows).to_have_count(1, timeout=WAIT_MS)
    await expect(log).to_have_text("run 0 started\nrun 0 shut down\n", timeout=WAIT_MS)
    await expect(page.locator("#log-note")).not_to_contain_text("The last", timeout=WAIT_MS)
    assert not errors, errors


async def test_task_page_shows_the_running_runs_progress(
    start_coordinator: StartCoordinator, browser: Browser, tmp_path: Path
) -> None:
    creds = write_clients(tmp_path / "clients.json", {})
    coordinator = await start_coordinator(auth_enabled=True, clients_file=tmp_path / "clients.json")
    seed = Seed(coordinator, creds["root"])
    task_id = await seed.create("build-with-progress")
    await seed.claim(task_id)
    reported = await call(
        coordinator.session,
        "POST",
        f"{coordinator.api}/task/{task_id}/runs/0/progress",
        {"fraction": 0.4, "message": "linking"},
        credentials=Credentials.from_json(creds["root"]),
    )
    assert reported.status == 200, reported.body

    page, errors = await open_page(browser)
    await page.goto(f"{coordinator.url}/ui/#/task/{task_id}", timeout=WAIT_MS)
    run = page.locator('#progress [data-run="0"]')
    await expect(run).to_contain_text("40% linking", timeout=WAIT_MS)
    await expect(run.locator("progress")).to_have_attribute("value", "0.4", timeout=WAIT_MS)
    # Resolved, the run shows no progress.
    await seed.queue.reportCompleted(task_id, "0")
    await page.reload(timeout=WAIT_MS)
    await expect(page.locator("#runs li[data-state=completed]")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator("#progress")).to_have_count(0, timeout=WAIT_MS)
    assert not errors, errors


async def test_cancel_on_a_task_page_stops_the_running_handler(
    start_coordinator: StartCoordinator, browser: Browser, tmp_path: Path
) -> None:
    """The task page's cancel reaches a worker's handler at once, long before its claim would
    be renewed (20 minutes here), and the worker reports nothing for the run."""
    creds = write_clients(tmp_path / "clients.json", {})
    coordinator = await start_coordinator(auth_enabled=True, clients_file=tmp_path / "clients.json")
    seed = Seed(coordinator, creds["root"])
    task_id = await seed.create("long-build")
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handle(run: TaskRun) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = Worker(
        handler=handle,
        root_url=coordinator.url,
        credentials=creds["root"],
        provisioner_id="dash",
        worker_type="builder",
        worker_group="dash",
        worker_id="w1",
        claim_work=True,
        handle_signals=False,
    )
    async with running(worker):
        await asyncio.wait_for(started.wait(), timeout=30)
        page, errors = await open_page(browser)
        await page.goto(f"{coordinator.url}/ui/#/task/{task_id}", timeout=WAIT_MS)
        await expect(page.locator('#runs li[data-run="0"]')).to_have_attribute(
            "data-state", "running", timeout=WAIT_MS
        )
        await sign_in(page, creds["root"])
        await page.locator("button.action.cancel").click()
        await asyncio.wait_for(cancelled.wait(), timeout=10)
        await expect(page.locator('#runs li[data-run="0"]')).to_have_attribute(
            "data-state", "exception", timeout=WAIT_MS
        )
    status = (await seed.queue.status(task_id))["status"]
    assert [(run["state"], run["reasonResolved"]) for run in status["runs"]] == [
        ("exception", "canceled")
    ]
    assert await seed.queue.listArtifacts(task_id, "0") == {"artifacts": []}
    assert not errors, errors


FAILED_LOG = "building...\nTraceback (most recent call last):\nRuntimeError: the build broke\n"


async def test_a_failed_tasks_log_is_open_to_everybody_on_the_dev_instance(
    start_coordinator: StartCoordinator, browser: Browser, tmp_path: Path
) -> None:
    """The clients file scripts/dev creates (DEV_ANONYMOUS_SCOPES): a signed-out visitor sees
    a failed task's artifacts and log."""
    clients_file = tmp_path / "clients.json"
    root = ensure_root_client(clients_file, anonymous_scopes=DEV_ANONYMOUS_SCOPES)
    coordinator = await start_coordinator(auth_enabled=True, clients_file=clients_file)
    seed = Seed(coordinator, {"clientId": root.client_id, "accessToken": root.access_token})
    task_id = await seed.failed_with_log("build-that-fails", FAILED_LOG, gzipped=True)

    page, errors = await open_page(browser)
    await page.goto(f"{coordinator.url}/ui/#/task/{task_id}", timeout=WAIT_MS)
    await expect(page.locator('#runs li[data-run="0"]')).to_have_attribute(
        "data-state", "failed", timeout=WAIT_MS
    )
    await expect(page.locator("#log")).to_have_text(FAILED_LOG, timeout=WAIT_MS)
    log_row = page.locator(f'#artifacts tr[data-name="{LOG}"]')
    await expect(log_row.locator("a.artifact-link")).to_have_text(LOG, timeout=WAIT_MS)
    await expect(page.locator(".error")).to_have_count(0, timeout=WAIT_MS)
    await expect(page.locator("#why-no-artifacts")).to_have_count(0, timeout=WAIT_MS)
    assert await page.evaluate("Object.keys(sessionStorage)") == []
    assert not errors, errors


async def expect_readable(error: Locator, code: str, scope: str) -> None:
    """An API error shown as text: its code, the scope in a block (<pre>), no markdown."""
    await expect(error).to_contain_text(f"{code}: ", timeout=WAIT_MS)
    await expect(error.locator("pre", has_text=scope).first).to_be_visible(timeout=WAIT_MS)
    await expect(error).not_to_contain_text("`", timeout=WAIT_MS)


async def test_api_errors_read_as_text_without_markdown_fences(
    start_coordinator: StartCoordinator, browser: Browser, tmp_path: Path
) -> None:
    """Taskcluster's error messages put scopes in ``` fences: the page shows them as blocks
    of text, for a refused client call (the artifacts listing) and a refused log fetch."""
    clients_file = tmp_path / "clients.json"
    creds = write_clients(clients_file, {"reader": ["queue:get-artifact:public/*"]})
    coordinator = await start_coordinator(auth_enabled=True, clients_file=clients_file)
    seed = Seed(coordinator, creds["root"])
    task_id = await seed.failed_with_log("build-that-fails", FAILED_LOG)
    listing_scope = f"queue:list-artifacts:{task_id}:0"

    page, errors = await open_page(browser)

    # Signed out, under the default anonymousScopes: listing the artifacts needs credentials.
    await page.goto(f"{coordinator.url}/ui/#/task/{task_id}", timeout=WAIT_MS)
    listing = page.locator("#artifacts-box .error")
    await expect_readable(listing, "AuthenticationFailed", listing_scope)

    # Signed in as a client without the scope: what it lacks, has and needs, each a block.
    await sign_in(page, creds["reader"])
    await expect_readable(listing, "InsufficientScopes", listing_scope)
    await expect(listing.locator("pre", has_text="queue:get-artifact:public/*")).to_have_count(1)
    await expect(listing).to_contain_text("You have the scopes:", timeout=WAIT_MS)
    # The box holds the error and nothing after it (the sign-in hint is for signed-out users).
    await expect(page.locator("#artifacts-box")).to_have_text(
        re.compile(rf"^InsufficientScopes: .*{re.escape(listing_scope)}$", re.DOTALL),
        timeout=WAIT_MS,
    )

    # Listing open to everybody but reading not: the log fetch's refusal, signed out.
    replace_anonymous_scopes(clients_file, ["queue:list-artifacts:*"])
    await page.click("#sign-out")
    await page.reload(timeout=WAIT_MS)
    await expect_readable(
        page.locator("#log-box .error"), "AuthenticationFailed", f"queue:get-artifact:{LOG}"
    )
    assert not errors, errors


async def test_an_operator_drives_a_queue_from_its_page(
    start_coordinator: StartCoordinator, browser: Browser, tmp_path: Path
) -> None:
    """The queue page: counts by state, pause and resume, limits (and both on the overview), a
    task list paged on the server, rerun and cancel of the filtered tasks after a
    confirmation; the workers page."""
    coordinator, creds = await start_secured(start_coordinator, tmp_path / "clients.json", {})
    seed = Seed(coordinator, creds["root"])
    failed = []
    for n in range(3):
        task_id = await seed.create(f"flaky-{n}", worker_type="ops", retries=0)
        await seed.claim(task_id)
        await seed.queue.reportFailed(task_id, "0")
        failed.append(task_id)
    for n in range(52):  # more than one page of 50
        await seed.create(f"waiting-{n}", worker_type="ops")
    page, errors = await open_page(browser, height=900)
    page.on("dialog", lambda dialog: dialog.accept())

    await page.goto(f"{coordinator.url}/ui/", timeout=WAIT_MS)
    await page.locator('tr[data-queue="dash/ops"] a').click()
    counts = page.locator("#state-counts")
    await expect(counts.locator("td.failed")).to_have_text("3", timeout=WAIT_MS)
    await expect(counts.locator("td.pending")).to_have_text("52", timeout=WAIT_MS)
    rows = page.locator("#tasks tbody tr")
    await expect(rows).to_have_count(50, timeout=WAIT_MS)
    await page.click("#next-page")
    await expect(rows).to_have_count(5, timeout=WAIT_MS)
    await page.click("#previous-page")
    await expect(rows).to_have_count(50, timeout=WAIT_MS)
    await expect(page.locator("button.action.pause")).to_be_disabled(timeout=WAIT_MS)

    await sign_in(page, creds["root"])
    await page.fill("#pause-reason", "downstream outage")
    await page.click("button.action.pause")
    await expect(page.locator("#pause-state")).to_contain_text("downstream outage", timeout=WAIT_MS)
    queue = await coordinator.ok("GET", "/task-queues/dash%2Fops")
    assert queue["paused"]["reason"] == "downstream outage"
    await page.fill("#max-running", "2")
    await page.fill("#max-claims-per-second", "5")
    await page.fill("#max-running-per-key", "1")
    await page.click("button.action.limits")
    await expect(page.locator("#action-result")).to_have_text("Limits set.", timeout=WAIT_MS)
    queue = await coordinator.ok("GET", "/task-queues/dash%2Fops")
    assert queue["limits"] == {"maxRunning": 2, "maxClaimsPerSecond": 5, "maxRunningPerKey": 1}
    await expect(page.locator("#max-running")).to_have_value("2", timeout=WAIT_MS)
    if os.environ.get("QC_SCREENSHOT") == "1":
        await page.screenshot(path=str(QUEUE_SCREENSHOT))

    # The overview: the queue paused (why, on hover), every limit it has, and its 3 failures
    # of the last hour, 3 / 60 a minute.
    await page.goto(f"{coordinator.url}/ui/", timeout=WAIT_MS)
    ops = page.locator('tr[data-queue="dash/ops"]')
    await expect(ops.locator("td.failed")).to_have_text("3", timeout=WAIT_MS)
    await expect(ops.locator("td.completed")).to_have_text("0", timeout=WAIT_MS)
    await expect(ops.locator("td.throughput")).to_have_text("0.05", timeout=WAIT_MS)
    await expect(ops.locator("td.paused-state .state.paused")).to_have_attribute(
        "title", re.compile("downstream outage"), timeout=WAIT_MS
    )
    await expect(ops.locator("td.limits .limit")).to_have_text(
        ["maxRunning 2", "maxClaimsPerSecond 5", "maxRunningPerKey 1"], timeout=WAIT_MS
    )
    await ops.locator("a").click()
    await page.click("button.action.resume")
    await expect(page.locator("#pause-state")).to_have_text(
        "Claims are handed out.", timeout=WAIT_MS
    )

    # The failed tasks, filtered on the server, then all of them rerun after a confirmation.
    await page.select_option("#state-filter", "failed")
    await expect(rows).to_have_count(3, timeout=WAIT_MS)
    await page.click("button.action.bulk-rerun")
    await expect(page.locator("#action-result")).to_have_text(
        "Rerun all: 3 tasks.", timeout=WAIT_MS
    )
    await expect(rows).to_have_count(0, timeout=WAIT_MS)
    for task_id in failed:
        status = (await coordinator.ok("GET", f"/task/{task_id}/status"))["status"]
        assert [run["reasonCreated"] for run in status["runs"]] == ["scheduled", "rerun"]
    await page.select_option("#state-filter", "pending")
    await page.click("button.action.bulk-cancel")
    await expect(page.locator("#action-result")).to_have_text(
        "Cancel all: 55 tasks.", timeout=WAIT_MS
    )
    await expect(counts.locator("td.exception")).to_have_text("55", timeout=WAIT_MS)

    # The workers page: the worker that claimed, with its recent tasks.
    await page.click("text=Workers and their recent tasks")
    worker = page.locator('#workers tr[data-worker="dash/w1"]')
    await expect(worker.locator("td.recent a")).to_have_count(3, timeout=WAIT_MS)
    await worker.locator("td.recent a").first.click()
    await expect(page.locator("h1")).to_contain_text(failed[-1], timeout=WAIT_MS)
    assert not errors, errors
