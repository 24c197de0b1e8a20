"""The layering of docs/architecture.md, checked on the imports of every module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ALLOWED: dict[str, set[str]] = {
    "domain": {"domain"},
    "store": {"domain", "store", "config"},
    "azure": {"domain", "azure"},
    # config: the factory reads Config and raises ConfigurationError, as store/factory.py does;
    # azure.account: the storage account opened as the queues open it (timeouts, retry, key)
    "blobs": {"domain", "blobs", "config", "azure.account"},
    # pulse: the AMQP transport the event outbox publishes through
    "pulse": {"domain", "pulse"},
    "service": {"domain", "store", "azure", "service", "blobs", "pulse", "config"},
    "resolvers": {
        "service",
        "domain",
        "resolvers",
        "azure.queues",
        "azure.errors",
        "store.errors",
    },
    # blobs.base: a blob store outage is a 503, an upload cut short a 400
    "api": {"service", "domain", "config", "api", "azure.errors", "store.errors", "blobs.base"},
}
"""Layer -> what its modules may import from ``coordinator`` (a layer, or one module). A layer
that no rule names (``pulse`` for all but ``service``) is imported only by ``app.py`` and
``cli``."""


def _imported_names(path: Path) -> set[str]:
    """Every module ``path`` imports, and each ``module.name`` it imports from one."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def _imports(path: Path) -> set[str]:
    """Every ``coordinator.*`` module ``path`` imports, without the ``coordinator.`` prefix."""
    return {
        name.removeprefix("coordinator.")
        for name in _imported_names(path)
        if name.startswith("coordinator.")
    }


def _allowed(layer: str, imported: str) -> bool:
    return any(imported == rule or imported.startswith(rule + ".") for rule in ALLOWED[layer])


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_what_it_may(layer: str) -> None:
    modules = sorted((ROOT / "coordinator" / layer).rglob("*.py"))
    assert modules, layer
    wrong = {
        f"{path.relative_to(ROOT)} imports coordinator.{name}"
        for path in modules
        for name in _imports(path)
        # ``from coordinator.x import y`` also lists ``x.y``: judge the module, not the name
        if not _allowed(layer, name) and not _allowed(layer, name.rpartition(".")[0])
    }
    assert not wrong, sorted(wrong)


def test_the_worker_sdk_never_imports_the_coordinator() -> None:
    for path in sorted((ROOT / "worker_sdk").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [alias.name for alias in node.names]
                )
                assert not any(n.split(".")[0] == "coordinator" for n in names), path


def test_no_http_status_below_the_api() -> None:
    for layer in ("domain", "service", "store", "resolvers", "blobs", "pulse"):
        for path in (ROOT / "coordinator" / layer).rglob("*.py"):
            text = path.read_text()
            assert "aiohttp" not in text and "status=4" not in text, path


ROOT_MODULES: dict[str, set[str]] = {
    "config": {"domain.urls"},
    "logs": {"config"},
}
"""The modules at the root of ``coordinator`` beside ``app.py`` -> what they may import from it.
``app.py`` and the ``cli`` package assemble the process and may import every layer."""


def _third_party_roots(path: Path) -> set[str]:
    """The top-level names ``path`` imports (``worker_sdk``, ``hawk_signing``, ``aiohttp``...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
    return found


def test_root_modules_import_only_what_they_may() -> None:
    roots = {p.stem for p in (ROOT / "coordinator").glob("*.py")} - {"__init__", "app"}
    assert roots == set(ROOT_MODULES), "a new root module needs a rule here"
    wrong = {
        f"coordinator/{name}.py imports coordinator.{imported}"
        for name, allowed in ROOT_MODULES.items()
        for imported in _imports(ROOT / "coordinator" / f"{name}.py")
        if not any(imported == rule or imported.startswith(rule + ".") for rule in allowed)
    }
    assert not wrong, sorted(wrong)


def test_only_the_neutral_packages_are_shared_by_the_coordinator_and_the_sdk() -> None:
    """The server never imports the worker SDK; the CLI signs with the neutral module, and
    both processes fix glibc's thresholds, trace, check a progress value and write their log
    lines with others; those
    import neither side."""
    for path in sorted((ROOT / "coordinator").rglob("*.py")):
        assert "worker_sdk" not in _third_party_roots(path), path
    for path in sorted((ROOT / "worker_sdk").rglob("*.py")):
        assert "coordinator" not in _third_party_roots(path), path
    for package in (
        "hawk_signing",
        "glibc_malloc",
        "otlp_tracing",
        "run_progress",
        "key_value_logs",
    ):
        for path in sorted((ROOT / package).rglob("*.py")):
            assert not {"coordinator", "worker_sdk"} & _third_party_roots(path), path


def test_only_the_pulse_transport_knows_amqp() -> None:
    """pika is the ``pulse`` layer's: the service decides what to publish, never how."""
    knowing = {
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "coordinator").rglob("*.py"))
        if "pika" in _third_party_roots(path)
    }
    assert knowing and all(path.startswith("coordinator/pulse/") for path in knowing), knowing


def _is_test_module(name: str) -> bool:
    return name.rpartition(".")[2].startswith("test_")


def test_no_test_module_imports_another() -> None:
    """What several test modules share lives in tests/fixtures/, so that a test module can be
    moved, renamed or run alone."""
    wrong = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        for name in _imported_names(path)
        if name.startswith("tests.") and _is_test_module(name)
    }
    assert not wrong, sorted(wrong)


def test_the_command_line_starts_without_the_service() -> None:
    """``queue-coordinator tasks`` (clients, roles, index, inbox) is a client of the REST API:
    importing the command imports no store driver, no Azure SDK and no API layer, which
    ``serve``, ``migrate``, ``backup`` and ``restore`` import when they run (they took each
    client command from 0.4 to 0.9 s of CPU)."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, coordinator.cli.main; print(*sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.split()
    heavy = ("coordinator.store.postgres", "coordinator.store.sqlite", "coordinator.api", "azure")
    assert not [name for name in loaded if name.startswith(heavy)]
