"""glibc's malloc kept from growing the heap of a long-running process by the free space it
holds.

Two causes, two measures (docs/performance.md, Memory):

- glibc gives blocks of 128 KiB and more mappings of their own (returned to the system on
  ``free``), but each time it frees one it raises that threshold to the block's size (up to
  32 MiB) and the trim threshold to twice it. After the first large request body, every later
  one of that size is carved out of the heap instead. Fixing both thresholds at their starting
  values turns that adjustment off.
- Blocks under the threshold come out of the heap, and the long-lived small allocations made
  between them keep the space freed around them from being returned: a worker creating a
  zlib compressor a run (four 64 KiB buffers) held 12 MiB more free space every 90 s. A
  thread calls ``malloc_trim`` every :data:`TRIM_INTERVAL` seconds, which hands the free
  pages inside the heap back to the system.

Without them a coordinator serving 800 tasks a second grew about 1 MiB a minute with no
plateau. glibc's own variables decide when set: ``MALLOC_MMAP_THRESHOLD_`` (and the other
``MALLOC_*_`` tunables) or ``GLIBC_TUNABLES``; then nothing is changed here. Elsewhere (musl,
macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

MMAP_THRESHOLD = 128 * 1024
"""glibc's own starting value, kept: blocks from 128 KiB up get their own mappings."""
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
"""Free space at the top of the heap past this is returned to the system (glibc's rule when
it adjusts the thresholds itself)."""
TRIM_INTERVAL = 10.0
"""Seconds between two ``malloc_trim`` calls (each takes about a millisecond)."""
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_OWN_SETTINGS = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
    "GLIBC_TUNABLES",
)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """glibc, or ``None`` elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.malloc_trim.argtypes = (ctypes.c_size_t,)
    except (OSError, AttributeError):  # not glibc
        return None
    return libc


def fix_thresholds(env: Mapping[str, str] = os.environ) -> bool:
    """Fix glibc's mmap and trim thresholds at their starting values, unless ``env`` sets
    glibc's own; whether they were fixed here."""
    libc = _libc()
    if libc is None or any(name in env for name in _OWN_SETTINGS):
        return False
    return bool(
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def keep_heap_flat(env: Mapping[str, str] = os.environ) -> bool:
    """:func:`fix_thresholds`, and when it did, start the daemon thread that trims the heap
    every :data:`TRIM_INTERVAL` seconds; whether it did."""
    if not fix_thresholds(env):
        return False
    threading.Thread(target=_trim, name="malloc-trim", daemon=True).start()
    return True


def _trim() -> None:
    libc = _libc()
    assert libc is not None  # only started once the thresholds were fixed
    while True:
        time.sleep(TRIM_INTERVAL)
        libc.malloc_trim(0)  # ctypes lets go of the GIL meanwhile


@dataclass(frozen=True, slots=True)
class Heap:
    """glibc's account of its memory, in bytes: ``in_use`` handed out by malloc, ``free`` held
    but not returned to the system (what fragmentation costs), ``mmapped`` in blocks with
    mappings of their own."""

    in_use: int
    free: int
    mmapped: int


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def heap() -> Heap | None:
    """glibc's ``mallinfo2()`` (glibc 2.33 and later); ``None`` elsewhere."""
    libc = _libc()
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is None:
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return Heap(in_use=info.uordblks, free=info.fordblks, mmapped=info.hblkhd)
