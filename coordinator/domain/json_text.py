"""Compact JSON: the one encoding of the API's response bodies and the store's JSON columns,
and the reading of what the store holds.

orjson writes it (a tenth of the standard library's time, and the coordinator encodes every
record it stores and every status it answers); the standard library takes over for what
orjson refuses, an integer beyond 64 bits, which a task's payload may hold. Both write UTF-8
without ``\\u`` escapes and without spaces, so the text is the same either way. Reading, the
standard library takes over wherever orjson might not give back exactly what was written.
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


_DIGITS_AS_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19
"""Nineteen digits in a row, once every digit reads as 0: where an integer beyond 64 bits
may be, which orjson reads as a float. Digit runs in strings and fractions match too, and
are read by the standard library, exactly, only slower. Translating the bytes and looking
for the run costs a tenth of a regular expression's search."""


def exact_loads(text: str) -> Any:
    """The value of JSON ``text`` as the standard library's ``json.loads`` gives it: through
    orjson (half the time, with this check) unless the text may hold an integer orjson would
    not read exactly, or orjson refuses it."""
    if _LONG_NUMBER not in text.encode("utf-8").translate(_DIGITS_AS_ZEROS):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)
