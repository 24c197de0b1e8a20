"""Free TCP ports for the servers the harness starts (coordinators, Azurite, dead probes).

A port is handed out before its server binds it, so another process may take it meanwhile.
Ports from the kernel's ephemeral range (``bind(0)``) are the likeliest to be taken: every
outgoing connection and every other ``bind(0)`` draws from it. So the ports come from below it
(:data:`FIRST_PORT` to :data:`LAST_PORT`), and each pytest-xdist worker draws from a slice of its
own, so that tests running side by side never pick the same port.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Iterator

FIRST_PORT = 12_000
LAST_PORT = 32_000
"""Below Linux's default ephemeral range (32768-60999) and above the well-known services'."""
SLICES = 16
"""How many slices the range is cut into: one per xdist worker (``gw0`` …), more than the
suite runs."""


def _candidates() -> Iterator[int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else SLICES - 1
    width = (LAST_PORT - FIRST_PORT) // SLICES
    first = FIRST_PORT + (index % SLICES) * width
    # a random start: the harness's child processes (bench, soak) share their parent's slice
    start = random.randrange(width)
    return (first + (start + step) % width for step in itertools.count())


_ports = _candidates()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    for port in itertools.islice(_ports, 1_000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on {host} between {FIRST_PORT} and {LAST_PORT}")
