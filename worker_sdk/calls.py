"""A function call as a task's payload: ``{"function": "<module>:<name>", "args": [...],
"kwargs": {...}}``, written by a producer's ``dispatch`` and read by the worker that serves it.

Both sides check what they are given, with no I/O: :func:`encode_call` binds the arguments to
the function's signature and refuses anything that is not JSON (a set, a datetime, an
object, a float that JSON cannot hold) with a :class:`TypeError` naming the argument, so a
bad call fails at dispatch and not as a failed task later; :func:`decode_call` refuses a
payload that is no such call, and :func:`bind` arguments that do not fit the function the
worker has, each with :class:`~worker_sdk.errors.MalformedPayload`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from worker_sdk.errors import MalformedPayload

JSON_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True, kw_only=True)
class FunctionCall:
    """One call of a registered function, as a task's payload carries it."""

    function: str
    """``<module>:<qualified name>``, or the name the function was registered under."""
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]

    def payload(self) -> dict[str, Any]:
        return {"function": self.function, "args": list(self.args), "kwargs": dict(self.kwargs)}


def function_name(function: Callable[..., Any]) -> str:
    """``<module>:<qualified name>``: what a payload's ``function`` calls ``function`` by."""
    return f"{function.__module__}:{function.__qualname__}"


def encode_call(
    name: str, signature: inspect.Signature, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> FunctionCall:
    """The call of the function registered as ``name``, whose ``signature`` this is, with
    ``args`` and ``kwargs``.

    :raises TypeError: the arguments do not bind to its signature, or one is not JSON (the
        message names it, and where inside it the offending value is).
    """
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise TypeError(f"{name}: {error}") from None
    for parameter, value in bound.arguments.items():
        kind = bound.signature.parameters[parameter].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            for index, item in enumerate(value):
                _check_json(item, f"{name}: argument {parameter}[{index}]")
        elif kind is inspect.Parameter.VAR_KEYWORD:
            for key, item in value.items():
                _check_json(item, f"{name}: argument {key}")
        else:
            _check_json(value, f"{name}: argument {parameter}")
    return FunctionCall(function=name, args=tuple(args), kwargs=dict(kwargs))


def _check_json(value: Any, where: str) -> None:
    """Raise TypeError unless ``value`` is JSON: what ``json.dumps`` writes and reads back as
    it was (a tuple becomes a list, and is accepted as one)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise TypeError(f"{where} is {value!r}, which JSON cannot hold")
    if isinstance(value, JSON_SCALARS):
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has the key {key!r}: JSON object keys are strings")
            _check_json(item, f"{where}[{key!r}]")
        return
    raise TypeError(
        f"{where} is a {type(value).__qualname__}, not JSON: pass str, int, float, bool, None, "
        "or lists and dicts of them (a datetime as an ISO string, a set as a list, an object "
        "as its id or fields)"
    )


def decode_call(payload: Any) -> FunctionCall:
    """The call a task's payload asks for.

    :raises MalformedPayload: the payload is not ``{"function": str, "args": list, "kwargs":
        object}`` (``args`` and ``kwargs`` may be left out).
    """
    if not isinstance(payload, Mapping) or not isinstance(payload.get("function"), str):
        raise MalformedPayload('the payload is not a function call: it needs "function": a name')
    args = payload.get("args", [])
    kwargs = payload.get("kwargs", {})
    if not isinstance(args, list):
        raise MalformedPayload(f'the payload\'s "args" is not a list: {args!r}')
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise MalformedPayload(f'the payload\'s "kwargs" is not an object: {kwargs!r}')
    unknown = set(payload) - {"function", "args", "kwargs"}
    if unknown:
        raise MalformedPayload(f"the payload has fields no function call has: {sorted(unknown)}")
    return FunctionCall(function=payload["function"], args=tuple(args), kwargs=dict(kwargs))


def bind(call: FunctionCall, function: Callable[..., Any]) -> inspect.BoundArguments:
    """``call``'s arguments bound to ``function``, the worker's version of it.

    :raises MalformedPayload: they do not fit its signature (the producer's version differs).
    """
    signature = inspect.signature(function)
    try:
        return signature.bind(*call.args, **call.kwargs)
    except TypeError as error:
        raise MalformedPayload(
            f"the arguments do not bind to {call.function}{signature}: {error}"
        ) from None
