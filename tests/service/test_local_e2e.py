"""Jobs that really run: the reconciler driving the local backend, end to end, on real processes.

A 2-pod job sees exactly the devices gpuaas stored for it; a failing command is Failed; cancel
and maxRunTime stop the process group; a command that does not exist is a clear reason; and a
``gpuaas serve --backend local`` killed with SIGKILL mid-job and started again finishes the job
without running it twice."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_world import build_world, events, job_spec
from serve_process import Server

from gpuaas.backends.base import DEFAULT_GRACE
from gpuaas.backends.local import LocalBackend, procs
from gpuaas.backends.local.state import RunRecord
from gpuaas.backends.logs import LogLayout
from gpuaas.engine.admission.restore import typed_pods
from gpuaas.service.fleet import load_nodes
from gpuaas.service.jobs import cancel_job, submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, Tenant


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    return build_world(db, quota_gpus=8, nodes=2)


@pytest.fixture
def reconciler(db: Database, world: dict[str, int], tmp_path: Path) -> Iterator[Reconciler]:
    backend = LocalBackend(tmp_path / "local", LogLayout(tmp_path / "logs"))
    r = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path), backend=backend)
    yield r
    r.stop()
    for path in (tmp_path / "local").glob("*/attempt-*/run.json"):  # nothing left running
        for pod in RunRecord.load(path).pods:
            if pod.pid is not None and pod.start is not None:
                procs.signal_group(pod.pid, pod.start, signal.SIGKILL)


def submit(db: Database, world: dict[str, int], spec: dict[str, Any]) -> int:
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        job, created = submit_job(s, tenant, world["alice"], JobSpec.model_validate(spec),
                                  time.time())  # fmt: skip
        assert created
        return job.id


def row(db: Database, job_id: int) -> Job:
    with db.sessions() as s:
        job = s.get(Job, job_id)
        assert job is not None
        s.expunge(job)
        return job


def run_until(reconciler: Reconciler, db: Database, job_id: int, states: set[str],
              timeout: float = 20) -> Job:  # fmt: skip
    """Step the reconciler (as its loop would, with the wall clock) until the job is in one of
    ``states``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reconciler.step(time.time())
        job = row(db, job_id)
        if job.state in states:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} is {row(db, job_id).state}, not in {states}")


def pods(db: Database, job_id: int, tmp_path: Path) -> list[RunRecord]:
    return [RunRecord.load(p) for p in (tmp_path / "local" / str(job_id)).glob("*/run.json")]


PRINT = ["sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES $RANK $WORLD_SIZE"']


def test_a_two_pod_job_sees_exactly_the_devices_gpuaas_assigned(
    db: Database, world: dict[str, int], reconciler: Reconciler, tmp_path: Path
) -> None:
    spec = job_spec("print", gpus=2, command=PRINT)
    spec["podSets"][0]["count"] = 2
    job_id = submit(db, world, spec)
    job = run_until(reconciler, db, job_id, {"Succeeded", "Failed"})
    assert job.state == "Succeeded", job.reason
    with db.sessions() as s:
        assert [b for _, b, _ in events(s, job_id)] == [
            "Pending", "Admitted", "Running", "Succeeded"
        ]  # fmt: skip
        nodes = {n.name: n for n in load_nodes(s)}
    assert job.placement is not None and len(job.placement) == 2
    placed = typed_pods(job.placement, nodes.get)
    logs = LogLayout(tmp_path / "logs")
    for pod in placed:
        uuids = [d.uuid for d in pod.devices]
        assert len(uuids) == 2 and all(u.startswith("GPU-") for u in uuids)
        # the stored slots name the node's GPUs, whose UUIDs the inventory gave
        stored = job.placement[pod.rank]
        node = nodes[stored["node"]]
        assert uuids == [node.gpus[slot].uuid for slot, _ in stored["assignment"]["gpus"]]
        out = logs.stdout(job_id, 0, pod.rank).read_text()
        assert out == f"{','.join(uuids)} {pod.rank} 2\n"
    all_uuids = [d.uuid for p in placed for d in p.devices]
    assert len(set(all_uuids)) == 4  # no device given twice


def test_a_failing_command_is_failed_with_its_exit_code(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    job_id = submit(db, world, job_spec(
        "fails", command=["sh", "-c", "echo 'CUDA error: out of memory' >&2; exit 3"]))  # fmt: skip
    job = run_until(reconciler, db, job_id, {"Succeeded", "Failed"})
    assert job.state == "Failed"
    assert "pod 0 exited with code 3: CUDA error: out of memory" in job.reason


def test_a_command_that_does_not_exist_is_a_clear_reason(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    job_id = submit(db, world, job_spec("missing", command=["no-such-program-gpuaas"]))
    job = run_until(reconciler, db, job_id, {"Succeeded", "Failed"})
    assert job.state == "Failed"
    assert "command 'no-such-program-gpuaas' was not found on the job's PATH" in job.reason


def test_cancel_stops_the_process_group_within_the_grace(
    db: Database, world: dict[str, int], reconciler: Reconciler, tmp_path: Path
) -> None:
    child = tmp_path / "child.pid"
    job_id = submit(db, world, job_spec(
        "cancelled", command=["bash", "-c", f"sleep 1000 & echo $! > {child}; wait"]))  # fmt: skip
    run_until(reconciler, db, job_id, {"Running"})
    deadline = time.monotonic() + 10
    while not (child.exists() and child.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.02)
    sleeper = int(child.read_text())
    with db.session() as s:
        found = s.get(Job, job_id)
        assert found is not None
        cancel_job(s, found, time.time())
    began = time.monotonic()
    run_until(reconciler, db, job_id, {"Cancelled"})
    [record] = pods(db, job_id, tmp_path)
    pod = record.pods[0]
    assert pod.pid is not None and pod.start is not None
    while procs.group_members(pod.pid, pod.start):
        assert time.monotonic() - began <= DEFAULT_GRACE + 1
        time.sleep(0.02)
    gone = procs.stat(sleeper)
    assert gone is None or gone.state == "Z"
    assert reconciler.backend.running() == set()


def test_max_run_time_stops_the_job(
    db: Database, world: dict[str, int], reconciler: Reconciler, tmp_path: Path
) -> None:
    job_id = submit(db, world, job_spec("slow", command=["sleep", "1000"], maxRunTime=1))
    job = run_until(reconciler, db, job_id, {"Failed", "Succeeded"})
    assert job.state == "Failed" and job.reason_code == "MaxRunTimeExceeded"
    [record] = pods(db, job_id, tmp_path)
    pod = record.pods[0]
    assert pod.pid is not None and pod.start is not None
    deadline = time.monotonic() + DEFAULT_GRACE + 1
    while procs.group_members(pod.pid, pod.start):
        assert time.monotonic() < deadline
        time.sleep(0.02)


# --- a real server, killed with SIGKILL mid-job ---------------------------------------------

ADMIN = "gpa_local-e2e-admin-token-0123456789"
FLEET = """\
apiVersion: gpuaas.io/v1
kind: Fleet
nodes:
  - name: host-{i}
    count: 2
    cpu: "16"
    memory: 64Gi
    gpus: {model: H100-80GB, count: 2}
"""
QUOTA = {
    "namespaceSelector": {},
    "resourceGroups": [{
        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
        "flavors": [{"name": "gpu", "resources": [
            {"name": "cpu", "nominalQuota": "32"}, {"name": "memory", "nominalQuota": "128Gi"},
            {"name": "nvidia.com/gpu", "nominalQuota": 4}]}],
    }],
}  # fmt: skip


def serve_local(data: Path, fleet: Path) -> Server:
    args = ["--data-dir", str(data), "--fleet", str(fleet), "--backend", "local"]
    return Server(args, data / "server.log", ADMIN)


def wait_state(client: httpx.Client, job_id: int, states: set[str], timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/tenants/acme/jobs/{job_id}").json()
        if job["state"] in states:
            return job  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} stayed {job['state']}, not in {states}")


@pytest.mark.slow
def test_a_killed_control_plane_neither_loses_nor_repeats_a_running_job(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    ran, go = tmp_path / "ran", tmp_path / "go"
    script = f"echo $RANK >> {ran}; while [ ! -e {go} ]; do sleep 0.05; done; echo done $RANK"
    servers: list[Server] = []
    try:
        first = serve_local(data, fleet)
        servers.append(first)
        with first.client() as c:
            for url, body in [
                ("/v1/tenants", {"name": "acme"}),
                ("/v1/flavors", {"name": "gpu", "spec": {}}),
                ("/v1/cluster-queues", {"name": "cq", "spec": QUOTA}),
                ("/v1/tenants/acme/local-queues", {"name": "default", "clusterQueue": "cq"}),
            ]:
                assert c.post(url, json=body).status_code == 201, url
            r = c.post("/v1/tenants/acme/jobs", json={
                "name": "survives", "queue": "default", "command": ["sh", "-c", script],
                "podSets": [{"count": 2, "resources": {"cpu": "1", "nvidia.com/gpu": 1}}],
            })  # fmt: skip
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            wait_state(c, job_id, {"Running"})
        deadline = time.monotonic() + 10
        while not (ran.exists() and len(ran.read_text().split()) == 2):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        first.kill()  # mid-job; its reconciler process dies with it
        [record] = [RunRecord.load(p) for p in (data / "local").glob("*/attempt-*/run.json")]
        assert all(
            p.pid is not None and p.start is not None and procs.alive(p.pid, p.start)
            for p in record.pods
        )  # the job's processes outlive the control plane
        second = serve_local(data, fleet)
        servers.append(second)
        with second.client() as c:
            time.sleep(1.0)  # the new reconciler follows the processes again ...
            assert c.get(f"/v1/tenants/acme/jobs/{job_id}").json()["state"] == "Running"
            go.touch()  # ... and sees them end
            job = wait_state(c, job_id, {"Succeeded", "Failed", "Pending"})
            assert job["state"] == "Succeeded", job["reason"]
            assert job["attempts"] == 0
            steps = [
                e["toState"]
                for e in c.get(f"/v1/tenants/acme/jobs/{job_id}/events").json()["items"]
            ]
        assert steps == ["Pending", "Admitted", "Running", "Succeeded"]
        assert sorted(ran.read_text().split()) == ["0", "1"]  # each pod ran exactly once
        assert (data / "logs" / str(job_id) / "attempt-0" / "pod-1.out").read_text() == "done 1\n"
    finally:
        for server in servers:
            server.stop()
        for path in (data / "local").glob("*/attempt-*/run.json"):
            for p in RunRecord.load(path).pods:
                if p.pid is not None and p.start is not None:
                    procs.signal_group(p.pid, p.start, signal.SIGKILL)
