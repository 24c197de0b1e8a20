"""What every artifact-bytes backend offers: the :class:`BlobStore` protocol, the
:class:`BlobReader` it hands out, its errors, and how an artifact is named in it (:func:`blob_key`).

A blob is the bytes of one ``s3`` artifact; its content type and encoding live in the artifact's
row, and are handed to the backend only where it needs them (Azure stores them on the blob and
puts them in the download URL). A write is all or nothing: a reader sees either the previous
bytes or the new ones, never a part.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Protocol
from urllib.parse import quote

from coordinator.domain.errors import InputError


class BlobIncomplete(InputError):
    """The stream handed to :meth:`BlobStore.write` did not carry exactly the declared number of
    bytes (a client that hung up, or a body longer than its Content-Length); nothing was
    stored, and whatever the key held before is still there."""


class BlobPlaceRemoved(Exception):
    """The place a blob was being written to was removed meanwhile (its task's blobs deleted,
    as deleteTasks or expiry do): nothing was stored."""


class BlobUnavailable(Exception):
    """The backend failed (Azure unreachable or refusing, the disk full or unwritable): nothing
    is wrong with the request, and repeating it later may succeed."""


def blob_key(task_id: str, run_id: int, name: str) -> str:
    """The key of artifact ``name`` of run ``run_id`` of task ``task_id``.

    ``name`` may hold ``/`` and anything else printable: backends keep it whole as one blob.
    """
    return f"{task_id}/{run_id}/{name}"


def task_prefix(task_id: str) -> str:
    """The prefix (for :meth:`BlobStore.delete_prefix`) of every artifact of ``task_id``."""
    return f"{task_id}/"


def key_segments(key: str) -> list[str]:
    """``[taskId, runId, name]`` of a :func:`blob_key`.

    :raises ValueError: ``key`` is not ``<taskId>/<runId>/<name>``.
    """
    segments = key.split("/", 2)
    if len(segments) != 3 or not all(segments):
        raise ValueError(f"blob key {key!r} is not <taskId>/<runId>/<name>")
    return segments


def prefix_segments(prefix: str) -> list[str]:
    """``[taskId]`` or ``[taskId, runId]`` of a prefix for :meth:`BlobStore.delete_prefix`.

    :raises ValueError: ``prefix`` is not ``<taskId>/`` or ``<taskId>/<runId>/``.
    """
    segments = prefix.split("/")
    if not 2 <= len(segments) <= 3 or segments.pop() or not all(segments):
        raise ValueError(f"blob prefix {prefix!r} is not <taskId>/ or <taskId>/<runId>/")
    return segments


def encode_segment(raw: str, *, limit: int) -> str:
    """``raw`` (a task id, run id or whole artifact name) as one segment of a path or blob
    name, different for every different ``raw``.

    Percent-quoted with nothing kept safe, so a name's ``/`` makes no directory and ``..``
    climbs nowhere; a leading or trailing ``.`` is quoted too (no segment is ``.``, ``..`` or a
    hidden file, and none ends in a dot, which some clients drop). When that is longer than
    ``limit``, it becomes its first ``limit - 64`` characters, ``~`` and the SHA-256 of
    ``raw``: ``limit + 1`` characters, so never equal to a segment that was kept.
    """
    quoted = quote(raw, safe="")
    if quoted.startswith("."):
        quoted = "%2E" + quoted[1:]
    if quoted.endswith("."):
        quoted = quoted[:-1] + "%2E"
    if len(quoted) > limit:
        quoted = f"{quoted[: limit - 64]}~{hashlib.sha256(raw.encode()).hexdigest()}"
    return quoted


class BlobReader:
    """The bytes of one blob, for streaming out: ``length`` and then the chunks
    (``async for chunk in reader``), each at most a backend's read size.

    Use it as an async context manager (or call :meth:`close`) so what it holds open is
    released even when the consumer stops early.

    :param length: the number of bytes the chunks add up to.
    :param chunks: the bytes, in order.
    :param close: releases what the chunks read from (a file, a connection).
    """

    def __init__(
        self,
        *,
        length: int,
        chunks: AsyncIterator[bytes],
        close: Callable[[], Awaitable[None]],
    ) -> None:
        self.length = length
        self._chunks = chunks
        self._close = close

    @classmethod
    def of(cls, data: bytes) -> BlobReader:
        """A reader of bytes already in memory (an inline artifact's, read from its row)."""

        async def chunks() -> AsyncIterator[bytes]:
            if data:
                yield data

        async def close() -> None:
            pass

        return cls(length=len(data), chunks=chunks(), close=close)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks

    async def read_all(self) -> bytes:
        """Every byte at once: for small blobs and tests only."""
        return b"".join([chunk async for chunk in self])

    async def close(self) -> None:
        await self._close()

    async def __aenter__(self) -> BlobReader:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


class BlobStore(Protocol):
    """Where artifact bytes live. Keys come from :func:`blob_key`.

    Every method may raise :class:`BlobUnavailable`.
    """

    async def write(
        self,
        key: str,
        chunks: AsyncIterator[bytes],
        *,
        content_type: str,
        content_encoding: str | None,
        length: int,
    ) -> int:
        """Store the bytes of ``chunks`` under ``key``, replacing what it held, all at once
        after the last byte; never more than a block or two of them in memory.

        :param key: from :func:`blob_key`.
        :param chunks: the bytes, in pieces of any size.
        :param content_type: the artifact's Content-Type (backends that serve the bytes
            themselves keep it with them).
        :param content_encoding: the Content-Encoding the bytes were sent with, if any.
        :param length: how many bytes ``chunks`` must carry.
        :returns: the number of bytes stored (``length``).
        :raises BlobIncomplete: ``chunks`` ended early or ran past ``length``; nothing stored.
        """
        ...

    async def open(self, key: str) -> BlobReader | None:
        """The bytes under ``key`` for streaming out, or ``None`` when there are none.

        A reader never mixes two writes: if the key is rewritten while it reads, it goes on
        with the bytes it opened (directory) or fails with :class:`BlobUnavailable` (Azure).
        """
        ...

    def download_url(
        self, key: str, *, content_type: str, content_encoding: str | None, expires: int
    ) -> str | None:
        """A URL that serves the bytes under ``key`` by itself until ``expires`` (epoch ms),
        answering with ``content_type`` and ``content_encoding`` (when given); ``None`` from a
        backend that cannot make one (then the API serves the bytes through :meth:`open`)."""
        ...

    async def delete(self, key: str) -> None:
        """Forget the bytes under ``key``; nothing happens when there are none."""
        ...

    async def delete_prefix(self, prefix: str) -> int:
        """Forget every blob whose key starts with ``prefix``, a key's leading segments ending
        in ``/`` (:func:`task_prefix`, or ``"<taskId>/<runId>/"``).

        :returns: how many blobs were deleted.
        """
        ...

    async def close(self) -> None:
        """Release connections; the store is not used afterwards."""
        ...


async def exact_batches(
    chunks: AsyncIterator[bytes], *, batch_size: int, length: int
) -> AsyncIterator[list[bytes]]:
    """``chunks`` gathered, as they are (nothing copied), into lists of at least ``batch_size``
    bytes (the last one may hold less), checked against ``length``.

    :raises BlobIncomplete: as soon as more than ``length`` bytes arrived, or at the end when
        fewer did, before the last batch: a caller that makes the blob visible only after the
        last batch never shows a wrong one.
    """
    batch: list[bytes] = []
    batched = received = 0
    async for chunk in chunks:
        received += len(chunk)
        if received > length:
            raise BlobIncomplete(f"the body holds more than the {length} bytes declared")
        batch.append(chunk)
        batched += len(chunk)
        if batched >= batch_size:
            yield batch
            batch, batched = [], 0
    if received < length:
        raise BlobIncomplete(f"the body ended after {received} of the {length} bytes declared")
    if batch:
        yield batch


async def exact_blocks(
    chunks: AsyncIterator[bytes], *, block_size: int, length: int
) -> AsyncIterator[bytes]:
    """``chunks`` regrouped into blocks of ``block_size`` bytes (the last one shorter), checked
    against ``length`` as :func:`exact_batches` does; at most one block plus one incoming chunk
    is held at a time."""
    buffer = bytearray()
    async for batch in exact_batches(chunks, batch_size=1, length=length):
        for chunk in batch:
            buffer += chunk
        while len(buffer) >= block_size:
            yield _take(buffer, block_size)
    if buffer:
        yield _take(buffer, block_size)


def _take(buffer: bytearray, size: int) -> bytes:
    """The first ``size`` bytes of ``buffer``, removed from it (one copy, not two)."""
    with memoryview(buffer) as view:
        block = bytes(view[:size])
    del buffer[:size]
    return block
