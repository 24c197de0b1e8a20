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
from coordinator.api.endpoints import API_PREFIX, NAME_PAGED, SIGNED, Endpoint
from coordinator.api.errors import InputTooLarge, LengthRequired, SignedUrlRefused
from coordinator.api.http import json_response
from coordinator.api.pipeline import ApiServices, Handlers, Routes
from coordinator.blobs.base import BlobIncomplete, BlobUnavailable
from coordinator.domain.artifacts import Artifact, ArtifactKey
from coordinator.domain.listings import Key, Page
from coordinator.domain.records import to_iso
from coordinator.domain.scopes import Template
from coordinator.service.artifacts import (
    DOWNLOAD_URL_LIFETIME_MS,
    PUT_URL_LIFETIME_MS,
    NamesPermit,
    check_uploaded,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

Body = dict[str, Any]

STORAGE_TYPE_HEADER = "x-taskcluster-artifact-storage-type"
"""Names the storage type of the artifact getArtifact answers with (Taskcluster's header)."""
UPLOAD_BUFFER = 1 << 20
"""Bytes of an upload's body the connection reads ahead of the blob store (twice this at
most): with aiohttp's default of 64 KiB, reading stops and resumes every 128 KiB."""


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
    """The request body as it arrives: each chunk as the connection read it, not copied or
    split, so that the event loop does no more per byte than hand it to the blob store.

    :raises BlobIncomplete: the client hung up (or broke the framing) before ``length`` bytes.
    """
    received = 0
    request.content.set_read_chunk_size(UPLOAD_BUFFER)
    try:
        async for chunk, _ in request.content.iter_chunks():
            received += len(chunk)
            yield chunk
    except (ConnectionResetError, HttpProcessingError) as error:
        raise BlobIncomplete(
            f"the body ended after {received} of the {length} bytes declared ({error}); "
            "nothing was stored"
        ) from None


GET_ARTIFACT: Template = {
    "AllOf": [{"for": "name", "in": "names", "each": "queue:get-artifact:<name>"}]
}
"""getArtifact's scopes: one per name visited while following links (the handler's ``names``)."""


ARTIFACT_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        name="createArtifact",
        method="POST",
        route="/task/{taskId}/runs/{runId}/artifacts/{name}",
        input="post-artifact-request",
        output="post-artifact-response",
        title="Create Artifact",
        description="Create an artifact of a running run (or of one resolved `exception` less "
        "than 25 minutes ago), expiring no later than its task. `s3`: the answer's `putUrl` "
        "takes the bytes (PUT, no Authorization, `Content-Type` equal to `contentType`, "
        "`Content-Length` exact, optional `Content-Encoding`), for 45 minutes; repeating the "
        "request answers a fresh one. `reference`, `link` and `error` are complete at once. "
        "`object` is refused: use `s3`. A repeat may extend `expires` (never shorten it), "
        "change a reference's URL or make a reference a link; anything else that differs is a "
        "409.",
        scopes="queue:create-artifact:<taskId>/<runId>",
    ),
    Endpoint(
        name="finishArtifact",
        method="PUT",
        route="/task/{taskId}/runs/{runId}/artifacts/{name}",
        input="finish-artifact-request",
        output=None,
        title="Finish Artifact",
        description="Taskcluster's completion of an `object` artifact. This coordinator makes "
        "none, so an existing artifact is a 400 (`Only object artifacts can be finished`) and "
        "a missing one a 404.",
        scopes="queue:create-artifact:<taskId>/<runId>",
        success=204,
    ),
    Endpoint(
        name="getArtifact",
        method="GET",
        route="/task/{taskId}/runs/{runId}/artifacts/{name}",
        input=None,
        output="get-artifact-response",
        title="Get Artifact Data from Run",
        description="Redirect (303) to the artifact's content, following `link` artifacts: an "
        "`s3` artifact's bytes (a signed URL valid 30 minutes; 404 until they are uploaded), a "
        "`reference`'s URL. An `error` artifact answers 424 with its `reason` and `message`; an "
        "expired one 410; links in a cycle 400. The caller needs `queue:get-artifact:<name>` "
        "for every name the links visit (anonymous callers hold `public/*`); a signed URL "
        "(`?bewit=`) carries its signer's scopes.",
        scopes=GET_ARTIFACT,
        success=303,
        statuses=("410", "424"),
    ),
    Endpoint(
        name="getLatestArtifact",
        method="GET",
        route="/task/{taskId}/artifacts/{name}",
        input=None,
        output="get-artifact-response",
        title="Get Artifact Data from Latest Run",
        description="getArtifact of the task's latest run (404 when the task has none).",
        scopes=GET_ARTIFACT,
        success=303,
        statuses=("410", "424"),
    ),
    Endpoint(
        name="listArtifacts",
        method="GET",
        route="/task/{taskId}/runs/{runId}/artifacts",
        input=None,
        output="list-artifacts-response",
        title="Get Artifacts from Run",
        description="One page of the run's artifacts in name order, expired ones (until they "
        "are deleted) and `s3` ones not uploaded yet included. A pending run lists none; a run "
        "the task does not have is a 404.",
        query=NAME_PAGED,
        scopes="queue:list-artifacts:<taskId>:<runId>",
    ),
    Endpoint(
        name="listLatestArtifacts",
        method="GET",
        route="/task/{taskId}/artifacts",
        input=None,
        output="list-artifacts-response",
        title="Get Artifacts from Latest Run",
        description="listArtifacts of the task's latest run (404 when the task has none).",
        query=NAME_PAGED,
        scopes="queue:list-artifacts:<taskId>",
    ),
    Endpoint(
        name="artifactInfo",
        method="GET",
        route="/task/{taskId}/runs/{runId}/artifact-info/{name}",
        input=None,
        output="artifact-response",
        title="Get Artifact Information From Run",
        description="The artifact's record: a link is not followed, an expired artifact is "
        "shown until it is deleted. Grants no access to the content.",
        scopes="queue:list-artifacts:<taskId>:<runId>",
    ),
    Endpoint(
        name="latestArtifactInfo",
        method="GET",
        route="/task/{taskId}/artifact-info/{name}",
        input=None,
        output="artifact-response",
        title="Get Artifact Information From Latest Run",
        description="artifactInfo of the task's latest run (404 when the task has none).",
        scopes="queue:list-artifacts:<taskId>",
    ),
    Endpoint(
        name="artifact",
        method="GET",
        route="/task/{taskId}/runs/{runId}/artifact-content/{name}",
        input=None,
        output="artifact-content-response",
        title="Get Artifact Content From Run",
        description="Where the artifact's content is, as JSON (200), following links as "
        "getArtifact does and with its scopes: an `s3` artifact's signed URL, a `reference`'s "
        "URL, or an `error` artifact's `reason` and `message`.",
        scopes=GET_ARTIFACT,
        statuses=("410",),
    ),
    Endpoint(
        name="latestArtifact",
        method="GET",
        route="/task/{taskId}/artifact-content/{name}",
        input=None,
        output="artifact-content-response",
        title="Get Artifact Content From Latest Run",
        description="artifact of the task's latest run (404 when the task has none).",
        scopes=GET_ARTIFACT,
        statuses=("410",),
    ),
    Endpoint(
        name="uploadArtifact",
        method="PUT",
        route="/task/{taskId}/runs/{runId}/artifact-upload/{name}",
        input=None,
        output=None,
        title="Upload Artifact Bytes",
        description="The `putUrl` createArtifact answers for an `s3` artifact: the bytes, "
        "streamed, with `Content-Type` equal to the artifact's `contentType` (400 otherwise), "
        "an exact `Content-Length` (411 without one; 413 past the coordinator's limit; a body "
        "that ends early is a 400 and stores nothing) and optionally `Content-Encoding`, given "
        "back on download. A repeat replaces the bytes. No Authorization: the URL's signature "
        "is the authority (403 once expired or altered). Not a Taskcluster method.",
        stability="experimental",
        query=SIGNED,
        statuses=("411",),
        uploads=True,
    ),
    Endpoint(
        name="downloadArtifact",
        method="GET",
        route="/task/{taskId}/runs/{runId}/artifact-download/{name}",
        input=None,
        output=None,
        title="Download Artifact Bytes",
        description="The signed URL getArtifact redirects to for an `s3` artifact when the "
        "coordinator keeps the bytes on its disk: the bytes with the `Content-Type`, "
        "`Content-Encoding` and length they were uploaded with. No Authorization: the URL's "
        "signature is the authority (403 once expired or altered). Not a Taskcluster method.",
        stability="experimental",
        query=SIGNED,
        downloads=True,
    ),
)
"""The artifact methods."""


class ArtifactHandlers(Handlers):
    """The artifact endpoints, over the artifact service and the signer of their URLs."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.artifacts = services.artifacts
        self.artifact_urls = services.artifact_urls

    def _names_permit(self, request: web.Request) -> NamesPermit:
        """getArtifact's scopes for the names visited so far."""

        async def permit(names: tuple[str, ...]) -> None:
            await self.authorize(request, names=names)

        return permit

    async def _resolved(self, request: web.Request, *, latest: bool) -> Artifact:
        """The artifact the request names, its links followed, with getArtifact's scopes
        checked for every name visited."""
        task_id, name = request.match_info["taskId"], request.match_info["name"]
        if latest:
            return await self.latest(request, task_id, name)
        permit = self._names_permit(request)
        run_id = int(request.match_info["runId"])
        return await self.artifacts.resolve(task_id, run_id, name, permit=permit)

    async def latest(self, request: web.Request, task_id: str, name: str) -> Artifact:
        """Artifact ``name`` of the task's latest run, its links followed, with the scopes
        checked for every name visited (the first before the task is read): the request's
        endpoint must declare :data:`GET_ARTIFACT` (the index's findArtifactFromTask does)."""
        permit = self._names_permit(request)
        await permit((name,))
        run_id = await self.artifacts.latest_run(task_id)
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

    def redirect(self, artifact: Artifact, *, plain: bool = False) -> web.Response:
        """getArtifact's answer: 303 to the content, or an error artifact's 424. ``plain``: the
        303's body is text, as a web server's redirect has it (what the index's
        findArtifactFromTask answers, where the official Python client and taskgraph read
        ``Location``), instead of the content's JSON."""
        content = self._content(artifact)
        if artifact.storage_type == "error":
            response = json_response(
                {"reason": content["reason"], "message": content["message"]}, status=424
            )
        elif plain:
            response = web.Response(status=303, text=f"See Other. Redirecting to {content['url']}")
            response.headers[hdrs.LOCATION] = content["url"]
        else:
            validation.validate_response("get-artifact-response", content)
            response = json_response(content, status=303)
            response.headers[hdrs.LOCATION] = content["url"]
        response.headers[STORAGE_TYPE_HEADER] = artifact.storage_type
        return response

    async def _list(self, request: web.Request, run_id: int | None) -> Body:
        after = keyset.after(request, (keyset.Name,))
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
        return self.redirect(await self._resolved(request, latest=False))

    async def getLatestArtifact(self, request: web.Request, body: Any) -> web.StreamResponse:
        return self.redirect(await self._resolved(request, latest=True))

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


ROUTES = Routes(ARTIFACT_ENDPOINTS, ArtifactHandlers)
