"""The artifact schemas (schemas/v1): Taskcluster's createArtifact family of bodies, checked
through the API's own validators (:mod:`coordinator.api.validation`), each valid example
accepted and each invalid one refused with a message naming what is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.api.errors import InputValidationError
from coordinator.api.validation import ResponseSchemaError, validate, validate_response

EXPIRES = "2031-01-01T00:00:00.000Z"
PUT_URL = "http://127.0.0.1:8080/api/queue/v1/task/x/runs/0/artifact-upload/a?expires=1&sig=f"

VALID_REQUESTS: list[dict[str, Any]] = [
    {"storageType": "s3", "expires": EXPIRES, "contentType": "text/plain"},
    {"storageType": "s3", "expires": EXPIRES, "contentType": "text/plain", "contentLength": 0},
    # scriptworker's arrow isoformat: microseconds and an offset
    {"storageType": "s3", "expires": "2031-01-01T00:00:00.123000+00:00", "contentType": "a/b"},
    {"storageType": "object", "expires": EXPIRES, "contentType": "application/json"},
    {
        "storageType": "reference",
        "expires": EXPIRES,
        "url": "https://example.com/a",
        "contentType": "text/html",
    },
    {"storageType": "link", "expires": EXPIRES, "artifact": "public/logs/live.log"},
    {"storageType": "link", "expires": EXPIRES, "artifact": "a", "contentType": "text/plain"},
    {
        "storageType": "error",
        "expires": EXPIRES,
        "reason": "file-missing-on-worker",
        "message": "no such file",
    },
]

S3 = {"storageType": "s3", "expires": EXPIRES, "contentType": "text/plain"}
ERROR = {"storageType": "error", "expires": EXPIRES, "reason": "file-missing-on-worker"}

INVALID_REQUESTS: list[tuple[dict[str, Any], str]] = [
    ({**S3, "storageType": "azure"}, "'azure' is not one of"),
    ({"storageType": "s3", "contentType": "text/plain"}, "'expires' is a required property"),
    ({"storageType": "s3", "expires": EXPIRES}, "'contentType' is a required property"),
    ({**S3, "expires": "2031-01-01T00:00:00"}, "is not a 'date-time'"),
    ({**S3, "expires": "tomorrow"}, "is not a 'date-time'"),
    ({**S3, "contentType": "x" * 256}, "is too long"),
    ({**S3, "contentLength": -1}, "less than the minimum of 0"),
    ({**S3, "contentLength": 1.5}, "is not of type 'integer'"),
    ({**S3, "url": "https://example.com/"}, "('url' was unexpected)"),
    ({**S3, "bucket": "b"}, "additional property 'bucket' is not allowed"),
    (
        {"storageType": "reference", "expires": EXPIRES, "url": "https://example.com/"},
        "'contentType' is a required property",
    ),
    (
        {"storageType": "reference", "expires": EXPIRES, "url": "no uri", "contentType": "a"},
        "is not a 'uri'",
    ),
    ({"storageType": "link", "expires": EXPIRES}, "'artifact' is a required property"),
    ({"storageType": "link", "expires": EXPIRES, "artifact": 7}, "is not of type 'string'"),
    ({**ERROR, "message": "m", "reason": "tired"}, "'tired' is not one of"),
    ({**ERROR, "message": "m" * 4097}, "is too long"),
    ({**ERROR}, "'message' is a required property"),
    (
        {**ERROR, "message": "m", "contentType": "text/plain"},
        "('contentType' was unexpected)",
    ),
    (
        {"storageType": "link", "expires": EXPIRES, "artifact": "a", "contentLength": 1},
        "'contentLength' were unexpected",
    ),
]


@pytest.mark.parametrize("body", VALID_REQUESTS, ids=lambda b: str(b["storageType"]))
def test_valid_create_artifact_requests(body: dict[str, Any]) -> None:
    validate("post-artifact-request", body)


@pytest.mark.parametrize(("body", "expected"), INVALID_REQUESTS, ids=lambda v: str(v)[:40])
def test_invalid_create_artifact_requests(body: dict[str, Any], expected: str) -> None:
    with pytest.raises(InputValidationError, match="post-artifact-request") as caught:
        validate("post-artifact-request", body)
    assert expected in str(caught.value)


def test_a_create_artifact_request_is_an_object() -> None:
    with pytest.raises(InputValidationError, match="is not of type 'object'"):
        validate("post-artifact-request", ["s3"])


def test_finish_artifact_request() -> None:
    validate("finish-artifact-request", {"uploadId": "Jgj3vp06TJCopdyHUgtfww"})
    for body, expected in [
        ({}, "'uploadId' is a required property"),
        ({"uploadId": "not-a-slugid"}, "does not match"),
        ({"uploadId": "Jgj3vp06TJCopdyHUgtfww", "x": 1}, "additional property 'x'"),
    ]:
        with pytest.raises(InputValidationError) as caught:
            validate("finish-artifact-request", body)
        assert expected in str(caught.value), body


RECORD = {
    "storageType": "s3",
    "name": "public/logs/live_backing.log",
    "expires": EXPIRES,
    "contentType": "text/plain",
}

VALID_RESPONSES: list[tuple[str, Any]] = [
    (
        "post-artifact-response",
        {"storageType": "s3", "putUrl": PUT_URL, "expires": EXPIRES, "contentType": "text/plain"},
    ),
    ("post-artifact-response", {"storageType": "reference"}),
    ("post-artifact-response", {"storageType": "link"}),
    ("post-artifact-response", {"storageType": "error"}),
    ("artifact-response", RECORD),
    ("artifact-response", {**RECORD, "storageType": "link", "contentLength": 0}),
    ("list-artifacts-response", {"artifacts": []}),
    (
        "list-artifacts-response",
        {"artifacts": [RECORD, {**RECORD, "name": "b"}], "continuationToken": "abc"},
    ),
    ("get-artifact-response", {"storageType": "s3", "url": PUT_URL}),
    ("get-artifact-response", {"storageType": "reference", "url": "https://example.com/"}),
    ("artifact-content-response", {"storageType": "s3", "url": PUT_URL}),
    ("artifact-content-response", {"storageType": "reference", "url": "https://e.com/"}),
    (
        "artifact-content-response",
        {"storageType": "error", "reason": "file-missing-on-worker", "message": "gone"},
    ),
]

INVALID_RESPONSES: list[tuple[str, Any, str]] = [
    ("post-artifact-response", {"storageType": "s3", "expires": EXPIRES}, "putUrl"),
    ("post-artifact-response", {"storageType": "object"}, "must match exactly one"),
    ("artifact-response", {**RECORD, "storageType": "object"}, "'object' is not one of"),
    ("artifact-response", {**RECORD, "name": "n" * 1025}, "is too long"),
    ("artifact-response", {**RECORD, "contentLength": -1}, "less than the minimum"),
    ("artifact-response", {"storageType": "s3", "name": "a"}, "'expires' is a required"),
    ("list-artifacts-response", {"artifacts": [RECORD, RECORD]}, "non-unique elements"),
    ("list-artifacts-response", {}, "'artifacts' is a required property"),
    ("get-artifact-response", {"storageType": "s3"}, "'url' is a required property"),
    ("get-artifact-response", {"storageType": "link", "url": PUT_URL}, "'link' is not one of"),
    ("artifact-content-response", {"storageType": "link", "url": PUT_URL}, "exactly one"),
    ("artifact-content-response", {"storageType": "error", "reason": "r"}, "exactly one"),
]


@pytest.mark.parametrize(("schema", "body"), VALID_RESPONSES, ids=lambda v: str(v)[:40])
def test_valid_artifact_responses(schema: str, body: Any) -> None:
    validate_response(schema, body)


@pytest.mark.parametrize(
    ("schema", "body", "expected"), INVALID_RESPONSES, ids=lambda v: str(v)[:40]
)
def test_invalid_artifact_responses(schema: str, body: Any, expected: str) -> None:
    with pytest.raises(ResponseSchemaError) as caught:
        validate_response(schema, body)
    assert expected in str(caught.value)
