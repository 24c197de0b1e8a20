"""The ``queue-coordinator`` command: ``serve`` runs the service, ``migrate`` applies store
migrations and exits. Flags mirror the environment variables of :mod:`coordinator.config`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from aiohttp import web

from coordinator.app import build_app
from coordinator.config import Config
from coordinator.store.factory import store_from_url

LOG_FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queue-coordinator", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the coordinator (API and resolvers)")
    serve.add_argument("--host", help="listen address (COORDINATOR_HOST)")
    serve.add_argument("--port", type=int, help="listen port (COORDINATOR_PORT)")
    serve.add_argument("--data-dir", help="data directory (COORDINATOR_DATA_DIR)")
    serve.add_argument("--store-url", help="store URL (COORDINATOR_STORE_URL)")
    serve.add_argument("--log-level", default=os.environ.get("COORDINATOR_LOG_LEVEL", "INFO"))
    migrate = commands.add_parser("migrate", help="apply store migrations and exit")
    migrate.add_argument("--store-url", help="store URL (COORDINATOR_STORE_URL)")
    return parser


def _config(args: argparse.Namespace) -> Config:
    env = dict(os.environ)
    for flag, variable in (
        ("host", "COORDINATOR_HOST"),
        ("port", "COORDINATOR_PORT"),
        ("data_dir", "COORDINATOR_DATA_DIR"),
        ("store_url", "COORDINATOR_STORE_URL"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            env[variable] = str(value)
    return Config.from_env(env)


async def _migrate(config: Config) -> list[int]:
    store = store_from_url(config.store_url)
    await store.open()  # open() migrates; report what it applied
    applied = await store.migrate()
    await store.close()
    return applied


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = _config(args)
    except ValueError as error:
        print(f"queue-coordinator: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=getattr(args, "log_level", "INFO"), format=LOG_FORMAT)
    # The Azure SDK logs every HTTP request at INFO; our own lines already say what matters.
    logging.getLogger("azure").setLevel(logging.WARNING)
    if args.command == "migrate":
        asyncio.run(_migrate(config))
        print(f"migrations applied: store at {config.store_url.split('@')[-1]} is up to date")
        return 0
    config.data_dir.mkdir(parents=True, exist_ok=True)
    web.run_app(
        build_app(config),
        host=config.host,
        port=config.port,
        print=None,
        access_log=None,
        shutdown_timeout=5,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
