"""The SQLite store's WAL checkpoints, copied into the database file by a thread of their own
so that the store's connection seldom waits for one.

SQLite checkpoints in the connection that commits: once the WAL holds
``wal_autocheckpoint`` pages (1,000), the COMMIT that crossed the mark also copies every page
into the database file and fsyncs it before it returns. The store's one connection does
nothing else meanwhile, and every write waits behind it: the slowest COMMITs of a busy store,
and the slowest tasks' pending time (docs/performance.md).

:class:`WalCheckpoints` runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own,
soon after writes were committed (:meth:`WalCheckpoints.written`) and at most every
:data:`INTERVAL` seconds. A passive checkpoint takes no write lock: it copies what no reader
still needs while the store goes on writing. The store keeps SQLite's automatic checkpoint,
which then finds most pages copied already; it is also what restarts the WAL from its start,
which a checkpoint beside a busy writer seldom can, so the WAL stays as small as before.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

INTERVAL = 0.05
"""Least seconds between two checkpoints. A page written again and again (an index's root, a
group's row) is copied at each checkpoint that finds it changed: every 20 ms cost the API
process measurably more CPU a task, every 50 ms did not (docs/performance-history.md)."""


class WalCheckpoints:
    """A thread checkpointing the WAL of the database at ``path`` after writes.

    :param path: the database file, already in WAL mode (the store's connection made it so).
    """

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._written = threading.Event()
        self._stopping = False
        self._failure: str | None = None
        self.backfilled = 0
        """How many of the WAL's pages were in the database file after the last checkpoint
        (tests look at it)."""
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpoints", daemon=True)
        self._thread.start()

    def written(self) -> None:
        """Writes were committed: checkpoint soon (from any thread)."""
        self._written.set()

    def close(self) -> None:
        """Stop the thread after its checkpoint in progress, and close its connection."""
        self._stopping = True
        self._written.set()
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        while True:
            self._written.wait()
            if self._stopping:
                return
            self._written.clear()
            self._checkpoint()
            time.sleep(INTERVAL)

    def _checkpoint(self) -> None:
        try:
            row = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as error:
            # The store's own checkpoints go on; say so once per kind of failure, not per pass.
            if str(error) != self._failure:
                self._failure = str(error)
                log.warning("WAL checkpoint failed; the store checkpoints itself error=%s", error)
            return
        self._failure = None
        self.backfilled = row[2]
