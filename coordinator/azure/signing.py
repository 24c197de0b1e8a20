"""Service SAS tokens for one queue: ``p`` (get and delete) for workers' poll and delete URLs,
``u`` (update, nothing else) for their release URLs, ``a`` (add) for the coordinator's own hint
puts. Signed on the real clock, whatever clock the lifecycle runs on: Azure checks them against
its own."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from azure.storage.queue import generate_queue_sas


@dataclass(frozen=True, kw_only=True, slots=True)
class AccountKey:
    """What signing needs: the storage account and its key.

    :param protocol: ``https`` for real accounts, ``https,http`` for the emulator.
    """

    account_name: str
    account_key: str
    protocol: str

    def queue_sas(self, queue: str, *, permission: str, start_ms: int, expiry_ms: int) -> str:
        """A SAS query string allowing ``permission`` on ``queue`` from start to expiry."""
        return generate_queue_sas(
            self.account_name,
            queue,
            self.account_key,
            permission=permission,
            start=_utc(start_ms),
            expiry=_utc(expiry_ms),
            protocol=self.protocol,
        )


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
