"""A local TCP proxy that tests can sever and restore: the broker (or any server) "goes away"
for whoever connects through it, without touching the shared server itself.

:meth:`TcpProxy.sever` closes every connection through it and stops listening, so new
connections are refused (ECONNREFUSED) as from a stopped server; :meth:`TcpProxy.restore`
listens again on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit, urlunsplit

from devharness.ports import free_port


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_host:target_port``."""

    def __init__(self, target_host: str, target_port: int, *, port: int | None = None) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = port or free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def in_front_of(cls, url: str, *, default_port: int) -> TcpProxy:
        """A proxy (not yet listening) to the server of ``url``.

        :param url: ``scheme://[userinfo@]host[:port]/...``.
        :param default_port: the scheme's port, when ``url`` names none.
        """
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or default_port)

    def url_through(self, url: str) -> str:
        """``url`` with its host and port replaced by this proxy's (userinfo, path and
        query kept), so that a client given it connects through the proxy."""
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        here = f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=f"{userinfo}@{here}" if userinfo else here))

    async def start(self) -> None:
        """Listen (again)."""
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accepted, "127.0.0.1", self.port, reuse_address=True
            )

    restore = start

    async def sever(self) -> None:
        """Stop listening and cut every open connection."""
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.sleep(0)

    async def close(self) -> None:
        await self.sever()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.ensure_future(self._pipe(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(sink)
            with contextlib.suppress(Exception):
                sink.transport.abort()
