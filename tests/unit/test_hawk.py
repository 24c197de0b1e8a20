"""hawk_signing.protocol computes what mohawk (the official Python client's signer) computes: the
same Authorization header as mohawk.Sender for the same nonce and timestamp, the same parsed
header, MAC, payload hash and bewit MAC for the requests clients send, and the same headers
refused."""

from __future__ import annotations

import mohawk
import mohawk.base
import mohawk.bewit
import mohawk.exc
import mohawk.util
import pytest

import hawk_signing
from hawk_signing import Credentials
from hawk_signing import protocol as hawk

KEY = "k" * 44
URLS = [
    "http://127.0.0.1:8080/api/queue/v1/claim-work/proj/workers",
    "http://localhost/api/queue/v1/task/abc/runs/0/artifacts/public%2Flogs%2Flive.log",
    "https://Queue.Example.COM/api/queue/v1/task/abc?limit=10&continuationToken=x%2By",
    "https://example.com:8443/a;params/b;more?q=1",
    "http://[::1]:9000/api/auth/v1/scopes/expand",
    "https://[2001:db8::1]/api/queue/v1/ping",
    "http://localhost:80/api/queue/v1/task/a%20b/status?x=%C3%A9&y=&z=a+b#fragment",
    "http://127.0.0.1:8080/api/queue/v1/task/ünïcode?q=ü",
]
CONTENT_TYPES = ["application/json", "Application/JSON; charset=utf-8", ""]
BODIES: list[str | bytes | None] = ["", '{"workerGroup":"wg","tasks":4}', b"\x00\xffbytes", None]
EXTS = [None, "", "e30", "eyJjZXJ0aWZpY2F0ZSI6e319"]


def _mohawk_header(
    url: str, method: str, body: str | bytes | None, content_type: str | None, **kwargs: str | None
) -> str:
    sender = mohawk.Sender(
        {"id": "proj/worker", "key": KEY, "algorithm": "sha256"},
        url,
        method,
        content=body,
        content_type=content_type,
        nonce="Ab-_9z",
        _timestamp=1700000000,
        **kwargs,
    )
    return str(sender.request_header)


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("method", ["GET", "post", "PUT", "DELETE"])
@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("content_type", [*CONTENT_TYPES, None])
def test_the_header_is_mohawk_senders(
    url: str, method: str, body: str | bytes | None, content_type: str | None
) -> None:
    expected = _mohawk_header(url, method, body, content_type, ext="e30")
    made = hawk.request_header(
        client_id="proj/worker",
        key=KEY,
        method=method,
        url=url,
        content=body,
        content_type=content_type,
        ext="e30",
        nonce="Ab-_9z",
        timestamp=1700000000,
    )
    assert made == expected


@pytest.mark.parametrize("ext", EXTS)
@pytest.mark.parametrize("app", [None, "", "an-app"])
@pytest.mark.parametrize("dlg", [None, "a-delegate"])
def test_ext_app_and_dlg_are_written_as_mohawk_sender_writes_them(
    ext: str | None, app: str | None, dlg: str | None
) -> None:
    url, body = URLS[0], '{"a":1}'
    expected = _mohawk_header(url, "POST", body, "application/json", ext=ext, app=app, dlg=dlg)
    made = hawk.request_header(
        client_id="proj/worker",
        key=KEY,
        method="POST",
        url=url,
        content=body,
        content_type="application/json",
        ext=ext,
        app=app,
        dlg=dlg,
        nonce="Ab-_9z",
        timestamp=1700000000,
    )
    assert made == expected


@pytest.mark.parametrize(
    "credentials",
    [
        Credentials(client_id="proj/worker", access_token=KEY),
        Credentials(
            client_id="task-client/abc/0/on/wg/w1/until/1700000000.0",
            access_token="t" * 44,
            certificate='{"version":1,"scopes":["a:b*"],"start":1,"expiry":2,"seed":"s",'
            '"signature":"x+y/z=","issuer":"static/issuer"}',
        ),
    ],
)
def test_authorization_is_mohawk_senders_with_the_official_ext(credentials: Credentials) -> None:
    url, body = URLS[2], '{"storageType":"s3"}'
    sender = mohawk.Sender(
        {"id": credentials.client_id, "key": credentials.access_token, "algorithm": "sha256"},
        url,
        "POST",
        content=body,
        content_type="application/json",
        ext=hawk_signing.hawk_ext(credentials),
        nonce="n0nce",
        _timestamp=1700000123,
    )
    made = hawk_signing.authorization(
        credentials,
        method="POST",
        url=url,
        content=body,
        content_type="application/json",
        nonce="n0nce",
        timestamp=1700000123,
    )
    assert made == sender.request_header


def test_unset_nonce_and_timestamp_are_fresh_and_verify() -> None:
    credentials = Credentials(client_id="proj/worker", access_token=KEY)
    url = URLS[0]
    first, second = (
        hawk_signing.authorization(credentials, method="GET", url=url, content="", content_type="")
        for _ in range(2)
    )
    parsed = [mohawk.util.parse_authorization_header(header) for header in (first, second)]
    assert parsed[0]["nonce"] != parsed[1]["nonce"]
    assert all(len(attributes["nonce"]) == 6 for attributes in parsed)
    receiver = mohawk.Receiver(
        lambda client_id: {"id": client_id, "key": KEY, "algorithm": "sha256"},
        first,
        url,
        "GET",
        content="",
        content_type="",
    )
    assert receiver.parsed_header == parsed[0]


@pytest.mark.parametrize(
    ("field", "value"), [("client_id", 'a"b'), ("ext", "e\\30"), ("app", "a\x01")]
)
def test_a_value_a_header_cannot_carry_is_refused(field: str, value: str) -> None:
    given = {"client_id": "c", "ext": "e30", "app": "a", field: value}
    with pytest.raises(hawk.HawkHeaderError):
        hawk.request_header(
            client_id=given["client_id"],
            key=KEY,
            method="GET",
            url=URLS[0],
            content="",
            content_type="",
            ext=given["ext"],
            app=given["app"],
        )


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


def _mohawk_resource(url: str, **fields: str) -> mohawk.base.Resource:
    """mohawk's view of a GET to ``url`` by client ``c`` with ext ``e30`` and ``fields``."""
    return mohawk.base.Resource(
        url=url,
        method="GET",
        credentials={"id": "c", "key": KEY, "algorithm": "sha256"},
        ext="e30",
        **fields,
    )


def test_app_and_dlg_are_signed_as_mohawk_signs_them() -> None:
    url = URLS[0]
    resource = _mohawk_resource(
        url, nonce="n0nce", timestamp="1700000000", app="an-app", dlg="a-delegate"
    )
    expected = mohawk.util.calculate_mac("header", resource, "")
    attributes = {"ts": "1700000000", "nonce": "n0nce", "ext": "e30", "app": "an-app"}
    attributes["dlg"] = "a-delegate"
    assert hawk.request_mac(KEY, attributes, method="get", url=url) == expected


@pytest.mark.parametrize("url", URLS)
def test_a_bewit_mac_is_mohawk_s(url: str) -> None:
    resource = _mohawk_resource(url, nonce="", timestamp="1800000000")
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
