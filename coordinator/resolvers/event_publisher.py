"""Event publisher: publishes the outbox of Pulse messages in order, deleting each batch the
broker confirmed (docs/events.md). Runs only with ``COORDINATOR_PULSE_URL``; during a broker
outage a pass publishes nothing and the messages wait, to go out in order once it is back
(a store outage skips the pass, as the runner does for every actor)."""

from __future__ import annotations

from coordinator.service.event_outbox import EventOutbox

BATCH = 500
"""Messages per pass; a full pass runs again at once."""

INTERVAL = 0.1
"""Seconds between idle passes: how late a message may go out after its change."""


async def run_once(outbox: EventOutbox) -> int:
    """One batch; how many messages the broker confirmed."""
    return await outbox.publish_batch(BATCH)
