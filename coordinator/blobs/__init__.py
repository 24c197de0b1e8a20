"""Where artifact bytes live: the :class:`~coordinator.blobs.base.BlobStore` protocol
(:mod:`~coordinator.blobs.base`), files under a directory (:mod:`~coordinator.blobs.directory`,
the default), Azure Blob Storage (:mod:`~coordinator.blobs.azure_blob`), and the choice between
them from the configuration (:func:`~coordinator.blobs.factory.open_blob_store`, imported
from there: the package itself imports no backend, so that what needs only the directory's
layout starts without Azure's SDK).

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

__all__ = [
    "BlobIncomplete",
    "BlobPlaceRemoved",
    "BlobReader",
    "BlobStore",
    "BlobUnavailable",
    "blob_key",
    "task_prefix",
]
