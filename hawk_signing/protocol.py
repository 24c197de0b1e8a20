"""Hawk's arithmetic, byte for byte as ``mohawk`` (which the official Python client signs with)
computes it: the normalized string and request MAC, the payload hash, the ``Authorization``
header a sender writes and its parsing on the receiving side.

Both sides use this one implementation: :func:`hawk_signing.authorization` signs with
:func:`request_header`, and the coordinator's :class:`~coordinator.api.auth.Authenticator`
verifies with :func:`parse_header`, :func:`request_mac` and :func:`payload_hash`. mohawk's
``Sender`` and ``Receiver`` format their debug log lines (``pprint`` of the parsed URL, the
header and the payload) whether or not DEBUG is on, and the receiver parses a header twice and
compares MACs in a Python loop: most of their time. Comparisons here are
:func:`hmac.compare_digest`. What a request must satisfy to be accepted (timestamp window,
nonces, credentials) is the coordinator's, not this module's.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
import re
import time
from collections.abc import Mapping
from urllib.parse import urlparse

MAX_HEADER_LENGTH = 4096
"""mohawk's limit on a header's length."""

_ATTRIBUTE = re.compile(r'(?P<key>\w+)="(?P<value>[^"\\]*)"\s*(?:,\s*|$)')
_ALLOWED_KEYS = frozenset(("id", "ts", "tsm", "nonce", "hash", "error", "ext", "mac", "app", "dlg"))
_VALUE = re.compile(r"[ a-zA-Z0-9_!#$%&'()*+,\-./:;<=>?@\[\]^`{|}~]*")
"""The characters a Hawk attribute may hold (mohawk's and Hawk's)."""


class HawkHeaderError(ValueError):
    """A header that is not Hawk, or not well formed, or a value a header cannot carry; the
    message says how."""


def parse_header(header: str) -> dict[str, str]:
    """The attributes of ``Authorization: Hawk k="v", ...``, refused as mohawk refuses them:
    over :data:`MAX_HEADER_LENGTH`, another scheme, an unknown or repeated key, a character
    Hawk does not allow, or text that is not ``key="value"`` pairs."""
    if len(header) > MAX_HEADER_LENGTH:
        raise HawkHeaderError(f"Header exceeds maximum length of {MAX_HEADER_LENGTH}")
    scheme, _, rest = header.partition(" ")
    if scheme.lower() != "hawk":
        raise HawkHeaderError(f"Unknown scheme '{scheme}' when parsing header")
    attributes: dict[str, str] = {}
    at = 0
    for match in _ATTRIBUTE.finditer(rest):
        if match.start() != at:
            break
        key, value = match["key"], match["value"]
        if key not in _ALLOWED_KEYS:
            raise HawkHeaderError(f"Unknown Hawk key '{key}' when parsing header")
        if _VALUE.fullmatch(value) is None:
            raise HawkHeaderError(f"header value name={key} contained an illegal character")
        if key in attributes:
            raise HawkHeaderError(f"Duplicate key in header: {key}")
        attributes[key] = value
        at = match.end()
    if at != len(rest):
        raise HawkHeaderError("Couldn't parse Hawk header")
    return attributes


def normalized_string(
    attributes: Mapping[str, str], *, method: str, url: str, kind: str = "header"
) -> str:
    """The text a MAC covers: the request to ``url`` (origin and target) and the header's (or
    bewit's) ``ts``, ``nonce``, ``hash``, ``ext``, ``app`` and ``dlg``.

    :raises ValueError: ``url``'s port is not a number.
    """
    host, port, name = _url_parts(url)
    lines = [
        f"hawk.1.{kind}",
        attributes["ts"],
        attributes["nonce"],
        method.upper(),
        name,
        host,
        port,
        attributes.get("hash", ""),
        attributes.get("ext", ""),
    ]
    if attributes.get("app"):
        lines += [attributes["app"], attributes.get("dlg", "")]
    lines.append("")
    return "\n".join(lines)


def request_mac(
    key: str, attributes: Mapping[str, str], *, method: str, url: str, kind: str = "header"
) -> bytes:
    """The base64 MAC of :func:`normalized_string` signed with ``key`` (sha256).

    :raises ValueError: ``url``'s port is not a number, or ``key`` is not ASCII.
    """
    normalized = normalized_string(attributes, method=method, url=url, kind=kind)
    digest = hmac.new(key.encode("ascii"), normalized.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest)


def payload_hash(content: bytes, content_type: str) -> bytes:
    """The base64 ``hash`` of a body with its ``Content-Type`` (parameters dropped)."""
    media_type = content_type.split(";")[0].strip().lower()
    digest = hashlib.sha256(b"hawk.1.payload\n" + media_type.encode() + b"\n" + content + b"\n")
    return base64.b64encode(digest.digest())


def matches(expected: bytes, given: str) -> bool:
    """Whether a MAC or hash sent as ``given`` is ``expected``, in constant time."""
    return hmac.compare_digest(expected, given.encode())


def new_nonce() -> str:
    """A fresh nonce as mohawk makes one: 6 characters of URL-safe base64 of random bytes."""
    return base64.urlsafe_b64encode(os.urandom(6))[:6].decode()


def request_header(
    *,
    client_id: str,
    key: str,
    method: str,
    url: str,
    content: str | bytes | None,
    content_type: str | None,
    ext: str | None = None,
    app: str | None = None,
    dlg: str | None = None,
    nonce: str | None = None,
    timestamp: int | None = None,
) -> str:
    """The ``Authorization`` value ``mohawk.Sender`` writes for this request (sha256, the
    payload always hashed; ``None`` content or type hashed as empty, as mohawk hashes them);
    a fresh nonce and the current time unless given.

    :raises HawkHeaderError: a value (``client_id``, ``ext``, ``app``, ``dlg``, ``nonce``)
        holds a character a Hawk header cannot carry.
    :raises ValueError: ``url`` is empty or its port is not a number, or ``key`` is not ASCII.
    """
    if not url:
        raise ValueError("url was empty")
    body = content.encode() if isinstance(content, str) else content or b""
    attributes = {
        "ts": str(timestamp or int(time.time())),
        "nonce": new_nonce() if nonce is None else nonce,
        "hash": payload_hash(body, content_type or "").decode(),
    }
    # Order and omissions as mohawk's: mac, hash, id, ts, nonce, then ext, app and dlg if set.
    fields = [("mac", ""), ("hash", attributes["hash"]), ("id", client_id)]
    fields += [("ts", attributes["ts"]), ("nonce", attributes["nonce"])]
    for name, value in (("ext", ext), ("app", app), ("dlg", dlg)):
        if value:
            attributes[name] = value
            fields.append((name, value))
    fields[0] = ("mac", request_mac(key, attributes, method=method, url=url).decode())
    for name, value in fields:
        if _VALUE.fullmatch(value) is None:
            raise HawkHeaderError(f"header value name={name} contained an illegal character")
    return "Hawk " + ", ".join(f'{name}="{value}"' for name, value in fields)


@functools.lru_cache(maxsize=1024)
def _url_parts(url: str) -> tuple[str, str, str]:
    """``(host, port, path?query)`` as mohawk signs them: ``urlparse``'s lower-cased host, the
    scheme's default port when none is given, the path without ``;params`` and fragment.
    Cached because a route's URL recurs (a claimWork poll's is always the same)."""
    parts = urlparse(url)
    port = parts.port
    if port is None:
        port = {"http": 80, "https": 443}.get(parts.scheme)
    name = f"{parts.path}?{parts.query}" if parts.query else parts.path
    return parts.hostname or "", str(port), name
