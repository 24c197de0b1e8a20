"""The ``task_script`` that scriptworker runs in tests/e2e/test_scriptworker.py: standard
library only, as any script a scriptworker runs would be.

Usage: ``scriptworker_task.py WORK_DIR ARTIFACT_DIR``. It reads the claimed task from
``WORK_DIR/task.json`` (scriptworker writes it there), downloads ``public/hello.txt`` of each
of its dependencies other than the decision task (its ``taskGroupId``) anonymously through the
queue's getLatestArtifact route (following the redirect, ungzipping what the store replays as
gzip), and writes ``ARTIFACT_DIR/public/hello.txt``: a greeting naming ``$TASK_ID`` and
``$RUN_ID`` followed by what the upstream files said. It prints what it does to stdout, which
scriptworker turns into the ``public/logs/live_backing.log`` artifact.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import urllib.parse
import urllib.request
from pathlib import Path

HELLO = "public/hello.txt"
TIMEOUT_S = 30.0


def upstream_hello(root_url: str, task_id: str) -> str:
    """``public/hello.txt`` of ``task_id``'s latest run, read anonymously.

    :param root_url: the queue's root URL (``$TASKCLUSTER_ROOT_URL``).
    :param task_id: the upstream task.
    """
    # Raw slashes in the name, as taskgraph's get_artifact_url and curl send it.
    url = (
        f"{root_url.rstrip('/')}/api/queue/v1/task/{urllib.parse.quote(task_id)}/artifacts/{HELLO}"
    )
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        body: bytes = response.read()
        encoding = response.headers.get("Content-Encoding")
    return (gzip.decompress(body) if encoding == "gzip" else body).decode()


def main(work_dir: Path, artifact_dir: Path) -> None:
    """Write the greeting, with what each upstream task said.

    :param work_dir: scriptworker's work directory (holds ``task.json``).
    :param artifact_dir: scriptworker's artifact directory (everything in it is uploaded).
    """
    task_id, run_id = os.environ["TASK_ID"], os.environ["RUN_ID"]
    task = json.loads((work_dir / "task.json").read_text())
    print(f"scriptworker_task: running {task_id}/{run_id} ({task['metadata']['name']})")
    lines = [f"hello from {task_id}/{run_id}"]
    for upstream in task["dependencies"]:
        if upstream == task["taskGroupId"]:
            continue
        said = upstream_hello(os.environ["TASKCLUSTER_ROOT_URL"], upstream)
        print(f"scriptworker_task: {upstream} said {said.strip()!r}")
        lines.append(f"upstream {upstream}: {said.strip()}")
    hello = artifact_dir / HELLO
    hello.parent.mkdir(parents=True, exist_ok=True)
    hello.write_text("\n".join(lines) + "\n")
    print(f"scriptworker_task: wrote {HELLO}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
