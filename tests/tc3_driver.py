"""Queue calls through the taskcluster 3.0.2 client, the last Python client with pollTaskUrls.

Runs in its own virtualenv, ``.venv-tc3`` (made by ``scripts/lib/setup.sh``), as a child of
the tests: ``.venv-tc3/bin/python tests/tc3_driver.py < request.json``. It imports nothing of
this project, so it exercises only what that old client sends.

The request on stdin::

    {"baseUrl": "<root>/api/queue/v1",
     "calls": [{"method": "pollTaskUrls", "args": ["prov", "wt"],
                "credentials": {"clientId": ..., "accessToken": ..., "certificate"?: ...}}]}

Each call gets its own ``taskcluster.Queue`` (``credentials`` may be omitted: no Hawk header);
``args`` are the client's positional arguments (path parameters, then the payload, if any).
The answer on stdout is ``{"version": "3.0.2", "results": [...]}`` with, per call, either
``{"result": <response body>}`` or ``{"error": {"status", "body", "message"}}``.

**The one shim.** Every release that has ``pollTaskUrls`` (3.0.2 and before; 4.0.0 dropped it)
encodes the Hawk ``ext`` with ``base64.encodestring``, an alias of ``base64.encodebytes`` that
Python 3.9 removed, so on Python 3.11 any call with credentials fails with ``AttributeError``
before a request is sent. :func:`restore_encodestring` puts the alias back (the very function
it named, so the bytes on the wire are what 3.0.2 sends on the Pythons it was written for).
Nothing else is patched, and nothing on the server side knows about this client.
"""

from __future__ import annotations

import base64
import json
import sys
from importlib.metadata import version
from typing import Any

import taskcluster
from taskcluster.exceptions import TaskclusterAuthFailure, TaskclusterRestFailure


def restore_encodestring() -> None:
    if not hasattr(base64, "encodestring"):
        base64.encodestring = base64.encodebytes  # type: ignore[attr-defined]


def run(base_url: str, call: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {"baseUrl": base_url, "maxRetries": 0}
    # Always set: 3.x otherwise reads TASKCLUSTER_CLIENT_ID/ACCESS_TOKEN from the environment.
    options["credentials"] = call.get("credentials") or {"clientId": None, "accessToken": None}
    queue = taskcluster.Queue(options)
    try:
        return {"result": getattr(queue, call["method"])(*call.get("args", []))}
    except (TaskclusterRestFailure, TaskclusterAuthFailure) as error:
        return {"error": {"status": error.status_code, "body": error.body, "message": str(error)}}


def main() -> None:
    restore_encodestring()
    request = json.load(sys.stdin)
    results = [run(request["baseUrl"], call) for call in request["calls"]]
    json.dump({"version": version("taskcluster"), "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
