"""Calling a blocking function from the event loop in a daemon thread of its own
(:func:`in_daemon_thread`): a sync handler's, and a plain function's of an app."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


async def in_daemon_thread(function: Callable[[], _T], *, name: str) -> _T:
    """Call ``function`` in a thread of its own, in the caller's context (the run's, for the
    run log), and await what it returns.

    A daemon thread, unlike an executor's, doesn't hold up the process's exit: a handler
    that ignores ``run.cancelled`` is abandoned at shutdown rather than waited for forever;
    so is one the awaiting task stopped waiting for (cancelled, or timed out).
    """
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    done: asyncio.Future[_T] = loop.create_future()

    def succeed(result: _T) -> None:
        if not done.done():  # not cancelled while the thread ran
            done.set_result(result)

    def fail(error: BaseException) -> None:
        if not done.done():
            done.set_exception(error)

    def target() -> None:
        try:
            result = context.run(function)
        except StopIteration as caught:
            # A future refuses StopIteration: it would silently end the awaiting coroutine.
            outcome = functools.partial(fail, RuntimeError(f"handler raised {caught!r}"))
        except BaseException as caught:  # whatever it is, the event loop decides
            outcome = functools.partial(fail, caught)
        else:
            outcome = functools.partial(succeed, result)
        # RuntimeError: the event loop is gone, so nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(outcome)

    threading.Thread(target=target, name=name, daemon=True).start()
    return await done
