"""The SDK's job logs: ``job_logs`` (text and what the server said about it) and
``follow_job_logs`` (lines until the job is finished), against the real app in process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from gpuaas.backends.logs import LogLayout
from gpuaas.client import ApiError, Client, JobLogs
from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings
from gpuaas.store.tables import Job

ADMIN = "gpa_sdk-logs-admin-token-0123456789"
CQ_SPEC = {
    "namespaceSelector": {},
    "resourceGroups": [
        {
            "coveredResources": ["nvidia.com/gpu"],
            "flavors": [
                {"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}
            ],
        }
    ],
}


@pytest.fixture
def http(sqlite_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(db_url=sqlite_url, data_dir=tmp_path, reconcile=False, admin_token=ADMIN)
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def alice(http: TestClient) -> Client:
    admin = Client.from_httpx(http, ADMIN)
    admin.create_flavor("gpu", {})
    admin.create_tenant("acme", capacity={"gpu": {"nvidia.com/gpu": "8"}})
    admin.create_cluster_queue("acme-cq", CQ_SPEC, owner="acme")
    admin.create_local_queue("default", "acme-cq", tenant="acme")
    admin.set_member("acme", "alice", "tenant-user")
    return Client.from_httpx(http, str(admin.create_member_token("acme", "alice", "t")["token"]))


def submit(alice: Client, pods: int) -> int:
    spec = {
        "name": f"j{time.monotonic_ns()}",
        "queue": "default",
        "command": ["true"],
        "podSets": [{"name": "main", "count": pods, "resources": {"nvidia.com/gpu": 1}}],
    }
    return int(alice.submit_job("acme", spec)["id"])


def layout(http: TestClient) -> LogLayout:
    return LogLayout(http.app.state.settings.logs_dir)  # type: ignore[attr-defined]


def write(http: TestClient, job: int, rank: int, out: bytes, err: bytes = b"") -> None:
    where = layout(http)
    where.attempt_dir(job, 0).mkdir(parents=True, exist_ok=True)
    with where.stdout(job, 0, rank).open("ab") as f:
        f.write(out)
    with where.stderr(job, 0, rank).open("ab") as f:
        f.write(err)


def finish(http: TestClient, job: int) -> None:
    with http.app.state.db.session() as s:  # type: ignore[attr-defined]
        s.execute(update(Job).where(Job.id == job).values(state="Failed"))


def test_job_logs_is_the_text_and_what_the_server_said(http: TestClient, alice: Client) -> None:
    job = submit(alice, pods=2)
    none = alice.job_logs("acme", job)
    assert isinstance(none, JobLogs)
    assert (none, none.state, none.attempt, none.truncated) == ("", "none-yet", None, False)
    write(http, job, 0, b"a\nb\nc\n", b"oops\n")
    write(http, job, 1, b"x\n")
    logs = alice.job_logs("acme", job)
    assert logs == "[pod-0] a\n[pod-0] b\n[pod-0] c\n[pod-0 stderr] oops\n[pod-1] x\n"
    assert (logs.state, logs.attempt) == ("output", 0)
    assert alice.job_logs("acme", job, pod=0, tail=1, stream="stdout") == "c\n"
    assert alice.job_logs("acme", job, pod=0, stream="stderr", attempt=0) == "oops\n"


def test_bad_parameters_and_unknown_jobs_are_api_errors(alice: Client) -> None:
    job = submit(alice, pods=1)
    for kwargs, field, status in (
        ({"pod": 1}, "pod", 404),  # a rank the job does not have: names what does not exist
        ({"pod": -1}, "pod", 422),
        ({"stream": "both"}, "stream", 422),
        ({"tail": -3}, "tail", 422),
    ):
        with pytest.raises(ApiError) as err:
            alice.job_logs("acme", job, **kwargs)  # type: ignore[arg-type]
        assert err.value.status == status
        assert [e["field"] for e in err.value.errors] == [field]
    with pytest.raises(ApiError) as err:
        alice.job_logs("acme", 424242)
    assert err.value.status == 404
    with pytest.raises(ApiError) as err:
        list(alice.follow_job_logs("acme", 424242))
    assert err.value.status == 404


def test_follow_yields_every_line_until_the_job_is_finished(
    http: TestClient, alice: Client
) -> None:
    job = submit(alice, pods=1)
    write(http, job, 0, b"first\n")

    def run() -> None:
        for i in range(3):
            time.sleep(0.2)
            write(http, job, 0, f"line {i}\n".encode(), f"warn {i}\n".encode())
        time.sleep(0.6)
        finish(http, job)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    got = list(alice.follow_job_logs("acme", job, stream="stdout"))
    thread.join()
    assert got == ["first", "line 0", "line 1", "line 2"]
    assert list(alice.follow_job_logs("acme", job, stream="stderr", tail=1)) == ["warn 2"]
