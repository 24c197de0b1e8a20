"""Who is calling and what they may do: Hawk authentication and scope checks, Taskcluster style.

A request with an ``Authorization: Hawk ...`` header is verified as ``mohawk`` verifies it
(:mod:`hawk_signing.protocol`) against the clients file (:mod:`coordinator.service.clients_file`)
and the auth API's clients, exactly as the Taskcluster auth service does:

- the MAC covers method, path and query, and the host and port the client signed: those of
  ``COORDINATOR_PUBLIC_URL`` when configured (behind a proxy), else of the ``Host`` header
  the request arrived with (both are tried, so ``localhost`` vs ``127.0.0.1`` does not matter);
- the payload hash is checked when the client sent one (Taskcluster clients always do);
- the Hawk timestamp may be 15 minutes off the server clock, and a nonce is accepted once per
  clientId and timestamp within that window (:class:`NonceCache`, checked only once the MAC
  matched): a replayed request is a 401. Each process keeps its own nonces (replicas share
  none), so a replay sent to another replica is not caught;
- ``ext`` is base64 JSON (either alphabet) with an optional ``certificate`` (temporary
  credentials, see :mod:`coordinator.api.credentials`: signed by a permanent client holding
  all its scopes, valid from ``start`` to ``expiry`` with 5 minutes of skew, MAC key derived
  from the seed) and optional ``authorizedScopes`` (narrows the effective scopes to a subset
  of the client's).

What a clientId and its ``ext`` come to (the MAC key, the scopes, a certificate's window) is
remembered (:class:`CredentialsCache`) while the client directory's state holds, since workers
sign every call with the same credentials; each request's MAC, payload hash, timestamp and
nonce, a certificate's window and the issuer's expiry and disabled flag are still checked
every time.

A GET may instead carry a Hawk *bewit* (``?bewit=``, what ``buildSignedUrl`` of the official
clients appends): the same MAC over the request target without the bewit, with an expiry
instead of a timestamp and no nonce (a signed URL works until it expires, as often as it is
used). A request with neither is anonymous and holds the clients file's ``anonymousScopes``.

Like Taskcluster, authentication never fails a request by itself and happens only when an
endpoint asks: :meth:`Authorizer.require` verifies the caller once (a :data:`RequestAuth`:
an :class:`Auth`, :class:`Anonymous`, or :class:`Rejected` with the reason), then raises
``401 AuthenticationFailed`` or ``403 InsufficientScopes`` as needed. Endpoints that need no
scopes (reads) therefore work for everybody, even with stale credentials. Unlike Taskcluster,
an anonymous call to a protected endpoint is a 401 (credentials are missing), not a 403.

Handlers use :class:`Authorizer`; :class:`Authenticator` and :func:`require` are its parts.
"""

from __future__ import annotations

import array
import base64
import binascii
import bisect
import heapq
import hmac
import json
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard
from urllib.parse import urlsplit

from aiohttp import hdrs, web

from coordinator.api.credentials import (
    MAX_LIFETIME_MS,
    certificate_signature,
    task_credentials,
    temporary_access_token,
)
from coordinator.api.errors import AuthenticationFailed, InsufficientScopes
from coordinator.config import NONCE_CACHE_ENTRIES, Config
from coordinator.domain.records import Run, TaskRecord
from coordinator.domain.scopes import (
    Expression,
    normalize_scope_set,
    render,
    satisfies,
    unsatisfied,
    valid_scope,
)
from coordinator.service.client_directory import ClientDirectory, KnownClient
from coordinator.service.clients_file import ISSUER_CLIENT_ID, ClientRegistry
from hawk_signing import Credentials
from hawk_signing import protocol as hawk

log = logging.getLogger(__name__)

CLOCK_SKEW_SECONDS = 15 * 60
"""How far a Hawk timestamp may be from the server clock (Taskcluster's value)."""

CERTIFICATE_SKEW_MS = 5 * 60 * 1000
"""How far before ``start`` and after ``expiry`` a certificate is accepted (Taskcluster's)."""

CREDENTIALS_CACHE_ENTRIES = 4096
"""How many callers' verified credentials (:class:`CredentialsCache`) a process keeps: one per
permanent client, and one per certificate, so one per run a worker holds and reports on."""

_HAWK_KEYS = ("id", "ts", "nonce", "mac")


@dataclass(frozen=True, kw_only=True, slots=True)
class Auth:
    """An authenticated caller: its clientId, the scopes in effect for this request, and until
    when its credentials hold (epoch ms; ``None``: a client that never expires)."""

    client_id: str
    scopes: tuple[str, ...]
    expires: int | None = None


class ClientLookup(Protocol):
    """Who a clientId is and what scopes hold: the
    :class:`~coordinator.service.client_directory.ClientDirectory`, or testAuthenticate's one
    fixed client."""

    def lookup(self, client_id: str) -> KnownClient | None: ...

    def caller_scopes(self, scopes: Sequence[str]) -> tuple[str, ...]: ...

    @property
    def anonymous_scopes(self) -> tuple[str, ...]: ...

    @property
    def state(self) -> Hashable:
        """Moves whenever an answer of the other methods may have changed."""
        ...

    def note_used(self, client_id: str) -> None: ...


class TesterClient:
    """testAuthenticate's one client, ``tester`` with accessToken ``no-secret``, and no roles:
    its scopes are as given, plus ``assume:anonymous`` as every caller's (Taskcluster's)."""

    def __init__(self, scopes: Sequence[str]) -> None:
        self._client = KnownClient(
            client_id="tester",
            access_token="no-secret",
            scopes=self.caller_scopes(scopes),
            expires=None,
            disabled=False,
        )

    def lookup(self, client_id: str) -> KnownClient | None:
        return self._client if client_id == "tester" else None

    def caller_scopes(self, scopes: Sequence[str]) -> tuple[str, ...]:
        return normalize_scope_set((*scopes, "assume:anonymous"))

    @property
    def anonymous_scopes(self) -> tuple[str, ...]:
        return ("assume:anonymous",)

    @property
    def state(self) -> Hashable:
        return 0

    def note_used(self, client_id: str) -> None:
        pass


@dataclass(frozen=True, kw_only=True, slots=True)
class Verified:
    """What a request's credentials come to, once its signature matches ``key``: derived from
    the clientId and ``ext`` alone under the client directory's ``state``, and valid, for a
    certificate, from ``window``'s start to its expiry (epoch ms, skew not included)."""

    key: str
    scopes: tuple[str, ...]
    expires: int | None
    issuer: KnownClient
    state: Hashable
    window: tuple[float, float] | None = None


class CredentialsCache:
    """What the credentials of recent callers came to (:class:`Verified`), by clientId and
    Hawk ``ext`` text: a worker signs every call with the same permanent credentials, and
    every call on a run with the same certificate, so its ``ext`` parse, certificate
    signature, scope checks and role expansion are done once, not per request.

    An entry holds while the client directory's ``state`` is the one it was derived under (a
    clients file re-read, a stored client or role written anywhere moves it) and, for a
    certificate, while the certificate is valid: the verifier checks its window on each use.
    Only credentials whose request MAC matched are remembered, and an entry is a function of
    its key and the state, so a forged request can neither add nor change one. The
    ``max_entries`` used last are kept.
    """

    def __init__(self, *, max_entries: int) -> None:
        self._max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], Verified] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, client_id: str, ext: str, state: Hashable) -> Verified | None:
        """The credentials remembered for ``client_id`` and ``ext`` under ``state``."""
        verified = self._entries.get((client_id, ext))
        if verified is None:
            return None
        if verified.state != state:
            del self._entries[client_id, ext]
            return None
        self._entries.move_to_end((client_id, ext))
        return verified

    def put(self, client_id: str, ext: str, verified: Verified) -> None:
        """Remember ``verified``, forgetting the entry used longest ago when full."""
        self._entries[client_id, ext] = verified
        self._entries.move_to_end((client_id, ext))
        if len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class Anonymous:
    """A request without credentials, holding what anonymous callers may do."""

    scopes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Rejected:
    """A request whose credentials did not verify; ``message`` says why (the 401 body)."""

    message: str


RequestAuth = Auth | Anonymous | Rejected


class _UnknownClient(AuthenticationFailed):
    """No such clientId (or certificate issuer): answered exactly like a wrong accessToken."""


class _NoMatch(AuthenticationFailed):
    """The one 401 for an unknown clientId and a wrong accessToken alike, so that a caller
    cannot probe which clientIds exist; :attr:`reason` tells the log which it was."""

    def __init__(self, client_id: str, origins: Sequence[str], *, reason: str) -> None:
        super().__init__(
            f"Hawk signature does not match for clientId {client_id}: unknown clientId or "
            f"wrong accessToken, or the request was signed for another host or port than "
            f"{' or '.join(origins)} (behind a proxy, set COORDINATOR_PUBLIC_URL to the URL "
            "clients use)"
        )
        self.reason = reason


UNRESTRICTED = Auth(client_id="auth-disabled", scopes=("*",))
"""What every request holds when authentication is disabled."""

REQUEST_AUTH = web.RequestKey[RequestAuth]("auth")
"""Where :meth:`Authorizer.caller` remembers the request's :data:`RequestAuth`."""


def require(auth: RequestAuth, expression: Expression) -> None:
    """Raise unless ``auth`` satisfies the scope ``expression``.

    ``AuthenticationFailed`` (401) when the credentials were rejected, or when there were
    none and the expression needs scopes; ``InsufficientScopes`` (403) naming the client,
    what it lacks and the expression otherwise.
    """
    if isinstance(auth, Rejected):
        raise AuthenticationFailed(auth.message)
    held = auth.scopes
    if satisfies(held, expression):
        return
    required = render(expression)
    if isinstance(auth, Anonymous):
        raise AuthenticationFailed(
            "This request requires Taskcluster credentials (Hawk) satisfying the scope "
            f"expression:\n\n```\n{required}\n```"
        )
    missing = unsatisfied(held, expression)
    raise InsufficientScopes(
        f"Client ID {auth.client_id} does not have sufficient scopes and is missing the "
        f"following scopes:\n\n```\n{render(missing) if missing is not None else ''}\n```\n\n"
        f"You have the scopes:\n\n```\n{chr(10).join(held)}\n```\n\n"
        "This request requires you to satisfy this scope expression:\n\n"
        f"```\n{required}\n```"
    )


class NonceCache:
    """The Hawk nonces this process accepted within the clock-skew window: a request replayed
    to this process is refused. Another replica does not know them (it has its own), so
    with several replicas a replay is refused by the replica that saw the original only.

    Entries are 64-bit salted hashes of ``(clientId, nonce, ts)``, kept sorted in one array per
    timestamp second: 8 bytes an entry (a set took about 70, an ``OrderedDict`` 165, which at
    800 requests a second grew the process by 3 MB a minute for the window's 15 minutes). A
    second's array is dropped whole once it leaves the window. Past ``max_entries``
    (``COORDINATOR_NONCE_CACHE_ENTRIES``) the oldest seconds are forgotten first, so memory
    stays bounded however many requests arrive; a request replayed after its second was
    forgotten is then accepted once more.
    """

    def __init__(self, *, window_s: float, max_entries: int) -> None:
        self._window_s = window_s
        self._max_entries = max_entries
        self._by_second: dict[int, array.array[int]] = {}
        self._seconds: list[int] = []
        """The keys of ``_by_second``, a heap: the oldest second first."""
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def seen(self, client_id: str, nonce: str, ts: str, *, now: float) -> bool:
        """Whether this nonce was accepted before; remembers it otherwise.

        :param ts: the Hawk timestamp, digits (the verifier checked it is within the window).
        """
        second = int(ts)
        self._forget(now)
        key = hash((client_id, nonce, ts))
        entries = self._by_second.get(second)
        if entries is None:
            entries = self._by_second[second] = array.array("q")
            heapq.heappush(self._seconds, second)
        at = bisect.bisect_left(entries, key)
        if at < len(entries) and entries[at] == key:
            return True
        entries.insert(at, key)
        self._size += 1
        return False

    def _forget(self, now: float) -> None:
        """Drop the seconds out of the window, and the oldest while the cache is full."""
        while self._seconds and (
            self._seconds[0] + self._window_s <= now or self._size >= self._max_entries
        ):
            self._size -= len(self._by_second.pop(heapq.heappop(self._seconds)))


class Authenticator:
    """Verifies Hawk requests against a :class:`ClientRegistry`.

    :param public_url: the URL clients use as ``rootUrl`` (``COORDINATOR_PUBLIC_URL``); its
        scheme, host and port are what they sign. Its path is ignored: a proxy must forward
        the path unchanged.
    :param clock: seconds since the epoch, injectable for tests.
    :param nonce_cache_entries: :class:`NonceCache`'s bound.
    :param credentials_cache_entries: :class:`CredentialsCache`'s bound.
    """

    def __init__(
        self,
        *,
        clients: ClientLookup,
        public_url: str | None = None,
        clock: Callable[[], float] = time.time,
        nonce_cache_entries: int = NONCE_CACHE_ENTRIES,
        credentials_cache_entries: int = CREDENTIALS_CACHE_ENTRIES,
    ) -> None:
        self._clients = clients
        self._clock = clock
        self._nonces = NonceCache(window_s=CLOCK_SKEW_SECONDS, max_entries=nonce_cache_entries)
        self._known = CredentialsCache(max_entries=credentials_cache_entries)
        self._public_origin: str | None = None
        if public_url is not None:
            parts = urlsplit(public_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"public URL must be http(s)://host[:port], not {public_url!r}")
            self._public_origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"

    async def authenticate(self, request: web.Request) -> RequestAuth:
        """Verify ``request``'s ``Authorization`` header or bewit, if any; without either,
        the caller is anonymous (the clients file's ``anonymousScopes``).

        Reads the body (aiohttp caches it for the handler) to check the payload hash; a body
        over the application's ``client_max_size`` raises aiohttp's
        ``HTTPRequestEntityTooLarge``.
        """
        header = request.headers.get(hdrs.AUTHORIZATION)
        if header is None and "bewit=" not in request.raw_path:
            return Anonymous(scopes=self._clients.anonymous_scopes)
        origins = [f"{request.scheme}://{request.host}"]
        if self._public_origin is not None and self._public_origin != origins[0]:
            origins.insert(0, self._public_origin)
        content = await request.read() if header is not None else b""
        return self._verify(
            method=request.method,
            resource=request.raw_path,
            origins=origins,
            authorization=header,
            content=content,
            content_type=request.headers.get(hdrs.CONTENT_TYPE, ""),
        )

    def verify_target(
        self, *, method: str, resource: str, origin: str, authorization: str | None
    ) -> RequestAuth:
        """Who signed a request for ``origin + resource`` (authenticateHawk), without its
        body: a header's payload hash is not checked."""
        return self._verify(
            method=method,
            resource=resource,
            origins=[origin],
            authorization=authorization,
            content=None,
            content_type="",
        )

    def _verify(
        self,
        *,
        method: str,
        resource: str,
        origins: Sequence[str],
        authorization: str | None,
        content: bytes | None,
        content_type: str,
    ) -> RequestAuth:
        signed = _BEWIT.fullmatch(resource) if "bewit=" in resource else None
        if authorization is None and signed is None:
            return Anonymous(scopes=self._clients.anonymous_scopes)
        try:
            if authorization is not None and signed is not None:
                raise AuthenticationFailed(
                    "The request carries both an Authorization header and a bewit: use one"
                )
            if signed is not None:
                rest = signed["rest"]
                auth = self.verify_bewit(
                    bewit=signed["bewit"],
                    method=method,
                    resource=signed["path"] + (signed["sep"] + rest if rest else ""),
                    origins=origins,
                )
            else:
                assert authorization is not None
                auth = self.verify(
                    authorization=authorization,
                    method=method,
                    resource=resource,
                    origins=origins,
                    content=content,
                    content_type=content_type,
                )
        except AuthenticationFailed as error:
            log.info(
                "authentication failed method=%s path=%s reason=%r",
                method,
                resource.partition("?")[0],
                error.reason if isinstance(error, _NoMatch) else str(error),
            )
            return Rejected(message=str(error))
        return auth

    def verify(
        self,
        *,
        authorization: str,
        method: str,
        resource: str,
        origins: Sequence[str],
        content: bytes | None,
        content_type: str,
    ) -> Auth:
        """Verify one Hawk ``authorization`` header; raise ``AuthenticationFailed`` if invalid.

        :param resource: the request target as sent: path and query, still percent-encoded.
        :param content: the body, whose hash the header's must match; ``None`` when the
            caller checks that itself (authenticateHawk).
        :param origins: ``scheme://host[:port]`` values the client may have signed for,
            tried in order.
        """
        try:
            attributes = hawk.parse_header(authorization)
        except hawk.HawkHeaderError as error:
            raise AuthenticationFailed(f"Authorization header is not valid Hawk: {error}") from None
        absent = [key for key in _HAWK_KEYS if key not in attributes]
        if absent:
            raise AuthenticationFailed(f"Hawk Authorization header lacks {', '.join(absent)}")
        client_id, ext = attributes["id"], attributes.get("ext", "")
        now = self._clock()
        verified, remembered = self._credentials_of(client_id, ext, origins, now)
        for origin in origins:
            try:
                mac = hawk.request_mac(
                    verified.key, attributes, method=method, url=origin + resource
                )
            except ValueError as error:  # a port that is not a number, a non-ASCII key
                raise AuthenticationFailed(f"Hawk verification failed: {error}") from None
            if hawk.matches(mac, attributes["mac"]):
                break
        else:
            raise _NoMatch(client_id, origins, reason="wrong accessToken or origin")
        if not remembered:
            self._known.put(client_id, ext, verified)
        # Clients that did not hash the payload are accepted, as in Taskcluster; without the
        # body (authenticateHawk) the caller checks the hash itself.
        if (
            content is not None
            and "hash" in attributes
            and not hawk.matches(hawk.payload_hash(content, content_type), attributes["hash"])
        ):
            raise AuthenticationFailed(
                "The payload hash in the Authorization header does not match the request "
                "body and Content-Type: the body was altered or signed differently"
            )
        # Only once the MAC matched: a forger cannot burn others' nonces.
        self._check_fresh(client_id, attributes, now)
        return self._accept(client_id, verified, now)

    def verify_bewit(
        self, *, bewit: str, method: str, resource: str, origins: Sequence[str]
    ) -> Auth:
        """Verify a Hawk bewit (``buildSignedUrl``); raise ``AuthenticationFailed`` if invalid.

        :param bewit: the ``bewit`` query value: base64url (padding optional) of
            ``id\\exp\\mac\\ext``.
        :param resource: the request target as sent, without the bewit.
        :param origins: as :meth:`verify`.
        """
        if method != "GET":
            raise AuthenticationFailed("A bewit authenticates GET requests only")
        try:
            decoded = base64.urlsafe_b64decode(bewit + "=" * (-len(bewit) % 4)).decode("ascii")
        except (binascii.Error, ValueError):
            raise AuthenticationFailed("The bewit is not base64url") from None
        parts = decoded.split("\\")
        if len(parts) != 4 or not parts[1].isdigit():
            raise AuthenticationFailed("The bewit is not id\\expiry\\mac\\ext")
        client_id, expiry, mac, ext_text = parts
        now = self._clock()
        verified, remembered = self._credentials_of(client_id, ext_text, origins, now)
        signed = {"ts": expiry, "nonce": "", "ext": ext_text}
        for origin in origins:
            try:
                expected = hawk.request_mac(
                    verified.key, signed, method="GET", url=origin + resource, kind="bewit"
                )
            except ValueError as error:
                raise AuthenticationFailed(f"The bewit cannot be verified: {error}") from None
            if hawk.matches(expected, mac):
                break
        else:
            raise _NoMatch(client_id, origins, reason="bewit: wrong accessToken or origin")
        if not remembered:
            self._known.put(client_id, ext_text, verified)
        if int(expiry) < now:
            raise AuthenticationFailed(
                f"The bewit expired at {expiry} (server time {int(now)}): sign the URL again"
            )
        return self._accept(client_id, verified, now)

    def _check_fresh(self, client_id: str, attributes: dict[str, str], now: float) -> None:
        """The timestamp and nonce checks, made once the MAC and the payload hash matched."""
        if not attributes["ts"].isdigit() or abs(int(attributes["ts"]) - now) > CLOCK_SKEW_SECONDS:
            raise AuthenticationFailed(
                f"Hawk timestamp {attributes['ts']} is more than {CLOCK_SKEW_SECONDS} s "
                f"away from the server time {int(now)}: check the client's clock"
            )
        if self._nonces.seen(client_id, attributes["nonce"], attributes["ts"], now=now):
            raise AuthenticationFailed(
                f"Hawk nonce {attributes['nonce']} was already used with timestamp "
                f"{attributes['ts']}: this request was replayed"
            )

    def _accept(self, client_id: str, verified: Verified, now: float) -> Auth:
        """The caller whose signature matched, unless its (issuing) client is disabled or
        expired: said only now, so that nobody without the accessToken learns it."""
        issuer = verified.issuer
        if issuer.disabled:
            raise AuthenticationFailed(f"Client ID {issuer.client_id} is disabled")
        if issuer.expires is not None and issuer.expires < now * 1000:
            raise AuthenticationFailed(f"Client ID {issuer.client_id} has expired")
        self._clients.note_used(issuer.client_id)
        return Auth(client_id=client_id, scopes=verified.scopes, expires=verified.expires)

    def _credentials_of(
        self, client_id: str, ext: str, origins: Sequence[str], now: float
    ) -> tuple[Verified, bool]:
        """What ``client_id`` presenting Hawk ``ext`` holds and signs with, and whether it was
        remembered (its certificate, if any, valid ``now``) rather than derived afresh (for
        the caller to remember once the MAC matched); an unknown client is answered as a
        wrong accessToken is."""
        state = self._clients.state
        verified = self._known.get(client_id, ext, state)
        if verified is None:
            try:
                return self._credentials(client_id, _parse_ext(ext), state, now), False
            except _UnknownClient as error:
                raise _NoMatch(client_id, origins, reason=str(error)) from None
        if verified.window is not None:
            _check_window(*verified.window, now_ms=now * 1000)
        return verified, True

    def _credentials(
        self, client_id: str, ext: dict[str, Any], state: Hashable, now: float
    ) -> Verified:
        """The MAC key, effective scopes and expiry for ``client_id`` with ``ext`` applied
        (Taskcluster's rules: a certificate's scopes replace the issuer's, which must hold
        them; ``authorizedScopes`` narrow what the credentials hold, the anonymous role
        included; what remains is expanded through the roles, the anonymous role added)."""
        certificate = ext.get("certificate")
        issuer_id = client_id
        if isinstance(certificate, dict) and certificate.get("issuer"):
            issuer_id = certificate["issuer"]
            if not isinstance(issuer_id, str):
                raise AuthenticationFailed("ext.certificate.issuer must be a string")
            if issuer_id == client_id:
                raise AuthenticationFailed(
                    "ext.certificate.issuer must differ from the supplied clientId"
                )
        client = self._clients.lookup(issuer_id)
        if client is None:
            raise _UnknownClient(f"Client ID {issuer_id} does not exist")
        key, scopes, expires = client.access_token, client.scopes, client.expires
        if certificate is None and "authorizedScopes" not in ext:
            return Verified(key=key, scopes=scopes, expires=expires, issuer=client, state=state)
        window = None
        if certificate is not None:
            key, scopes = self._apply_certificate(
                certificate, name=client_id, issuer_id=issuer_id, key=key, scopes=scopes, now=now
            )
            window = (certificate["start"], certificate["expiry"])
            expiry = int(certificate["expiry"])
            expires = expiry if expires is None else min(expires, expiry)
        authorized = ext.get("authorizedScopes")
        if authorized is not None:
            if not isinstance(authorized, list):
                raise AuthenticationFailed("ext.authorizedScopes must be an array")
            if not all(valid_scope(scope) for scope in authorized):
                raise AuthenticationFailed("ext.authorizedScopes must be an array of valid scopes")
            held = self._clients.caller_scopes(scopes)
            if not satisfies(held, {"AllOf": authorized}):
                raise AuthenticationFailed(
                    "Supplied credentials do not satisfy authorizedScopes; credentials have "
                    f"scopes:\n\n```\n{chr(10).join(held)}\n```\n\nauthorizedScopes are:"
                    f"\n\n```\n{chr(10).join(authorized)}\n```"
                )
            scopes = tuple(authorized)
        return Verified(
            key=key,
            scopes=self._clients.caller_scopes(scopes),
            expires=expires,
            issuer=client,
            state=state,
            window=window,
        )

    def _apply_certificate(
        self,
        certificate: Any,
        *,
        name: str,
        issuer_id: str,
        key: str,
        scopes: tuple[str, ...],
        now: float,
    ) -> tuple[str, tuple[str, ...]]:
        """Check a temporary-credentials certificate; return its MAC key and scopes."""
        if not isinstance(certificate, dict):
            raise AuthenticationFailed("ext.certificate must be a JSON object")
        if not _is_number(certificate.get("version")) or certificate["version"] != 1:
            raise AuthenticationFailed("ext.certificate.version must be 1")
        seed = certificate.get("seed")
        if not isinstance(seed, str):
            raise AuthenticationFailed("ext.certificate.seed must be a string")
        if len(seed) != 44:
            raise AuthenticationFailed("ext.certificate.seed must be 44 characters")
        start, expiry = certificate.get("start"), certificate.get("expiry")
        if not _is_number(start):
            raise AuthenticationFailed("ext.certificate.start must be a number")
        if not _is_number(expiry):
            raise AuthenticationFailed("ext.certificate.expiry must be a number")
        cert_scopes = certificate.get("scopes")
        if not isinstance(cert_scopes, list):
            raise AuthenticationFailed("ext.certificate.scopes must be an array")
        if not all(valid_scope(scope) for scope in cert_scopes):
            raise AuthenticationFailed("ext.certificate.scopes must be an array of valid scopes")
        _check_window(start, expiry, now_ms=now * 1000)
        if expiry - start > MAX_LIFETIME_MS:
            raise AuthenticationFailed("ext.certificate cannot last longer than 31 days!")
        if issuer_id != name:
            create_scope = f"auth:create-client:{name}"
            if not satisfies(scopes, create_scope):
                raise AuthenticationFailed(
                    f"ext.certificate issuer `{issuer_id}` doesn't have `{create_scope}` "
                    "for supplied clientId."
                )
        elif "clientId" in certificate:
            raise AuthenticationFailed(
                "ext.certificate.clientId must only be used with ext.certificate.issuer"
            )
        if not satisfies(scopes, {"AllOf": cert_scopes}):
            raise AuthenticationFailed(
                f"ext.certificate issuer `{issuer_id}` doesn't satisfy all certificate scopes "
                f"{', '.join(cert_scopes)}.  The temporary credentials were not generated "
                "correctly."
            )
        signature = certificate.get("signature")
        expected = certificate_signature(key, certificate, name)
        if not isinstance(signature, str) or not hmac.compare_digest(
            signature.encode(), expected.encode()
        ):
            if certificate.get("issuer"):
                raise AuthenticationFailed(
                    "ext.certificate.signature is not valid, or wrong clientId provided"
                )
            raise AuthenticationFailed("ext.certificate.signature is not valid")
        return temporary_access_token(key, seed), tuple(cert_scopes)


def _check_window(start: float, expiry: float, *, now_ms: float) -> None:
    """Refuse a certificate outside its ``start`` to ``expiry`` at ``now_ms``, give or take
    :data:`CERTIFICATE_SKEW_MS`."""
    if start > now_ms + CERTIFICATE_SKEW_MS:
        raise AuthenticationFailed("ext.certificate.start > now: not valid yet")
    if expiry < now_ms - CERTIFICATE_SKEW_MS:
        raise AuthenticationFailed("ext.certificate.expiry < now: the credentials expired")


def _is_number(value: object) -> TypeGuard[int | float]:
    # JSON numbers only: Python's bool is an int, JavaScript's is not a number.
    return isinstance(value, int | float) and not isinstance(value, bool)


_BEWIT = re.compile(r"(?P<path>/.*)(?P<sep>[?&])bewit=(?P<bewit>[^&]*)(?:&(?P<rest>.+))?", re.S)
"""A request target with a bewit: the target without it is ``path``, then ``sep`` and ``rest``
when parameters follow the bewit (as the Hawk library that Taskcluster runs strips it)."""


def _parse_ext(ext: str | None) -> dict[str, Any]:
    """Decode Hawk ``ext``: base64 (standard or URL-safe, padding optional) of a JSON object."""
    if not ext:
        return {}
    text = ext.replace("-", "+").replace("_", "/")
    try:
        decoded = json.loads(base64.b64decode(text + "=" * (-len(text) % 4), validate=True))
    except (binascii.Error, ValueError):
        raise AuthenticationFailed(
            "Failed to parse ext: expected base64 of a JSON object"
        ) from None
    if not isinstance(decoded, dict):
        raise AuthenticationFailed("Failed to parse ext: expected base64 of a JSON object")
    return decoded


class Authorizer:
    """The seam the handlers use: who is calling, may they, and credentials for claims.

    :param clients: the clients file; ``None`` disables authentication (every request runs
        as :data:`UNRESTRICTED`, scope ``*``) for tests of other layers and local experiments.
        The app attaches the store to :attr:`directory` at start-up, adding the clients and
        roles the auth API manages.
    :param public_url, nonce_cache_entries: see :class:`Authenticator`.
    """

    def __init__(
        self,
        *,
        clients: ClientRegistry | None,
        public_url: str | None = None,
        clock: Callable[[], float] = time.time,
        nonce_cache_entries: int = NONCE_CACHE_ENTRIES,
    ) -> None:
        self.directory = ClientDirectory(clients, clock=lambda: int(clock() * 1000))
        self._public_url = public_url
        self._clock = clock
        self._authenticator = (
            None
            if clients is None
            else Authenticator(
                clients=self.directory,
                public_url=public_url,
                clock=clock,
                nonce_cache_entries=nonce_cache_entries,
            )
        )
        # Without a clients file nothing verifies credentials, so a per-process issuer only
        # gives claims credentials of the right shape.
        self._unverified_issuer = Credentials(
            client_id=ISSUER_CLIENT_ID, access_token=secrets.token_urlsafe(33)
        )

    @classmethod
    def from_config(cls, config: Config, *, clock: Callable[[], float] = time.time) -> Authorizer:
        """Load ``config.clients_file`` (raising :class:`ClientsFileError` when it is missing or
        malformed) unless ``config.auth_enabled`` is off.

        :param clock: seconds since the epoch; the clock the runs (and so the certificates
            issued for them) are on, so that credentials expire on the same clock.
        """
        if not config.auth_enabled:
            log.warning("authentication disabled: every request holds scope *")
            return cls(clients=None, clock=clock)
        return cls(
            clients=ClientRegistry(config.clients_file),
            public_url=config.public_url,
            clock=clock,
            nonce_cache_entries=config.nonce_cache_entries,
        )

    def now_ms(self) -> int:
        """The time credentials are verified at, epoch ms."""
        return int(self._clock() * 1000)

    def verify_signature(
        self, *, method: str, resource: str, origin: str, authorization: str | None
    ) -> RequestAuth:
        """authenticateHawk: who signed a request another service received (its
        ``authorization`` header, or a bewit in ``resource``), the payload hash left to that
        service; never raises for bad credentials (a :class:`Rejected` says why)."""
        if self._authenticator is None:
            return UNRESTRICTED
        return self._authenticator.verify_target(
            method=method, resource=resource, origin=origin, authorization=authorization
        )

    async def as_tester(self, request: web.Request, scopes: Sequence[str]) -> RequestAuth:
        """testAuthenticate: who sent ``request`` when the only client is Taskcluster's
        ``tester`` (accessToken ``no-secret``) holding ``scopes``, whether or not
        authentication is on."""
        tester = Authenticator(
            clients=TesterClient(scopes), public_url=self._public_url, clock=self._clock
        )
        return await tester.authenticate(request)

    @property
    def unrestricted(self) -> bool:
        """Authentication is off: every request holds every scope."""
        return self._authenticator is None

    async def caller(self, request: web.Request) -> RequestAuth:
        """Who sent ``request``, verified once and remembered on the request.

        Reads the body to check the payload hash (aiohttp caches it for the handler); a body
        over ``client_max_size`` raises aiohttp's ``HTTPRequestEntityTooLarge``.
        """
        if REQUEST_AUTH in request:
            return request[REQUEST_AUTH]
        if self._authenticator is None:
            auth: RequestAuth = UNRESTRICTED
        else:
            auth = await self._authenticator.authenticate(request)
        request[REQUEST_AUTH] = auth
        return auth

    async def authenticated(self, request: web.Request) -> Auth:
        """The caller of ``request``, who must have presented valid credentials (with any
        scopes; all of them when authentication is off), else 401 ``AuthenticationFailed``.

        For the batch endpoints, whose scopes depend on each stored item and are checked per
        item with :func:`require`.
        """
        auth = await self.caller(request)
        if isinstance(auth, Rejected):
            raise AuthenticationFailed(auth.message)
        if isinstance(auth, Anonymous):
            raise AuthenticationFailed("This request requires Taskcluster credentials (Hawk)")
        return auth

    async def require(self, request: web.Request, expression: Expression) -> RequestAuth:
        """The caller of ``request`` if it satisfies ``expression``; else raise as :func:`require`
        does (401 ``AuthenticationFailed`` or 403 ``InsufficientScopes``)."""
        auth = await self.caller(request)
        try:
            require(auth, expression)
        except InsufficientScopes:
            missing = unsatisfied(() if isinstance(auth, Rejected) else auth.scopes, expression)
            log.info(
                "insufficient scopes clientId=%s method=%s path=%s missing=%s",
                getattr(auth, "client_id", "-"),
                request.method,
                request.path,
                json.dumps(missing, separators=(",", ":")),
            )
            raise
        return auth

    def run_credentials(self, record: TaskRecord, run: Run) -> dict[str, str]:
        """Temporary credentials for the worker holding ``run`` of ``record``: Taskcluster's
        task scopes for the run plus the task's ``scopes``, until the run's ``takenUntil``.

        Signed by the clients file's ``issuer``, so every replica accepts them.
        """
        if run.taken_until is None or run.started is None:
            raise ValueError(f"run {record.task_id}/{run.run_id} is not claimed")
        if run.worker_group is None or run.worker_id is None:
            raise ValueError(f"run {record.task_id}/{run.run_id} has no worker")
        issuer = self.directory.issuer or self._unverified_issuer
        return task_credentials(
            issuer=issuer,
            task_id=record.task_id,
            run_id=run.run_id,
            worker_group=run.worker_group,
            worker_id=run.worker_id,
            task_scopes=record.definition.get("scopes", []),
            # The run's own clock, not the wall clock: start and takenUntil then agree even
            # under an injected clock; clamped to the 31-day limit on certificates.
            start=max(run.started, run.taken_until - MAX_LIFETIME_MS),
            taken_until=run.taken_until,
        )
