"""Event publisher: publishes the outbox of Pulse messages in order, deleting each batch the
broker confirmed (docs/events.md). Runs only with ``COORDINATOR_PULSE_URL``, in a process of
its own (``python -m coordinator.cli.publish_events``, which ``serve`` starts and restarts)
or, with ``COORDINATOR_PULSE_IN_PROCESS``, beside the API's actors; during a broker outage a
pass publishes nothing and the messages wait, to go out in order once it is back (a store
outage skips the pass, as the runner does for every actor)."""

from __future__ import annotations

from coordinator.resolvers.runner import Actor
from coordinator.service.event_outbox import EventOutbox

NAME = "event-publisher"

BATCH = 500
"""Messages per pass; a full pass runs again at once."""

INTERVAL = 0.1
"""Seconds between idle passes: how late a message may go out after its change."""


async def run_once(outbox: EventOutbox) -> int:
    """One batch; how many messages the broker confirmed."""
    return await outbox.publish_batch(BATCH)


def actor(outbox: EventOutbox) -> Actor:
    """The publisher as the runner runs it, in whichever process publishes (its passes act
    every 100 ms under load and are not logged: its counter says what they did)."""
    return Actor(
        name=NAME,
        run_once=lambda: run_once(outbox),
        interval=INTERVAL,
        busy_at=BATCH,
        log_passes=False,
    )
