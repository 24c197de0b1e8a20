"""JSON Schema validation of request and response bodies and of path and query parameters.

Owns loading ``schemas/v1/*.json`` (once, into a ``referencing`` registry so ``$ref`` between
files resolves offline) and the cached validators built from them; each validator gets its
schema with every ``$ref`` already resolved, which makes validation about three times faster.
Schemas are named by file stem (``create-task-request``); a checkout keeps them in the
top-level ``schemas/v1`` beside ``coordinator/``, and the wheel installs them as
``coordinator/schemas/v1`` (``pyproject.toml`` maps the one onto the other).

A bad request raises :class:`~coordinator.api.errors.InputValidationError` naming every failing
path and why; a bad response is our own bug and raises :class:`ResponseSchemaError`, which is
deliberately not an :class:`~coordinator.api.errors.ApiError` so the API answers 500.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema_rs
from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema.protocols import Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

import coordinator
from coordinator.api.endpoints import PARAMETERS, Endpoint, Parameter
from coordinator.api.errors import InputValidationError
from coordinator.domain.records import from_iso

if TYPE_CHECKING:
    # referencing exports Resolver only from its private module; annotations need nothing more.
    from referencing._core import Resolver

_PACKAGE = Path(coordinator.__file__).resolve().parent


def _schemas_dir() -> Path:
    """Installed inside the package by the wheel; at the top of a checkout beside it."""
    installed = _PACKAGE / "schemas" / "v1"
    return installed if installed.is_dir() else _PACKAGE.parent / "schemas" / "v1"


SCHEMAS_DIR = _schemas_dir()
SCHEMA_BASE_URI = "https://queue-coordinator/schemas/v1/"

_MAX_SHOWN = 80
"""Longest quotation of a failing instance in a message; the instance may be megabytes."""

# RFC 3339 proper: fromisoformat alone also takes ISO 8601 forms JSON Schema does not allow
# (basic format, missing seconds, a space instead of ``T``).
_DATE_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s\x00-\x1f\x7f]*")


class ResponseSchemaError(AssertionError):
    """A response body the coordinator produced does not match its schema."""


def _is_date_time(instance: str) -> bool:
    if not _DATE_TIME.fullmatch(instance):
        return False
    try:
        from_iso(instance)
    except ValueError:
        return False
    return True


def _is_uri(instance: str) -> bool:
    return bool(_URI.fullmatch(instance))


def _is_hostname(instance: str) -> bool:
    """RFC 1123: dot-separated labels of letters, digits and hyphens, neither starting nor
    ending with a hyphen, each 1 to 63 long, 253 in all (an IPv4 address is one too)."""
    return len(instance) <= 253 and all(
        _LABEL.fullmatch(label) for label in instance.removesuffix(".").split(".")
    )


_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)

_FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": _is_date_time,
    "uri": _is_uri,
    "hostname": _is_hostname,
}
"""Our own checkers for the formats jsonschema checks only with optional packages; both
validators below use them, so they agree on what a date-time is."""


def _format_checker() -> FormatChecker:
    checker = FormatChecker()
    for name, check in _FORMATS.items():
        checker.checks(name)(
            lambda instance, check=check: not isinstance(instance, str) or check(instance)
        )
    return checker


_FORMAT_CHECKER = _format_checker()


@functools.cache
def _compile_pattern(pattern: str) -> re.Pattern[str]:
    # JSON Schema patterns are ECMA-262, where a final ``$`` is the end of the string; in
    # Python it also matches before a trailing newline, which would let ``"wt\n"`` pass
    # ``^[a-zA-Z0-9-_]{1,38}$``.
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def _pattern(
    validator: Any, pattern: str, instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if isinstance(instance, str) and not _compile_pattern(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


# The type stubs leave ``extend`` untyped.
_Validator: type[Validator] = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, {"pattern": _pattern}
)


@functools.cache
def schemas() -> Mapping[str, Mapping[str, Any]]:
    """Every schema file's contents by name. Not checked against the 2020-12 metaschema
    here: the files ship with the package, tests/unit/test_validation.py checks each, and
    the check cost every process that starts a coordinator 0.15 s of CPU."""
    loaded: dict[str, Mapping[str, Any]] = {}
    for path in sorted(SCHEMAS_DIR.glob("*.json")):
        contents = json.loads(path.read_text(encoding="utf-8"))
        expected_id = SCHEMA_BASE_URI + path.name
        if contents.get("$id") != expected_id:
            raise ValueError(f"{path} must have $id {expected_id!r}")
        loaded[path.stem] = contents
    if not loaded:
        raise FileNotFoundError(f"no schemas found in {SCHEMAS_DIR}")
    return loaded


@functools.cache
def _registry() -> Registry[Any]:
    resources = [
        (contents["$id"], Resource.from_contents(contents, default_specification=DRAFT202012))
        for contents in schemas().values()
    ]
    registry: Registry[Any] = Registry().with_resources(resources)
    return registry.crawl()


_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment"})
LITERAL_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
"""Keywords whose values are data, not schemas: a ``$ref`` inside them is not a reference."""
SCHEMA_MAP_KEYWORDS = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})
"""Keywords whose values map arbitrary names (even ``default``) to schemas."""
_MAX_REF_DEPTH = 16


def _inline(node: Any, resolver: Resolver[Any], depth: int = 0) -> Any:
    """``node`` with every ``$ref`` replaced by what it points at, looked up in the registry.

    Resolving references at run time (URL joins and registry look-ups) was more than half of
    the cost of validating a response; the schemas are acyclic, so each is resolved once here.
    """
    if isinstance(node, list):
        return [_inline(item, resolver, depth) for item in node]
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("$ref"), str):
        if depth >= _MAX_REF_DEPTH:
            raise ValueError(f"$ref {node['$ref']!r} nests too deeply: are the schemas cyclic?")
        resolved = resolver.lookup(node["$ref"])
        target = _inline(resolved.contents, resolved.resolver, depth + 1)
        target = {k: v for k, v in target.items() if k not in ("$id", "$schema", "$defs")}
        siblings = {k: _inline(v, resolver, depth) for k, v in node.items() if k != "$ref"}
        if siblings.keys() <= _ANNOTATIONS:
            return {**target, **siblings}
        return {"allOf": [target, siblings]}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in LITERAL_KEYWORDS:
            out[key] = value
        elif key in SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
            out[key] = {name: _inline(sub, resolver, depth) for name, sub in value.items()}
        else:
            out[key] = _inline(value, resolver, depth)
    return out


def _build(schema: Mapping[str, Any]) -> Validator:
    resolver = _registry().resolver(base_uri=schema.get("$id", SCHEMA_BASE_URI))
    return _Validator(_inline(schema, resolver), format_checker=_FORMAT_CHECKER)


@functools.cache
def _validator(schema_name: str) -> Validator:
    _schema_id(schema_name)  # a clear KeyError for an unknown name
    return _build(schemas()[schema_name])


@functools.cache
def _parameter_validator(definition: str) -> Validator:
    return _build({"$ref": _parameter_ref(definition)})


def preload(endpoints: Iterable[Endpoint]) -> None:
    """Load every schema and build every validator now, so that a broken schema stops the
    server at startup instead of failing its first request."""
    for name in schemas():
        _validator(name)
        _fast(_schema_id(name), formats=True)
        _fast(_schema_id(name), formats=False)
    for parameter in {*PARAMETERS.values(), *(p for e in endpoints for p in e.query)}:
        _parameter_validator(parameter.schema)
        _fast(_parameter_ref(parameter.schema), formats=True)


def _errors(validator: Validator, instance: Any, where: str, *, quote: bool = True) -> list[str]:
    errors = sorted(
        validator.iter_errors(instance),
        key=lambda e: ([str(p) for p in e.absolute_path], e.message),
    )
    describe = _describe if quote else _describe_unquoted
    return [describe(error, where) for error in errors]


def validate(
    schema_name: str, instance: object, *, where: str = "body", quote: bool = True
) -> None:
    """Check a request body against the named schema.

    :param where: how messages name the instance's root, e.g. ``body``.
    :param quote: messages may quote the failing values; without, they say only where and
        which rule failed (a body holding a secret).
    :raises InputValidationError: listing every failing path, e.g.
        ``body.metadata.owner: 'x' is not a 'email'``.
    """
    if _fast(_schema_id(schema_name), formats=True).is_valid(instance):
        return
    problems = _errors(_validator(schema_name), instance, where, quote=quote)
    if problems:
        raise InputValidationError(
            f"{where} does not match the schema {schema_name}: " + "; ".join(problems)
        )


@functools.cache
def _fast(schema_ref: str, *, formats: bool) -> jsonschema_rs.Validator:
    """The compiled (Rust) validator of a schema: about a hundred times cheaper than the
    reference validator, which made validation the largest cost of a request
    (docs/performance-history.md). It only decides *valid*; the reference validator words every
    rejection and has the last say, so the two can differ only where the fast one is more
    lenient, and both use :data:`_FORMATS`.

    :param schema_ref: the ``$id`` of a schema file, or a ``$ref`` into one.
    :param formats: check ``format`` (requests); responses skip it: every date-time we send
        comes from :func:`coordinator.domain.records.to_iso`.
    """
    return jsonschema_rs.validator_for(
        {"$ref": schema_ref},
        registry=_fast_registry(),
        validate_formats=formats,
        formats=_FORMATS if formats else None,
    )


@functools.cache
def _fast_registry() -> jsonschema_rs.Registry:
    return jsonschema_rs.Registry(
        [(str(contents["$id"]), dict(contents)) for contents in schemas().values()]
    )


def _schema_id(schema_name: str) -> str:
    try:
        return str(schemas()[schema_name]["$id"])
    except KeyError:
        raise KeyError(f"no schema named {schema_name!r} in {SCHEMAS_DIR}") from None


def _parameter_ref(definition: str) -> str:
    return f"{SCHEMA_BASE_URI}common.json#/$defs/{definition}"


CHECK_BUILT_OUTPUT = False
"""Check the responses of endpoints with :attr:`~coordinator.api.endpoints.Endpoint.built_output`
as well (the test suite's coordinators do: tests/conftest.py). Off in service: checking a
claimWork, resolveRuns or createTasks answer cost a twentieth of the coordinator's CPU a task
under store dispatch, to re-check what the record builders make."""


def validate_response(schema_name: str, instance: object) -> None:
    """Check a response body the coordinator produced against the named schema.

    :raises ResponseSchemaError: our bug, not the caller's.
    """
    if _fast(_schema_id(schema_name), formats=False).is_valid(instance):
        return
    problems = _errors(_validator(schema_name), instance, "response")
    if problems:
        raise ResponseSchemaError(
            f"response does not match the schema {schema_name}: " + "; ".join(problems)
        )


def validate_params(
    params: Mapping[str, str], parameters: Mapping[str, Parameter] = PARAMETERS
) -> None:
    """Check decoded path and query parameters against their schemas in ``common.json``.

    :param parameters: what each name means (an endpoint's query parameters; by default
        :data:`~coordinator.api.endpoints.PARAMETERS`). Other names are not checked here (the
        route handler refuses query parameters its endpoint does not take).
    :raises InputValidationError: naming every bad parameter.
    """
    problems: list[str] = []
    for name, value in params.items():
        parameter = parameters.get(name)
        if parameter is not None and not _fast(
            _parameter_ref(parameter.schema), formats=True
        ).is_valid(value):
            problems += _errors(_parameter_validator(parameter.schema), value, name)
    if problems:
        raise InputValidationError("invalid URL parameters: " + "; ".join(problems))


def _location(where: str, path: Iterable[str | int]) -> str:
    text = where
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part.isidentifier():
            text += f".{part}"
        else:
            text += f"[{part!r}]"
    return text


def _describe(error: ValidationError, where: str) -> str:
    location = _location(where, error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        message = _additional_properties(error.instance, error.schema)
    elif error.validator in ("anyOf", "oneOf") and error.context:
        message = _alternatives(error)
    else:
        message = error.message
        # jsonschema's messages open with the instance's repr; shorten just that, so the
        # reason after it survives.
        shown = repr(error.instance)
        if len(shown) > _MAX_SHOWN and message.startswith(shown):
            message = shown[: _MAX_SHOWN - 1] + "…" + message[len(shown) :]
    return f"{location}: {message}"


def _describe_unquoted(error: ValidationError, where: str) -> str:
    """:func:`_describe` without the failing value: only its place, and the rule it breaks
    (a missing or unknown property's name is the body's shape, not a value)."""
    location = _location(where, error.absolute_path)
    rule = error.validator_value
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        message = _additional_properties(error.instance, error.schema)
    elif error.validator == "required":
        message = error.message
    elif error.validator == "type":
        message = f"must be of type {rule!r}"
    elif error.validator == "format":
        message = f"must be a {rule!r}"
    else:
        message = f"does not satisfy the schema's {error.validator!r} ({rule!r})"
    return f"{location}: {message}"


def _additional_properties(instance: Mapping[str, Any], schema: Any) -> str:
    known = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
    patterns = schema.get("patternProperties", {}) if isinstance(schema, Mapping) else {}
    extras = [
        key for key in instance if key not in known and not any(re.search(p, key) for p in patterns)
    ]
    names = ", ".join(repr(key) for key in extras)
    if len(extras) == 1:
        return f"additional property {names} is not allowed"
    return f"additional properties {names} are not allowed"


def _alternatives(error: ValidationError) -> str:
    """Why none of the branches of an ``anyOf``/``oneOf`` matched, branch by branch."""
    branches: dict[object, list[str]] = {}
    for sub in error.context or ():
        branch = sub.relative_schema_path[0] if sub.relative_schema_path else None
        branches.setdefault(branch, []).append(sub.message)
    reasons = "; or ".join(" and ".join(messages) for messages in branches.values())
    if error.validator == "oneOf":
        return f"must match exactly one alternative, but: {reasons}"
    return f"must match one of the alternatives, but: {reasons}"
