"""What of a URL may be shown: the one rule for logs, error bodies and configuration messages
that name a database or a broker."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def without_credentials(url: str) -> str:
    """``url`` without its user, password, query and fragment."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
