"""Choosing where artifact bytes live from the configuration (``COORDINATOR_ARTIFACTS``).

* ``directory`` (the default): :class:`~coordinator.blobs.directory.DirectoryBlobStore` under
  ``COORDINATOR_ARTIFACTS_DIR`` (``<data dir>/artifacts``).
* ``azure``: :class:`~coordinator.blobs.azure_blob.AzureBlobStore` in the container
  ``<COORDINATOR_QUEUE_PREFIX>artifacts`` of the ``AZURE_STORAGE_CONNECTION_STRING`` account,
  so deployments sharing an account keep their artifacts apart as they do their queues.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from pathlib import Path

from coordinator.blobs.azure_blob import AzureBlobStore
from coordinator.blobs.base import BlobStore
from coordinator.blobs.directory import DirectoryBlobStore
from coordinator.config import Config, ConfigurationError

CONTAINER_SUFFIX = "artifacts"

_CONTAINER_RE = re.compile(r"[a-z0-9](?:-?[a-z0-9])*")


async def open_blob_store(config: Config) -> BlobStore:
    """The artifact store ``config`` asks for, ready to use.

    :raises ConfigurationError: the directory cannot be created or written, the connection
        string carries no account key, or the queue prefix makes no valid container name.
    """
    # Config guarantees a connection string with ``azure``.
    if config.artifacts == "azure" and config.azure_connection_string:
        container = f"{config.queue_prefix}{CONTAINER_SUFFIX}"
        if not (3 <= len(container) <= 63 and _CONTAINER_RE.fullmatch(container)):
            raise ConfigurationError(
                f"the artifacts container {container!r} (COORDINATOR_QUEUE_PREFIX + "
                f"{CONTAINER_SUFFIX!r}) is not a valid Azure container name; use a prefix of "
                "lowercase letters, digits and single hyphens"
            )
        try:
            return AzureBlobStore(config.azure_connection_string, container=container)
        except ValueError as error:
            raise ConfigurationError(
                f"{error}: COORDINATOR_ARTIFACTS=azure signs download URLs with it; fix "
                "AZURE_STORAGE_CONNECTION_STRING or use COORDINATOR_ARTIFACTS=directory"
            ) from None
    root = config.artifacts_dir
    try:
        await asyncio.to_thread(_check_writable, root)
    except OSError as error:
        raise ConfigurationError(
            f"cannot write artifacts under {root}: {error.strerror or error}; "
            "fix COORDINATOR_ARTIFACTS_DIR (or its permissions)"
        ) from None
    return DirectoryBlobStore(root)


def _check_writable(root: Path) -> None:
    """Create ``root`` if missing and prove a file can be made in it."""
    root.mkdir(parents=True, exist_ok=True)
    probe = root / f".probe-{secrets.token_hex(4)}"
    probe.touch()
    probe.unlink()
