"""The ``queue-coordinator`` command: ``serve`` runs the service (in several processes with
``COORDINATOR_PROCESSES``: :mod:`coordinator.cli.processes`), ``migrate`` applies store
migrations, ``clients add`` adds a client to the clients file, the other ``clients``
commands and ``roles`` manage clients and roles through the auth API
(:mod:`coordinator.cli.auth`), ``backup`` and ``restore`` copy the store and the artifact
files out and back (:mod:`coordinator.cli.backup`), ``encryption-key`` prints a new key for
``COORDINATOR_ENCRYPTION_KEY``, and ``tasks`` lists, counts, cancels and deletes tasks, and
lists and downloads their artifacts, through the REST API (:mod:`coordinator.cli.tasks`).
Flags mirror the environment variables of :mod:`coordinator.config`. A configuration mistake
is one line on stderr that names it and the way out, and exit status 2; never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import ssl
import sys
from collections.abc import Callable, Sequence

from aiohttp import web

import glibc_malloc
from coordinator.cli import auth as auth_cli
from coordinator.cli import backup as backup_cli
from coordinator.cli import inbox as inbox_cli
from coordinator.cli import index as index_cli
from coordinator.cli import processes
from coordinator.cli import tasks as tasks_cli
from coordinator.config import Config, ConfigurationError
from coordinator.logs import configure_logging
from coordinator.service.clients_file import add_client

DESCRIPTION = """\
A Taskcluster-style queue coordinator. Settings come from COORDINATOR_* environment
variables (see docs/operations.md); the flags below override the most common ones."""

CLIENTS_ADD_EPILOG = """\
Prints the new client's credentials as shell exports for the taskcluster client and
queue-worker. Example: queue-coordinator clients add root (scope *), or
queue-coordinator clients add builder --scope 'queue:create-task:*'"""


CLIENTS_DESCRIPTION = """\
Manage clients. add edits the clients file (static clients; COORDINATOR_CLIENTS_FILE or
--clients-file). list, show, create, update, reset, disable, enable, delete and history go
through the auth API at $TASKCLUSTER_ROOT_URL/api/auth/v1 with TASKCLUSTER_CLIENT_ID and
TASKCLUSTER_ACCESS_TOKEN, and manage the clients the API keeps in the store."""

ENCRYPTION_KEY_DESCRIPTION = """\
Print a new random key (base64 of 32 bytes) for COORDINATOR_ENCRYPTION_KEY, with which the
coordinator encrypts the API clients' accessTokens. Every replica of one store needs the same
key (docs/auth.md)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queue-coordinator", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the coordinator (API and resolvers)")
    serve.add_argument("--host", help="listen address (COORDINATOR_HOST)")
    serve.add_argument("--port", type=int, help="listen port (COORDINATOR_PORT)")
    serve.add_argument("--data-dir", help="data directory (COORDINATOR_DATA_DIR)")
    serve.add_argument("--store-url", help="store URL (COORDINATOR_STORE_URL)")
    serve.add_argument(
        "--processes",
        type=int,
        help="serve processes sharing the port, PostgreSQL only (COORDINATOR_PROCESSES)",
    )
    serve.add_argument("--log-level", default=os.environ.get("COORDINATOR_LOG_LEVEL", "INFO"))
    migrate = commands.add_parser("migrate", help="apply store migrations and exit")
    migrate.add_argument("--store-url", help="store URL (COORDINATOR_STORE_URL)")
    backup_cli.configure(commands)
    clients = commands.add_parser(
        "clients",
        help="manage clients: add edits the clients file, the others go through the auth API",
        description=CLIENTS_DESCRIPTION,
    )
    clients_commands = clients.add_subparsers(dest="clients_command", required=True)
    add = clients_commands.add_parser(
        "add",
        help="add a client with a new random accessToken (creating the file if needed)",
        epilog=CLIENTS_ADD_EPILOG,
    )
    add.add_argument("client_id", metavar="CLIENT_ID")
    add.add_argument(
        "--scope",
        action="append",
        dest="scopes",
        help="a scope the client holds (repeatable; default: * for every scope)",
    )
    add.add_argument("--description", default="", help="what the client is for")
    add.add_argument("--clients-file", help="the file (COORDINATOR_CLIENTS_FILE)")
    add.add_argument("--data-dir", help="data directory (COORDINATOR_DATA_DIR)")
    auth_cli.configure_clients(clients_commands)
    auth_cli.configure_roles(
        commands.add_parser(
            "roles", help="list, show, create, update, delete or expand roles through the auth API"
        )
    )
    commands.add_parser(
        "encryption-key",
        help="print a new key for COORDINATOR_ENCRYPTION_KEY",
        description=ENCRYPTION_KEY_DESCRIPTION,
    )
    index_cli.configure(
        commands.add_parser(
            "index", help="find, list, insert or delete index entries through the index API"
        )
    )
    inbox_cli.configure(
        commands.add_parser(
            "inbox", help="list or delete the task inbox's rejected rows through the queue API"
        )
    )
    tasks_cli.configure(
        commands.add_parser(
            "tasks",
            help="list, count, cancel or delete tasks, list and download their artifacts, "
            "through a coordinator's API",
        )
    )
    return parser


def _config(args: argparse.Namespace) -> Config:
    env = dict(os.environ)
    for flag, variable in (
        ("host", "COORDINATOR_HOST"),
        ("port", "COORDINATOR_PORT"),
        ("data_dir", "COORDINATOR_DATA_DIR"),
        ("store_url", "COORDINATOR_STORE_URL"),
        ("clients_file", "COORDINATOR_CLIENTS_FILE"),
        ("processes", "COORDINATOR_PROCESSES"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            env[variable] = str(value)
    return Config.from_env(env)


async def _migrate(config: Config) -> None:
    # Imported here, as the server below: the API clients (tasks, clients, roles) start
    # in a second less without the service's modules.
    from coordinator.store.factory import open_store

    store = await open_store(config.store_url)  # opening applies the migrations
    await store.close()


def _add_client(config: Config, args: argparse.Namespace) -> None:
    credentials = add_client(
        config.clients_file,
        args.client_id,
        scopes=args.scopes or ["*"],
        description=args.description,
    )
    print(f"# added to {config.clients_file}")
    print(f"export TASKCLUSTER_CLIENT_ID={credentials.client_id}")
    print(f"export TASKCLUSTER_ACCESS_TOKEN={credentials.access_token}")


GC_YOUNGEST_THRESHOLD = 20_000
"""Net new container objects between two collections of the youngest generation (Python's
default is 700)."""


def _settle_garbage_collector() -> None:
    """Once serving, keep the cyclic garbage collector's pauses out of the request path: what
    start-up built (modules, schemas, routes, caches) is frozen out of every later collection,
    and the youngest generation is collected after :data:`GC_YOUNGEST_THRESHOLD` net new
    containers. A request's objects are freed by reference counting, not by the collector, so
    this costs little memory. Under store dispatch at full rate the collector had paused the
    event loop for up to 35-125 ms at a time (full collections walking the start-up heap), the
    tail of the pending time (docs/performance.md)."""
    gc.freeze()
    gc.set_threshold(GC_YOUNGEST_THRESHOLD, *gc.get_threshold()[1:])


async def _serve_until_signalled(
    config: Config,
    tls: ssl.SSLContext | None,
    *,
    reuse_port: bool,
    serving: Callable[[], None] | None,
) -> None:
    """Serve (HTTPS with ``tls``) until SIGTERM or SIGINT, then shut down; ``serving`` is
    called once the port is listened on."""
    from coordinator.api.server import AppRunner
    from coordinator.app import build_app

    runner = AppRunner(build_app(config), access_log=None, handle_signals=False, shutdown_timeout=5)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        site = web.TCPSite(
            runner, config.host, config.port, ssl_context=tls, reuse_port=reuse_port or None
        )
        await site.start()
        _settle_garbage_collector()
        if serving is not None:
            serving()
        await stop.wait()
    finally:
        # Here, while the background actors still run, rather than in asyncio.run's teardown
        # (aiohttp's own signal handling), which cancels every task at once and left the
        # store's pool waiting on a connection a cancelled call never gave back.
        await runner.cleanup()


def serve_process(
    config: Config, *, reuse_port: bool = False, serving: Callable[[], None] | None = None
) -> None:
    """Serve in this process until SIGTERM or SIGINT (``reuse_port``: on a port other
    processes share, :mod:`coordinator.cli.processes`; ``serving``: called once it listens)."""
    tls = config.tls_context()
    config.data_dir.mkdir(parents=True, exist_ok=True)
    glibc_malloc.keep_heap_flat()
    try:
        asyncio.run(_serve_until_signalled(config, tls, reuse_port=reuse_port, serving=serving))
    except KeyboardInterrupt:
        pass  # SIGINT before the loop's handler was in place: nothing to shut down yet
    except OSError as error:
        raise ConfigurationError(
            f"cannot listen on {config.host}:{config.port}: {error.strerror or error}; "
            "choose another COORDINATOR_HOST/COORDINATOR_PORT (or --host/--port)"
        ) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "tasks":
        # A client of the REST API (TASKCLUSTER_* settings): no Config, no store.
        return tasks_cli.run(args)
    if args.command == "roles" or (args.command == "clients" and args.clients_command != "add"):
        # A client of the auth API, likewise.
        return auth_cli.run(args)
    if args.command == "index":
        return index_cli.run(args)
    if args.command == "inbox":
        return inbox_cli.run(args)
    if args.command == "encryption-key":
        return auth_cli.encryption_key(sys.stdout)
    try:
        config = _config(args)
        configure_logging(level=getattr(args, "log_level", "WARNING"), env=os.environ)
        if args.command == "migrate":
            asyncio.run(_migrate(config))
            print(f"migrations applied: store at {config.store_url.split('@')[-1]} is up to date")
        elif args.command in ("backup", "restore"):
            return backup_cli.run(args, config)
        elif args.command == "clients":
            _add_client(config, args)
        elif config.processes > 1:
            return processes.supervise(config, log_level=args.log_level)
        else:
            serve_process(config)
    except ConfigurationError as error:
        print(f"queue-coordinator: {error}", file=sys.stderr)
        return 2
    return 0
