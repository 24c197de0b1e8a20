"""The dashboard's hooks page (docs/hooks.md) in headless Chromium: the hooks with their schedule
and next fire, a trigger with a payload, and the last fire it leaves."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.fixtures.browser import WAIT_MS, needs_chromium, open_page, sign_in
from tests.fixtures.clients import Hooks, Queue, start_secured
from tests.fixtures.coordinator import StartCoordinator

pytestmark = [needs_chromium, pytest.mark.timeout(120)]

TEMPLATE = {
    "provisionerId": "dash",
    "workerType": "hooked",
    "payload": {"colour": "${payload.colour}"},
    "metadata": {
        "name": "hooked",
        "description": "made by a hook",
        "owner": "me@example.com",
        "source": "https://example.com/hooks",
    },
}


async def test_the_hooks_page_shows_schedules_and_fires_a_hook(
    start_coordinator: StartCoordinator, browser: Browser, tmp_path: Path
) -> None:
    coordinator, creds = await start_secured(start_coordinator, tmp_path / "clients.json", {})
    hooks = Hooks("aio", coordinator.url, creds["root"])
    await hooks.createHook(
        "dash",
        "nightly",
        {
            "metadata": {"name": "nightly build", "description": "", "owner": "me@example.com"},
            "schedule": ["0 0 3 * * *"],
            "task": TEMPLATE,
            "triggerSchema": {"type": "object", "required": ["colour"]},
        },
    )
    page, errors = await open_page(browser)

    # Without credentials the page says why it shows nothing.
    await page.goto(f"{coordinator.url}/ui/#/hooks", timeout=WAIT_MS)
    await expect(page.locator("div.error")).to_contain_text("AuthenticationFailed")
    await sign_in(page, creds["root"])
    await page.click("a[href='#/hooks']")
    row = page.locator('#hooks tr[data-hook="dash/nightly"]')
    await expect(row.locator("td.schedule")).to_have_text("0 0 3 * * *")
    next_fire = (await hooks.getHookStatus("dash", "nightly"))["nextScheduledDate"]
    assert next_fire.endswith("T03:00:00.000Z")
    await expect(row.locator("td.next")).not_to_have_text("—")
    await expect(row.locator("td.last")).to_have_text("never")

    # A payload the triggerSchema refuses is shown as the 400 it is; a good one fires.
    await row.locator("input[name=payload]").fill("{}")
    await row.locator("button.trigger").click()
    await expect(page.locator("#trigger-result")).to_contain_text("payload")
    await row.locator("input[name=payload]").fill('{"colour": "red"}')
    await row.locator("button.trigger").click()
    created = page.locator("#trigger-result a")
    await expect(created).to_have_count(1)
    task_id = await created.inner_text()
    assert (await Queue("aio", coordinator.url).task(task_id))["payload"] == {"colour": "red"}
    await expect(row.locator("td.last")).to_contain_text(task_id)
    await expect(row.locator("td.last .state")).to_have_text("success")
    assert not errors, errors
