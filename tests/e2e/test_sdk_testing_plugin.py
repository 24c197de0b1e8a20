"""worker_sdk.testing from outside: production never imports it (nor pytest), and
``pytest -p worker_sdk.testing`` gives a user's tests the ``inline_app`` fixture."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from devharness.processes import child_env
from tests.fixtures.commands import run_to_end

IMPORT_ALL_BUT_TESTING = """
import importlib, pkgutil, sys
import worker_sdk
for module in pkgutil.iter_modules(worker_sdk.__path__):
    if module.name != "testing":
        importlib.import_module(f"worker_sdk.{module.name}")
print(" ".join(sorted(
    name for name in sys.modules
    if name.split(".")[0] in ("pytest", "_pytest") or name == "worker_sdk.testing"
)))
"""

USER_TEST = """
from worker_sdk import App

app = App(root_url="http://coordinator.invalid", credentials=None, task_queue="p/w")


@app.task
def add(x: int, y: int) -> int:
    return x + y


def test_add(inline_app):
    recorder = inline_app(app)
    assert add.dispatch_sync(2, 3).result_sync() == 5
    assert recorder.calls(add) == [((2, 3), {})]
"""


async def test_production_imports_neither_the_testing_module_nor_pytest(tmp_path: Path) -> None:
    finished = await run_to_end(
        [sys.executable, "-c", IMPORT_ALL_BUT_TESTING],
        cwd=tmp_path,
        env=child_env(),
        timeout_s=60,
    )
    assert finished.status == 0, finished.output
    assert finished.stdout.strip() == ""


async def test_the_plugin_gives_a_users_tests_the_inline_app_fixture(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TEST))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"]
    without = await run_to_end(command, cwd=tmp_path, env=child_env(), timeout_s=60)
    assert "fixture 'inline_app' not found" in without.output  # nothing loads it unasked
    finished = await run_to_end(
        [*command, "-p", "worker_sdk.testing"], cwd=tmp_path, env=child_env(), timeout_s=60
    )
    assert finished.status == 0, finished.output
    assert "1 passed" in finished.stdout
