"""Coordinator configuration: one frozen value built from the environment.

Every setting has an environment variable; ``queue-coordinator serve`` flags override them.
Durations are given in seconds in the environment and held in milliseconds here.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from coordinator.domain.urls import without_credentials


class ConfigurationError(ValueError):
    """A setting is wrong or names something unusable; the message names the setting and the
    way out, and ``queue-coordinator`` prints it as one line and exits non-zero."""


def _seconds(env: Mapping[str, str], name: str, default: float) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return int(default * 1000)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not a number of seconds") from None
    if value < 0:
        raise ConfigurationError(f"{name}={raw!r} must not be negative")
    return int(value * 1000)


def _optional_seconds(env: Mapping[str, str], name: str) -> int | None:
    """:func:`_seconds` of a setting that is off unless set."""
    return _seconds(env, name, 0) if env.get(name) else None


def _positive(env: Mapping[str, str], name: str, default: int, *, unit: str) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()) or int(raw) == 0:
        raise ConfigurationError(f"{name}={raw!r} is not a positive number of {unit}")
    return int(raw)


ARTIFACT_BACKENDS = ("directory", "azure")
"""The values of ``COORDINATOR_ARTIFACTS``: where artifact bytes are kept."""

NONCE_CACHE_ENTRIES = 2_000_000
"""The most Hawk nonces a process remembers by default: the whole 15-minute window at 2,222
requests a second, 16 MB."""

DISPATCHES = ("store", "azure")
"""The values of ``COORDINATOR_DISPATCH``: how pending runs reach workers (docs/dispatch.md):
claimWork served from the store, or hints in Azure Storage Queues."""


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name}={raw!r} is not a boolean (use true or false)")


def check_pulse_url(url: str) -> None:
    """Raise :class:`ConfigurationError` unless ``url`` is an ``amqp://`` or ``amqps://`` URL
    with a host (whether the broker answers is checked at start-up)."""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise ConfigurationError(
            f"COORDINATOR_PULSE_URL={without_credentials(url)!r} is not an AMQP URL: use "
            "amqp://user:password@host:5672/vhost (or amqps://), or leave it unset to publish "
            "nothing"
        )


@functools.cache
def _installed_version() -> str:
    # The distribution's metadata is read from disk: once per process, not per Config.
    return importlib.metadata.version("queue-coordinator")


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """What ``__version__`` answers, in the Dockerflow shape: the installed distribution's
    version, and the source, commit and build a deployment may name
    (``COORDINATOR_SOURCE``, ``COORDINATOR_COMMIT``, ``COORDINATOR_BUILD``)."""

    source: str = "queue-coordinator"
    version: str = field(default_factory=_installed_version)
    commit: str = "unknown"
    build: str = "unknown"

    def to_api(self) -> dict[str, str]:
        return {
            "source": self.source,
            "version": self.version,
            "commit": self.commit,
            "build": self.build,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Config:
    """Everything the service needs to start.

    :param public_url: the URL clients use (signatures are checked against it).
    :param store_url: ``sqlite:///path`` or ``postgresql://...``.
    :param azure_connection_string: the storage account of the Azure queues (and of the
        ``azure`` artifact backend); ``None`` runs without Azure.
    :param dispatch: how pending runs reach workers: ``store`` (claimWork served from the
        store, no hints; the default without a storage account) or ``azure`` (hints in Azure
        Storage Queues, pollTaskUrls; the default with one); empty: that default.
    :param queue_prefix: prefix of every Azure queue name, so deployments can share an account.
    :param auth_enabled: Hawk authentication and scope checks; off only for local experiments.
    :param encryption_key: base64 of the 32-byte key that encrypts values at rest (the
        API-managed clients' accessTokens); ``None``: the key in ``encryption_key_file``.
    :param encryption_key_file: where the key is kept when ``encryption_key`` is not given
        (created on first start); every replica of one store needs the same key.
    :param resolver_interval_ms: how often each background resolver scans (ms).
    :param poll_visibility_ms: how long a hint a worker fetched through its signed poll URL stays
        hidden from other workers (ms; the ``visibilitytimeout`` of the URL).
    :param pending_cache_ms: how long a pendingTasks count from Azure is reused (ms).
    :param queue_request_timeout_ms: how long one Azure queue request may take before it counts
        as failed (ms; a hint put that fails is put again by the hint keeper).
    :param completed_ttl_ms: how long a completed task is kept after it resolved (ms; ``None``:
        until its ``expires``).
    :param failed_ttl_ms: the same for failed and exception tasks.
    :param reconcile_interval_ms: how often the reconciler compares the store's pending runs with
        Azure's message counts and puts lost hints again (ms).
    :param artifacts: where artifact bytes are kept: ``directory`` (files under
        ``artifacts_dir``) or ``azure`` (block blobs in the container ``<queue_prefix>artifacts``
        of the ``azure_connection_string`` account, downloaded straight from Azure).
    :param artifacts_dir: the directory of the ``directory`` backend (``<data_dir>/artifacts``
        unless set).
    :param artifact_max_bytes: the largest artifact upload accepted (a larger Content-Length
        is refused before any byte is read).
    :param pulse_url: ``amqp://`` or ``amqps://`` URL of the broker that Taskcluster's Pulse
        messages are published to (docs/events.md); ``None``: nothing is published and no
        outbox is written.
    :param pulse_in_process: publish the outbox on the API process's own event loop rather
        than from a child process of its own (docs/events.md#the-publisher-process); for an
        in-process coordinator (tests) or a single-core machine.
    :param nonce_cache_entries: the most Hawk nonces the process remembers to refuse replays
        (8 bytes each; the oldest are forgotten first).
    :param deployment: what ``__version__`` answers.
    :param tls_cert: PEM file of the certificate (its chain after it) the API serves HTTPS
        with; with ``tls_key``, or neither (plain HTTP).
    :param tls_key: PEM file of that certificate's private key.
    :param processes: how many serve processes share the port (PostgreSQL only), each a
        replica (docs/replicas.md).
    """

    host: str = "127.0.0.1"
    port: int = 8080
    public_url: str = "http://127.0.0.1:8080"
    data_dir: Path = Path(".data")
    store_url: str = "sqlite:///./.data/coordinator.db"
    azure_connection_string: str | None = None
    dispatch: str = ""
    queue_prefix: str = "qc-"
    clients_file: Path = Path(".data/clients.json")
    auth_enabled: bool = True
    encryption_key: str | None = field(default=None, repr=False)
    encryption_key_file: Path = Path(".data/encryption.key")
    claim_timeout_ms: int = 1_200_000
    retry_delay_base_ms: int = 0
    max_deadline_ms: int = 5 * 86_400_000
    deadline_delay_ms: int = 10_000
    resolver_interval_ms: int = 1_000
    hint_grace_ms: int = 30_000
    reconcile_interval_ms: int = 30_000
    claim_work_timeout_ms: int = 20_000
    poll_visibility_ms: int = 300_000
    pending_cache_ms: int = 20_000
    queue_request_timeout_ms: int = 10_000
    max_body_bytes: int = 1_048_576
    max_batch_body_bytes: int = 16 * 1_048_576
    completed_ttl_ms: int | None = None
    failed_ttl_ms: int | None = None
    artifacts: str = "directory"
    artifacts_dir: Path = Path(".data/artifacts")
    artifact_max_bytes: int = 5 * 2**30
    nonce_cache_entries: int = NONCE_CACHE_ENTRIES
    pulse_url: str | None = None
    pulse_in_process: bool = False
    deployment: Deployment = field(default_factory=Deployment)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    processes: int = 1

    def __post_init__(self) -> None:
        if self.processes > 1 and not self.store_url.startswith(("postgres://", "postgresql://")):
            raise ConfigurationError(
                f"COORDINATOR_PROCESSES={self.processes} needs a PostgreSQL store "
                "(COORDINATOR_STORE_URL=postgresql://…): a SQLite store has one writing "
                "process; set COORDINATOR_PROCESSES=1, or run on PostgreSQL"
            )
        if self.processes > 1 and self.port == 0:
            raise ConfigurationError(
                f"COORDINATOR_PROCESSES={self.processes} needs a fixed COORDINATOR_PORT, not 0: "
                "the processes share one port"
            )
        if self.queue_request_timeout_ms <= 0:
            raise ConfigurationError(
                f"COORDINATOR_QUEUE_REQUEST_TIMEOUT={self.queue_request_timeout_ms / 1000:g} "
                "must be more than 0 seconds: every Azure queue request would fail at once"
            )
        if self.artifacts not in ARTIFACT_BACKENDS:
            raise ConfigurationError(
                f"COORDINATOR_ARTIFACTS={self.artifacts!r} is not a place for artifacts: use "
                "directory (files under COORDINATOR_ARTIFACTS_DIR) or azure "
                "(AZURE_STORAGE_CONNECTION_STRING)"
            )
        if self.artifacts == "azure" and not self.azure_connection_string:
            raise ConfigurationError(
                "COORDINATOR_ARTIFACTS=azure needs AZURE_STORAGE_CONNECTION_STRING (the storage "
                "account for the artifacts container); set it, or use "
                "COORDINATOR_ARTIFACTS=directory"
            )
        if self.dispatch and self.dispatch not in DISPATCHES:
            raise ConfigurationError(
                f"COORDINATOR_DISPATCH={self.dispatch!r} is not a dispatch: use store "
                "(claimWork served from the store) or azure (hints in Azure Storage Queues, "
                "AZURE_STORAGE_CONNECTION_STRING)"
            )
        if self.dispatch_mode == "azure" and not self.azure_connection_string:
            raise ConfigurationError(
                "COORDINATOR_DISPATCH=azure needs AZURE_STORAGE_CONNECTION_STRING (the storage "
                "account of the hint queues); set it, or use COORDINATOR_DISPATCH=store"
            )
        if self.pulse_url is not None:
            check_pulse_url(self.pulse_url)
        if (self.tls_cert is None) != (self.tls_key is None):
            given, missing = (
                ("COORDINATOR_TLS_CERT", "COORDINATOR_TLS_KEY")
                if self.tls_key is None
                else ("COORDINATOR_TLS_KEY", "COORDINATOR_TLS_CERT")
            )
            raise ConfigurationError(
                f"{given} is set but {missing} is not: set both (the PEM files of the "
                "certificate and of its private key) to serve HTTPS, or neither to serve HTTP"
            )

    @property
    def dispatch_mode(self) -> str:
        """``dispatch``, or where it is empty its default: ``azure`` with a storage account,
        else ``store``."""
        return self.dispatch or ("azure" if self.azure_connection_string else "store")

    def tls_context(self) -> ssl.SSLContext | None:
        """The server side of TLS 1.2 and later with ``tls_cert`` and ``tls_key`` loaded;
        ``None`` without them (plain HTTP). Raises :class:`ConfigurationError` naming the
        file that cannot be read or the pair that does not load."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        for variable, path in (
            ("COORDINATOR_TLS_CERT", self.tls_cert),
            ("COORDINATOR_TLS_KEY", self.tls_key),
        ):
            try:
                path.read_bytes()
            except OSError as error:
                raise ConfigurationError(
                    f"{variable}={str(path)!r} cannot be read: {error.strerror or error}; "
                    "point it at a readable PEM file, or unset both COORDINATOR_TLS_CERT and "
                    "COORDINATOR_TLS_KEY to serve HTTP"
                ) from None

        def encrypted_key() -> bytes:
            # Without a callback OpenSSL would prompt on the terminal, and a service would hang.
            raise ConfigurationError(
                f"COORDINATOR_TLS_KEY={str(self.tls_key)!r} is encrypted; give the key "
                "unencrypted (openssl pkey -in KEY -out KEY.plain), readable only by the service"
            )

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.tls_cert, self.tls_key, password=encrypted_key)
        except ssl.SSLError as error:
            raise ConfigurationError(
                f"COORDINATOR_TLS_CERT={str(self.tls_cert)!r} and "
                f"COORDINATOR_TLS_KEY={str(self.tls_key)!r} do not load as a certificate and "
                f"its private key ({error.reason or error}); give PEM files of a certificate "
                "and the unencrypted key it was issued for"
            ) from None
        return context

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        """Read the ``COORDINATOR_*`` and ``AZURE_STORAGE_CONNECTION_STRING`` variables."""
        env = os.environ if env is None else env
        host = env.get("COORDINATOR_HOST") or "127.0.0.1"
        raw_port = env.get("COORDINATOR_PORT") or "8080"
        if not raw_port.isdigit() or not 0 <= int(raw_port) <= 65535:
            raise ConfigurationError(f"COORDINATOR_PORT={raw_port!r} is not a port number")
        port = int(raw_port)
        data_dir = Path(env.get("COORDINATOR_DATA_DIR") or ".data")
        tls_cert = env.get("COORDINATOR_TLS_CERT") or None
        tls_key = env.get("COORDINATOR_TLS_KEY") or None
        scheme = "https" if tls_cert or tls_key else "http"
        return cls(
            host=host,
            port=port,
            public_url=(env.get("COORDINATOR_PUBLIC_URL") or f"{scheme}://{host}:{port}").rstrip(
                "/"
            ),
            data_dir=data_dir,
            store_url=env.get("COORDINATOR_STORE_URL")
            or f"sqlite:///{data_dir.resolve() / 'coordinator.db'}",
            azure_connection_string=env.get("AZURE_STORAGE_CONNECTION_STRING") or None,
            dispatch=env.get("COORDINATOR_DISPATCH") or "",
            queue_prefix=env.get("COORDINATOR_QUEUE_PREFIX") or "qc-",
            clients_file=Path(env.get("COORDINATOR_CLIENTS_FILE") or data_dir / "clients.json"),
            auth_enabled=_flag(env, "COORDINATOR_AUTH", True),
            encryption_key=env.get("COORDINATOR_ENCRYPTION_KEY") or None,
            encryption_key_file=Path(
                env.get("COORDINATOR_ENCRYPTION_KEY_FILE") or data_dir / "encryption.key"
            ),
            claim_timeout_ms=_seconds(env, "COORDINATOR_CLAIM_TIMEOUT", 1200),
            retry_delay_base_ms=_seconds(env, "COORDINATOR_RETRY_DELAY_BASE", 0),
            max_deadline_ms=_seconds(env, "COORDINATOR_MAX_DEADLINE", 5 * 86_400),
            deadline_delay_ms=_seconds(env, "COORDINATOR_DEADLINE_DELAY", 10),
            resolver_interval_ms=_seconds(env, "COORDINATOR_RESOLVER_INTERVAL", 1),
            hint_grace_ms=_seconds(env, "COORDINATOR_HINT_GRACE", 30),
            reconcile_interval_ms=_seconds(env, "COORDINATOR_RECONCILE_INTERVAL", 30),
            claim_work_timeout_ms=_seconds(env, "COORDINATOR_CLAIM_WORK_TIMEOUT", 20),
            poll_visibility_ms=_seconds(env, "COORDINATOR_POLL_VISIBILITY", 300),
            pending_cache_ms=_seconds(env, "COORDINATOR_PENDING_CACHE", 20),
            queue_request_timeout_ms=_seconds(env, "COORDINATOR_QUEUE_REQUEST_TIMEOUT", 10),
            completed_ttl_ms=_optional_seconds(env, "COORDINATOR_COMPLETED_TTL"),
            failed_ttl_ms=_optional_seconds(env, "COORDINATOR_FAILED_TTL"),
            artifacts=env.get("COORDINATOR_ARTIFACTS") or "directory",
            artifacts_dir=Path(env.get("COORDINATOR_ARTIFACTS_DIR") or data_dir / "artifacts"),
            artifact_max_bytes=_positive(
                env, "COORDINATOR_ARTIFACT_MAX_BYTES", 5 * 2**30, unit="bytes"
            ),
            nonce_cache_entries=_positive(
                env, "COORDINATOR_NONCE_CACHE_ENTRIES", NONCE_CACHE_ENTRIES, unit="entries"
            ),
            pulse_url=env.get("COORDINATOR_PULSE_URL") or None,
            processes=_positive(env, "COORDINATOR_PROCESSES", 1, unit="processes"),
            pulse_in_process=_flag(env, "COORDINATOR_PULSE_IN_PROCESS", False),
            deployment=Deployment(
                source=env.get("COORDINATOR_SOURCE") or "queue-coordinator",
                commit=env.get("COORDINATOR_COMMIT") or "unknown",
                build=env.get("COORDINATOR_BUILD") or "unknown",
            ),
            tls_cert=Path(tls_cert) if tls_cert else None,
            tls_key=Path(tls_key) if tls_key else None,
        )
