"""Taskcluster temporary credentials: issuing them and the certificate arithmetic verifiers share.

A temporary credential is ``{clientId, accessToken, certificate}``. The certificate (version 1,
a JSON string) names scopes, a ``start`` and an ``expiry`` (epoch ms) and a random ``seed``;
its ``signature`` is an HMAC-SHA256, keyed with the issuer's accessToken, over::

    version:1
    clientId:<name>          (named credentials only)
    issuer:<issuer clientId> (named credentials only)
    seed:<seed>
    start:<start>
    expiry:<expiry>
    scopes:
    <scope>
    ...

joined with ``\\n`` and encoded as standard base64. The temporary accessToken is
HMAC-SHA256(issuer accessToken, seed) in URL-safe base64 without padding, so a verifier that
knows the issuer's accessToken can recompute it and nothing needs to be stored. This matches
``taskcluster.createTemporaryCredentials`` and the Taskcluster auth service exactly.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence
from typing import Any

from coordinator.domain.scopes import valid_scope
from hawk_signing import Credentials

MAX_LIFETIME_MS = 31 * 24 * 3600 * 1000
"""Taskcluster refuses certificates that last longer than 31 days."""

_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""``json.dumps(..., separators=(",", ":"))`` without building an encoder per certificate."""


def js_number(value: int | float) -> str:
    """``value`` as JavaScript's ``String(number)`` prints it, since the signature is over text
    that Taskcluster's JavaScript services produce (``1.7e12`` is ``1700000000000`` there).
    """
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value)


def certificate_signature(access_token: str, certificate: dict[str, Any], name: str) -> str:
    """The base64 signature ``certificate`` must carry when issued with ``access_token``.

    ``name`` is the temporary clientId; it is signed only for named credentials (those whose
    certificate has an ``issuer``).
    """
    lines = ["version:1"]
    if certificate.get("issuer"):
        lines += [f"clientId:{name}", f"issuer:{certificate['issuer']}"]
    lines += [
        f"seed:{certificate['seed']}",
        f"start:{js_number(certificate['start'])}",
        f"expiry:{js_number(certificate['expiry'])}",
        "scopes:",
        *certificate["scopes"],
    ]
    return base64.b64encode(_hmac(access_token, "\n".join(lines))).decode("ascii")


def temporary_access_token(access_token: str, seed: str) -> str:
    """The accessToken of temporary credentials with ``seed`` issued by ``access_token``."""
    return base64.urlsafe_b64encode(_hmac(access_token, seed)).decode("ascii").rstrip("=")


def _hmac(access_token: str, message: str) -> bytes:
    """HMAC-SHA256 of ``message`` keyed with ``access_token``."""
    mac = _keyed(access_token).copy()
    mac.update(message.encode())
    return mac.digest()


@functools.lru_cache(maxsize=64)
def _keyed(access_token: str) -> hmac.HMAC:
    """The HMAC state after the key ``access_token`` and before any message, copied for each
    message: a claim signs two per run, all with the issuer's key. The keys are the clients
    file's accessTokens (issuers), so the cache holds no more secrets than the registry."""
    return hmac.new(access_token.encode(), digestmod=hashlib.sha256)


def temporary_credentials(
    *, issuer: Credentials, client_id: str, scopes: Sequence[str], start: int, expiry: int
) -> dict[str, str]:
    """Issue temporary credentials as ``taskcluster.createTemporaryCredentials`` does.

    ``client_id`` equal to the issuer's gives unnamed credentials; any other value gives
    named ones (the certificate carries ``issuer``, and the issuer must hold
    ``auth:create-client:<client_id>`` for verifiers to accept them). ``start`` and ``expiry``
    are epoch ms. The issuer must hold every scope in ``scopes``; verifiers check that.
    """
    if not all(valid_scope(scope) for scope in scopes):
        raise ValueError(f"scopes must be strings of printable ASCII: {list(scopes)!r}")
    return _issue(issuer=issuer, client_id=client_id, scopes=scopes, start=start, expiry=expiry)


def _issue(
    *, issuer: Credentials, client_id: str, scopes: Sequence[str], start: int, expiry: int
) -> dict[str, str]:
    """:func:`temporary_credentials` for ``scopes`` known to be valid."""
    if expiry - start > MAX_LIFETIME_MS:
        raise ValueError("temporary credentials cannot last longer than 31 days")
    if expiry < start:
        raise ValueError("temporary credentials cannot expire before they start")
    certificate: dict[str, Any] = {
        "version": 1,
        "scopes": list(scopes),
        "start": start,
        "expiry": expiry,
        # 44 characters, the length Taskcluster requires (it uses two slugids).
        "seed": secrets.token_urlsafe(33),
    }
    if client_id != issuer.client_id:
        certificate["issuer"] = issuer.client_id
    certificate["signature"] = certificate_signature(issuer.access_token, certificate, client_id)
    return {
        "clientId": client_id,
        "accessToken": temporary_access_token(issuer.access_token, certificate["seed"]),
        "certificate": _COMPACT.encode(certificate),
    }


def task_credentials(
    *,
    issuer: Credentials,
    task_id: str,
    run_id: int,
    worker_group: str,
    worker_id: str,
    task_scopes: Sequence[str],
    start: int,
    taken_until: int,
) -> dict[str, str]:
    """The credentials a claim or reclaim hands the worker, named and scoped as Taskcluster's
    queue names and scopes them: the run's reclaim/resolve/create-artifact scopes plus the
    task's own scopes, expiring at ``taken_until`` (verifiers allow 5 minutes of skew past it).
    """
    until = js_number(taken_until / 1000)
    client_id = "/".join(
        ["task-client", task_id, str(run_id), "on", worker_group, worker_id, "until", until]
    )
    run = f"{task_id}/{run_id}"
    scopes = [
        f"queue:reclaim-task:{run}",
        f"queue:resolve-task:{run}",
        f"queue:create-artifact:{run}",
        *task_scopes,
    ]
    # Not re-checked per claim: the task's scopes matched the create-task schema's scope pattern
    # (stricter than valid_scope) when it was created, and the run's are a slugid and a number.
    return _issue(
        issuer=issuer, client_id=client_id, scopes=scopes, start=start, expiry=taken_until
    )
