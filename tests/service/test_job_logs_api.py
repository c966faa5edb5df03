"""GET /v1/tenants/{t}/jobs/{id}/logs: files written in the log layout for a submitted job are
served by pod, stream, tail and attempt, followed until the job is finished, refused (404, 422)
like the other job routes."""

from __future__ import annotations

import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from job_world import TOKENS, build_world, job_spec
from sqlalchemy import update
from test_identity_revocation import served

from conftest import Api
from gpuaas.backends.logs import LogLayout
from gpuaas.client import Client
from gpuaas.service import logs as service_logs
from gpuaas.service.routers import jobs as jobs_router
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, Tenant


@pytest.fixture
def world(sqlite_api: Api) -> Api:
    build_world(_db(sqlite_api))
    return sqlite_api


def _db(api: Api) -> Database:
    return api.client.app.state.db  # type: ignore[attr-defined]


def _layout(api: Api) -> LogLayout:
    return LogLayout(api.client.app.state.settings.logs_dir)  # type: ignore[attr-defined]


def submit(api: Api, pods: int = 2, user: str = "alice") -> int:
    spec = job_spec(f"job-{time.monotonic_ns()}")
    spec["podSets"][0]["count"] = pods
    r = api.as_(TOKENS[user]).post("/v1/tenants/acme/jobs", json=spec)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def write(api: Api, job: int, rank: int, out: str = "", err: str = "", attempt: int = 0) -> None:
    layout = _layout(api)
    layout.attempt_dir(job, attempt).mkdir(parents=True, exist_ok=True)
    with layout.stdout(job, attempt, rank).open("ab") as f:
        f.write(out.encode())
    with layout.stderr(job, attempt, rank).open("ab") as f:
        f.write(err.encode())


def finish(api: Api, job: int, state: str = "Succeeded") -> None:
    with _db(api).session() as s:
        s.execute(update(Job).where(Job.id == job).values(state=state))


def logs(api: Api, job: int, user: str = "alice", **params: object) -> tuple[str, dict[str, str]]:
    r = api.as_(TOKENS[user]).get(f"/v1/tenants/acme/jobs/{job}/logs", params=params)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return r.text, dict(r.headers)


def test_a_job_without_output_is_an_empty_answer_that_says_so(world: Api) -> None:
    job = submit(world)
    text, headers = logs(world, job)
    assert text == ""
    assert headers["x-gpuaas-log-state"] == "none-yet"
    assert "x-gpuaas-log-attempt" not in headers
    finish(world, job, "Failed")
    assert logs(world, job)[1]["x-gpuaas-log-state"] == "none"


def test_every_pod_stdout_then_stderr_labelled(world: Api) -> None:
    job = submit(world, pods=2)
    write(world, job, 0, out="a1\na2\n", err="e0\n")
    write(world, job, 1, out="b1\nb2 unfinished", err="")
    text, headers = logs(world, job)
    assert text == (
        "[pod-0] a1\n[pod-0] a2\n[pod-0 stderr] e0\n[pod-1] b1\n[pod-1] b2 unfinished\n"
    )
    assert headers["x-gpuaas-log-state"] == "output"
    assert headers["x-gpuaas-log-attempt"] == "0"
    assert headers["x-gpuaas-log-truncated"] == "false"


def test_pod_and_stream_filters(world: Api) -> None:
    job = submit(world, pods=2)
    write(world, job, 0, out="a1\n", err="e0\n")
    write(world, job, 1, out="b1\n", err="e1\n")
    assert logs(world, job, pod=1)[0] == "b1\n[stderr] e1\n"
    assert logs(world, job, pod=1, stream="stdout")[0] == "b1\n"
    assert logs(world, job, pod=0, stream="stderr")[0] == "e0\n"
    assert logs(world, job, stream="stderr")[0] == "[pod-0] e0\n[pod-1] e1\n"


def test_tail_is_per_file(world: Api) -> None:
    job = submit(world, pods=1)
    write(world, job, 0, out="".join(f"o{i}\n" for i in range(50)), err="x\ny\nz\n")
    assert logs(world, job, tail=2)[0] == "o48\no49\n[stderr] y\n[stderr] z\n"
    assert logs(world, job, tail=2, stream="stdout")[0] == "o48\no49\n"
    assert logs(world, job, tail=0)[0] == ""


def test_attempts_latest_by_default(world: Api) -> None:
    job = submit(world, pods=1)
    write(world, job, 0, out="first run\n", attempt=0)
    write(world, job, 0, out="second run\n", attempt=1)
    text, headers = logs(world, job, stream="stdout")
    assert (text, headers["x-gpuaas-log-attempt"]) == ("second run\n", "1")
    text, headers = logs(world, job, stream="stdout", attempt=0)
    assert (text, headers["x-gpuaas-log-attempt"]) == ("first run\n", "0")
    text, headers = logs(world, job, attempt=7)
    assert (text, headers["x-gpuaas-log-state"]) == ("", "none-yet")


def test_bytes_that_are_not_utf8_are_replaced(world: Api) -> None:
    job = submit(world, pods=1)
    layout = _layout(world)
    layout.attempt_dir(job, 0).mkdir(parents=True)
    layout.stdout(job, 0, 0).write_bytes(b"ok \xff\xfe end\n")
    assert logs(world, job)[0] == "ok \ufffd\ufffd end\n"


def test_without_tail_a_file_gives_its_last_lines_up_to_the_cap(
    world: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_logs, "MAX_LINES", 100)
    job = submit(world, pods=1)
    write(world, job, 0, out="".join(f"line {i}\n" for i in range(150)))
    text, headers = logs(world, job, stream="stdout")
    assert text.splitlines() == [f"line {i}" for i in range(50, 150)]
    assert headers["x-gpuaas-log-truncated"] == "true"
    text, headers = logs(world, job, stream="stdout", tail=3)
    assert text == "line 147\nline 148\nline 149\n"
    assert headers["x-gpuaas-log-truncated"] == "false"


def test_a_huge_file_is_read_from_its_end_only(world: Api) -> None:
    """A 4 GiB file (sparse: no disk needed) ends with three lines; the answer reads no more
    than the response's byte budget."""
    job = submit(world, pods=1)
    layout = _layout(world)
    layout.attempt_dir(job, 0).mkdir(parents=True)
    path = layout.stdout(job, 0, 0)
    with path.open("wb") as f:
        f.truncate(4 << 30)
        f.seek(0, 2)
        f.write(b"a\nb\nc\n")
    tracemalloc.start()
    try:
        started = time.monotonic()
        tail_text, _ = logs(world, job, stream="stdout", tail=2)
        full_text, headers = logs(world, job, stream="stdout")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tail_text == "b\nc\n"
    assert full_text == "b\nc\n"  # the zeros' line is longer than the budget: cut, and said
    assert headers["x-gpuaas-log-truncated"] == "true"
    assert peak < 6 * service_logs.MAX_RESPONSE_BYTES, peak
    assert time.monotonic() - started < 30


def test_a_file_the_server_cannot_read_is_503_not_a_bug(world: Api) -> None:
    job = submit(world, pods=1)
    _layout(world).stdout(job, 0, 0).mkdir(parents=True)  # a folder where the file should be
    r = world.get(f"/v1/tenants/acme/jobs/{job}/logs")
    assert r.status_code == 503, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "cannot be read" in r.json()["detail"] and "/" not in r.json()["detail"]


def test_another_users_or_tenants_job_or_no_job_is_404(world: Api) -> None:
    job = submit(world, pods=1, user="alice")
    write(world, job, 0, out="secret\n")
    bob = world.as_(TOKENS["bob"])
    for url in (
        f"/v1/tenants/acme/jobs/{job}/logs",  # bob is a tenant-user: alice's job is not his
        "/v1/tenants/acme/jobs/999999/logs",
        f"/v1/tenants/globex/jobs/{job}/logs",
        "/v1/tenants/acme/jobs/99999999999999999999/logs",
    ):
        r = bob.get(url)
        assert r.status_code == 404, (url, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert "secret" not in r.text
    assert world.get(f"/v1/tenants/acme/jobs/{job}/logs").text == "secret\n"  # provider admin
    with _db(world).session() as s:
        s.add(Tenant(name="globex", display_name="Globex", capacity={}, created_at=0.0))
    r = world.get(f"/v1/tenants/globex/jobs/{job}/logs")  # acme's job under another tenant
    assert r.status_code == 404, r.text
    assert "secret" not in r.text


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"pod": -1}, "pod"),
        ({"pod": "zero"}, "pod"),
        ({"pod": 10_000}, "pod"),  # no job has more than 10,000 pods (the document's bound)
        ({"pod": 10**30}, "pod"),
        ({"tail": -1}, "tail"),
        ({"tail": 10_001}, "tail"),
        ({"tail": "all"}, "tail"),
        ({"stream": "both"}, "stream"),
        ({"attempt": -1}, "attempt"),
        ({"follow": "maybe"}, "follow"),
    ],
)
def test_bad_parameters_are_422_naming_the_parameter(
    world: Api, params: dict[str, object], field: str
) -> None:
    job = submit(world, pods=2)
    r = world.get(f"/v1/tenants/acme/jobs/{job}/logs", params=params)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert [e["field"] for e in r.json()["errors"]] == [field]


def test_a_pod_the_job_does_not_have_is_404_naming_the_parameter(world: Api) -> None:
    """A rank the document admits, of no pod of this job: the request was well formed and
    names what does not exist (as a job id that does not exist is)."""
    job = submit(world, pods=2)
    r = world.get(f"/v1/tenants/acme/jobs/{job}/logs", params={"pod": 2})
    assert r.status_code == 404, r.text
    assert r.json()["errors"] == [
        {"field": "pod", "message": f"pod: job {job} has no pod 2 (its 2: ranks 0 to 1)"}
    ]


def later(*steps: tuple[float, Callable[[], object]]) -> threading.Thread:
    """A thread that waits and acts, step by step (a backend writing, the reconciler ending)."""

    def run() -> None:
        for wait, act in steps:
            time.sleep(wait)
            act()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def db_world(api: Api) -> Api:
    build_world(_db(api))
    return api


def test_follow_sends_lines_as_they_come_and_ends_with_the_job(db_world: Api) -> None:
    """A thread appends lines to both pods' stdout, one of them in two writes, then marks the
    job finished: the stream holds every line once and ends (on SQLite and PostgreSQL)."""
    job = submit(db_world, pods=2)
    write(db_world, job, 0, out="before\n")
    lines = ["p0 one\n", "p1 one\n", "p0 two ", "p1 two\n", "continued\n", "p1 last"]
    writes = [
        (0.05, lambda i=i, line=line: write(db_world, job, i % 2, out=line))
        for i, line in enumerate(lines)
    ]
    # at least one poll sees the last line before the job ends
    writer = later(*writes, (0.6, lambda: finish(db_world, job)))
    started = time.monotonic()
    text, headers = logs(db_world, job, follow="true", stream="stdout")
    writer.join()
    assert time.monotonic() - started < 20
    assert headers["x-gpuaas-log-state"] == "output"
    got = text.splitlines()
    assert sorted(got) == sorted(
        [
            "[pod-0] before",
            "[pod-0] p0 one",
            "[pod-1] p1 one",
            "[pod-0] p0 two continued",
            "[pod-1] p1 two",
            "[pod-1] p1 last",
        ]
    )
    pod0 = [line for line in got if line.startswith("[pod-0]")]
    assert pod0 == ["[pod-0] before", "[pod-0] p0 one", "[pod-0] p0 two continued"]
    assert got[-1] == "[pod-1] p1 last"  # the unfinished line comes once the job is over


def test_follow_with_tail_and_a_finished_job_returns_at_once(world: Api) -> None:
    job = submit(world, pods=1)
    write(world, job, 0, out="".join(f"{i}\n" for i in range(10)))
    finish(world, job)
    started = time.monotonic()
    text, _ = logs(world, job, follow="true", tail=2, stream="stdout")
    assert text == "8\n9\n"
    assert time.monotonic() - started < 5


def test_follow_waits_for_the_first_output_and_moves_to_a_new_attempt(world: Api) -> None:
    job = submit(world, pods=1)
    thread = later(
        (0.7, lambda: write(world, job, 0, out="run 0\n", attempt=0)),
        (0.7, lambda: write(world, job, 0, out="run 1\n", attempt=1)),
        (0.7, lambda: finish(world, job)),
    )
    text, headers = logs(world, job, follow="true", stream="stdout")
    thread.join()
    assert headers["x-gpuaas-log-state"] == "none-yet"
    assert text == "run 0\n==> attempt 1 <==\nrun 1\n"


def test_follow_of_a_fixed_attempt_stays_there(world: Api) -> None:
    job = submit(world, pods=1)
    write(world, job, 0, out="run 0\n", attempt=0)
    thread = later(
        (0.3, lambda: write(world, job, 0, out="run 1\n", attempt=1)),
        (0.7, lambda: finish(world, job)),
    )
    text, _ = logs(world, job, follow="true", stream="stdout", attempt=0)
    thread.join()
    assert text == "run 0\n"


def test_over_a_real_socket_lines_arrive_before_the_job_ends_and_a_gone_client_ends_the_follow(
    sqlite_url: str, tmp_path: Path, settings_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under uvicorn, through the SDK: each line comes while the job still runs (a chunked
    stream, not a buffered answer) and the stream ends when the job does; a client that closes
    its stream stops the server's polling."""
    db = Database(sqlite_url)
    build_world(db)
    db.dispose()
    polls: dict[int, int] = {}
    real = jobs_router._job_over

    def counted(database: Database, job_id: int) -> bool:
        polls[job_id] = polls.get(job_id, 0) + 1
        return real(database, job_id)

    monkeypatch.setattr(jobs_router, "_job_over", counted)
    settings = settings_for(sqlite_url, tmp_path)
    layout = LogLayout(settings.logs_dir)
    with served(settings) as url, Client(url, TOKENS["alice"]) as alice:
        job = alice.submit_job("acme", job_spec("streamed"))["id"]
        out = layout.stdout(job, 0, 0)
        out.parent.mkdir(parents=True)
        out.write_bytes(b"one\n")

        def finish_job() -> None:
            with Database(sqlite_url).session() as s:
                s.execute(update(Job).where(Job.id == job).values(state="Succeeded"))

        watchdog = threading.Timer(30, finish_job)  # a buffered answer fails, never hangs
        watchdog.start()
        try:
            lines = alice.follow_job_logs("acme", job, stream="stdout")
            assert next(lines) == "one"
            with out.open("ab") as f:
                f.write(b"two\n")
            assert next(lines) == "two"
            assert watchdog.is_alive(), "the lines came only once the job was over"
        finally:
            watchdog.cancel()
        finish_job()
        assert list(lines) == []  # ended with the job

        other = alice.submit_job("acme", job_spec("abandoned"))["id"]
        layout.attempt_dir(other, 0).mkdir(parents=True)
        layout.stdout(other, 0, 0).write_bytes(b"hello\n")
        abandoned = alice.follow_job_logs("acme", other)
        assert next(abandoned) == "hello"
        abandoned.close()  # the client goes away; the job runs on
        time.sleep(3 * service_logs.FOLLOW_POLL)
        after_close = polls[other]
        time.sleep(4 * service_logs.FOLLOW_POLL)
        assert polls[other] == after_close, "the server still follows for a gone client"
