"""The Slurm backend on a real slurmctld with three 8-GPU nodes (see conftest.py): the service's
reconciler drives it, gpuaas places, Slurm runs, and what Slurm does comes back to gpuaas."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import Cluster
from slurm_world import backend, build, job, path, settings, spec, state_is, step_until, submit

from gpuaas.backends.base import BackendJob, BackendUnavailable, EventKind
from gpuaas.backends.logs import LogLayout
from gpuaas.backends.slurm import SlurmBackend
from gpuaas.backends.slurm.rest import SlurmRest
from gpuaas.model.placement import DeviceKind, DeviceRef, PodPlacement
from gpuaas.service.jobs import cancel_job
from gpuaas.service.reconciler import Reconciler
from gpuaas.store.db import Database
from gpuaas.store.tables import Job

PRINT = ["bash", "-c", "echo rank=$RANK world=$WORLD_SIZE cvd=$CUDA_VISIBLE_DEVICES "
         "slurm=$GPUAAS_SLURM_GPUS node=$SLURMD_NODENAME; sleep 2"]  # fmt: skip


@pytest.fixture
def db(sqlite_url: str) -> Iterator[Database]:
    database = Database(sqlite_url)
    yield database
    database.dispose()


def run(slurm_cluster: Cluster, db: Database, tmp_path: Path, quota: int = 16,
        **options: object) -> tuple[Reconciler, SlurmBackend, dict[str, int]]:  # fmt: skip
    world = build(db, slurm_cluster, quota)
    slurm = backend(slurm_cluster, tmp_path, **options)
    return Reconciler(db, settings(db, tmp_path), backend=slurm), slurm, world


def squeue_state(cluster: Cluster, slurm_id: int) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", str(slurm_id), "-o", "%T"],
        env=cluster.env, capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.strip()


def test_a_gang_of_two_8_gpu_pods_runs_where_gpuaas_placed_it(
    slurm_cluster: Cluster, db: Database, tmp_path: Path
) -> None:
    reconciler, slurm, world = run(slurm_cluster, db, tmp_path)
    job_id = submit(db, world, spec("gang", PRINT, pods=2, gpus=8))
    step_until(reconciler, state_is(db, job_id, "Running"))
    placed = {p["node"]: sorted(s for s, _ in p["assignment"]["gpus"])
              for p in job(db, job_id).placement or []}  # fmt: skip
    assert len(placed) == 2 and all(len(g) == 8 for g in placed.values())
    slurm_id = slurm.slurm_id(job_id)
    assert slurm_id is not None
    # Slurm's own record of the allocation: the same nodes, the same GPU indexes
    assert slurm.cli.gres_indexes(slurm_id) == placed
    step_until(reconciler, state_is(db, job_id, "Succeeded", "Failed"))
    row = job(db, job_id)
    assert row.state == "Succeeded", row.reason
    logs = LogLayout(tmp_path / "logs")
    seen = {}
    for rank in (0, 1):
        words = dict(w.split("=", 1) for w in logs.stdout(job_id, 0, rank).read_text().split())
        assert words["rank"] == str(rank) and words["world"] == "2"
        seen[words["node"]] = [int(i) for i in words["cvd"].split(",")]
        assert words["cvd"] == words["slurm"]  # gpuaas's choice is Slurm's
    assert seen == placed
    assert [b for _, b, _ in path(db, job_id)] == ["Pending", "Admitted", "Running", "Succeeded"]
    # one listing per poll, whatever the number of jobs: never one call per job
    assert slurm.calls["submit"] == 1 and "sacct" not in slurm.calls


def test_cancel_and_preemption_reach_slurm(
    slurm_cluster: Cluster, db: Database, tmp_path: Path
) -> None:
    reconciler, slurm, world = run(slurm_cluster, db, tmp_path, quota=8)
    low = submit(db, world, spec("low", ["sleep", "60"], gpus=8, priorityClass="low"))
    step_until(reconciler, state_is(db, low, "Running"))
    low_slurm = slurm.slurm_id(low)
    assert low_slurm is not None and squeue_state(slurm_cluster, low_slurm) == "RUNNING"
    high = submit(db, world, spec("high", ["sleep", "60"], gpus=8, priorityClass="high"))
    try:
        step_until(reconciler, state_is(db, high, "Running"))
    except AssertionError:
        raise AssertionError((path(db, low), path(db, high), slurm.calls)) from None
    assert [b for _, b, _ in path(db, low)][-2:] == ["Preempted", "Pending"]
    assert squeue_state(slurm_cluster, low_slurm) == "CANCELLED"
    high_slurm = slurm.slurm_id(high)
    assert high_slurm is not None
    with db.session() as s:
        row = s.get(Job, high)
        assert row is not None
        cancel_job(s, row, time.time())
    step_until(reconciler, state_is(db, high, "Cancelled"))
    deadline = time.monotonic() + 10
    while squeue_state(slurm_cluster, high_slurm) != "CANCELLED" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert squeue_state(slurm_cluster, high_slurm) == "CANCELLED"
    # the evicted job runs again as attempt 1, a new Slurm job
    step_until(reconciler, state_is(db, low, "Running"))
    assert slurm.slurm_id(low) not in (None, low_slurm)
    with db.session() as s:
        row = s.get(Job, low)
        assert row is not None
        cancel_job(s, row, time.time())
    step_until(reconciler, state_is(db, low, "Cancelled"))


def test_a_job_killed_inside_slurm_is_failed_with_slurms_reason(
    slurm_cluster: Cluster, db: Database, tmp_path: Path
) -> None:
    reconciler, slurm, world = run(slurm_cluster, db, tmp_path)
    job_id = submit(db, world, spec("victim", ["sleep", "60"], gpus=2))
    step_until(reconciler, state_is(db, job_id, "Running"))
    slurm_id = slurm.slurm_id(job_id)
    slurm_cluster.scontrol("show", "job", str(slurm_id))
    subprocess.run(["scancel", str(slurm_id)], env=slurm_cluster.env, check=True)
    step_until(reconciler, state_is(db, job_id, "Failed"))
    reason = job(db, job_id).reason
    assert f"cancelled in Slurm: Slurm job {slurm_id} CANCELLED" in reason, reason


def test_bad_inputs_are_clear_reasons(slurm_cluster: Cluster, db: Database, tmp_path: Path) -> None:
    reconciler, _, world = run(slurm_cluster, db, tmp_path)
    missing = submit(db, world, spec("nope", ["no-such-command-xyz"]))
    failing = submit(db, world, spec("fails", ["bash", "-c", "echo boom >&2; exit 3"]))
    step_until(reconciler, lambda: all(job(db, j).state == "Failed" for j in (missing, failing)))
    assert "exit code 127" in job(db, missing).reason
    assert "no-such-command-xyz" in job(db, missing).reason  # bash's "command not found"
    assert "exit code 3" in job(db, failing).reason and "boom" in job(db, failing).reason
    assert "Slurm job" in job(db, failing).reason and "FAILED" in job(db, failing).reason


def _pod(node: str, gpus: list[int], rank: int = 0) -> PodPlacement:
    devices = tuple(DeviceRef(f"gpu-{i}", f"GPU-{node}-{i}", i, DeviceKind.GPU) for i in gpus)
    return PodPlacement("main", rank, rank, node, 1000, 1 << 28, devices)


def _poll_until(slurm: SlurmBackend, kinds: set[EventKind], timeout: float = 20.0) -> list:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += slurm.poll(time.time())
        if kinds <= {e.kind for e in seen}:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"saw only {seen}")


def test_partitions_that_refuse_the_job_reject_it_with_slurms_words(
    slurm_cluster: Cluster, tmp_path: Path
) -> None:
    short = backend(slurm_cluster, tmp_path / "short", partition="short")
    short.launch(BackendJob(1, "long", {"command": ["true"], "maxRunTime": 3600},
                            (_pod("n1", [0]),)))  # fmt: skip
    (event,) = _poll_until(short, {EventKind.REJECTED})
    assert "Requested time limit is invalid" in event.reason, event.reason
    closed = backend(slurm_cluster, tmp_path / "closed", partition="closed", start_timeout=2)
    closed.launch(BackendJob(2, "waits", {"command": ["true"]}, (_pod("n1", [0]),)))
    (event,) = _poll_until(closed, {EventKind.REJECTED})
    assert "PENDING after" in event.reason and "PartitionDown" in event.reason, event.reason
    nowhere = backend(slurm_cluster, tmp_path / "nowhere")
    nowhere.launch(BackendJob(3, "ghost", {"command": ["true"]}, (_pod("n9", [0]),)))
    (event,) = _poll_until(nowhere, {EventKind.REJECTED})
    assert "n9 are not nodes of this Slurm cluster" in event.reason


def test_unreachable_slurmrestd_is_backend_unavailable_and_nothing_is_lost(
    slurm_cluster: Cluster, tmp_path: Path
) -> None:
    slurm = backend(slurm_cluster, tmp_path)
    good = slurm.rest
    slurm.rest = SlurmRest(socket=str(tmp_path / "no-such.socket"))
    slurm.launch(BackendJob(5, "wait", {"command": ["true"]}, (_pod("n2", [1]),)))
    with pytest.raises(BackendUnavailable, match=r"no-such\.socket"):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            slurm.poll(time.time())
            time.sleep(0.1)
    assert slurm.running() == {5}
    slurm.rest = good  # slurmrestd is back: the job is submitted and runs to its end
    events = _poll_until(slurm, {EventKind.STARTED, EventKind.SUCCEEDED})
    assert [e.kind for e in events] == [EventKind.STARTED, EventKind.SUCCEEDED]
    assert slurm.calls["submit"] == 1


def test_a_node_that_goes_down_loses_its_job_with_slurms_reason(
    slurm_cluster: Cluster, tmp_path: Path
) -> None:
    slurm = backend(slurm_cluster, tmp_path)
    slurm.launch(BackendJob(6, "doomed", {"command": ["sleep", "60"]}, (_pod("n3", [0, 1]),)))
    _poll_until(slurm, {EventKind.STARTED})
    slurm_cluster.scontrol("update", "nodename=n3", "state=down", "reason=gpuaas-test")
    try:
        events = _poll_until(slurm, {EventKind.LOST})
    finally:
        slurm_cluster.resume("n3")
    lost = next(e for e in events if e.kind is EventKind.LOST)
    assert "NODE_FAIL" in lost.reason, lost.reason
    assert slurm.running() == set()
    slurm_cluster.wait_idle(20)


def test_after_a_restart_the_same_slurm_job_is_followed_never_submitted_twice(
    slurm_cluster: Cluster, tmp_path: Path
) -> None:
    first = backend(slurm_cluster, tmp_path)
    job = BackendJob(7, "long", {"command": ["sleep", "3"]}, (_pod("n1", [4]),), attempt=2)
    first.launch(job)
    started = _poll_until(first, {EventKind.STARTED})[0]
    slurm_id = first.slurm_id(7)
    # the control plane dies; a new backend on the same state dir is told the job runs
    second = backend(slurm_cluster, tmp_path)
    second.launch(BackendJob(7, "long", job.spec, job.pods, started.at, attempt=2))
    assert second.slurm_id(7) == slurm_id
    events = _poll_until(second, {EventKind.SUCCEEDED})
    assert [e.kind for e in events] == [EventKind.SUCCEEDED]
    assert second.calls["submit"] == 0
    # died inside sbatch: a record without an id; the job is found by its Slurm name
    third = backend(slurm_cluster, tmp_path / "crashed")
    orphan = BackendJob(8, "orphan", {"command": ["sleep", "2"]}, (_pod("n1", [5]),))
    (tmp_path / "crashed" / "state" / "8-0.json").write_text('{"slurm_id": null}')
    submitted = subprocess.run(
        ["sbatch", "--parsable", "-J", "gpuaas-8-0", "-p", "gpu", f"--chdir={tmp_path}",
         "--wrap", "sleep 2"],
        env=slurm_cluster.env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    third.launch(orphan)
    _poll_until(third, {EventKind.STARTED})
    assert third.slurm_id(8) == int(submitted.stdout.strip())  # found by name, adopted
    _poll_until(third, {EventKind.SUCCEEDED})
    assert third.calls["submit"] == 0


class _Forgetful(SlurmRest):
    """slurmrestd after MinJobAge: it lists no job any more."""

    def jobs(self) -> list[dict]:
        return []


def test_jobs_slurmctld_forgot_are_read_from_the_completion_log_or_lost(
    slurm_cluster: Cluster, tmp_path: Path
) -> None:
    slurm = backend(slurm_cluster, tmp_path)
    slurm.launch(BackendJob(9, "quick", {"command": ["bash", "-c", "sleep 1; exit 4"]},
                            (_pod("n2", [3]),)))  # fmt: skip
    _poll_until(slurm, {EventKind.STARTED})
    slurm_id = slurm.slurm_id(9)
    assert slurm_id is not None
    slurm.rest = _Forgetful(socket=str(slurm_cluster.socket))
    deadline = time.monotonic() + 20
    while slurm_id not in slurm.cli.finished([slurm_id]) and time.monotonic() < deadline:
        time.sleep(0.2)
    (failed,) = slurm.poll(time.time())
    assert failed.kind is EventKind.FAILED and failed.exit_code == 4, failed
    assert f"Slurm job {slurm_id} FAILED" in failed.reason
    # a record of a Slurm job nobody knows: lost, with that said
    (tmp_path / "state" / "10-0.json").write_text('{"slurm_id": 999999}')
    slurm.launch(BackendJob(10, "ghost", {}, (_pod("n2", [3]),), started_at=time.time()))
    (lost,) = slurm.poll(time.time())
    assert lost.kind is EventKind.LOST and "no record" in lost.reason


def test_records_no_restarted_control_plane_claims_are_cancelled_in_slurm(
    slurm_cluster: Cluster, tmp_path: Path
) -> None:
    first = backend(slurm_cluster, tmp_path)
    first.launch(BackendJob(11, "stale", {"command": ["sleep", "60"]}, (_pod("n1", [6]),)))
    _poll_until(first, {EventKind.STARTED})
    slurm_id = first.slurm_id(11)
    assert slurm_id is not None
    # gpuaas finished with job 11 while down: the new control plane never launches it again
    second = backend(slurm_cluster, tmp_path, claim_grace=0)
    assert second.poll(time.time()) == []
    deadline = time.monotonic() + 10
    while squeue_state(slurm_cluster, slurm_id) != "CANCELLED" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert squeue_state(slurm_cluster, slurm_id) == "CANCELLED"
    assert not list((tmp_path / "state").glob("*.json"))


def test_a_running_job_without_record_or_slurm_job_is_lost_not_run_again(
    slurm_cluster: Cluster, tmp_path: Path
) -> None:
    slurm = backend(slurm_cluster, tmp_path)  # its state dir was lost with the old host
    slurm.launch(BackendJob(12, "gone", {"command": ["true"]}, (_pod("n1", [7]),),
                            started_at=time.time() - 30, attempt=1))  # fmt: skip
    (lost,) = _poll_until(slurm, {EventKind.LOST})
    assert "Slurm has no job gpuaas-12-1" in lost.reason
    assert slurm.calls["submit"] == 0 and slurm.running() == set()
