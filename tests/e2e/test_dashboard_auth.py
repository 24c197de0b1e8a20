"""The dashboard's clients and roles page (docs/auth.md) in headless Chromium, checked with the
official Python ``Auth`` client: a role and a client made from the page, the accessToken shown
once and working, disable and enable, a reset, a role's change reaching the client's
expansion, the expand box, deletes, and the API's refusals shown as text. No accessToken ever
reaches the URL, localStorage or the console."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from tests.fixtures.browser import WAIT_MS, needs_chromium, open_page, sign_in
from tests.fixtures.clients import Auth, Credentials, rejected, start_secured
from tests.fixtures.coordinator import StartCoordinator

pytestmark = [needs_chromium, pytest.mark.timeout(180)]

ROLE = "project:dash"
ROLE_SCOPES = ["queue:create-task:highest:dash/*", "secrets:get:dash/*"]
CLIENT = "dash/ci"
CLIENT_SCOPES = [f"assume:{ROLE}", "auth:current-scopes"]


async def current_scopes(url: str, credentials: Credentials) -> list[str]:
    """What the credentials hold, through the official client (raises on a 401)."""
    scopes: list[str] = (await Auth("aio", url, credentials).currentScopes())["scopes"]
    return scopes


async def fill_lines(page: Page, selector: str, lines: list[str]) -> None:
    await page.fill(selector, "\n".join(lines))


async def shown_token(page: Page) -> str:
    """The accessToken the client's page shows once, with the note that it will not again."""
    box = page.locator("#new-token")
    await expect(box).to_contain_text("it will not be shown again", timeout=WAIT_MS)
    token = await page.locator("#access-token").inner_text()
    assert len(token.strip()) == 44, token
    return token.strip()


async def expect_scopes(page: Page, list_id: str, present: list[str], absent: list[str]) -> None:
    items = page.locator(f"#{list_id} li")
    for scope in present:
        await expect(items.filter(has_text=scope)).to_have_count(1, timeout=WAIT_MS)
    for scope in absent:
        await expect(items.filter(has_text=scope)).to_have_count(0, timeout=WAIT_MS)


async def test_clients_and_roles_are_managed_from_the_dashboard(
    start_coordinator: StartCoordinator, browser: Browser, tmp_path: Path
) -> None:
    coordinator, creds = await start_secured(start_coordinator, tmp_path / "clients.json", {})
    url = coordinator.url
    root = Auth("aio", url, creds["root"])
    page, errors = await open_page(browser, height=900)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    addresses: list[str] = []
    page.on("framenavigated", lambda frame: addresses.append(frame.url))
    page.on("dialog", lambda dialog: dialog.accept())

    # Signed out, the API's 401 is what the page shows.
    await page.goto(f"{url}/ui/#/", timeout=WAIT_MS)
    await page.click("nav a[href='#/clients']")
    await expect(page.locator("div.error")).to_contain_text("AuthenticationFailed", timeout=WAIT_MS)
    await sign_in(page, creds["root"])
    await expect(page.locator("#app")).to_contain_text(
        "No client has been created yet.", timeout=WAIT_MS
    )

    # A role, made from the roles tab; its page shows what it grants and who made it.
    await page.click(".tabs a[href='#/roles']")
    await page.click("#create-role-box summary")
    await page.fill("#create-role-id", ROLE)
    await page.fill("#create-role-description", "what the dash CI may do")
    await fill_lines(page, "#create-role-scopes", ROLE_SCOPES)
    await page.click("#create-role button[type=submit]")
    await expect(page.locator("#action-result")).to_have_text(
        f"Created role {ROLE}.", timeout=WAIT_MS
    )
    await expect(page.locator("h1")).to_contain_text(ROLE, timeout=WAIT_MS)
    await expect_scopes(page, "expanded-scopes", ROLE_SCOPES, [])
    await expect(page.locator('#history tr[data-action="created"]')).to_contain_text(
        "root", timeout=WAIT_MS
    )

    # A client holding the role, made from the clients tab: its accessToken is shown once.
    await page.click(".tabs a[href='#/clients']")
    await page.click("#create-client-box summary")
    await page.fill("#create-client-id", CLIENT)
    await page.fill("#create-client-description", "the dash CI")
    await fill_lines(page, "#create-client-scopes", ["", *CLIENT_SCOPES, "  "])
    await page.check("#create-client-delete-on-expiration")
    await page.click("#create-client button[type=submit]")
    await expect(page.locator("#action-result")).to_have_text(
        f"Created client {CLIENT}.", timeout=WAIT_MS
    )
    token = await shown_token(page)
    client_creds: Credentials = {"clientId": CLIENT, "accessToken": token}
    held = await current_scopes(url, client_creds)
    assert set(ROLE_SCOPES + CLIENT_SCOPES) <= set(held), held
    await expect_scopes(page, "scopes", CLIENT_SCOPES, ROLE_SCOPES)
    await expect_scopes(page, "expanded-scopes", ROLE_SCOPES + CLIENT_SCOPES, [])
    await expect(page.locator("dd.fact-deleteOnExpiration")).to_have_text("yes", timeout=WAIT_MS)
    await expect(page.locator("dd.fact-disabled")).to_have_text("no", timeout=WAIT_MS)
    await expect(page.locator("dd.fact-description")).to_have_text("the dash CI", timeout=WAIT_MS)
    made = await root.client(CLIENT)
    assert made["deleteOnExpiration"] is True and made["scopes"] == CLIENT_SCOPES
    # Drawn again, the page no longer has it.
    await page.reload(timeout=WAIT_MS)
    await expect(page.locator("dd.fact-disabled")).to_have_text("no", timeout=WAIT_MS)
    await expect(page.locator("#new-token")).to_have_count(0, timeout=WAIT_MS)

    # The list: the client with its expiry and state, filtered by prefix and paged.
    await page.click(".tabs a[href='#/clients']")
    row = page.locator(f'#clients tr[data-client="{CLIENT}"]')
    await expect(row.locator("td.disabled")).to_have_text("no", timeout=WAIT_MS)
    await expect(row.locator("td.expires")).not_to_have_text("—", timeout=WAIT_MS)
    await asyncio.gather(
        *(
            root.createClient(
                f"bulk/{n:02}",
                {"description": "bulk", "expires": made["expires"], "scopes": []},
            )
            for n in range(51)
        )
    )
    await page.fill("#prefix", "bulk/")
    await page.click("#client-filter button")
    rows = page.locator("#clients tbody tr")
    await expect(rows).to_have_count(50, timeout=WAIT_MS)
    await expect(rows.first).to_have_attribute("data-client", "bulk/00", timeout=WAIT_MS)
    await page.click("#next-page")
    await expect(rows).to_have_count(1, timeout=WAIT_MS)
    await expect(rows.first).to_have_attribute("data-client", "bulk/50", timeout=WAIT_MS)
    await page.click("#previous-page")
    await expect(rows).to_have_count(50, timeout=WAIT_MS)
    await page.fill("#prefix", "dash/")
    await page.click("#client-filter button")
    await expect(rows).to_have_count(1, timeout=WAIT_MS)
    await row.locator("a").click()

    # Disabled, its credentials get 401; enabled, they work again.
    await page.click("button.action.disable")
    await expect(page.locator("#action-result")).to_contain_text("Disabled", timeout=WAIT_MS)
    await expect(page.locator("dd.fact-disabled")).to_have_text("yes", timeout=WAIT_MS)
    status, body = await rejected(current_scopes(url, client_creds))
    assert status == 401 and "disabled" in body["message"], body
    await page.click("button.action.enable")
    await expect(page.locator("#action-result")).to_contain_text("Enabled", timeout=WAIT_MS)
    await expect(page.locator("dd.fact-disabled")).to_have_text("no", timeout=WAIT_MS)
    assert set(ROLE_SCOPES) <= set(await current_scopes(url, client_creds))

    # A reset shows the new accessToken once; the old one gets 401.
    await page.click("button.action.reset")
    await expect(page.locator("#action-result")).to_contain_text(
        "A new accessToken", timeout=WAIT_MS
    )
    new_token = await shown_token(page)
    assert new_token != token
    status, _ = await rejected(current_scopes(url, client_creds))
    assert status == 401
    client_creds = {"clientId": CLIENT, "accessToken": new_token}
    assert set(ROLE_SCOPES) <= set(await current_scopes(url, client_creds))
    await expect(page.locator("dd.fact-lastRotated")).not_to_have_text("—", timeout=WAIT_MS)

    # The client's own edit.
    await page.click("#edit-client-box summary")
    await page.fill("#edit-client-description", "the dash CI, edited")
    await page.click("#edit-client button[type=submit]")
    await expect(page.locator("#action-result")).to_have_text("Saved.", timeout=WAIT_MS)
    await expect(page.locator("dd.fact-description")).to_have_text(
        "the dash CI, edited", timeout=WAIT_MS
    )
    edited = await root.client(CLIENT)
    assert edited["expires"] == made["expires"] and edited["scopes"] == CLIENT_SCOPES
    history = page.locator("#history tbody tr")
    await expect(history).to_have_count(5, timeout=WAIT_MS)
    assert await history.evaluate_all("rows => rows.map(r => r.dataset.action)") == [
        "created",
        "client disabled",
        "client enabled",
        "access token reset",
        "updated",
    ]

    # A role's new scopes reach the client's expansion.
    new_scopes = ["queue:create-task:highest:dash/*", "index:insert-task:dash.*"]
    await page.goto(f"{url}/ui/#/roles", timeout=WAIT_MS)
    role_row = page.locator(f'#roles tr[data-role="{ROLE}"]')
    await expect(role_row.locator("td.scope-count")).to_have_text("2", timeout=WAIT_MS)
    await role_row.locator("a").click()
    await page.click("#edit-role-box summary")
    await expect(page.locator("#edit-role-scopes")).to_have_value(
        "\n".join(ROLE_SCOPES), timeout=WAIT_MS
    )
    await fill_lines(page, "#edit-role-scopes", new_scopes)
    await page.click("#edit-role button[type=submit]")
    await expect(page.locator("#action-result")).to_have_text("Saved.", timeout=WAIT_MS)
    await expect_scopes(page, "scopes", new_scopes, ["secrets:get:dash/*"])
    await expect(page.locator('#history tr[data-action="updated"]')).to_have_count(
        1, timeout=WAIT_MS
    )
    await page.goto(f"{url}/ui/#/clients/{CLIENT.replace('/', '%2F')}", timeout=WAIT_MS)
    await expect_scopes(page, "expanded-scopes", new_scopes, ["secrets:get:dash/*"])
    held = await current_scopes(url, client_creds)
    assert "index:insert-task:dash.*" in held and "secrets:get:dash/*" not in held, held

    # The expand box: what scopes grant through the roles.
    await page.click(".tabs a[href='#/roles']")
    await page.fill("#expand-input", f"assume:{ROLE}\nqueue:ping")
    await page.click("#expand button[type=submit]")
    await expect_scopes(page, "expanded", [*new_scopes, f"assume:{ROLE}", "queue:ping"], [])

    # The API's refusal (a scope ending in **) is shown as text, and nothing is made.
    await page.click(".tabs a[href='#/clients']")
    await page.click("#create-client-box summary")
    await page.fill("#create-client-id", "dash/greedy")
    await fill_lines(page, "#create-client-scopes", ["queue:**"])
    await page.click("#create-client button[type=submit]")
    error = page.locator("#action-result .error")
    await expect(error).to_contain_text("InputError: ", timeout=WAIT_MS)
    await expect(error).to_contain_text("must not end with", timeout=WAIT_MS)
    await expect(error).not_to_contain_text("`", timeout=WAIT_MS)
    status, _ = await rejected(root.client("dash/greedy"))
    assert status == 404

    # Deletes, each after a confirmation: the client's credentials stop working.
    await page.goto(f"{url}/ui/#/clients/{CLIENT.replace('/', '%2F')}", timeout=WAIT_MS)
    await page.click("button.action.delete")
    await expect(page.locator("#action-result")).to_have_text(
        f"Deleted client {CLIENT}.", timeout=WAIT_MS
    )
    await expect(page.locator("#clients tbody tr").first).to_have_attribute(
        "data-client", "bulk/00", timeout=WAIT_MS
    )
    await expect(page.locator(f'#clients tr[data-client="{CLIENT}"]')).to_have_count(
        0, timeout=WAIT_MS
    )
    status, _ = await rejected(current_scopes(url, client_creds))
    assert status == 401
    await page.goto(f"{url}/ui/#/roles/{ROLE}", timeout=WAIT_MS)
    await page.click("button.action.delete")
    await expect(page.locator("#action-result")).to_have_text(
        f"Deleted role {ROLE}.", timeout=WAIT_MS
    )
    await expect(page.locator("#app")).to_contain_text(
        "No role has been created yet.", timeout=WAIT_MS
    )
    status, _ = await rejected(root.role(ROLE))
    assert status == 404

    # No accessToken went anywhere but the page.
    tokens = (token, new_token, creds["root"]["accessToken"])
    assert not any(t in address for t in tokens for address in addresses), addresses
    assert not any(t in line for t in tokens for line in console), console
    assert await page.evaluate("Object.keys(localStorage)") == []
    assert not errors, errors


async def test_a_client_without_the_scopes_is_told_what_it_lacks(
    start_coordinator: StartCoordinator, browser: Browser, tmp_path: Path
) -> None:
    """A client that may list clients but not make them: the 403 names the scope missing."""
    coordinator, creds = await start_secured(
        start_coordinator, tmp_path / "clients.json", {"viewer": ["auth:list-clients"]}
    )
    page, errors = await open_page(browser)
    await page.goto(f"{coordinator.url}/ui/#/clients", timeout=WAIT_MS)
    await sign_in(page, creds["viewer"])
    await expect(page.locator("#app")).to_contain_text(
        "No client has been created yet.", timeout=WAIT_MS
    )
    await page.click("#create-client-box summary")
    await page.fill("#create-client-id", "someone")
    await page.click("#create-client button[type=submit]")
    error = page.locator("#action-result .error")
    await expect(error).to_contain_text("InsufficientScopes: ", timeout=WAIT_MS)
    await expect(error.locator("pre", has_text="auth:create-client:someone").first).to_be_visible(
        timeout=WAIT_MS
    )
    # The roles need auth:list-roles, which the viewer lacks.
    await page.click(".tabs a[href='#/roles']")
    await expect(page.locator("#app .error").first).to_contain_text(
        "InsufficientScopes", timeout=WAIT_MS
    )
    listed: dict[str, Any] = await Auth("aio", coordinator.url, creds["root"]).listClients()
    assert listed["clients"] == []
    assert not errors, errors
