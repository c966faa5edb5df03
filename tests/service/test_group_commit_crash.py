"""SIGKILL of the server while many clients submit at once, so that the group-commit writer
(service/group_commit.py) holds batches of several requests when it dies: on SQLite and on
PostgreSQL, every acknowledged job is stored (with its first event) under its own key, none
twice, and after a restart a client retrying any of them gets the job it was answered with."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_process import Server
from sqlalchemy import func, select

from gpuaas.store.db import Database
from gpuaas.store.tables import Job, JobEvent

ADMIN = "gpa_groupcommit-admin-0123456789"
CLIENTS = 8
CLUSTER_QUEUE = {
    "namespaceSelector": {},
    "resourceGroups": [
        {
            "coveredResources": ["cpu", "nvidia.com/gpu"],
            "flavors": [
                {
                    "name": "gpu",
                    "resources": [
                        {"name": "cpu", "nominalQuota": "64"},
                        {"name": "nvidia.com/gpu", "nominalQuota": 8},
                    ],
                }
            ],
        }
    ],
}


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def _spec(key: str) -> dict[str, object]:
    return {
        "name": f"job-{key}",
        "queue": "default",
        "idempotencyKey": key,
        "command": ["sleep", "1"],
        "podSets": [{"count": 1, "resources": {"cpu": "1", "nvidia.com/gpu": 1}}],
    }


def _stream(url: str, client_no: int, acked: dict[str, int], stop: threading.Event) -> None:
    """One client submitting until the server dies; ``acked``: key -> job id."""
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        i = 0
        while not stop.is_set():
            key = f"c{client_no}-{i}"
            try:
                r = client.post("/v1/tenants/acme/jobs", json=_spec(key))
            except httpx.TransportError:
                return  # killed mid-request: never acknowledged
            assert r.status_code in (200, 201), r.text
            acked[key] = r.json()["id"]
            i += 1


@pytest.mark.slow
def test_kill_9_during_concurrent_submissions_loses_nothing_acknowledged(
    db_url: str, tmp_path: Path, servers: list[Server]
) -> None:
    log = tmp_path / "server.log"
    args = ["--db", db_url, "--data-dir", str(tmp_path), "--no-reconcile"]
    first = Server(args, log, ADMIN, startup=180)
    servers.append(first)
    with first.client() as c:
        for url, body in [
            ("/v1/tenants", {"name": "acme"}),
            ("/v1/flavors", {"name": "gpu", "spec": {}}),
            ("/v1/cluster-queues", {"name": "cq", "spec": CLUSTER_QUEUE}),
            ("/v1/tenants/acme/local-queues", {"name": "default", "clusterQueue": "cq"}),
        ]:
            assert c.post(url, json=body).status_code == 201, url
    acked: dict[str, int] = {}
    stop = threading.Event()
    streams = [
        threading.Thread(target=_stream, args=(first.url, n, acked, stop)) for n in range(CLIENTS)
    ]
    for t in streams:
        t.start()
    deadline = time.monotonic() + 60  # a deadline: a loaded machine submits slowly
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    first.kill()  # with requests of every client in flight
    for t in streams:
        t.join(30)
    stop.set()
    assert len(acked) >= 50, "too few submissions before the kill to test anything"
    db = Database(db_url)
    try:
        with db.sessions() as s:
            stored = {key: job_id for key, job_id in s.execute(select(Job.idempotency_key, Job.id))}
            assert s.scalar(select(func.count()).select_from(Job)) == len(stored)  # no repeats
            pending = select(JobEvent.job_id).where(JobEvent.to_state == "Pending")
            first_events = set(s.scalars(pending))
        for key, job_id in acked.items():
            assert stored.get(key) == job_id, key  # acknowledged means stored, as answered
        assert set(stored.values()) <= first_events  # every stored job with its first event
    finally:
        db.dispose()
    second = Server(args, log, ADMIN, startup=180)
    servers.append(second)
    with second.client() as c:  # clients retrying what they may not have seen answered
        for key in sorted(acked)[:100]:
            r = c.post("/v1/tenants/acme/jobs", json=_spec(key))
            assert (r.status_code, r.json()["id"]) == (200, acked[key]), r.text
