"""A producer's connection to the coordinator: what an :class:`~worker_sdk.app.App` and its
:class:`~worker_sdk.handles.TaskHandle` objects call through.

An aiohttp session belongs to one event loop, so the connection keeps a
:class:`~worker_sdk.client.CoordinatorClient` per loop that used it: async callers get the
one of their running loop. The sync forms (``dispatch_sync``, ``result_sync``, ...) run their
coroutine on a loop of the connection's own, in a daemon thread started on first use, and
block the calling thread until it is done; they are for code without an event loop (a Flask
or Django view, a script, a sync handler's thread), and refuse to block a running loop.

What a producer calls of the coordinator is :class:`Coordinator`; a connection that answers
those calls otherwise overrides :meth:`Connection.client` (``worker_sdk.testing`` runs the
tasks in the process that way).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import aiohttp

from hawk_signing import Credentials
from worker_sdk.client import CoordinatorClient, new_session
from worker_sdk.progress import RunProgress

_T = TypeVar("_T")
_P = ParamSpec("_P")


class Coordinator(Protocol):
    """The coordinator's methods an app and its handles call (a
    :class:`~worker_sdk.client.CoordinatorClient` has them)."""

    async def create_task(
        self, task_id: str, task: Mapping[str, Any], *, traceparent: str | None = None
    ) -> dict[str, Any]: ...

    async def create_tasks(
        self, tasks: Mapping[str, Mapping[str, Any]], *, traceparent: str | None = None
    ) -> list[dict[str, Any]]: ...

    async def task_status(self, task_id: str) -> dict[str, Any]: ...

    async def task_progress(self, task_id: str) -> list[RunProgress]: ...

    async def server_time(self) -> datetime: ...

    async def cancel_task(self, task_id: str) -> dict[str, Any]: ...

    async def artifact_content(self, task_id: str, run_id: int, name: str) -> bytes: ...


class Connection:
    """Root URLs and credentials, and the clients and loop that use them."""

    def __init__(self, *, root_urls: Sequence[str], credentials: Credentials | None) -> None:
        self.root_urls = tuple(root_urls)
        self.credentials = credentials
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, CoordinatorClient]
        ] = weakref.WeakKeyDictionary()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def client(self) -> Coordinator:
        """The client of the running event loop (made on its first call there)."""
        loop = asyncio.get_running_loop()
        held = self._clients.get(loop)
        if held is None or held[0].closed:
            session = new_session()
            client = CoordinatorClient(
                session=session, root_urls=self.root_urls, credentials=self.credentials
            )
            held = self._clients[loop] = (session, client)
        return held[1]

    async def aclose(self) -> None:
        """Close the running loop's session (the others close with their loops)."""
        held = self._clients.pop(asyncio.get_running_loop(), None)
        if held is not None:
            await held[0].close()

    def blocking(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on the connection's own loop and wait for its result."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coroutine.close()
            raise RuntimeError(
                "the _sync forms block their thread: on a running event loop, await the "
                "async forms instead"
            )
        return asyncio.run_coroutine_threadsafe(coroutine, self._own_loop()).result()

    def close(self) -> None:
        """Close the session of the connection's own loop and stop the loop."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return
        asyncio.run_coroutine_threadsafe(self.aclose(), loop).result()
        loop.call_soon_threadsafe(loop.stop)

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                # a daemon: a producer that never calls close() still exits
                threading.Thread(
                    target=_run_until_stopped, args=(loop,), name="worker_sdk app", daemon=True
                ).start()
                self._loop = loop
            return self._loop


def _run_until_stopped(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


class Connected(Protocol):
    """What has a connection: an app's functions and handles."""

    @property
    def connection(self) -> Connection: ...


_C = TypeVar("_C", bound=Connected)


def blocking_form(
    method: Callable[Concatenate[_C, _P], Coroutine[Any, Any, _T]],
) -> Callable[Concatenate[_C, _P], _T]:
    """The ``_sync`` form of a coroutine method: the same parameters, run on the object's
    connection's own loop (:meth:`Connection.blocking`) while the calling thread waits."""

    @functools.wraps(method)
    def call(self: _C, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return self.connection.blocking(method(self, *args, **kwargs))

    call.__name__ = f"{method.__name__}_sync"
    call.__qualname__ = f"{method.__qualname__}_sync"
    call.__doc__ = f"``{method.__name__}`` for code without an event loop."
    return call
