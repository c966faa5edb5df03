"""The issue's restart test: kill -9 the server while jobs stream in, start it again on the same
database, and check that nothing acknowledged was lost, every job's history is a valid path to
its state, no GPU was ever given twice, and the jobs in flight run to the end."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
from job_world import devices_given_twice, events, jobs
from serve_process import Server, all_final, kill_mid_stream, post_all

from gpuaas.model.job_state import TRANSITIONS, JobState
from gpuaas.store.db import Database

ADMIN = "gpa_restart-admin-token-0123456789"
FLEET = """\
apiVersion: gpuaas.io/v1
kind: Fleet
nodes:
  - name: gpu-{i}
    count: 2
    cpu: "64"
    memory: 512Gi
    gpus: {model: H100-80GB, count: 4}
"""
CLUSTER_QUEUE = {
    "namespaceSelector": {},
    "resourceGroups": [
        {
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [
                {
                    "name": "gpu",
                    "resources": [
                        {"name": "cpu", "nominalQuota": "128"},
                        {"name": "memory", "nominalQuota": "1Ti"},
                        {"name": "nvidia.com/gpu", "nominalQuota": 8},
                    ],
                }
            ],
        }
    ],
}


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    return path


SETUP = [
    ("/v1/tenants", {"name": "acme"}),
    ("/v1/flavors", {"name": "gpu", "spec": {}}),
    ("/v1/cluster-queues", {"name": "cq", "spec": CLUSTER_QUEUE}),
    ("/v1/tenants/acme/local-queues", {"name": "default", "clusterQueue": "cq"}),
]


def _spec(i: int) -> dict[str, object]:
    return {
        "name": f"job-{i}",
        "kind": "batch",
        "queue": "default",
        "idempotencyKey": f"key-{i}",
        "command": ["sleep", "1"],
        "duration": 5 + (i % 3) * 5,  # 0.1 .. 0.3 s at --speed 50
        # every fifth job a gang of two pods on the two nodes' last free GPUs
        "podSets": [
            {"count": 2 if i % 5 == 0 else 1, "resources": {"cpu": "4", "nvidia.com/gpu": 1}}
        ],
    }


def _admitted_any(db_url: str) -> Callable[[], bool]:
    def ready() -> bool:
        watcher = Database(db_url)
        try:
            with watcher.sessions() as s:
                return any(j.state != "Pending" for j in jobs(s).values())
        finally:
            watcher.dispose()

    return ready


def _check(db: Database) -> dict[int, str]:
    with db.sessions() as s:
        assert devices_given_twice(s) == []
        states = {}
        for job_id, job in jobs(s).items():
            steps = events(s, job_id)
            assert steps and steps[0][:2] == (None, "Pending"), (job_id, steps)
            for a, b, _ in steps:
                assert JobState(b) in TRANSITIONS[JobState(a) if a else None], (job_id, steps)
            for (_, b, _), (a, _, _) in itertools.pairwise(steps):
                assert a == b, (job_id, steps)
            assert steps[-1][1] == job.state, (job_id, steps)
            states[job_id] = job.state
        return states


@pytest.mark.slow
def test_kill_9_mid_stream_loses_nothing_acknowledged(
    tmp_path: Path, fleet: Path, servers: list[Server]
) -> None:
    db_url = f"sqlite:///{tmp_path / 'gpuaas.db'}"
    log = tmp_path / "server.log"
    first = Server(["--db", db_url, "--fleet", str(fleet), "--speed", "50"], log, ADMIN)
    servers.append(first)
    with first.client() as c:
        post_all(c, SETUP)
    acked: dict[int, int] = {}
    # jobs queue, get admitted, run and finish while the stream goes on: kill once the
    # reconciler's process admitted its first
    kill_mid_stream(first, _spec, acked, _admitted_any(db_url))
    assert len(acked) > 20, "too few submissions before the kill to test anything"
    db = Database(db_url)
    try:
        with db.sessions() as s:
            stored = jobs(s)
        assert set(acked.values()) <= set(stored)  # every acknowledged submission is there
        states = _check(db)
        assert {"Admitted", "Running"} & set(states.values()) or JobState.SUCCEEDED in set(
            states.values()
        )
        second = Server(["--db", db_url, "--fleet", str(fleet), "--speed", "50"], log, ADMIN)
        servers.append(second)
        # a client that never saw its answer retries with the same key: still one job each
        with second.client() as c:
            for i in range(len(acked) + 3):
                r = c.post("/v1/tenants/acme/jobs", json=_spec(i), timeout=10)
                assert r.status_code in (200, 201), r.text
                if i in acked:
                    assert (r.status_code, r.json()["id"]) == (200, acked[i])
        all_final(db_url, 120)
        # checked once nothing moves: SQLite reads outside a transaction are not one snapshot
        states = _check(db)
        assert all(state == "Succeeded" for state in states.values()), states
        assert len(states) == len(acked) + 3
    finally:
        db.dispose()
