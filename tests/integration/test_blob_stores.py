"""Both artifact-bytes backends against the same expectations: files under a temporary
directory, and Azure Blob Storage on the session's real Azurite (a container per test).

Whole writes and reads, incomplete streams that leave nothing behind, atomic replacement,
names that must neither escape nor collide, deletion, bounded memory for large streams, the
Azure SAS download URL, and the configuration that picks a backend.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import psutil
import pytest
import slugid
from azure.core.exceptions import ResourceNotFoundError

from coordinator.blobs import (
    BlobIncomplete,
    BlobPlaceRemoved,
    BlobStore,
    BlobUnavailable,
    blob_key,
    task_prefix,
)
from coordinator.blobs.azure_blob import AzureBlobStore
from coordinator.blobs.base import exact_batches
from coordinator.blobs.directory import DirectoryBlobStore
from coordinator.blobs.factory import open_blob_store
from coordinator.config import Config, ConfigurationError
from devharness.azurite import AzuriteProcess

MiB = 1 << 20


async def pieces(data: bytes, size: int = 65_536) -> AsyncIterator[bytes]:
    """``data`` in chunks of ``size``, as a request body arrives."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def read(store: BlobStore, key: str) -> bytes | None:
    reader = await store.open(key)
    if reader is None:
        return None
    async with reader:
        data = await reader.read_all()
    assert len(data) == reader.length
    return data


async def put(store: BlobStore, key: str, data: bytes, content_type: str = "text/plain") -> int:
    return await store.write(
        key, pieces(data), content_type=content_type, content_encoding=None, length=len(data)
    )


@pytest.fixture(params=["directory", "azure"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, azurite: AzuriteProcess
) -> AsyncIterator[BlobStore]:
    backend: BlobStore
    if request.param == "directory":
        backend = DirectoryBlobStore(tmp_path / "artifacts")
    else:
        backend = AzureBlobStore(azurite.connection_string, container=f"t{uuid.uuid4().hex}")
    yield backend
    await backend.close()


def key(name: str = "public/build/target.tar.gz", *, run_id: int = 0) -> str:
    return blob_key(slugid.nice(), run_id, name)


async def test_bytes_and_length_read_back(store: BlobStore) -> None:
    # crosses Azure's 4 MiB blocks and the directory's 1 MiB writes, and ends mid-block
    data = os.urandom(9 * MiB + 123)
    k = key()
    assert await put(store, k, data) == len(data)
    reader = await store.open(k)
    assert reader is not None
    async with reader:
        assert reader.length == len(data)
        chunks = [chunk async for chunk in reader]
    assert b"".join(chunks) == data
    assert max(map(len, chunks)) <= 4 * MiB

    empty = key("empty.log")
    assert await put(store, empty, b"") == 0
    assert await read(store, empty) == b""
    assert await store.open(key("never/written")) is None


async def test_gzip_bytes_read_back_as_stored(store: BlobStore) -> None:
    """A blob stored with ``Content-Encoding: gzip`` reads back byte for byte, still gzipped:
    the download route serves it with that header, so decoding is the client's."""
    text = b"".join(b"line %d of the run log\n" % n for n in range(50_000))
    data = gzip.compress(text)
    k = key("public/logs/live_backing.log")
    stored = await store.write(
        k, pieces(data), content_type="text/plain", content_encoding="gzip", length=len(data)
    )
    assert stored == len(data)
    assert await read(store, k) == data
    assert gzip.decompress(data) == text


async def test_an_incomplete_stream_stores_nothing(store: BlobStore) -> None:
    k = key()
    data = os.urandom(5 * MiB)
    with pytest.raises(
        BlobIncomplete, match=f"ended after {len(data)} of the {len(data) + 10} bytes"
    ):
        await store.write(
            k, pieces(data), content_type="text/plain", content_encoding=None, length=len(data) + 10
        )
    assert await store.open(k) is None
    with pytest.raises(BlobIncomplete, match="more than the 100 bytes"):
        await store.write(
            k, pieces(data), content_type="text/plain", content_encoding=None, length=100
        )
    assert await store.open(k) is None
    if isinstance(store, DirectoryBlobStore):
        # not even a temporary file is left behind
        assert [p for p in store.root.rglob("*") if p.is_file()] == []
    elif isinstance(store, AzureBlobStore):
        blob = store._container.get_blob_client(store.blob_name(k))
        with pytest.raises(ResourceNotFoundError):
            await blob.get_blob_properties()


async def test_an_incomplete_rewrite_keeps_the_previous_bytes(store: BlobStore) -> None:
    k = key()
    await put(store, k, b"first")
    with pytest.raises(BlobIncomplete):
        await store.write(
            k, pieces(b"sec"), content_type="text/plain", content_encoding=None, length=6
        )
    assert await read(store, k) == b"first"


async def test_a_rewrite_replaces_the_bytes_at_once(store: BlobStore) -> None:
    """Readers during a slow rewrite see the old bytes whole or the new ones whole (or, from
    Azure, fail when the blob changed between two of their chunks), never a mix."""
    k = key()
    old, new = b"a" * (6 * MiB), b"b" * (6 * MiB + 7)
    await put(store, k, old)
    before = await store.open(k)
    assert before is not None

    async def slow_pieces() -> AsyncIterator[bytes]:
        async for chunk in pieces(new, MiB // 2):
            await asyncio.sleep(0.01)
            yield chunk

    writing = asyncio.create_task(
        store.write(
            k, slow_pieces(), content_type="text/plain", content_encoding=None, length=len(new)
        )
    )
    seen = set()
    while not writing.done():
        try:
            data = await read(store, k)
        except BlobUnavailable as error:
            assert isinstance(store, AzureBlobStore) and "replaced while it was read" in str(error)
            continue
        assert data in (old, new)
        seen.add(data)
    assert await writing == len(new)
    assert old in seen  # the loop did read during the write
    assert await read(store, k) == new
    if isinstance(store, DirectoryBlobStore):
        # a reader that opened the file before keeps reading the old bytes
        async with before:
            assert await before.read_all() == old
    else:
        await before.close()


NAMES = [
    "public/logs/live_backing.log",
    "../../../escape",
    "..",
    ".",
    "a/../../b",
    "/leading/slash",
    "trailing/",
    "trailing.",
    ".hidden",
    "with space",
    "100%",
    "%2F",
    "%2E%2E",
    "~tilde",
    "x" * 1024,
    "%" * 1024,
    "/" * 1024,
    "".join(chr(c) for c in range(0x20, 0x7F)),
]


async def test_names_round_trip_and_stay_inside(store: BlobStore, tmp_path: Path) -> None:
    task_id = slugid.nice()
    keys = {blob_key(task_id, 0, name): name.encode() for name in NAMES}
    for k, data in keys.items():
        await put(store, k, data)
    for k, data in keys.items():
        assert await read(store, k) == data, k
    if isinstance(store, DirectoryBlobStore):
        root = store.root.resolve()
        assert sorted(os.listdir(tmp_path)) == ["artifacts"]
        files = [p for p in root.rglob("*") if p.is_file()]
        # one file per name, all directly in the run's directory
        assert len(files) == len(NAMES)
        assert {p.parent for p in files} == {root / task_id / "0"}
        for k in keys:
            assert store.path(k).resolve().parent == root / task_id / "0"
            assert len(store.path(k).name) <= 255
    elif isinstance(store, AzureBlobStore):
        names = [n async for n in store._container.list_blob_names()]
        assert len(names) == len(NAMES)
        assert all(n.startswith(f"{task_id}/0/") and n.count("/") == 2 for n in names)
        assert all(len(n) <= 1024 for n in names)


async def test_delete_and_delete_prefix(store: BlobStore) -> None:
    task, other = slugid.nice(), slugid.nice()
    keys = [blob_key(task, run, name) for run in (0, 1) for name in ("a", "b/c", "..")]
    kept = blob_key(other, 0, "a")
    for k in [*keys, kept]:
        await put(store, k, k.encode())

    await store.delete(keys[0])
    assert await store.open(keys[0]) is None
    assert await read(store, keys[1]) == keys[1].encode()
    await store.delete(keys[0])  # already gone: no error

    assert await store.delete_prefix(f"{task}/1/") == 3
    assert [await store.open(k) for k in keys[3:]] == [None] * 3
    assert await read(store, keys[1]) == keys[1].encode()

    assert await store.delete_prefix(task_prefix(task)) == 2
    assert [await store.open(k) for k in keys] == [None] * len(keys)
    assert await store.delete_prefix(task_prefix(task)) == 0
    assert await read(store, kept) == kept.encode()
    if isinstance(store, DirectoryBlobStore):
        # the deleted task leaves no directory behind
        assert sorted(os.listdir(store.root)) == [other]
    for bad in ("", task, f"{task}/0", f"{task}/0/x/"):
        with pytest.raises(ValueError):
            await store.delete_prefix(bad)


async def test_a_write_whose_task_is_deleted_meanwhile_stores_nothing(tmp_path: Path) -> None:
    """deleteTasks (or expiry) removing a task's blobs while one of its artifacts arrives:
    the write says so (the API answers 404), rather than failing on the vanished folder."""
    store = DirectoryBlobStore(tmp_path)
    task = slugid.nice()
    key = blob_key(task, 0, "public/logs/live_backing.log")

    async def chunks() -> AsyncIterator[bytes]:
        yield b"first half "
        assert await store.delete_prefix(task_prefix(task)) == 0  # its folder goes
        yield b"second half"

    with pytest.raises(BlobPlaceRemoved):
        await store.write(
            key, chunks(), content_type="text/plain", content_encoding=None, length=22
        )
    assert await store.open(key) is None
    assert os.listdir(tmp_path) == []  # no temporary file left behind


async def test_a_cancelled_write_leaves_no_file(tmp_path: Path) -> None:
    """A client that goes quiet and is given up on (the request cancelled) while a batch of
    its bytes is being written in a thread: nothing is left behind."""
    store = DirectoryBlobStore(tmp_path)
    handed_over = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        yield os.urandom(3 * MiB)  # a whole batch: handed to a thread
        handed_over.set()
        await asyncio.Event().wait()

    write = asyncio.create_task(
        store.write(
            key(), chunks(), content_type="text/plain", content_encoding=None, length=8 * MiB
        )
    )
    await handed_over.wait()
    write.cancel()
    with pytest.raises(asyncio.CancelledError):
        await write
    assert [name for _, _, files in os.walk(tmp_path) for name in files] == []


async def test_batches_hold_the_chunks_as_they_arrived() -> None:
    """The directory backend's batches: the chunks themselves (never copied on the event
    loop), at least a batch's size each but the last."""
    arrived = [os.urandom(300_000) for _ in range(7)]

    async def chunks() -> AsyncIterator[bytes]:
        for chunk in arrived:
            yield chunk

    batches = [b async for b in exact_batches(chunks(), batch_size=MiB, length=2_100_000)]
    assert [len(batch) for batch in batches] == [4, 3]
    assert all(
        a is b for a, b in zip([c for batch in batches for c in batch], arrived, strict=True)
    )


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


async def test_a_large_stream_keeps_memory_bounded(store: BlobStore) -> None:
    """64 MiB written and read back while the process's RSS grows by far less."""
    total, chunk_size = 64 * MiB, 64 * 1024
    chunk = os.urandom(chunk_size)
    k = key()
    start = _rss()
    peak = start

    async def generated() -> AsyncIterator[bytes]:
        nonlocal peak
        for index in range(total // chunk_size):
            if index % 64 == 0:
                peak = max(peak, _rss())
            yield chunk

    assert (
        await store.write(
            k, generated(), content_type="application/binary", content_encoding=None, length=total
        )
        == total
    )
    digest = hashlib.sha256()
    reader = await store.open(k)
    assert reader is not None
    async with reader:
        assert reader.length == total
        async for piece in reader:
            digest.update(piece)
            peak = max(peak, _rss())
    expected = hashlib.sha256(chunk * (total // chunk_size)).hexdigest()
    assert digest.hexdigest() == expected
    # buffering the whole stream would add 64 MiB; blocks of 4 MiB add a few of them
    assert peak - start < 40 * MiB, f"RSS grew by {(peak - start) / MiB:.1f} MiB"


async def test_the_directory_backend_has_no_download_url(tmp_path: Path) -> None:
    store = DirectoryBlobStore(tmp_path)
    url = store.download_url(
        key(), content_type="text/plain", content_encoding=None, expires=_ms() + 60_000
    )
    assert url is None


def _ms() -> int:
    return int(time.time() * 1000)


async def test_the_azure_download_url_serves_the_bytes_with_their_headers(
    azurite: AzuriteProcess,
) -> None:
    store = AzureBlobStore(azurite.connection_string, container=f"t{uuid.uuid4().hex}")
    try:
        k = key("public/logs/live log%20.txt.gz")
        data = os.urandom(100_000)
        await store.write(
            k,
            pieces(data),
            content_type="application/octet-stream",
            content_encoding=None,
            length=len(data),
        )
        url = store.download_url(
            k,
            content_type="text/plain; charset=utf-8",
            content_encoding="gzip",
            expires=_ms() + 60_000,
        )
        assert url is not None and url.startswith(azurite.blob_endpoint)
        expired = store.download_url(
            k, content_type="text/plain", content_encoding=None, expires=_ms() - 60_000
        )
        assert expired is not None
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            async with session.get(url) as response:
                assert response.status == 200
                assert await response.read() == data
                assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
                assert response.headers["Content-Encoding"] == "gzip"
            async with session.get(expired) as response:
                assert response.status == 403
            # without the SAS the blob is private
            async with session.get(url.partition("?")[0]) as response:
                assert response.status in (401, 403, 404)
    finally:
        await store.close()


async def test_the_configuration_picks_the_backend(tmp_path: Path, azurite: AzuriteProcess) -> None:
    env = {"COORDINATOR_DATA_DIR": str(tmp_path)}
    config = Config.from_env(env)
    assert (config.artifacts, config.artifacts_dir) == ("directory", tmp_path / "artifacts")
    assert config.artifact_max_bytes == 5 * 2**30
    directory = await open_blob_store(config)
    assert isinstance(directory, DirectoryBlobStore) and directory.root == tmp_path / "artifacts"
    assert (tmp_path / "artifacts").is_dir()

    prefix = f"t{uuid.uuid4().hex[:10]}-"
    azure_config = Config.from_env(
        {
            **env,
            "COORDINATOR_ARTIFACTS": "azure",
            "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string,
            "COORDINATOR_QUEUE_PREFIX": prefix,
            "COORDINATOR_ARTIFACT_MAX_BYTES": "1048576",
        }
    )
    assert azure_config.artifact_max_bytes == MiB
    azure = await open_blob_store(azure_config)
    try:
        assert isinstance(azure, AzureBlobStore) and azure.container == f"{prefix}artifacts"
        k = key()
        await put(azure, k, b"bytes")  # the container is created on first use
        assert await read(azure, k) == b"bytes"
    finally:
        await azure.close()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"COORDINATOR_ARTIFACTS": "s3"}, "COORDINATOR_ARTIFACTS='s3' is not a place"),
        ({"COORDINATOR_ARTIFACTS": "azure"}, "needs AZURE_STORAGE_CONNECTION_STRING"),
        ({"COORDINATOR_ARTIFACT_MAX_BYTES": "5GiB"}, "not a positive number of bytes"),
        ({"COORDINATOR_ARTIFACT_MAX_BYTES": "0"}, "not a positive number of bytes"),
        ({"COORDINATOR_NONCE_CACHE_ENTRIES": "many"}, "not a positive number of entries"),
    ],
)
def test_configuration_mistakes_name_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        Config.from_env(env)
    assert "\n" not in str(caught.value)


async def test_an_unusable_setting_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ConfigurationError, match="COORDINATOR_ARTIFACTS_DIR"):
        await open_blob_store(Config(artifacts_dir=tmp_path / "file" / "artifacts"))
    no_key = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        "BlobEndpoint=http://127.0.0.1:1/devstoreaccount1;"
    )
    with pytest.raises(ConfigurationError, match="AccountKey"):
        await open_blob_store(Config(artifacts="azure", azure_connection_string=no_key))
    with pytest.raises(ConfigurationError, match="not a valid Azure container name"):
        await open_blob_store(
            Config(artifacts="azure", azure_connection_string=no_key, queue_prefix="Bad_")
        )
