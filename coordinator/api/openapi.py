"""The OpenAPI 3.1 document of each service (:data:`coordinator.api.services.SERVICES`), built
from its endpoint table and the schema files.

Each schema file an operation reaches (through its ``$ref``s, transitively) becomes
``components/schemas/<name>``. Its ``$id`` is dropped and every
``$ref`` is rewritten to point into the document (``task-status.json`` →
``#/components/schemas/task-status``, ``#/$defs/run`` →
``#/components/schemas/task-status/$defs/run``), because OpenAPI tools resolve references
against the document, not against our ``$id`` URIs. ``$schema`` is dropped too: the document's
``jsonSchemaDialect`` says 2020-12 once for all.

The document says what the API accepts, so that a client generated from it is not surprised:
every parameter's pattern and length, a repeatable parameter as an array of at most as many
values as the API takes, and the management API's task filters as one exploded ``filter``
object (``?state=running&tag=k:v``), which lets cancelTasks and deleteTasks require at least
one of them (``minProperties``). Each operation's scopes are its ``x-scopes`` (and, for the
batch calls on runs, ``x-run-scopes``), Taskcluster's templates with ``<name>`` placeholders,
repeated in its description. What no schema can say (a deadline after ``created``, a
continuationToken that this API issued for this listing, a run named twice in one batch) is
a 400 naming what was wrong. The artifact routes answer what Taskcluster's do besides 200
(getArtifact's 303 with ``Location``, an error artifact's 424, an expired artifact's 410), and
the two that carry an artifact's bytes take and give them in any media type.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from coordinator.api.endpoints import (
    PARAMETERS,
    TASK_FILTERS,
    Endpoint,
    FilterUse,
    Parameter,
)
from coordinator.api.services import Service
from coordinator.api.validation import LITERAL_KEYWORDS, SCHEMA_MAP_KEYWORDS, schemas
from coordinator.domain.scopes import Template

ERROR_STATUSES: Mapping[str, str] = {
    "400": "InputValidationError (the body or a parameter does not match its schema) or "
    "InputError (the request is not acceptable).",
    "401": "AuthenticationFailed: the Hawk credentials are missing or invalid.",
    "403": "InsufficientScopes: the client lacks a scope the request needs.",
    "404": "ResourceNotFound: no such task or run.",
    "409": "RequestConflict: the request conflicts with the task's current state.",
    "413": "InputTooLarge: the request body is too large.",
    "500": "InternalServerError.",
    "503": "ServiceUnavailable: Azure, the store or the artifact storage does not answer; retry "
    "after `Retry-After` seconds.",
}

_STORAGE_TYPE_HEADER = {
    "x-taskcluster-artifact-storage-type": {
        "description": "The storage type of the artifact the links led to.",
        "schema": {"type": "string"},
    }
}
_BYTES = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
"""An artifact's bytes, in the media type they were created with."""

STATUSES: Mapping[str, dict[str, Any]] = {
    "410": {
        "$ref": "#/components/responses/Error",
        "description": "ResourceExpired: the artifact (or one its links lead to) has expired.",
    },
    "411": {
        "$ref": "#/components/responses/Error",
        "description": "LengthRequired: the upload has no Content-Length.",
    },
    "429": {
        "$ref": "#/components/responses/Error",
        "description": "TooManyRequests: the task queue is paused, or at its limits "
        "(`maxRunning`, `maxClaimsPerSecond`), or the task's `concurrencyKey` at its "
        "`maxRunningPerKey`; ask again after `Retry-After` seconds.",
    },
    "424": {
        "description": "The artifact is an `error` artifact: why the worker could not upload it.",
        "headers": _STORAGE_TYPE_HEADER,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"reason": {"type": "string"}, "message": {"type": "string"}},
                    "required": ["reason", "message"],
                }
            }
        },
    },
}
"""The answers only some endpoints give (:attr:`~coordinator.api.endpoints.Endpoint.statuses`)."""


def build_openapi(public_url: str, service: Service) -> dict[str, Any]:
    """The document of ``service``, with the server at ``<public_url><prefix>``."""
    errors = {**ERROR_STATUSES, **service.errors}
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in service.endpoints:
        paths.setdefault(endpoint.route, {})[endpoint.method.lower()] = _operation(endpoint, errors)
    error_response = {
        "description": "An error.",
        "content": {"application/json": {"schema": _ref("error")}},
    }
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {"title": service.title, "version": "v1", "description": service.about},
        "servers": [{"url": public_url.rstrip("/") + service.prefix}],
        "paths": paths,
        "components": {
            "schemas": _components([paths, error_response]),
            "responses": {"Error": error_response},
        },
    }


def _components(roots: list[Any]) -> dict[str, Any]:
    """The schema files ``roots`` reach through their ``$ref``s, transitively, as components."""
    files = schemas()
    components: dict[str, Any] = {}
    pending = roots
    while pending:
        names = {
            ref.removeprefix(_SCHEMAS).partition("/")[0]
            for ref in _refs(pending)
            if ref.startswith(_SCHEMAS)
        } - components.keys()
        pending = []
        for name in sorted(names):
            components[name] = _component(name, files[name])
            pending.append(components[name])
    return {name: components[name] for name in files if name in components}


_SCHEMAS = "#/components/schemas/"


def _refs(node: Any) -> list[str]:
    """Every ``$ref`` in ``node``, not counting the literal values of ``enum`` and its kin."""
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    if not isinstance(node, dict):
        return []
    ref = node.get("$ref")
    own = [ref] if isinstance(ref, str) else []
    return own + [
        ref for key, value in node.items() if key not in LITERAL_KEYWORDS for ref in _refs(value)
    ]


def _operation(endpoint: Endpoint, errors: Mapping[str, str]) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": endpoint.operation_id,
        "summary": endpoint.title,
        "description": endpoint.description
        + _scopes_text("Scopes", endpoint.scopes)
        + _scopes_text("Scopes of each run", endpoint.run_scopes),
        "x-taskcluster-method": endpoint.name,
        "x-stability": endpoint.stability,
    }
    if endpoint.scopes is not None:
        operation["x-scopes"] = endpoint.scopes
    if endpoint.run_scopes is not None:
        operation["x-run-scopes"] = endpoint.run_scopes
    if endpoint.stability == "deprecated":
        operation["deprecated"] = True
    parameters = [
        _parameter(PARAMETERS[name], location="path") for name in endpoint.path_parameters
    ]
    if endpoint.filters is not None:
        parameters.append(_filter_parameter(endpoint.filters))
    parameters += [_parameter(parameter, location="query") for parameter in endpoint.query]
    if parameters:
        operation["parameters"] = parameters
    if endpoint.input is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(endpoint.input)}},
        }
    elif endpoint.uploads:
        operation["requestBody"] = {"required": True, "content": _BYTES}
    operation["responses"] = {
        str(endpoint.success): _success(endpoint),
        **{status: STATUSES[status] for status in endpoint.statuses},
        **{
            status: {"$ref": "#/components/responses/Error", "description": description}
            for status, description in errors.items()
        },
    }
    return operation


def _success(endpoint: Endpoint) -> dict[str, Any]:
    """The documented success: JSON (its output schema, else an object), an artifact's bytes,
    a 303 redirect whose body is its output (or text, without one), or a 204 without a
    body."""
    if endpoint.success == 204:
        return {"description": "Success, no content."}
    if endpoint.success == 303 and endpoint.output is None:
        return {
            "description": "See Other: the content is at `Location`.",
            "headers": {
                "Location": {"required": True, "schema": {"type": "string", "format": "uri"}},
                **_STORAGE_TYPE_HEADER,
            },
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    if endpoint.downloads:
        return {"description": "The artifact's bytes.", "content": _BYTES}
    output = _ref(endpoint.output) if endpoint.output is not None else {"type": "object"}
    response: dict[str, Any] = {
        "description": "Success.",
        "content": {"application/json": {"schema": output}},
    }
    if endpoint.success == 303:
        response["description"] = "See Other: the content is at `Location` (also the body's `url`)."
        response["headers"] = {
            "Location": {"required": True, "schema": {"type": "string", "format": "uri"}},
            **_STORAGE_TYPE_HEADER,
        }
    return response


def _scopes_text(heading: str, template: Template | None) -> str:
    if template is None:
        return ""
    return f"\n\n{heading}:\n\n```json\n{json.dumps(template, indent=2)}\n```"


def _parameter(parameter: Parameter, *, location: str) -> dict[str, Any]:
    return {
        "name": parameter.name,
        "in": location,
        "required": location == "path" or parameter.required,
        "description": parameter.description,
        "schema": _value_schema(parameter),
    }


def _value_schema(parameter: Parameter) -> dict[str, Any]:
    """A parameter's schema: its value's, or an array of them for a repeatable one (sent as
    ``name=a&name=b``, OpenAPI's default for a query array)."""
    value = {"$ref": f"#/components/schemas/common/$defs/{parameter.schema}"}
    if parameter.repeat == 1:
        return value
    return {"type": "array", "items": value, "minItems": 1, "maxItems": parameter.repeat}


def _filter_parameter(use: FilterUse) -> dict[str, Any]:
    """The task filters as one ``form``-style exploded object: each property is a query
    parameter of its own on the wire."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: _value_schema(PARAMETERS[name]) for name in TASK_FILTERS},
        "additionalProperties": False,
    }
    if use == "required":
        schema["minProperties"] = 1
    return {
        "name": "filter",
        "in": "query",
        "style": "form",
        "explode": True,
        "required": use == "required",
        "description": "The task filters, each its own query parameter, combined with AND"
        + ("; at least one is required." if use == "required" else "."),
        "schema": schema,
    }


def _ref(schema_name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{schema_name}"}


def _component(name: str, schema: Any) -> Any:
    component = _rewrite_refs(name, schema)
    del component["$id"], component["$schema"]
    return component


def _rewrite_refs(current: str, node: Any) -> Any:
    """A copy of ``node`` with ``$ref``s pointing into the document; ``current`` is the name
    of the schema file the node comes from, against which a bare ``#...`` resolves."""
    if isinstance(node, list):
        return [_rewrite_refs(current, item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            file_part, _, fragment = value.partition("#")
            target = file_part.removesuffix(".json") if file_part else current
            out[key] = f"#/components/schemas/{target}{fragment}"
        elif key in LITERAL_KEYWORDS:
            out[key] = value
        elif key in SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
            out[key] = {name: _rewrite_refs(current, sub) for name, sub in value.items()}
        else:
            out[key] = _rewrite_refs(current, value)
    return out
