"""Hawk's arithmetic on the receiving side: parsing an ``Authorization: Hawk`` header, the
request MAC and the payload hash, byte for byte as ``mohawk`` (which the official Python client
signs with) computes them.

:class:`~coordinator.api.auth.Authenticator` verifies every signed request with these instead
of ``mohawk.Receiver``, which formats its debug log lines (``pprint`` of the parsed header, the
URL and the payload) whether or not DEBUG is on, parses the header a second time and compares
MACs in a Python loop: two thirds of a verification's time. Comparisons here are
:func:`hmac.compare_digest`. What a request must satisfy, and in which order, stays
:mod:`coordinator.api.auth`'s.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import re
from urllib.parse import urlparse

MAX_HEADER_LENGTH = 4096
"""mohawk's limit on a header's length."""

_ATTRIBUTE = re.compile(r'(?P<key>\w+)="(?P<value>[^"\\]*)"\s*(?:,\s*|$)')
_ALLOWED_KEYS = frozenset(("id", "ts", "tsm", "nonce", "hash", "error", "ext", "mac", "app", "dlg"))
_VALUE = re.compile(r"[ a-zA-Z0-9_!#$%&'()*+,\-./:;<=>?@\[\]^`{|}~]*")
"""The characters a Hawk attribute may hold (mohawk's and Hawk's)."""


class HawkHeaderError(ValueError):
    """A header that is not Hawk, or not well formed; the message says how."""


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


def request_mac(
    key: str, attributes: dict[str, str], *, method: str, url: str, kind: str = "header"
) -> bytes:
    """The base64 MAC of a request to ``url`` (origin and target) signed with ``key``, over
    the header's (or bewit's) ``ts``, ``nonce``, ``hash``, ``ext``, ``app`` and ``dlg``.

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
    digest = hmac.new(key.encode("ascii"), "\n".join(lines).encode(), hashlib.sha256).digest()
    return base64.b64encode(digest)


def payload_hash(content: bytes, content_type: str) -> bytes:
    """The base64 ``hash`` of a body with its ``Content-Type`` (parameters dropped)."""
    media_type = content_type.split(";")[0].strip().lower()
    digest = hashlib.sha256(b"hawk.1.payload\n" + media_type.encode() + b"\n" + content + b"\n")
    return base64.b64encode(digest.digest())


def matches(expected: bytes, given: str) -> bool:
    """Whether a MAC or hash sent as ``given`` is ``expected``, in constant time."""
    return hmac.compare_digest(expected, given.encode())


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
