"""How the store fails when it is not there: :class:`StoreUnavailable`, raised by every driver
for an unreachable database or a dropped connection.

Anything else a driver raises is a bug or a refusal of the statement, not an outage. The API
answers :class:`StoreUnavailable` with 503 and ``Retry-After`` (``coordinator.api.errors``);
the resolvers' runner skips the pass. Its logging is :mod:`coordinator.store.outages`'s.
"""

from __future__ import annotations


class StoreUnavailable(Exception):
    """The store could not be reached, or dropped the connection, or refused work for want of
    resources (a locked or full database): the same call may succeed later.

    :param store: which store: its driver and host or path, never a password
        (``postgresql://127.0.0.1:5432/queue``, ``sqlite:///var/lib/qc.db``).
    :param reason: what the driver said, on one line.
    """

    def __init__(self, *, store: str, reason: str) -> None:
        super().__init__(f"the store {store} is unavailable: {reason}")
        self.store = store
        self.reason = reason
