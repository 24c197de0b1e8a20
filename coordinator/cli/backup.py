"""``queue-coordinator backup PATH`` and ``queue-coordinator restore PATH``: a backup of the
configured store (and, with the ``directory`` artifact backend, of the artifacts' bytes) as a
directory, and putting one back (docs/operations.md, "Backups and restore").

This module owns the backup's layout and its manifest, the artifact files' copies, and what
restore refuses; the store's copy is :mod:`coordinator.store.backups`'s. A backup directory
holds ``manifest.json``, written last (a directory without one is a backup that did not
finish), the store's copy (``store.sqlite`` or ``store.pgdump``) and, with the ``directory``
backend, ``artifacts/``, the artifact files as the backend lays them out.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coordinator.blobs.directory import TEMP_PREFIX
from coordinator.config import Config
from coordinator.store.backups import (
    STORE_FILES,
    BackupError,
    StoreCopy,
    copy_store,
    holds_tasks,
    latest_migration,
    restore_store,
    shown,
)
from coordinator.store.factory import open_store, store_kind

FORMAT = 1
"""The manifest's format version; a restore refuses a higher one."""
MANIFEST = "manifest.json"
ARTIFACTS = "artifacts"

BACKUP_DESCRIPTION = """\
Back up the store that COORDINATOR_STORE_URL (or --store-url) names into the new directory
PATH while coordinators keep serving: every task whose createTask was answered before the
backup began is in it. SQLite is copied with SQLite's online backup, PostgreSQL with
pg_dump --format=custom (which must be on PATH). With COORDINATOR_ARTIFACTS=directory the
artifact files under COORDINATOR_ARTIFACTS_DIR are copied too; Azure Blob Storage's artifacts
are not (back them up with Azure's own means). The encryption key and the clients file are
not in a backup: keep them apart (docs/operations.md)."""

BACKUP_EPILOG = """\
Example: queue-coordinator backup /var/backups/qc-$(date -u +%Y%m%dT%H%M%SZ). What a backup
holds and what it guarantees: docs/operations.md, "Backups and restore"."""

RESTORE_EPILOG = """\
Example: queue-coordinator restore /var/backups/qc-20270131T020000Z. A refusal or a failure is
one line on stderr and exit status 1 (docs/operations.md, "Backups and restore")."""

RESTORE_DESCRIPTION = """\
Replace the store that COORDINATOR_STORE_URL (or --store-url) names with the backup in PATH,
put the backup's artifact files back under COORDINATOR_ARTIFACTS_DIR, then apply this
version's migrations to it. Stop every coordinator of that store first. A store that already
holds tasks is refused unless --force, and so is a backup taken by a newer coordinator (one
with migrations this one lacks). PostgreSQL is restored with pg_restore (on PATH)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Manifest:
    """What ``manifest.json`` says of a backup.

    :param format: :data:`FORMAT` when it was written.
    :param store: ``sqlite`` or ``postgresql``.
    :param migration: the highest store migration the copy holds.
    :param postgres_schema: the PostgreSQL schema it was taken from (``None`` for SQLite).
    :param artifacts: the artifact backend when it was taken: ``directory`` (the files are in
        ``artifacts/``) or ``azure`` (not in the backup).
    :param artifact_files: how many artifact files the backup holds.
    :param taken_at: when the backup began (ISO 8601, UTC).
    :param duration_seconds: how long it took.
    :param coordinator_version: the queue-coordinator version that took it.
    """

    format: int
    store: str
    migration: int
    postgres_schema: str | None
    artifacts: str
    artifact_files: int
    taken_at: str
    duration_seconds: float
    coordinator_version: str

    @property
    def copy(self) -> StoreCopy:
        return StoreCopy(kind=self.store, migration=self.migration, schema=self.postgres_schema)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def read(cls, path: Path) -> Manifest:
        """The manifest of the backup directory ``path``.

        :raises BackupError: there is no backup there, or its manifest is not one.
        """
        if not path.is_dir():
            raise BackupError(f"no backup at {path}: it is not a directory")
        try:
            raw = json.loads((path / MANIFEST).read_text("utf-8"))
        except FileNotFoundError:
            raise BackupError(
                f"{path} holds no {MANIFEST}: it is not a backup, or one that did not finish"
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise BackupError(f"cannot read {path / MANIFEST}: {error}") from None
        manifest = cls._from_mapping(raw, path / MANIFEST)
        if not (path / STORE_FILES[manifest.store]).is_file():
            raise BackupError(f"{path} lacks {STORE_FILES[manifest.store]}, the store's copy")
        return manifest

    @classmethod
    def _from_mapping(cls, raw: Any, where: Path) -> Manifest:
        if not isinstance(raw, Mapping):
            raise BackupError(f"{where} is not a backup manifest: not a JSON object")
        if isinstance(raw.get("format"), int) and raw["format"] > FORMAT:
            raise BackupError(
                f"{where} has format {raw['format']}, newer than this coordinator reads "
                f"({FORMAT}); restore it with the version that took it "
                f"({raw.get('coordinator_version', 'unknown')}) or later"
            )
        kinds: dict[str, tuple[type, ...]] = {
            "format": (int,),
            "store": (str,),
            "migration": (int,),
            "postgres_schema": (str, type(None)),
            "artifacts": (str,),
            "artifact_files": (int,),
            "taken_at": (str,),
            "duration_seconds": (int, float),
            "coordinator_version": (str,),
        }
        wrong = [
            name
            for name, types in kinds.items()
            if name not in raw or isinstance(raw[name], bool) or not isinstance(raw[name], types)
        ]
        if wrong:
            raise BackupError(
                f"{where} is not a backup manifest: missing or mistyped {', '.join(wrong)}"
            )
        if raw["store"] not in STORE_FILES:
            raise BackupError(f"{where} names an unknown store kind {raw['store']!r}")
        return cls(**{name: raw[name] for name in kinds})


def configure(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``backup`` and ``restore`` to the ``queue-coordinator`` commands."""
    backup = commands.add_parser(
        "backup",
        help="back up the store (and the artifact files) into a new directory while serving",
        description=BACKUP_DESCRIPTION,
        epilog=BACKUP_EPILOG,
    )
    restore = commands.add_parser(
        "restore",
        help="replace the store (and put the artifact files back) with a backup",
        description=RESTORE_DESCRIPTION,
        epilog=RESTORE_EPILOG,
    )
    for command, what in ((backup, "the new directory to write"), (restore, "the backup")):
        command.add_argument("path", metavar="PATH", type=Path, help=what)
        command.add_argument("--store-url", help="store URL (COORDINATOR_STORE_URL)")
        command.add_argument("--data-dir", help="data directory (COORDINATOR_DATA_DIR)")
    restore.add_argument(
        "--force", action="store_true", help="replace a store that already holds tasks"
    )


def run(args: argparse.Namespace, config: Config) -> int:
    """Run ``backup`` or ``restore``; the exit status (1 with one line on stderr if it could
    not be done)."""
    try:
        if args.command == "backup":
            print(backup(config, args.path))
        else:
            print(restore(config, args.path, force=args.force))
    except BackupError as error:
        print(f"queue-coordinator {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


def backup(config: Config, path: Path) -> str:
    """Back up into ``path`` (made here, and removed again if the backup fails); what was
    done, as one line."""
    store_kind(config.store_url)  # a bad URL is refused before anything is written
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BackupError(f"{path} already exists and is not an empty directory; name a new one")
    began = time.time()
    made = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    try:
        copy = asyncio.run(copy_store(config.store_url, path))
        files = 0
        if config.artifacts == "directory":
            files = _copy_files(config.artifacts_dir, path / ARTIFACTS)
        manifest = Manifest(
            format=FORMAT,
            store=copy.kind,
            migration=copy.migration,
            postgres_schema=copy.schema,
            artifacts=config.artifacts,
            artifact_files=files,
            taken_at=datetime.datetime.fromtimestamp(began, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            duration_seconds=round(time.time() - began, 3),
            coordinator_version=config.deployment.version,
        )
        temp = path / f"{MANIFEST}.tmp"
        temp.write_text(manifest.to_json(), "utf-8")
        os.replace(temp, path / MANIFEST)
    except BaseException:
        _remove(path, keep=not made)
        raise
    artifacts = (
        f"{files} artifact files"
        if config.artifacts == "directory"
        else "no artifacts (they are in Azure Blob Storage)"
    )
    return (
        f"backed up the {copy.kind} store at {shown(config.store_url)} "
        f"(migration {copy.migration}) and {artifacts} to {path} "
        f"in {manifest.duration_seconds:.1f} s"
    )


def restore(config: Config, path: Path, *, force: bool) -> str:
    """Restore the backup in ``path`` into the configured store; what was done, as one
    line."""
    manifest = Manifest.read(path)
    target = shown(config.store_url)
    kind = store_kind(config.store_url)
    if manifest.store != kind:
        raise BackupError(
            f"{path} holds a {manifest.store} store but {target} is a {kind} one; restore it "
            f"into a {manifest.store} store"
        )
    known = latest_migration(kind)
    if manifest.migration > known:
        raise BackupError(
            f"{path} was taken at store migration {manifest.migration} by queue-coordinator "
            f"{manifest.coordinator_version}, newer than this one knows ({known}); restore it "
            "with that version or later"
        )
    if manifest.artifacts != config.artifacts:
        raise BackupError(
            f"{path} was taken with COORDINATOR_ARTIFACTS={manifest.artifacts} but this "
            f"coordinator has COORDINATOR_ARTIFACTS={config.artifacts}; restore it with "
            f"COORDINATOR_ARTIFACTS={manifest.artifacts}"
        )
    if not force and asyncio.run(holds_tasks(config.store_url)):
        raise BackupError(
            f"the store at {target} already holds tasks; restore into an empty store, or "
            "pass --force to replace it"
        )
    asyncio.run(restore_store(config.store_url, path, manifest.copy))
    files = 0
    if manifest.artifacts == "directory":
        files = _copy_files(path / ARTIFACTS, config.artifacts_dir)
    asyncio.run(_migrate(config.store_url))
    return (
        f"restored the {kind} store at {target} from {path} (taken {manifest.taken_at}, "
        f"migration {manifest.migration}, now {known}) and {files} artifact files"
    )


def _remove(path: Path, *, keep: bool) -> None:
    """Remove what an unfinished backup wrote: ``path`` itself unless ``keep`` (the operator
    made it)."""
    if not keep:
        shutil.rmtree(path, ignore_errors=True)
        return
    for child in path.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


async def _migrate(url: str) -> None:
    store = await open_store(url)  # opening applies the migrations
    await store.close()


def _copy_files(source: Path, target: Path) -> int:
    """Copy every file under ``source`` to the same place under ``target`` but files being
    written (which the blob store names with :data:`TEMP_PREFIX`); how many were copied."""
    copied = 0
    for directory, _, names in os.walk(source):
        into = target / Path(directory).relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in names:
            if name.startswith(TEMP_PREFIX):
                continue
            try:
                shutil.copyfile(Path(directory) / name, into / name)
            except FileNotFoundError:
                continue  # deleted since it was listed (expired): not the backup's concern
            copied += 1
    return copied
