"""The soak's function tasks: a :class:`worker_sdk.App` whose functions fail some attempts, so
that the soak checks the coordinator honours their ``retries`` through kills and restarts.

The soak workers' handler (:mod:`soaklib.handler`) serves a run whose payload calls a
function through :meth:`App.serve`, with :data:`attempt` set to the run's runId: a function
decides from it whether this attempt fails. The soak creates the calls itself (see
:func:`call`), through its own client that retries through coordinator restarts, with the
definition fields of each function's options, as ``dispatch`` would.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from soaklib.processes import PROVISIONER_ID, WORKER_TYPE
from worker_sdk import App
from worker_sdk.app import TaskFunction

RECOVERS_FAILURES = 2
"""How many first attempts of :func:`recovers` fail."""
RECOVERS_RETRIES = 6
""":func:`recovers`'s ``retries``: its failures and room for the chaos's kills."""
GIVES_UP_RETRIES = 1
""":func:`gives_up`'s ``retries``: it fails every attempt, so it ends after this many
retries."""

attempt: ContextVar[int] = ContextVar("soak_attempt", default=0)
"""The runId of the run being served."""

# Never connects: the soak creates the calls, the workers serve them.
app = App(
    root_url="http://127.0.0.1:9", credentials=None, task_queue=f"{PROVISIONER_ID}/{WORKER_TYPE}"
)


@app.task(
    name="soak:recovers",
    retries=RECOVERS_RETRIES,
    retry_on=(ConnectionError,),
    retry_delay=1,
)
async def recovers(failures: int) -> str:
    """Fails (asking for a retry) while the runId is below ``failures``, then succeeds."""
    if attempt.get() < failures:
        raise ConnectionError(f"attempt {attempt.get()} fails, as the soak asks")
    return "recovered"


@app.task(
    name="soak:gives-up",
    retries=GIVES_UP_RETRIES,
    retry_on=(ConnectionError,),
    retry_delay=1,
)
async def gives_up() -> None:
    """Fails every attempt: its task ends failed once its retries are used up."""
    raise ConnectionError(f"attempt {attempt.get()} fails, as every attempt does")


FUNCTIONS: dict[str, TaskFunction[..., Any]] = {"recovers": recovers, "gives-up": gives_up}
"""The functions the soak calls, by the kind the checks know them by."""


def call(kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The payload and the definition fields (``retries``, ``retryDelay``) of a call of the
    function of ``kind``."""
    function = FUNCTIONS[kind]
    args = [RECOVERS_FAILURES] if kind == "recovers" else []
    payload = {"function": function.name, "args": args, "kwargs": {}}
    return payload, function.options.definition_fields()
