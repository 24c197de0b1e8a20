"""Artifact bytes in Azure Blob Storage: :class:`AzureBlobStore`, over one async
``BlobServiceClient`` (azure-storage-blob) per process.

Each artifact is one block blob in one container (created on first use), named
``<taskId>/<runId>/<encoded name>`` (:func:`~coordinator.blobs.base.encode_segment`: the
name's ``/`` and dot segments, which Azure would take as directories or resolve away, are
quoted, and a name past Azure's 1024 characters is shortened with a hash). A
write stages blocks of :data:`BLOCK_SIZE` as they arrive and commits the block list only after
the last byte, with the content type and encoding as the blob's properties: until then the
blob keeps its previous bytes (or stays absent), and the blocks of an abandoned upload are
never committed (Azure discards them after a week). Block ids carry a per-upload token, so two
uploads of one key at once cannot mix their blocks.

Downloads go straight to Azure: :meth:`AzureBlobStore.download_url` signs a read-only service
SAS whose ``rsct``/``rsce`` make Azure answer with the artifact's Content-Type and
Content-Encoding. Signing needs the account key, so the connection string must carry one
(Azurite's is the well-known development key). Every Azure failure surfaces as
:class:`~coordinator.blobs.base.BlobUnavailable`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from azure.core.exceptions import (
    AzureError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.storage.blob import BlobBlock, BlobSasPermissions, ContentSettings, generate_blob_sas
from azure.storage.blob.aio import BlobServiceClient, ContainerClient

from coordinator.azure.account import account_key, client_options
from coordinator.blobs.base import (
    BlobReader,
    BlobUnavailable,
    encode_segment,
    exact_blocks,
    key_segments,
    prefix_segments,
)

logger = logging.getLogger(__name__)

BLOCK_SIZE = 4 << 20
"""Bytes per staged block, and per chunk of a download: the most a transfer holds in memory."""
SEGMENT_LIMIT = 960
"""Longest encoded segment kept whole: with a task id and a run id the blob name stays within
Azure's 1024 characters."""
DELETE_BATCH = 32
"""Deletes in flight at once in :meth:`AzureBlobStore.delete_prefix`."""


class AzureBlobStore:
    """Artifact bytes as block blobs in ``container`` of the account of ``connection_string``.

    :param connection_string: the storage account's, with its ``AccountKey`` (and, for the
        emulator, a ``BlobEndpoint``).
    :param container: the container's name (3-63 lowercase letters, digits and hyphens);
        created on first use.
    :param request_timeout_s: bound on every Azure request.
    :raises ValueError: the connection string carries no account key.
    """

    def __init__(
        self, connection_string: str, *, container: str, request_timeout_s: float = 30.0
    ) -> None:
        # A failed upload or download is its client's to retry (it gets a 503).
        self._service = BlobServiceClient.from_connection_string(
            connection_string,
            **client_options(request_timeout_s),
            # A download's first request would otherwise fetch up to 32 MiB at once.
            max_single_get_size=BLOCK_SIZE,
            max_chunk_get_size=BLOCK_SIZE,
        )
        self._account = account_key(self._service)
        self.container = container
        self._container: ContainerClient = self._service.get_container_client(container)
        self._container_ready = False
        self._container_lock = asyncio.Lock()

    def blob_name(self, key: str) -> str:
        """The name of the blob that holds ``key``'s bytes.

        :raises ValueError: ``key`` is not ``<taskId>/<runId>/<name>``.
        """
        return _encode(key_segments(key))

    async def _ensure_container(self) -> None:
        if self._container_ready:
            return
        async with self._container_lock:
            if self._container_ready:
                return
            try:
                await self._container.create_container()
                logger.info("artifact container created container=%s", self.container)
            except ResourceExistsError:
                pass
            self._container_ready = True

    async def write(
        self,
        key: str,
        chunks: AsyncIterator[bytes],
        *,
        content_type: str,
        content_encoding: str | None,
        length: int,
    ) -> int:
        """See :meth:`coordinator.blobs.base.BlobStore.write`."""
        blob = self._container.get_blob_client(self.blob_name(key))
        upload = secrets.token_hex(8)
        blocks: list[BlobBlock] = []
        try:
            await self._ensure_container()
            async for block in exact_blocks(chunks, block_size=BLOCK_SIZE, length=length):
                # Same length for every id of a blob, as Azure requires.
                block_id = f"{upload}-{len(blocks):08d}"
                await blob.stage_block(block_id, block, length=len(block))
                blocks.append(BlobBlock(block_id=block_id))
            await blob.commit_block_list(
                blocks,
                content_settings=ContentSettings(
                    content_type=content_type, content_encoding=content_encoding
                ),
            )
        except AzureError as error:
            raise _unavailable("write", key, error) from error
        return length

    async def open(self, key: str) -> BlobReader | None:
        """See :meth:`coordinator.blobs.base.BlobStore.open`; chunks of :data:`BLOCK_SIZE`."""
        blob = self._container.get_blob_client(self.blob_name(key))
        try:
            # The bytes as stored: the SDK would otherwise decode a gzip Content-Encoding,
            # and the download route serves them with that header for the client to decode.
            downloader = await blob.download_blob(decompress=False)
        except ResourceNotFoundError:
            return None
        except AzureError as error:
            raise _unavailable("read", key, error) from error

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in downloader.chunks():
                    yield chunk
            except ResourceModifiedError as error:
                # Each chunk after the first asks for the blob as it was (If-Match): a rewrite
                # in between fails the read rather than mixing old and new bytes.
                raise BlobUnavailable(f"{key} was replaced while it was read") from error
            except AzureError as error:
                raise _unavailable("read", key, error) from error

        async def close() -> None:
            """Nothing held between chunks: each is its own request."""

        return BlobReader(length=downloader.size, chunks=chunks(), close=close)

    def download_url(
        self, key: str, *, content_type: str, content_encoding: str | None, expires: int
    ) -> str | None:
        """A read-only SAS URL of the blob, valid until ``expires`` (epoch ms, the real
        clock: Azure checks it against its own), whose answers carry ``content_type`` and
        ``content_encoding``."""
        name = self.blob_name(key)
        sas = generate_blob_sas(
            self._account.account_name,
            self.container,
            name,
            account_key=self._account.account_key,
            permission=BlobSasPermissions(read=True),
            expiry=datetime.fromtimestamp(expires / 1000, tz=UTC),
            protocol=self._account.protocol,
            content_type=content_type,
            content_encoding=content_encoding,
        )
        return f"{self._container.get_blob_client(name).url}?{sas}"

    async def delete(self, key: str) -> None:
        """See :meth:`coordinator.blobs.base.BlobStore.delete`."""
        try:
            await self._container.delete_blob(self.blob_name(key))
        except ResourceNotFoundError:
            pass
        except AzureError as error:
            raise _unavailable("delete", key, error) from error

    async def delete_prefix(self, prefix: str) -> int:
        """See :meth:`coordinator.blobs.base.BlobStore.delete_prefix`; deletes
        :data:`DELETE_BATCH` blobs at a time."""
        deleted = 0
        batch: list[str] = []
        try:
            starts = _encode(prefix_segments(prefix)) + "/"
            async for name in self._container.list_blob_names(name_starts_with=starts):
                batch.append(name)
                if len(batch) == DELETE_BATCH:
                    deleted += await self._delete_all(batch)
                    batch = []
            deleted += await self._delete_all(batch)
        except ResourceNotFoundError:
            pass  # no container yet: nothing was ever written
        except AzureError as error:
            raise _unavailable("delete", prefix, error) from error
        return deleted

    async def _delete_all(self, names: list[str]) -> int:
        """Delete ``names`` at once; how many were still there."""
        results = await asyncio.gather(
            *(self._container.delete_blob(name) for name in names), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(
                result,
                ResourceNotFoundError,  # deleted meanwhile by someone else
            ):
                raise result
        return sum(not isinstance(result, BaseException) for result in results)

    async def close(self) -> None:
        await self._service.close()


def _encode(segments: list[str]) -> str:
    return "/".join(encode_segment(segment, limit=SEGMENT_LIMIT) for segment in segments)


def _unavailable(action: str, key: str, error: Exception) -> BlobUnavailable:
    logger.warning("artifact storage failed action=%s key=%s error=%s", action, key, error)
    return BlobUnavailable(f"Azure Blob Storage could not {action} {key}: {type(error).__name__}")
