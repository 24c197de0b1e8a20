"""Compact JSON: the one encoding of the API's response bodies and the store's JSON columns.

orjson writes it (a tenth of the standard library's time, and the coordinator encodes every
record it stores and every status it answers); the standard library takes over for what
orjson refuses, an integer beyond 64 bits, which a task's payload may hold. Both write UTF-8
without ``\\u`` escapes and without spaces, so the text is the same either way.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_standard = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def compact_bytes(value: Any) -> bytes:
    """``value`` as compact JSON, UTF-8 encoded.

    :raises UnicodeEncodeError: a string holds a lone surrogate (no UTF-8 can carry it).
    """
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: a big integer, or a lone surrogate
        return _standard(value).encode("utf-8")


def compact(value: Any) -> str:
    """``value`` as compact JSON text."""
    try:
        return orjson.dumps(value).decode("utf-8")
    except TypeError:
        return _standard(value)
