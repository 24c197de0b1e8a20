"""The HTTP server around the app: aiohttp's, except for requests its parser refuses.

aiohttp answers a request it cannot parse (a request line or a header over 8 KiB, a NUL in a
header, a malformed request line) with a text/plain 400 of its own and logs it at ERROR with
a traceback, before the app sees anything. Those are client mistakes like any other: here
they get Taskcluster's JSON error body and one WARNING line. :class:`AppRunner` is what
``queue-coordinator serve`` and the tests serve the app with.
"""

from __future__ import annotations

import logging

from aiohttp import web, web_protocol
from aiohttp.web_request import BaseRequest

from coordinator.api.http import error_body, json_response

log = logging.getLogger(__name__)


class _RequestHandler(web_protocol.RequestHandler):
    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            return super().handle_error(request, status, exc, message)
        what = " ".join(str(getattr(exc, "message", None) or exc or message).split())
        log.warning("unparseable request answered status=%d error=%s", status, what)
        body = error_body(
            "InputError",
            f"the request could not be parsed as HTTP: {what}",
            method=request.method,
            params={},
            payload={},
        )
        response = json_response(body, status=status)
        response.force_close()
        return response


class _Server(web.Server):
    def __call__(self) -> web_protocol.RequestHandler:
        return _RequestHandler(self, loop=self._loop, **self._kwargs)


class AppRunner(web.AppRunner):
    """:class:`aiohttp.web.AppRunner` whose connections use :class:`_RequestHandler`."""

    async def _make_server(self) -> web.Server:
        # aiohttp builds the server from the app (private, but pinned): take its pieces
        server = await super()._make_server()
        return _Server(
            server.request_handler,
            request_factory=server.request_factory,
            handler_cancellation=server.handler_cancellation,
            loop=server._loop,
            **server._kwargs,
        )
