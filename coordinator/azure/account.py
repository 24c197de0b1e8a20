"""The storage account behind ``AZURE_STORAGE_CONNECTION_STRING``, as every Azure client of the
coordinator opens it: the hint queues (:mod:`coordinator.azure.queues`) and the artifact
blobs (:mod:`coordinator.blobs.azure_blob`).

* :func:`client_options`: the keyword arguments of an SDK client's
  ``from_connection_string`` (which parses the string): request timeouts and one quick retry.
* :func:`account_key`: the account's name and key from such a client, which signing SAS URLs
  needs, so a connection string without an ``AccountKey`` is refused here.
"""

from __future__ import annotations

from typing import Any, Protocol

from coordinator.azure.signing import AccountKey


class StorageClient(Protocol):
    """What :func:`account_key` reads of an SDK service client (``QueueServiceClient``,
    ``BlobServiceClient``)."""

    @property
    def url(self) -> str: ...

    @property
    def credential(self) -> Any: ...


def client_options(request_timeout_s: float) -> dict[str, Any]:
    """Options for ``<SDK client>.from_connection_string(connection_string, **options)``.

    :param request_timeout_s: bound on connecting and on each read of every request.
    """
    return {
        "connection_timeout": request_timeout_s,
        "read_timeout": request_timeout_s,
        # One quick retry (0.2 s + 0**1) absorbs a dropped keep-alive connection; a longer
        # outage is the caller's to retry (the SDK's default backs off 15 s and more, while a
        # request waits).
        "retry_total": 1,
        "initial_backoff": 0.2,
        "increment_base": 0,
        "random_jitter_range": 0,
    }


def account_key(client: StorageClient) -> AccountKey:
    """The account name and key ``client`` was opened with, and the protocols its SAS URLs
    allow: ``https`` for real accounts, ``https,http`` for the emulator (which speaks http).

    :param client: opened from a connection string.
    :raises ValueError: the connection string carries no ``AccountKey``.
    """
    credential = client.credential
    key = getattr(credential, "account_key", None)
    if not key:
        raise ValueError("the Azure connection string must contain an AccountKey")
    return AccountKey(
        account_name=credential.account_name,
        account_key=key,
        protocol="https" if client.url.startswith("https:") else "https,http",
    )
