"""The artifact endpoints: Taskcluster's ten artifact methods, and the two signed URLs of ours
that carry s3 artifacts' bytes: ``uploadArtifact`` (the ``putUrl`` createArtifact answers) and
``downloadArtifact`` (where getArtifact redirects while the bytes are on the coordinator's own
disk; the Azure backend's downloads go to Azure's signed URLs instead).

A signed URL ends in ``?expires=<epoch ms>&sig=<hex>``: an HMAC-SHA256, keyed by the secret
every replica shares (:meth:`~coordinator.service.artifacts.ArtifactService.url_key`), of the
method, taskId, runId, name, ``expires`` and, for an upload, the contentType the PUT must send.
It needs no Authorization: past ``expires``, or altered in any part, it is a 403. An upload is
streamed into the blob store (never held whole), its length checked against its
``Content-Length``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError

from coordinator.api import keyset, validation
from coordinator.api.endpoints import API_PREFIX
from coordinator.api.errors import InputTooLarge, LengthRequired, SignedUrlRefused
from coordinator.api.http import json_response
from coordinator.blobs.base import BlobIncomplete, BlobUnavailable
from coordinator.domain.artifacts import Artifact, ArtifactKey
from coordinator.domain.listings import Key, Page
from coordinator.domain.records import to_iso
from coordinator.service.artifacts import (
    DOWNLOAD_URL_LIFETIME_MS,
    PUT_URL_LIFETIME_MS,
    ArtifactService,
    NamesPermit,
    check_uploaded,
)

if TYPE_CHECKING:
    from coordinator.api.auth import RequestAuth

log = logging.getLogger(__name__)

Body = dict[str, Any]

STORAGE_TYPE_HEADER = "x-taskcluster-artifact-storage-type"
"""Names the storage type of the artifact getArtifact answers with (Taskcluster's header)."""
UPLOAD_CHUNK = 1 << 16
"""Bytes read from an upload's body at a time."""


def _encoded_name(name: str) -> str:
    """``name`` as one path segment: every ``/`` as ``%2F``, and a name that is only dots
    quoted too, so that no client resolves it as ``.`` or ``..``."""
    quoted = quote(name, safe="")
    return quoted.replace(".", "%2E") if set(quoted) == {"."} else quoted


@dataclass(frozen=True, kw_only=True, slots=True)
class ArtifactUrls:
    """Makes and checks the signed URLs of artifact bytes.

    :param key: the HMAC key, shared by every replica.
    :param public_url: the coordinator's URL as clients reach it.
    :param max_bytes: the largest upload accepted (``COORDINATOR_ARTIFACT_MAX_BYTES``).
    """

    key: bytes
    public_url: str
    max_bytes: int

    def signature(self, method: str, key: ArtifactKey, *, expires: int, content_type: str) -> str:
        """The hex HMAC of a URL of ``method`` for the artifact of ``key``."""
        task_id, run_id, name = key
        # Printable ASCII names hold no newline, so the fields cannot run into each other.
        message = "\n".join([method, task_id, str(run_id), name, content_type, str(expires)])
        return hmac.new(self.key, message.encode(), hashlib.sha256).hexdigest()

    def _url(self, route: str, artifact: Artifact, *, expires: int, sig: str) -> str:
        return (
            f"{self.public_url}{API_PREFIX}/task/{artifact.task_id}/runs/{artifact.run_id}/"
            f"{route}/{_encoded_name(artifact.name)}?expires={expires}&sig={sig}"
        )

    def upload_url(self, artifact: Artifact, *, expires: int) -> str:
        """The ``putUrl`` of an s3 artifact, working until ``expires``."""
        sig = self.signature(
            "PUT", artifact.key, expires=expires, content_type=artifact.content_type
        )
        return self._url("artifact-upload", artifact, expires=expires, sig=sig)

    def download_url(self, artifact: Artifact, *, expires: int) -> str:
        """Where the coordinator serves an uploaded artifact's bytes until ``expires``."""
        sig = self.signature("GET", artifact.key, expires=expires, content_type="")
        return self._url("artifact-download", artifact, expires=expires, sig=sig)

    def check(
        self,
        request: web.Request,
        key: ArtifactKey,
        *,
        content_type: str,
        now: int,
    ) -> None:
        """Refuse a request whose URL is expired or not signed for it.

        :param content_type: what the signature covers (the artifact's contentType for an
            upload, ``""`` for a download).
        :raises SignedUrlRefused: 403.
        """
        expires = int(request.query["expires"])
        expected = self.signature(request.method, key, expires=expires, content_type=content_type)
        if not hmac.compare_digest(request.query["sig"], expected):
            raise SignedUrlRefused(
                "This URL's signature does not match it: it was altered, or signed by a "
                "coordinator with another secret"
            )
        if expires < now:
            raise SignedUrlRefused(
                f"This URL expired at {to_iso(expires)}: ask for a new one (repeat createArtifact "
                "for an upload, getArtifact for a download)"
            )


def _artifact_key(request: web.Request) -> ArtifactKey:
    info = request.match_info
    return info["taskId"], int(info["runId"]), info["name"]


async def _body(request: web.Request, length: int) -> AsyncIterator[bytes]:
    """The request body as it arrives, in chunks of at most :data:`UPLOAD_CHUNK` bytes.

    :raises BlobIncomplete: the client hung up (or broke the framing) before ``length`` bytes.
    """
    received = 0
    try:
        async for chunk in request.content.iter_chunked(UPLOAD_CHUNK):
            received += len(chunk)
            yield chunk
    except (ConnectionResetError, HttpProcessingError) as error:
        raise BlobIncomplete(
            f"the body ended after {received} of the {length} bytes declared ({error}); "
            "nothing was stored"
        ) from None


class ArtifactHandlers:
    """The artifact endpoints, mixed into :class:`~coordinator.api.handlers.Handlers`.

    :param artifacts: the artifact service.
    :param artifact_urls: what signs and checks the upload and download URLs.
    """

    artifacts: ArtifactService
    artifact_urls: ArtifactUrls

    if TYPE_CHECKING:

        async def authorize(self, request: web.Request, **params: object) -> RequestAuth: ...

    def _names_permit(self, request: web.Request) -> NamesPermit:
        """getArtifact's scopes for the names visited so far."""

        async def permit(names: tuple[str, ...]) -> None:
            await self.authorize(request, names=names)

        return permit

    async def _resolved(self, request: web.Request, *, latest: bool) -> Artifact:
        """The artifact the request names, its links followed, with getArtifact's scopes
        checked for every name visited (for ``latest``, the first before the task is read)."""
        task_id, name = request.match_info["taskId"], request.match_info["name"]
        permit = self._names_permit(request)
        if latest:
            await permit((name,))
            run_id = await self.artifacts.latest_run(task_id)
        else:
            run_id = int(request.match_info["runId"])
        return await self.artifacts.resolve(task_id, run_id, name, permit=permit)

    def _s3_url(self, artifact: Artifact) -> str:
        """Where an uploaded s3 artifact's bytes are downloaded for the next 30 minutes."""
        check_uploaded(artifact)
        return self.artifacts.blob_url(artifact) or self.artifact_urls.download_url(
            artifact, expires=self.artifacts.clock() + DOWNLOAD_URL_LIFETIME_MS
        )

    def _content(self, artifact: Artifact) -> Body:
        """How to get a resolved artifact's content (artifact-content-response)."""
        if artifact.storage_type == "error":
            return {
                "storageType": "error",
                "reason": artifact.details["reason"],
                "message": artifact.details["message"],
            }
        if artifact.storage_type == "reference":
            return {"storageType": "reference", "url": artifact.details["url"]}
        return {"storageType": "s3", "url": self._s3_url(artifact)}

    def _redirect(self, artifact: Artifact) -> web.Response:
        """getArtifact's answer: 303 to the content, or an error artifact's 424."""
        content = self._content(artifact)
        if artifact.storage_type == "error":
            response = json_response(
                {"reason": content["reason"], "message": content["message"]}, status=424
            )
        else:
            validation.validate_response("get-artifact-response", content)
            response = json_response(content, status=303)
            response.headers[hdrs.LOCATION] = content["url"]
        response.headers[STORAGE_TYPE_HEADER] = artifact.storage_type
        return response

    async def _list(self, request: web.Request, run_id: int | None) -> Body:
        after = keyset.after(request, (keyset.ArtifactName,))
        _, page = await self.artifacts.listing(
            request.match_info["taskId"],
            run_id,
            after=None if after is None else str(after[0]),
            limit=keyset.limit(request),
        )
        keyed: Page[Artifact, Key] = Page(
            items=page.items,
            next_after=None if page.next_after is None else (page.next_after,),
        )
        return keyset.page_body(request, "artifacts", keyed, lambda found: found.to_api())

    # --- Taskcluster's methods --------------------------------------------------------------

    async def createArtifact(self, request: web.Request, body: Any) -> Body:
        artifact = await self.artifacts.create(*_artifact_key(request), body)
        if artifact.storage_type != "s3":
            return {"storageType": artifact.storage_type}
        expires = self.artifacts.clock() + PUT_URL_LIFETIME_MS
        return {
            "storageType": "s3",
            "contentType": artifact.content_type,
            "expires": to_iso(expires),
            "putUrl": self.artifact_urls.upload_url(artifact, expires=expires),
        }

    async def finishArtifact(self, request: web.Request, body: Any) -> Body:
        await self.artifacts.finish(*_artifact_key(request))

    async def getArtifact(self, request: web.Request, body: Any) -> web.StreamResponse:
        return self._redirect(await self._resolved(request, latest=False))

    async def getLatestArtifact(self, request: web.Request, body: Any) -> web.StreamResponse:
        return self._redirect(await self._resolved(request, latest=True))

    async def artifact(self, request: web.Request, body: Any) -> Body:
        return self._content(await self._resolved(request, latest=False))

    async def latestArtifact(self, request: web.Request, body: Any) -> Body:
        return self._content(await self._resolved(request, latest=True))

    async def listArtifacts(self, request: web.Request, body: Any) -> Body:
        return await self._list(request, int(request.match_info["runId"]))

    async def listLatestArtifacts(self, request: web.Request, body: Any) -> Body:
        return await self._list(request, None)

    async def artifactInfo(self, request: web.Request, body: Any) -> Body:
        return (await self.artifacts.info(*_artifact_key(request))).to_api()

    async def latestArtifactInfo(self, request: web.Request, body: Any) -> Body:
        task_id, name = request.match_info["taskId"], request.match_info["name"]
        run_id = await self.artifacts.latest_run(task_id)
        return (await self.artifacts.info(task_id, run_id, name)).to_api()

    # --- the bytes --------------------------------------------------------------------------

    async def uploadArtifact(self, request: web.Request, body: Any) -> Body:
        """The bytes of an s3 artifact, checked in this order: the artifact still there (404),
        the URL signed for it and not expired (403), the Content-Length given (411) and within
        the limit (413), the Content-Type (400), then the body itself (400 if it ends early),
        all but the last before a byte is read."""
        key = _artifact_key(request)
        artifact = await self.artifacts.uploadable(*key)
        self.artifact_urls.check(
            request, key, content_type=artifact.content_type, now=self.artifacts.clock()
        )
        length = request.content_length
        if length is None:
            raise LengthRequired(
                "Content-Length is required: an artifact upload sends its exact length "
                "(not chunked)"
            )
        if length > self.artifact_urls.max_bytes:
            raise InputTooLarge(
                f"the artifact is {length} bytes: this coordinator accepts at most "
                f"{self.artifact_urls.max_bytes} (COORDINATOR_ARTIFACT_MAX_BYTES)"
            )
        await self.artifacts.upload(
            artifact,
            _body(request, length),
            content_type=request.headers.get(hdrs.CONTENT_TYPE, ""),
            content_encoding=request.headers.get(hdrs.CONTENT_ENCODING),
            length=length,
        )
        return {}

    async def downloadArtifact(self, request: web.Request, body: Any) -> web.StreamResponse:
        """An uploaded artifact's bytes, streamed with their Content-Type, Content-Encoding
        and length."""
        key = _artifact_key(request)
        self.artifact_urls.check(request, key, content_type="", now=self.artifacts.clock())
        artifact = await self.artifacts.uploaded(*key)
        async with await self.artifacts.open(artifact) as reader:
            response = web.StreamResponse()
            response.headers[hdrs.CONTENT_TYPE] = artifact.content_type
            encoding = artifact.details.get("contentEncoding")
            if encoding:
                response.headers[hdrs.CONTENT_ENCODING] = encoding
            response.content_length = reader.length
            await response.prepare(request)
            # Past prepare() the status is sent: a failure can only cut the body short, which
            # the client sees against the Content-Length.
            try:
                async for chunk in reader:
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionResetError:
                log.info("artifact download abandoned by the client key=%s", key)
            except BlobUnavailable as error:
                log.warning("artifact download cut short key=%s error=%s", key, error)
                response.force_close()
        return response
