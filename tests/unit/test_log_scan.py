"""The log scan (devharness.log_scan) finds each kind of credential in the shapes logs write
them, and passes the masked and the harmless look-alikes the coordinator's logs hold."""

from pathlib import Path

import pytest

from devharness.log_scan import scan_text, scan_tree

TOKEN = "8kQv0hWjTBqkYq3fLpV2XgZr1mN6cD4eA9sU7tI5oP0"

LEAKS = {
    "access token": [
        f'{{"clientId": "worker", "accessToken": "{TOKEN}"}}',
        f"credentials clientId=worker accessToken={TOKEN}",
        f"starting with TASKCLUSTER_ACCESS_TOKEN={TOKEN}",
    ],
    "secret value": ['PUT secret project/a {"secret": {"password": "hunter22"}, "expires": 1}'],
    "SAS signature": [
        "GET https://acct.queue.core.windows.net/q/messages?sv=2021&se=2026&sig=AbC%2Bdef123%3D"
    ],
    "bewit": ["signed url https://q.example/api/queue/v1/task/x/artifacts/a?bewit=YWJjZGVmZ2g"],
    "account key": ["DefaultEndpointsProtocol=http;AccountName=a;AccountKey=Eby8vdM02xNOcqFlqUw=="],
    "URL password": [
        "publishing to amqp://guest:guest@127.0.0.1:5672/",
        "store postgresql://app:s3cret@db:5432/queue",
    ],
}

CLEAN = [
    "publishing to amqp://127.0.0.1:5672/",
    "store postgresql://postgres@127.0.0.1:5432/queue",
    '{"clientId": "worker", "accessToken": "***"}',
    "accessToken=<redacted>",
    "GET https://acct.queue.core.windows.net/q/messages?sv=2021&sig=REDACTED",
    'secret project/a written {"name": "project/a", "expires": "2027-01-01T00:00:00Z"}',
    '{"secret": {}}',
    "claimed taskId=fN1Ro2JSTb2zGNSTHHvS9A runId=0 http://127.0.0.1:8080/api/queue/v1",
    # what ./scripts/dev and `clients add` print for their user to paste
    f"  export TASKCLUSTER_ACCESS_TOKEN={TOKEN}",
]


@pytest.mark.parametrize(
    ("rule", "line"), [(rule, line) for rule, lines in LEAKS.items() for line in lines]
)
def test_each_kind_of_credential_is_found(rule: str, line: str) -> None:
    leaks = list(scan_text(f"first line\n{line}\n"))
    assert [(leak.rule, leak.line_number) for leak in leaks] == [(rule, 2)]
    # the report shows where, never the whole value
    assert TOKEN not in str(leaks[0]) and "hunter22" not in str(leaks[0])


@pytest.mark.parametrize("line", CLEAN)
def test_masked_values_and_look_alikes_pass(line: str) -> None:
    assert list(scan_text(line)) == []


def test_a_tree_scan_reads_every_matching_file_and_only_those(tmp_path: Path) -> None:
    # not *.log: the run's own scan would find this test's planted leak
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "worker-1.planted").write_text(f"ok\naccessToken={TOKEN}\n")
    (tmp_path / "coordinator.planted").write_text("nothing here\n")
    (tmp_path / "clients.json").write_text(f'{{"accessToken": "{TOKEN}"}}')
    (tmp_path / "a" / "theirs").mkdir()
    (tmp_path / "a" / "theirs" / "tool.planted").write_text(f"accessToken={TOKEN}\n")
    leaks = scan_tree(tmp_path, "*.planted", skip_folders={"theirs"})
    assert [(leak.path, leak.line_number) for leak in leaks] == [
        (tmp_path / "a" / "b" / "worker-1.planted", 2)
    ]
