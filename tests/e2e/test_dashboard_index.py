"""The dashboard's index page (docs/index-service.md) in headless Chromium: browsing from the
top level down the namespaces to the tasks indexed there, and back up by the path's links."""

from __future__ import annotations

from pathlib import Path

import pytest
import slugid
import taskcluster
from playwright.async_api import Browser, expect

from tests.fixtures.browser import WAIT_MS, needs_chromium, open_page, sign_in
from tests.fixtures.clients import Index, start_secured
from tests.fixtures.coordinator import StartCoordinator

pytestmark = [needs_chromium, pytest.mark.timeout(120)]


async def test_the_index_page_browses_namespaces_down_to_their_tasks(
    start_coordinator: StartCoordinator, browser: Browser, tmp_path: Path
) -> None:
    coordinator, creds = await start_secured(start_coordinator, tmp_path / "clients.json", {})
    index = Index("aio", coordinator.url, creds["root"])
    latest, other = slugid.nice(), slugid.nice()
    for path, task_id, rank in (
        ("project.app.v1.latest", latest, 4),
        ("project.app.v1.rev-1", other, 0),
        ("project.docs.latest", other, 0),
    ):
        await index.insertTask(
            path,
            {
                "taskId": task_id,
                "rank": rank,
                "data": {"rev": path},
                "expires": taskcluster.fromNowJSON("1 day"),
            },
        )
    page, errors = await open_page(browser)

    # Without credentials the page says why it shows nothing.
    await page.goto(f"{coordinator.url}/ui/#/index", timeout=WAIT_MS)
    await expect(page.locator("div.error")).to_contain_text("AuthenticationFailed")
    await sign_in(page, creds["root"])
    await page.click("a[href='#/index']")
    await expect(page.locator("#namespaces tr[data-namespace]")).to_have_count(1)
    await page.click("#namespaces tr[data-namespace='project'] a")
    names = page.locator("#namespaces tr[data-namespace] a")
    await expect(names).to_have_text(["app", "docs"])
    await names.first.click()
    await page.click("#namespaces tr[data-namespace='project.app.v1'] a")
    rows = page.locator("#indexed-tasks tr[data-path]")
    await expect(rows).to_have_count(2)
    first = page.locator("#indexed-tasks tr[data-path='project.app.v1.latest'] td")
    await expect(first.nth(1)).to_have_text(latest)
    await expect(first.nth(2)).to_have_text("4")
    await expect(first.nth(4)).to_have_text('{"rev":"project.app.v1.latest"}')

    # The path above is links: back to project, whose one task-less level lists its namespaces.
    await page.click("#index-path a:text('project')")
    await expect(names).to_have_text(["app", "docs"])
    await expect(page.locator("#indexed-tasks")).to_have_count(0)
    await page.goto(f"{coordinator.url}/ui/#/index/nothing.here", timeout=WAIT_MS)
    await expect(page.locator("#index-empty")).to_contain_text("Nothing is indexed under")
    # A task's link leads to its page.
    await page.goto(f"{coordinator.url}/ui/#/index/project.docs", timeout=WAIT_MS)
    await page.click(f"#indexed-tasks a:text('{other}')")
    await expect(page).to_have_url(f"{coordinator.url}/ui/#/task/{other}")
    assert not errors, errors
