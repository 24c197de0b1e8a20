"""glibc's malloc held to fixed thresholds, so a long-running process's heap stops growing.

glibc starts with blocks of 128 KiB and more in their own mappings (returned to the system on
``free``), but each time such a block is freed it raises that threshold to the block's size
(up to 32 MiB) and the trim threshold to twice it. After the first large request body, every
later one of that size is carved out of the heap instead; the small long-lived allocations
made between them keep the freed space from being trimmed, and the heap grows by the free
space it holds: about 1 MiB a minute in a coordinator serving 800 tasks a second, with no
plateau (docs/performance.md, Memory). Fixing the thresholds turns that adjustment off.

glibc's own variables still decide when set: ``MALLOC_MMAP_THRESHOLD_`` (and the other
``MALLOC_*_`` tunables) or ``GLIBC_TUNABLES``; then nothing is changed here. Elsewhere (musl,
macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

MMAP_THRESHOLD = 128 * 1024
"""glibc's own starting value, kept: blocks from 128 KiB up get their own mappings."""
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
"""Free space at the top of the heap past this is returned to the system (glibc's rule when
it adjusts the thresholds itself)."""
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_OWN_SETTINGS = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
    "GLIBC_TUNABLES",
)


def fix_thresholds(env: Mapping[str, str] = os.environ) -> bool:
    """Fix glibc's mmap and trim thresholds at their starting values, unless ``env`` sets
    glibc's own; whether they were fixed here."""
    if not sys.platform.startswith("linux") or any(name in env for name in _OWN_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


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
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return Heap(in_use=info.uordblks, free=info.fordblks, mmapped=info.hblkhd)
