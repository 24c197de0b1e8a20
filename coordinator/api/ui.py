"""The dashboard: ``/ui/`` serves the static pages of ``coordinator/ui`` (ES modules and CSS).

The pages talk only to the REST API, through the bundled official browser client
(``coordinator/ui/vendor``); this module just serves files.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

UI_DIR = Path(__file__).resolve().parents[1] / "ui"
"""Where the pages live (shipped in the wheel as package data of ``coordinator.ui``)."""


def add_ui_routes(app: web.Application) -> None:
    """``GET /ui`` (a redirect), ``GET /ui/`` (index.html) and the files under ``/ui/``."""
    index = UI_DIR / "index.html"

    async def serve_index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(index, headers={"Cache-Control": "no-cache"})

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPPermanentRedirect("/ui/")

    app.router.add_get("/ui", redirect, name="ui-redirect")
    app.router.add_get("/ui/", serve_index, name="ui")
    app.router.add_static("/ui/", UI_DIR, name="ui-static")
