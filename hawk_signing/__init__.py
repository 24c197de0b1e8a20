"""Taskcluster Hawk signing, shared by the worker SDK and the ``queue-coordinator`` command line.

Owns the credentials a caller signs with and the ``Authorization`` header of one request,
byte for byte as the official ``taskcluster`` client makes it (mohawk, sha256, ``ext`` = URL-safe
base64 of the JSON ``{"certificate": ...}`` for temporary credentials and of ``{}`` otherwise),
computed by :mod:`hawk_signing.protocol`, which the coordinator verifies with too. It imports
neither ``coordinator`` nor ``worker_sdk``, so both may import it.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hawk_signing import protocol


@dataclass(frozen=True, kw_only=True)
class Credentials:
    """Taskcluster credentials; ``certificate`` (JSON text) makes them temporary ones."""

    client_id: str
    access_token: str
    certificate: str | None = None

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Credentials:
        """Read ``{clientId, accessToken, certificate?}`` as the API and the official client
        spell them; a certificate may be JSON text or an already parsed object."""
        certificate = value.get("certificate")
        if certificate is not None and not isinstance(certificate, str):
            certificate = json.dumps(certificate, separators=(",", ":"))
        return cls(
            client_id=str(value["clientId"]),
            access_token=str(value["accessToken"]),
            certificate=certificate or None,
        )

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Credentials | None:
        """``TASKCLUSTER_CLIENT_ID``, ``TASKCLUSTER_ACCESS_TOKEN`` and, for temporary
        credentials, ``TASKCLUSTER_CERTIFICATE``, as the official tools read them; ``None``
        when neither of the first two is set.

        :raises ValueError: only one of the two is set.
        """
        client_id = environ.get("TASKCLUSTER_CLIENT_ID")
        access_token = environ.get("TASKCLUSTER_ACCESS_TOKEN")
        if bool(client_id) != bool(access_token):
            present, absent = (
                ("TASKCLUSTER_CLIENT_ID", "TASKCLUSTER_ACCESS_TOKEN")
                if client_id
                else ("TASKCLUSTER_ACCESS_TOKEN", "TASKCLUSTER_CLIENT_ID")
            )
            raise ValueError(f"{present} is set but {absent} is not; set both, or neither")
        if not (client_id and access_token):
            return None
        return cls(
            client_id=client_id,
            access_token=access_token,
            certificate=environ.get("TASKCLUSTER_CERTIFICATE") or None,
        )

    def to_json(self) -> dict[str, str | None]:
        """``{clientId, accessToken, certificate}`` as the API spells them; what
        :meth:`from_json` reads back."""
        return {
            "clientId": self.client_id,
            "accessToken": self.access_token,
            "certificate": self.certificate,
        }


@functools.lru_cache(maxsize=256)
def hawk_ext(credentials: Credentials) -> str:
    """The Hawk ``ext`` the official client sends, byte for byte.

    The coordinator reads the certificate of temporary credentials from here; permanent
    credentials still send the encoded empty object, as the official client does. Cached
    because a caller signs every request with the same few credentials.
    """
    ext: dict[str, Any] = {}
    if credentials.certificate:
        ext["certificate"] = json.loads(credentials.certificate)
    encoded = base64.b64encode(json.dumps(ext, separators=(",", ":")).encode()).decode()
    return encoded.replace("+", "-").replace("/", "_")


def authorization(
    credentials: Credentials,
    *,
    method: str,
    url: str,
    content: str | bytes | None,
    content_type: str,
    nonce: str | None = None,
    timestamp: int | None = None,
) -> str:
    """The ``Authorization`` header value for one request: ``mohawk.Sender``'s, byte for byte;
    a fresh nonce and the current time unless given.

    :raises ValueError: a value a Hawk header cannot carry, or a URL mohawk refuses.
    """
    return protocol.request_header(
        client_id=credentials.client_id,
        key=credentials.access_token,
        method=method,
        url=url,
        content=content,
        content_type=content_type,
        ext=hawk_ext(credentials),
        nonce=nonce,
        timestamp=timestamp,
    )
