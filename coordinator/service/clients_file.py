"""The registry of Taskcluster clients (clientId, accessToken, scopes) and its JSON file.

The file named by ``COORDINATOR_CLIENTS_FILE`` (default ``<data dir>/clients.json``)::

    {
      "issuer": "static/queue-coordinator",
      "anonymousScopes": ["queue:get-artifact:public/*"],
      "clients": [
        {"clientId": "root", "accessToken": "<44 random chars>", "scopes": ["*"],
         "description": "created by ./scripts/dev"},
        {"clientId": "static/queue-coordinator", "accessToken": "<44 random chars>",
         "scopes": ["*"]}
      ]
    }

- ``clients``: every permanent client. ``clientId`` matches ``^[A-Za-z0-9!@/:.+|_-]+$`` (as in
  Taskcluster) and is unique; ``accessToken`` is a non-empty secret; ``scopes`` are strings
  of printable ASCII (a trailing ``*`` is a wildcard); ``description`` is optional.
- ``issuer``: the clientId whose accessToken signs the temporary credentials the coordinator
  hands out on claims. Because the issuer lives in the file and not in process memory, those
  credentials stay valid across restarts and are accepted by every replica that shares the
  file. The issuer must hold every scope it delegates (task scopes are arbitrary, so in
  practice ``*``); rotating its accessToken invalidates all outstanding task credentials.
- ``anonymousScopes`` (optional): what a request without credentials holds, Taskcluster's
  ``anonymous`` role; :data:`DEFAULT_ANONYMOUS_SCOPES` when absent (``[]`` grants nothing).

The file holds secrets: it is created with mode 0600 and a warning is logged when it is
readable by others. The registry re-reads it when its modification time, size or inode
changes (checked on each lookup: one ``stat``), so operators add or remove clients without a
restart; an edit that does not parse is logged and ignored, keeping the last good contents,
so a half-written file never locks everybody out. Replace the file atomically (write a new
file, then rename) to avoid readers seeing a partial write.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.config import ConfigurationError
from coordinator.domain.scopes import valid_scope
from hawk_signing import Credentials

log = logging.getLogger(__name__)

ROOT_CLIENT_ID = "root"
ISSUER_CLIENT_ID = "static/queue-coordinator"
DEFAULT_ANONYMOUS_SCOPES = ("queue:get-artifact:public/*",)
"""What anonymous callers hold unless the file says otherwise: reading ``public/`` artifacts."""
DEV_ANONYMOUS_SCOPES = ("queue:list-artifacts:*", "queue:get-artifact:public/*")
"""What ``./scripts/dev`` lets anonymous callers do in the clients file it creates: list
artifacts and read ``public/`` ones, as a Taskcluster deployment's ``anonymous`` role does, so
the dashboard shows a task's artifacts and log without a sign-in."""
_CLIENT_ID = re.compile(r"^[A-Za-z0-9!@/:.+|_-]+$")
_CLIENT_KEYS = frozenset({"clientId", "accessToken", "scopes", "description"})


class ClientsFileError(ConfigurationError):
    """The clients file is missing, unreadable or malformed; the message says where."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Client:
    """A permanent client from the clients file."""

    client_id: str
    access_token: str
    scopes: tuple[str, ...]

    @property
    def credentials(self) -> Credentials:
        return Credentials(client_id=self.client_id, access_token=self.access_token)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Contents:
    clients: dict[str, Client]
    issuer: Client
    anonymous_scopes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class _Stamp:
    """What changes when the file is edited or replaced."""

    mtime_ns: int
    size: int
    inode: int


class ClientRegistry:
    """The clients of one clients file, kept in step with the file.

    Construction loads the file and raises :class:`ClientsFileError` when it is unusable,
    so a misconfigured coordinator fails at start-up rather than on the first request.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._stamp: _Stamp | None = self._stat()
        self._contents = _load(self._path)
        self._generation = 0

    @property
    def generation(self) -> int:
        """A number that moves each time the file is re-read with new contents (after the one
        ``stat`` that checks it), for what is derived from the file to know it is stale."""
        self._current()
        return self._generation

    def lookup(self, client_id: str) -> Client | None:
        """The permanent client ``client_id``, or ``None`` if the file does not list it."""
        return self._current().clients.get(client_id)

    @property
    def issuer(self) -> Credentials:
        """The credentials that sign temporary credentials (the file's ``issuer``)."""
        return self._current().issuer.credentials

    @property
    def anonymous_scopes(self) -> tuple[str, ...]:
        """What a request without credentials holds (the file's ``anonymousScopes``)."""
        return self._current().anonymous_scopes

    def _current(self) -> _Contents:
        try:
            stamp: _Stamp | None = self._stat()
        except ClientsFileError as error:
            # Most likely mid-replacement: keep serving the last contents, and say so once.
            stamp = None
            if self._stamp is not None:
                log.error("clients file unavailable path=%s error=%s", self._path, error)
        if stamp is not None and stamp != self._stamp:
            try:
                self._contents = _load(self._path)
                self._generation += 1
                log.info(
                    "clients file reloaded path=%s clients=%d",
                    self._path,
                    len(self._contents.clients),
                )
            except ClientsFileError as error:
                log.error(
                    "clients file not reloaded, keeping previous path=%s error=%s",
                    self._path,
                    error,
                )
        # Remember the stamp either way so a bad edit is reported once, not on every request.
        self._stamp = stamp
        return self._contents

    def _stat(self) -> _Stamp:
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            raise ClientsFileError(
                f"cannot read clients file {self._path}: it does not exist; create it with "
                "`queue-coordinator clients add root`, point COORDINATOR_CLIENTS_FILE at "
                "another, or set COORDINATOR_AUTH=false (local experiments only)"
            ) from None
        except OSError as error:
            raise ClientsFileError(f"cannot read clients file {self._path}: {error}") from error
        return _Stamp(mtime_ns=st.st_mtime_ns, size=st.st_size, inode=st.st_ino)


def _load(path: Path) -> _Contents:
    try:
        with open(path, encoding="utf-8") as file:
            mode = os.fstat(file.fileno()).st_mode
            document = json.load(file)
    except OSError as error:
        raise ClientsFileError(f"cannot read clients file {path}: {error}") from error
    except ValueError as error:
        raise ClientsFileError(f"clients file {path} is not valid JSON: {error}") from error
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("clients file readable by others path=%s mode=%o", path, mode & 0o777)
    return _parse(document, path)


def _parse(document: Any, path: Path) -> _Contents:
    if not isinstance(document, dict) or not isinstance(document.get("clients"), list):
        raise ClientsFileError(f'clients file {path} must be an object with a "clients" list')
    unknown = set(document) - {"clients", "issuer", "anonymousScopes"}
    if unknown:
        raise ClientsFileError(f"clients file {path} has unknown keys {sorted(unknown)}")
    clients: dict[str, Client] = {}
    for index, entry in enumerate(document["clients"]):
        client = _parse_client(entry, f"{path}: clients[{index}]")
        if client.client_id in clients:
            raise ClientsFileError(f"{path}: clientId {client.client_id!r} is listed twice")
        clients[client.client_id] = client
    issuer_id = document.get("issuer")
    if not isinstance(issuer_id, str):
        raise ClientsFileError(
            f'clients file {path} must name, in "issuer", the client that signs temporary '
            "credentials"
        )
    issuer = clients.get(issuer_id)
    if issuer is None:
        raise ClientsFileError(f"{path}: issuer {issuer_id!r} is not one of the clients")
    anonymous = document.get("anonymousScopes", list(DEFAULT_ANONYMOUS_SCOPES))
    if not isinstance(anonymous, list) or not all(valid_scope(scope) for scope in anonymous):
        raise ClientsFileError(
            f"{path}: anonymousScopes must be a list of printable ASCII strings (scopes)"
        )
    return _Contents(clients=clients, issuer=issuer, anonymous_scopes=tuple(anonymous))


def _parse_client(entry: Any, where: str) -> Client:
    if not isinstance(entry, dict):
        raise ClientsFileError(f"{where} must be an object")
    unknown = set(entry) - _CLIENT_KEYS
    if unknown:
        raise ClientsFileError(f"{where} has unknown keys {sorted(unknown)}")
    client_id = entry.get("clientId")
    if not isinstance(client_id, str) or not _CLIENT_ID.match(client_id):
        raise ClientsFileError(f"{where}.clientId must match {_CLIENT_ID.pattern}")
    access_token = entry.get("accessToken")
    if not isinstance(access_token, str) or not access_token:
        raise ClientsFileError(f"{where} ({client_id}): accessToken must be a non-empty string")
    scopes = entry.get("scopes")
    if not isinstance(scopes, list) or not all(valid_scope(scope) for scope in scopes):
        raise ClientsFileError(
            f"{where} ({client_id}): scopes must be a list of printable ASCII strings"
        )
    if not isinstance(entry.get("description", ""), str):
        raise ClientsFileError(f"{where} ({client_id}): description must be a string")
    return Client(client_id=client_id, access_token=access_token, scopes=tuple(scopes))


def _new_access_token() -> str:
    # 44 characters of URL-safe base64, the shape of Taskcluster's accessTokens.
    return secrets.token_urlsafe(33)


def ensure_root_client(
    path: str | os.PathLike[str], *, anonymous_scopes: Sequence[str] | None = None
) -> Credentials:
    """The root client's credentials, creating the clients file first if it does not exist.

    A new file gets a root client (``root``, scope ``*``) and the issuer client
    (``static/queue-coordinator``, scope ``*``), both with random accessTokens, mode 0600,
    and ``anonymousScopes`` when ``anonymous_scopes`` is given (otherwise none, so
    :data:`DEFAULT_ANONYMOUS_SCOPES` apply). An existing file is never changed, its
    ``anonymousScopes`` included. Creation is atomic and never overwrites: several replicas
    starting at once end up sharing the one file that won. Raises :class:`ClientsFileError`
    when an existing file is unusable or has no ``root`` client.
    """
    target = Path(path)
    if not target.exists():
        document = _new_document(_root_entry())
        if anonymous_scopes is not None:
            document["anonymousScopes"] = list(anonymous_scopes)
        _write(target, document, replace=False)
    client = ClientRegistry(target).lookup(ROOT_CLIENT_ID)
    if client is None:
        raise ClientsFileError(f"clients file {target} has no {ROOT_CLIENT_ID!r} client")
    return client.credentials


def add_client(
    path: str | os.PathLike[str],
    client_id: str,
    *,
    scopes: list[str],
    description: str = "",
) -> Credentials:
    """Add a client with a new random accessToken; creates the file (with the issuer) first
    if there is none. Returns the new client's credentials.

    :raises ClientsFileError: the clientId is taken or invalid, a scope is invalid, or the
        existing file is unusable.
    """
    target = Path(path)
    access_token = _new_access_token()
    entry: dict[str, Any] = {
        "clientId": client_id,
        "accessToken": access_token,
        "scopes": scopes,
        "description": description,
    }
    _parse_client(entry, "the new client")
    if not target.exists():
        _write(target, _new_document(entry), replace=False)
    else:
        _load(target)  # refuse to extend a file that does not parse
        document = json.loads(target.read_text(encoding="utf-8"))
        if any(other.get("clientId") == client_id for other in document["clients"]):
            raise ClientsFileError(f"clients file {target} already has a client {client_id!r}")
        document["clients"].append(entry)
        _write(target, document, replace=True)
    log.info("client added path=%s clientId=%s scopes=%s", target, client_id, scopes)
    return Credentials(client_id=client_id, access_token=access_token)


def _root_entry() -> dict[str, Any]:
    return {
        "clientId": ROOT_CLIENT_ID,
        "accessToken": _new_access_token(),
        "scopes": ["*"],
        "description": "created on first start; holds every scope",
    }


def _new_document(first: dict[str, Any]) -> dict[str, Any]:
    issuer = {
        "clientId": ISSUER_CLIENT_ID,
        "accessToken": _new_access_token(),
        "scopes": ["*"],
        "description": "signs the temporary credentials handed out on claims",
    }
    return {"issuer": ISSUER_CLIENT_ID, "clients": [first, issuer]}


def _write(target: Path, document: dict[str, Any], *, replace: bool) -> None:
    """Publish ``document`` at ``target`` complete, mode 0600.

    :param replace: replace an existing file (rename); otherwise never overwrite one
        (link, which fails if another process created the file meanwhile).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp creates the file with mode 0600.
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".clients-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(document, file, indent=2)
            file.write("\n")
            file.flush()
            os.fsync(file.fileno())
        if replace:
            os.replace(temporary, target)
            return
        try:
            os.link(temporary, target)
            log.info("clients file created path=%s", target)
        except FileExistsError:
            log.info("clients file created concurrently by another process path=%s", target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
