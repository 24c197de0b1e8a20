"""Artifact bytes as files under one directory (the default backend): :class:`DirectoryBlobStore`.

Key ``<taskId>/<runId>/<name>`` is the file ``<root>/<taskId>/<runId>/<encoded name>``, each
segment encoded by :func:`~coordinator.blobs.base.encode_segment`: a name's ``/`` makes no
subdirectory, ``..`` climbs nowhere, no segment starts with a dot (so :data:`TEMP_PREFIX`
files never collide with artifacts), and a name too long for a file name is shortened and
given a hash of the whole.

A write goes to a temporary file in the same directory, is fsynced and then renamed over the
key's file (and the directory fsynced), so readers see the old file or the new one, never a
part, and a crash leaves at worst a temporary file. A reader keeps the file it opened even if a
new write replaces it meanwhile. The files hold only the bytes; their content type and
encoding are in the artifact rows. The blocking file calls run in the default thread pool, a
write's batches while the event loop receives the next (:func:`_write_all`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import BinaryIO, ParamSpec, TypeVar

from coordinator.blobs.base import (
    BlobPlaceRemoved,
    BlobReader,
    BlobUnavailable,
    encode_segment,
    exact_batches,
    key_segments,
    prefix_segments,
)

WRITE_SIZE = 1 << 20
"""Bytes handed to the disk per write call (chunks from the network are coalesced to this)."""
SYNC_SIZE = 16 << 20
"""Bytes written between two ``fdatasync`` calls. Syncing only at the end leaves a gigabyte of
dirty pages for one final flush, and the store's own fsync (SQLite's commit, on the same
filesystem) waits behind it (scripts/bench, row artifact-1gib: createTask's p99 at the end
of a 1 GiB upload). Writing back as we go keeps that flush small."""
READ_SIZE = 1 << 20
"""Bytes per chunk a :class:`BlobReader` yields."""
TEMP_PREFIX = ".tmp-"
"""Starts the names of files being written; quoted segments never start with a dot."""
SEGMENT_LIMIT = 200
"""Longest encoded segment kept whole (:func:`~coordinator.blobs.base.encode_segment`): a
shortened one is one longer, within the usual 255-byte limit on file names."""

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirectoryBlobStore:
    """Artifact bytes under ``root`` (created on first write).

    :param root: the directory; nothing else should write in it.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        """The file that holds ``key``'s bytes (inside :attr:`root`, whatever the key holds).

        :raises ValueError: ``key`` is not ``<taskId>/<runId>/<name>``.
        """
        return self._join(key_segments(key))

    def _join(self, segments: list[str]) -> Path:
        return self.root.joinpath(*(encode_segment(s, limit=SEGMENT_LIMIT) for s in segments))

    async def write(
        self,
        key: str,
        chunks: AsyncIterator[bytes],
        *,
        content_type: str,
        content_encoding: str | None,
        length: int,
    ) -> int:
        """See :meth:`coordinator.blobs.base.BlobStore.write`; the content type and encoding
        are not stored (the artifact row has them)."""
        target = self.path(key)
        file, temp = await _run(_create_temp, target.parent)
        try:
            try:
                await _write_all(file, exact_batches(chunks, batch_size=WRITE_SIZE, length=length))
            finally:
                file.close()
            try:
                await _run(os.replace, temp, target)
            except FileNotFoundError:
                # the task's directory was deleted under the write (deleteTasks, expiry)
                raise BlobPlaceRemoved(key) from None
            await _run(_fsync_directory, target.parent)
        except BaseException:
            # Also on cancellation: a client that hung up leaves no temporary file behind.
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        return length

    async def open(self, key: str) -> BlobReader | None:
        """See :meth:`coordinator.blobs.base.BlobStore.open`."""
        try:
            file = await _run(self.path(key).open, "rb")
        except FileNotFoundError:
            return None
        length = os.fstat(file.fileno()).st_size

        async def chunks() -> AsyncIterator[bytes]:
            while chunk := await _run(file.read, READ_SIZE):
                yield chunk

        async def close() -> None:
            file.close()

        return BlobReader(length=length, chunks=chunks(), close=close)

    def download_url(
        self, key: str, *, content_type: str, content_encoding: str | None, expires: int
    ) -> str | None:
        """``None``: files have no URL of their own; the API serves them through :meth:`open`."""
        return None

    async def delete(self, key: str) -> None:
        """See :meth:`coordinator.blobs.base.BlobStore.delete`; the run's and then the task's
        directory go too once empty."""
        path = self.path(key)
        await _run(path.unlink, missing_ok=True)
        await _run(_remove_empty, [path.parent, path.parent.parent])

    async def delete_prefix(self, prefix: str) -> int:
        """See :meth:`coordinator.blobs.base.BlobStore.delete_prefix`."""
        directory = self._join(prefix_segments(prefix))
        count = await _run(_remove_tree, directory)
        if directory.parent != self.root:
            await _run(_remove_empty, [directory.parent])
        return count

    async def close(self) -> None:
        """Nothing to release."""


async def _run(function: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """``function`` in a thread; an :class:`OSError` other than a missing file becomes
    :class:`BlobUnavailable` (a full or unwritable disk is the operator's to fix)."""
    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise BlobUnavailable(f"artifact storage failed: {error}") from error


def _create_temp(directory: Path) -> tuple[BinaryIO, Path]:
    """A new temporary file in ``directory`` (created if missing), open for writing."""
    # A concurrent delete may remove the (empty) directory between the two calls: try again.
    for _ in range(3):
        directory.mkdir(parents=True, exist_ok=True)
        temp = directory / f"{TEMP_PREFIX}{secrets.token_hex(8)}"
        try:
            return temp.open("xb"), temp
        except FileNotFoundError:
            continue
    raise BlobUnavailable(f"artifact directory {directory} keeps disappearing")


async def _write_all(file: BinaryIO, batches: AsyncIterator[list[bytes]]) -> None:
    """Write ``batches`` to ``file`` and fsync it.

    Each batch is written in a thread while the next one is received: the event loop only
    hands over references to the bytes as they arrive, and neither copies them nor waits for
    the disk, so a large upload leaves it free for other requests. At most two batches are
    held at a time.
    """
    writing: asyncio.Future[None] | None = None
    unsynced = 0
    try:
        async for batch in batches:
            unsynced += sum(map(len, batch))
            sync = unsynced >= SYNC_SIZE
            if sync:
                unsynced = 0
            if writing is not None:
                await asyncio.shield(writing)
            writing = asyncio.ensure_future(_run(_write, file, batch, sync=sync))
        if writing is not None:
            await asyncio.shield(writing)
        await _run(_flush, file)
    finally:
        # The caller closes the file next: never under a write still running in its thread
        # (a cancelled upload, or a body that failed while the previous batch was written).
        # What that write raised matters no more than the error already on its way.
        if writing is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(writing)


def _write(file: BinaryIO, parts: list[bytes], *, sync: bool) -> None:
    for part in parts:
        file.write(part)
    if sync:
        file.flush()
        os.fdatasync(file.fileno())


def _flush(file: BinaryIO) -> None:
    file.flush()
    os.fsync(file.fileno())


def _remove_empty(directories: list[Path]) -> None:
    """Remove each of ``directories`` in turn while they are empty."""
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:  # not empty (another artifact, a write under way) or already gone
            return


def _remove_tree(directory: Path) -> int:
    """Delete ``directory`` and everything in it; how many artifact files it held."""
    if not directory.exists():
        return 0
    count = sum(
        1
        for _, _, files in os.walk(directory)
        for name in files
        if not name.startswith(TEMP_PREFIX)
    )
    shutil.rmtree(directory, ignore_errors=True)
    return count
