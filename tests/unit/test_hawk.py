"""coordinator.api.hawk computes what mohawk (the official Python client's signer) computes: the
same parsed header, MAC, payload hash and bewit MAC for the requests clients send, and the
same headers refused."""

from __future__ import annotations

import mohawk
import mohawk.base
import mohawk.bewit
import mohawk.exc
import mohawk.util
import pytest

from coordinator.api import hawk

KEY = "k" * 44
URLS = [
    "http://127.0.0.1:8080/api/queue/v1/claim-work/proj/workers",
    "http://localhost/api/queue/v1/task/abc/runs/0/artifacts/public%2Flogs%2Flive.log",
    "https://Queue.Example.COM/api/queue/v1/task/abc?limit=10&continuationToken=x%2By",
    "https://example.com:8443/a;params/b;more?q=1",
    "http://[::1]:9000/api/auth/v1/scopes/expand",
]
CONTENT_TYPES = ["application/json", "Application/JSON; charset=utf-8", ""]


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("content_type", CONTENT_TYPES)
@pytest.mark.parametrize("ext", [None, "e30", "eyJjZXJ0aWZpY2F0ZSI6e319"])
def test_headers_mohawk_signs_are_parsed_and_verified_alike(
    url: str, content_type: str, ext: str | None
) -> None:
    body = '{"workerGroup":"wg","tasks":4}'
    sender = mohawk.Sender(
        {"id": "proj/worker", "key": KEY, "algorithm": "sha256"},
        url,
        "post",
        content=body,
        content_type=content_type,
        ext=ext,
    )
    header = str(sender.request_header)
    attributes = hawk.parse_header(header)
    assert attributes == mohawk.util.parse_authorization_header(header)
    assert hawk.matches(
        hawk.request_mac(KEY, attributes, method="POST", url=url), attributes["mac"]
    )
    assert not hawk.matches(
        hawk.request_mac("x" + KEY[1:], attributes, method="POST", url=url), attributes["mac"]
    )
    assert hawk.matches(hawk.payload_hash(body.encode(), content_type), attributes["hash"])
    assert not hawk.matches(hawk.payload_hash(b"{}", content_type), attributes["hash"])


def test_app_and_dlg_are_signed_as_mohawk_signs_them() -> None:
    url = URLS[0]
    resource = mohawk.base.Resource(
        url=url,
        method="GET",
        credentials={"id": "c", "key": KEY, "algorithm": "sha256"},
        nonce="n0nce",
        timestamp="1700000000",
        ext="e30",
        app="an-app",
        dlg="a-delegate",
    )
    expected = mohawk.util.calculate_mac("header", resource, "")
    attributes = {"ts": "1700000000", "nonce": "n0nce", "ext": "e30", "app": "an-app"}
    attributes["dlg"] = "a-delegate"
    assert hawk.request_mac(KEY, attributes, method="get", url=url) == expected


@pytest.mark.parametrize("url", URLS)
def test_a_bewit_mac_is_mohawk_s(url: str) -> None:
    resource = mohawk.base.Resource(
        url=url,
        method="GET",
        credentials={"id": "c", "key": KEY, "algorithm": "sha256"},
        nonce="",
        timestamp="1800000000",
        ext="e30",
    )
    _, _, mac, _ = mohawk.bewit.parse_bewit(mohawk.bewit.get_bewit(resource))
    signed = {"ts": "1800000000", "nonce": "", "ext": "e30"}
    assert hawk.matches(hawk.request_mac(KEY, signed, method="GET", url=url, kind="bewit"), mac)


@pytest.mark.parametrize(
    "header",
    [
        'Basic id="a"',
        'Hawk id="a", ts="1", nonce="n", mac="m", bogus="x"',
        'Hawk id="a", id="b", ts="1", nonce="n", mac="m"',
        'Hawk id="a\x01", ts="1", nonce="n", mac="m"',
        'Hawk id="a" ts="1"',
        'Hawk id="a", junk, ts="1"',
        'Hawk id="a", ts="1"' + ", ext=" + '"' + "x" * 5000 + '"',
    ],
)
def test_malformed_headers_are_refused_as_mohawk_refuses_them(header: str) -> None:
    with pytest.raises(mohawk.exc.HawkFail):
        mohawk.util.parse_authorization_header(header)
    with pytest.raises(hawk.HawkHeaderError):
        hawk.parse_header(header)
