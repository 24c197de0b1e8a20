"""Where artifact bytes live: the :class:`~coordinator.blobs.base.BlobStore` protocol
(:mod:`~coordinator.blobs.base`), files under a directory (:mod:`~coordinator.blobs.directory`,
the default), Azure Blob Storage (:mod:`~coordinator.blobs.azure_blob`), and the choice between
them from the configuration (:func:`~coordinator.blobs.factory.open_blob_store`).

This layer knows bytes and keys, not artifacts: which artifact a key belongs to, its
content type and whether it was uploaded are in the store's artifact rows.
"""

from coordinator.blobs.base import (
    BlobIncomplete,
    BlobPlaceRemoved,
    BlobReader,
    BlobStore,
    BlobUnavailable,
    blob_key,
    task_prefix,
)
from coordinator.blobs.factory import open_blob_store

__all__ = [
    "BlobIncomplete",
    "BlobPlaceRemoved",
    "BlobReader",
    "BlobStore",
    "BlobUnavailable",
    "blob_key",
    "open_blob_store",
    "task_prefix",
]
