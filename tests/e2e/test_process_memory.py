"""Memory that stays flat: glibc's thresholds fixed and its heap trimmed by :mod:`glibc_malloc`
(what the coordinator and ``queue-worker`` do at start-up), and ``devharness.memtrace``, the
tool that found why the heap grew, each in a process of its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import glibc_malloc
from devharness.processes import REPO, child_env

# Frees a 4 MiB block, which had a mapping of its own: glibc then raises its mmap threshold past
# 4 MiB unless the thresholds are fixed. Then a 1 MiB block: how much of it is mmapped says
# which happened.
_PROBE = textwrap.dedent(
    """
    import ctypes, sys
    import glibc_malloc
    if sys.argv[1] == "fixed":
        assert glibc_malloc.fix_thresholds(env={})
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(4 << 20))
    before = glibc_malloc.heap().mmapped
    block = libc.malloc(1 << 20)
    print(glibc_malloc.heap().mmapped - before)
    """
)


def _python(*args: str, env: dict[str, str] | None = None) -> str:
    """Run ``python args`` in the repository to its end; its output."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env or child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def _mmapped_after_a_large_free(mode: str) -> int:
    return int(_python("-c", _PROBE, mode))


@pytest.mark.skipif(glibc_malloc.heap() is None, reason="glibc 2.33 or later only")
def test_fixed_thresholds_keep_large_blocks_out_of_the_heap_after_a_large_free() -> None:
    # glibc's own adjustment, which made the coordinator's heap grow: the 1 MiB block comes
    # out of the heap
    assert _mmapped_after_a_large_free("dynamic") == 0
    # fixed: it gets a mapping of its own, returned to the system when freed
    assert _mmapped_after_a_large_free("fixed") >= 1 << 20


# 400 blocks of 64 KiB (under the threshold: in the heap), touched, each followed by a small
# block that stays; then the large ones are freed. The heap cannot shrink past the small blocks,
# so the 25 MiB freed stay resident until something trims them. The RSS after half a second.
_FRAGMENTS = textwrap.dedent(
    """
    import ctypes, os, sys, time
    import glibc_malloc
    glibc_malloc.TRIM_INTERVAL = 0.05
    trimmed = sys.argv[1] == "trimmed"
    env = {} if trimmed else {"GLIBC_TUNABLES": ""}
    assert glibc_malloc.keep_heap_flat(env=env) == trimmed
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    large, small = [], []
    for _ in range(400):
        block = libc.malloc(64 << 10)
        ctypes.memset(block, 1, 64 << 10)
        large.append(block)
        small.append(libc.malloc(64))
    for block in large:
        libc.free(block)
    time.sleep(0.5)
    print(int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    """
)


@pytest.mark.skipif(glibc_malloc.heap() is None, reason="glibc 2.33 or later only")
def test_the_trimming_thread_returns_the_free_pages_inside_the_heap() -> None:
    kept = int(_python("-c", _FRAGMENTS, "untrimmed"))
    trimmed = int(_python("-c", _FRAGMENTS, "trimmed"))
    assert kept - trimmed >= 20 << 20, (kept >> 20, trimmed >> 20)


def test_glibc_s_own_settings_win() -> None:
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):
        assert not glibc_malloc.fix_thresholds(env={name: "65536"})
        assert not glibc_malloc.keep_heap_flat(env={name: "65536"})


def test_memtrace_finds_the_line_and_the_type_that_grow(tmp_path: Path) -> None:
    (tmp_path / "growing.py").write_text(
        textwrap.dedent(
            """
            import os, pathlib, time

            class Kept:
                pass

            kept, taken = [], pathlib.Path(os.environ["SNAPSHOTS"])
            end = time.monotonic() + 60.0
            while time.monotonic() < end and len(list(taken.glob("*.snapshot"))) < 3:
                kept.append([Kept() for _ in range(200)])  # grows
                time.sleep(0.01)
            """
        )
    )
    snapshots = tmp_path / "snapshots"
    env = child_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    # it grows until three snapshots are taken: on a loaded machine each takes a while
    env["SNAPSHOTS"] = str(snapshots)
    _python(
        *("-m", "devharness.memtrace", "run", str(snapshots)),
        *("--every", "0.4", "--frames", "2", "-m", "growing"),
        env=env,
    )
    taken = sorted(snapshots.glob("*.snapshot"))
    assert len(taken) >= 3, taken
    assert all(snapshot.with_suffix(".types.json").exists() for snapshot in taken)
    diff = _python("-m", "devharness.memtrace", "diff", str(taken[0]), str(taken[-1]))
    first, _, rest = diff.partition("\n")
    assert "RSS" in first and "malloc in use" in first and "traced +" in first, diff
    # the largest growth by line is the list comprehension that keeps its objects
    growth = rest.split("# object counts that grew")
    assert 'growing.py", line 10' in growth[0].split("KiB", 2)[1], diff
    grown_types = dict(line.split()[::-1] for line in growth[1].strip().splitlines())
    assert int(grown_types["Kept"]) >= 200, diff
