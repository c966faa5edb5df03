"""The reconciler driven step by step with explicit times (no sleeping): admission, the job
lifecycle, cancellation, preemption, drain, maxRunTime, restart and leadership."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from job_world import build_world, devices_given_twice, events, job_spec, jobs, node_entries
from sqlalchemy import delete

from gpuaas.backends.base import BackendEvent, EventKind
from gpuaas.backends.sim import SimBackend
from gpuaas.engine.admission.restore import PlacementLost, readmit
from gpuaas.model.job_state import JobState
from gpuaas.model.resources import NVIDIA_GPU
from gpuaas.service.fleet import (
    FLEET_VERSION,
    bump_version,
    delete_node,
    register_nodes,
    set_schedulable,
)
from gpuaas.service.jobs import cancel_job, submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, NodeRow, Tenant

T0 = 1_000_000.0


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    return build_world(db, quota_gpus=8, nodes=2)


def settings(db: Database, tmp_path: Path, speed: float = 1.0) -> Settings:
    return Settings(db_url=db.url, data_dir=tmp_path, speed=speed)


@pytest.fixture
def reconciler(db: Database, world: dict[str, int], tmp_path: Path) -> Iterator[Reconciler]:
    r = Reconciler(db, settings(db, tmp_path))
    yield r
    r.stop()


def submit(db: Database, world: dict[str, int], spec: dict[str, Any], at: float = T0) -> int:
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        job, created = submit_job(s, tenant, world["alice"], JobSpec.model_validate(spec), at)
        assert created
        return job.id


def gang(name: str, pods: int, gpus: int, **extra: Any) -> dict[str, Any]:
    spec = job_spec(name, gpus=gpus, **extra)
    spec["podSets"][0]["count"] = pods
    return spec


def state(db: Database) -> dict[int, str]:
    with db.sessions() as s:
        return {i: j.state for i, j in jobs(s).items()}


def path(db: Database, job_id: int) -> list[tuple[str | None, str]]:
    with db.sessions() as s:
        return [(a, b) for a, b, _ in events(s, job_id)]


def check_consistent(db: Database) -> None:
    """No device given twice, and every job's events end in its state along allowed steps."""
    from gpuaas.model.job_state import TRANSITIONS

    with db.sessions() as s:
        assert devices_given_twice(s) == []
        for job_id, job in jobs(s).items():
            steps = events(s, job_id)
            assert steps, f"job {job_id} has no events"
            for a, b, _ in steps:
                assert JobState(b) in TRANSITIONS[JobState(a) if a else None], (job_id, steps)
            assert [b for _, b, _ in steps][-1] == job.state
            assert all(steps[i][1] == steps[i + 1][0] for i in range(len(steps) - 1))


def test_a_job_goes_from_pending_to_succeeded(db: Database, world: dict[str, int],
                                              reconciler: Reconciler) -> None:  # fmt: skip
    job = submit(db, world, gang("train", 2, 4, duration=100))
    assert reconciler.step(T0 + 1)
    with db.sessions() as s:
        row = s.get(Job, job)
        assert row is not None and row.state == "Admitted"
        assert row.cluster_queue == "cq" and row.gpus == 8000 and row.admitted_at == T0 + 1
        assert sorted(p["node"] for p in row.placement or []) == ["node-1", "node-2"]
        assert all(len(p["assignment"]["gpus"]) == 4 for p in row.placement or [])
    reconciler.step(T0 + 2)
    assert state(db)[job] == "Running"
    reconciler.step(T0 + 101)
    assert state(db)[job] == "Running"
    reconciler.step(T0 + 102)
    assert state(db)[job] == "Succeeded"
    assert path(db, job) == [
        (None, "Pending"), ("Pending", "Admitted"), ("Admitted", "Running"),
        ("Running", "Succeeded"),
    ]  # fmt: skip
    with db.sessions() as s:
        admitted = events(s, job)[1][2]
        assert "ClusterQueue cq" in admitted and "node-1" in admitted
    # the quota is free again: the next job is admitted at once
    second = submit(db, world, gang("again", 2, 4, duration=10), at=T0 + 103)
    reconciler.step(T0 + 104)
    assert state(db)[second] == "Admitted"
    check_consistent(db)


def test_admission_counts_and_waits_are_observed(db: Database, world: dict[str, int],
                                                 reconciler: Reconciler) -> None:  # fmt: skip
    submit(db, world, gang("one", 1, 1, duration=10), at=T0)
    reconciler.step(T0 + 5)
    registry = reconciler.telemetry.registry
    labels = {"cluster_queue": "cq", "local_queue": "default", "tenant": "acme"}
    assert registry.get_sample_value("gpuaas_admissions_total", labels) == 1
    assert registry.get_sample_value(
        "gpuaas_admission_wait_seconds_sum", {"cluster_queue": "cq"}
    ) == pytest.approx(5)


def test_pending_jobs_carry_the_reason_they_wait(db: Database, world: dict[str, int],
                                                 reconciler: Reconciler) -> None:  # fmt: skip
    submit(db, world, gang("all", 2, 4, duration=100))
    waits = submit(db, world, gang("waits", 1, 1, duration=100))
    reconciler.step(T0 + 1)
    with db.sessions() as s:
        row = s.get(Job, waits)
        assert row is not None and row.state == "Pending"
        assert "insufficient unused quota for nvidia.com/gpu in flavor gpu" in row.reason
        assert row.reason_code == "UnusedQuotaShort"  # the same reason, structured
        assert row.reason_fields is not None
        fields = row.reason_fields["fields"]
        assert (fields["flavor"], fields["resource"], fields["needed"]) == ("gpu", NVIDIA_GPU, 1)


def test_cancel_pending_and_running_jobs(db: Database, world: dict[str, int],
                                         reconciler: Reconciler) -> None:  # fmt: skip
    running = submit(db, world, gang("runs", 2, 4, duration=1000))
    queued = submit(db, world, gang("queued", 2, 4, duration=1000))
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)
    assert state(db) == {running: "Running", queued: "Pending"}
    with db.session() as s:  # the queued job is cancelled while it waits
        row = s.get(Job, queued)
        assert row is not None
        assert cancel_job(s, row, T0 + 3).state == "Cancelled"
    with db.session() as s:
        row = s.get(Job, running)
        assert row is not None
        assert cancel_job(s, row, T0 + 3).cancel_requested
    reconciler.step(T0 + 4)
    assert state(db) == {running: "Cancelled", queued: "Cancelled"}
    assert reconciler.backend.running() == set()
    assert path(db, running)[-1] == ("Running", "Cancelled")
    assert path(db, queued) == [(None, "Pending"), ("Pending", "Cancelled")]
    third = submit(db, world, gang("third", 2, 4, duration=10), at=T0 + 5)
    reconciler.step(T0 + 6)
    assert state(db)[third] == "Admitted"  # the cancelled job's quota and GPUs were freed
    check_consistent(db)


def test_a_job_cancelled_while_pending_never_preempts(db: Database, world: dict[str, int],
                                                     reconciler: Reconciler) -> None:  # fmt: skip
    """The engine learns of a pending job's cancellation only at the next sweep; a step
    before it that would evict others for that job must store nothing."""
    peer = submit(db, world, gang("peer", 1, 4, duration=2, priorityClass="high"))
    low = submit(db, world, gang("low", 1, 4, duration=1000, priorityClass="low"))
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)  # both start; peer ends at T0 + 4
    big = submit(db, world, gang("big", 2, 4, duration=100, priorityClass="high"), at=T0 + 2.5)
    reconciler.step(T0 + 3.1)  # a sweep: big waits (peer has its priority, cannot be evicted)
    assert state(db) == {peer: "Running", low: "Running", big: "Pending"}
    with db.session() as s:
        row = s.get(Job, big)
        assert row is not None
        assert cancel_job(s, row, T0 + 3.5).state == "Cancelled"
    # no sweep yet (1.4 s since the last): peer's end would let big evict low
    reconciler.step(T0 + 4.5)
    assert state(db) == {peer: "Succeeded", low: "Running", big: "Cancelled"}
    assert reconciler.engine is None  # the step's decisions were dropped
    reconciler.step(T0 + 5.5)
    assert state(db) == {peer: "Succeeded", low: "Running", big: "Cancelled"}
    assert path(db, low) == [(None, "Pending"), ("Pending", "Admitted"), ("Admitted", "Running")]
    assert low in reconciler.backend.running()
    check_consistent(db)


def test_preempted_jobs_are_requeued_with_events(db: Database, world: dict[str, int],
                                                 reconciler: Reconciler) -> None:  # fmt: skip
    low = submit(db, world, gang("low", 2, 4, duration=1000, priorityClass="low"))
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)
    high = submit(db, world, gang("high", 1, 4, duration=100, priorityClass="high"), at=T0 + 3)
    reconciler.step(T0 + 4)
    assert state(db) == {low: "Pending", high: "Admitted"}
    assert path(db, low)[-3:] == [("Admitted", "Running"), ("Running", "Preempted"),
                                  ("Preempted", "Pending")]  # fmt: skip
    with db.sessions() as s:
        row = s.get(Job, low)
        assert row is not None and row.attempts == 1 and row.placement is None
        assert f"preempted (InClusterQueue) to admit job {high}" in events(s, low)[-2][2]
    assert low not in reconciler.backend.running()
    registry = reconciler.telemetry.registry
    assert (
        registry.get_sample_value(
            "gpuaas_evictions_total", {"cluster_queue": "cq", "reason": "InClusterQueue"}
        )
        == 1
    )
    # once the preemptor finishes, the requeued job runs again
    reconciler.step(T0 + 5)
    reconciler.step(T0 + 106)  # high started at T0 + 5: it ends at T0 + 105
    assert state(db) == {low: "Admitted", high: "Succeeded"}
    check_consistent(db)


def running_on_one_node(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> tuple[int, str]:
    """A job running on one node from T0 + 2: its id and its node."""
    first = submit(db, world, gang("first", 1, 2, duration=1000))
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)
    with db.sessions() as s:
        row = s.get(Job, first)
        assert row is not None and row.placement is not None
        return first, row.placement[0]["node"]


def test_draining_a_node_requeues_its_jobs_elsewhere(db: Database, world: dict[str, int],
                                                     reconciler: Reconciler) -> None:  # fmt: skip
    first, node = running_on_one_node(db, world, reconciler)
    other = "node-2" if node == "node-1" else "node-1"
    with db.session() as s:
        set_schedulable(s, node, T0 + 3, cordoned=True, draining=True)
    reconciler.step(T0 + 4)
    with db.sessions() as s:
        row = s.get(Job, first)
        assert row is not None and row.state == "Admitted" and row.attempts == 1
        assert [p["node"] for p in row.placement or []] == [other]
        steps = events(s, first)
    assert [(a, b) for a, b, _ in steps[-3:]] == [("Running", "Preempted"),
                                                  ("Preempted", "Pending"),
                                                  ("Pending", "Admitted")]  # fmt: skip
    assert f"node {node} is draining" in steps[-3][2]
    registry = reconciler.telemetry.registry
    labels = {"cluster_queue": "cq", "reason": "NodeDrained"}
    assert registry.get_sample_value("gpuaas_evictions_total", labels) == 1
    check_consistent(db)


def test_a_job_on_a_node_that_left_is_requeued_as_node_removed(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    first, node = running_on_one_node(db, world, reconciler)
    with db.session() as s:  # gone without a drain (a fleet file reloaded without it)
        s.execute(delete(NodeRow).where(NodeRow.name == node))
        bump_version(s, FLEET_VERSION)
    reconciler.step(T0 + 4)
    with db.sessions() as s:
        steps = events(s, first)
    assert [(a, b) for a, b, _ in steps[-3:-1]] == [("Running", "Preempted"),
                                                    ("Preempted", "Pending")]  # fmt: skip
    assert f"node {node} is no longer in the fleet" in steps[-3][2]
    registry = reconciler.telemetry.registry
    for cause, count in (("NodeRemoved", 1), ("NodeDrained", None), ("DeviceLost", None)):
        labels = {"cluster_queue": "cq", "reason": cause}
        assert registry.get_sample_value("gpuaas_evictions_total", labels) == count
    check_consistent(db)


class LosingBackend(SimBackend):
    """The simulated backend, except that it reports ``lose`` lost once it runs."""

    def __init__(self, lose: set[int]) -> None:
        super().__init__(1.0)
        self.lose = lose

    def poll(self, now: float) -> list[BackendEvent]:
        events = super().poll(now)
        lost = [i for i in sorted(self.lose) if i in self.running()]
        for job_id in lost:
            self.lose.discard(job_id)
            self.cancel(job_id)
        return events + [BackendEvent(i, EventKind.LOST, now, "machine gone") for i in lost]


def test_a_job_the_backend_lost_is_requeued_with_that_cause(
    db: Database, world: dict[str, int], tmp_path: Path
) -> None:
    job = submit(db, world, gang("lost", 1, 2, duration=1000))
    backend = LosingBackend(set())
    reconciler = Reconciler(db, settings(db, tmp_path), backend=backend)
    try:
        reconciler.step(T0 + 1)
        reconciler.step(T0 + 2)
        assert state(db)[job] == "Running"
        backend.lose.add(job)
        reconciler.step(T0 + 3)  # lost, given back, and admitted again in the same step
        with db.sessions() as s:
            row = s.get(Job, job)
            assert row is not None and row.attempts == 1
            steps = events(s, job)
        assert [(a, b) for a, b, _ in steps[-3:]] == [("Running", "Preempted"),
                                                      ("Preempted", "Pending"),
                                                      ("Pending", "Admitted")]  # fmt: skip
        assert steps[-3][2] == "the sim backend lost it: machine gone"
        assert steps[-2][2] == "requeued"
        labels = {"cluster_queue": "cq", "reason": "BackendLost"}
        assert reconciler.telemetry.registry.get_sample_value("gpuaas_evictions_total", labels) == 1
        check_consistent(db)
    finally:
        reconciler.stop()


def test_fleet_changes_apply_to_the_running_engine_without_a_rebuild(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    first = submit(db, world, gang("first", 1, 2, duration=1000))
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)
    engine = reconciler.engine
    assert engine is not None and engine.pool is not None
    placement = engine.admitted[str(first)].placement
    with db.session() as s:  # a node joins, a free one is cordoned, then deleted
        register_nodes(s, [{**node_entries(1)[0], "name": "node-3", "count": 1}], T0 + 3)
    reconciler.step(T0 + 4)
    assert reconciler.engine is engine  # applied in place, not rebuilt
    assert engine.admitted[str(first)].placement is placement  # untouched
    assert "node-3" in engine.pool.snapshot.names
    with db.sessions() as s:
        row = s.get(Job, first)
        assert row is not None and row.attempts == 0
        used = {p["node"] for p in row.placement or []}
    free = next(n for n in ("node-1", "node-2") if n not in used)
    with db.session() as s:
        set_schedulable(s, free, T0 + 5, cordoned=True)
    reconciler.step(T0 + 6)
    with db.session() as s:
        delete_node(s, free)
    second = submit(db, world, gang("second", 2, 2, duration=1000), at=T0 + 6)
    reconciler.step(T0 + 7)
    assert reconciler.engine is engine
    assert free not in engine.pool.snapshot.names
    with db.sessions() as s:
        row = s.get(Job, second)
        assert row is not None and row.state == "Admitted"
        assert {p["node"] for p in row.placement or []} <= {"node-3", *used}
    check_consistent(db)


def test_max_run_time_fails_a_job_that_runs_too_long(db: Database, world: dict[str, int],
                                                     reconciler: Reconciler) -> None:  # fmt: skip
    slow = submit(db, world, gang("slow", 1, 1, duration=500, maxRunTime=60))
    quick = submit(db, world, gang("quick", 1, 1, duration=30, maxRunTime=60))
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)
    reconciler.step(T0 + 40)
    assert state(db) == {slow: "Running", quick: "Succeeded"}
    reconciler.step(T0 + 62)
    assert state(db)[slow] == "Failed"
    with db.sessions() as s:
        assert "exceeded its maxRunTime of 60s" in events(s, slow)[-1][2]
        row = s.get(Job, slow)
        assert row is not None and row.reason_code == "MaxRunTimeExceeded"
        assert row.reason_fields == {"fields": {"limit": 60.0}}
    assert reconciler.backend.running() == set()
    check_consistent(db)


def test_a_restarted_reconciler_keeps_every_device_where_it_was(
    db: Database, world: dict[str, int], tmp_path: Path
) -> None:
    first = Reconciler(db, settings(db, tmp_path))
    ids = [submit(db, world, gang(f"j{i}", 1, 2, duration=100 + i)) for i in range(4)]
    first.step(T0 + 1)
    first.step(T0 + 2)
    assert first.engine is not None and first.engine.pool is not None
    used = {n: first.engine.pool.used(n) for n in ("node-1", "node-2")}
    with db.sessions() as s:
        before = {i: (j.state, j.placement, j.started_at) for i, j in jobs(s).items()}
    first.stop()  # as if the process died: the database is all that is left
    more = [submit(db, world, gang(f"late{i}", 1, 2, duration=50)) for i in range(2)]
    second = Reconciler(db, settings(db, tmp_path))
    try:
        second.step(T0 + 3)
        assert second.engine is not None and second.engine.pool is not None
        assert {n: second.engine.pool.used(n) for n in used} == used  # same devices, no more
        with db.sessions() as s:
            after = {i: (j.state, j.placement, j.started_at) for i, j in jobs(s).items()}
        assert {i: after[i] for i in ids} == before
        assert all(state(db)[i] == "Pending" for i in more)  # the fleet is full
        assert second.backend.running() == set(ids)  # resumed, from their recorded start
        second.step(T0 + 2 + 100.5)  # j0 ends: its GPUs go to the first late job at once
        assert (state(db)[ids[0]], state(db)[more[0]]) == ("Succeeded", "Admitted")
        check_consistent(db)
    finally:
        second.stop()


def test_only_one_reconciler_leads(db: Database, world: dict[str, int], tmp_path: Path) -> None:
    one = Reconciler(db, settings(db, tmp_path))
    two = Reconciler(db, settings(db, tmp_path))
    try:
        assert one.step(T0) and one.is_leader
        assert not two.step(T0) and not two.is_leader
        one.stop()
        assert two.step(T0 + 1) and two.is_leader
    finally:
        one.stop()
        two.stop()


def test_the_background_thread_reconciles(db: Database, world: dict[str, int],
                                          tmp_path: Path) -> None:  # fmt: skip
    job = submit(db, world, gang("bg", 1, 1, duration=0.01))
    r = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path, reconcile_interval=0.01))
    done = threading.Event()
    r.start()
    try:
        for _ in range(500):
            if state(db)[job] == "Succeeded":
                done.set()
                break
            done.wait(0.01)
    finally:
        r.stop()
    assert done.is_set()
    check_consistent(db)


def test_concurrent_submissions_with_one_idempotency_key_make_one_job(
    db: Database, world: dict[str, int]
) -> None:
    spec = JobSpec.model_validate(job_spec("race", idempotencyKey="same-key"))
    results: list[int] = []
    barrier = threading.Barrier(8)

    def one() -> None:
        with db.session() as s:
            tenant = s.get(Tenant, world["tenant"])
            assert tenant is not None
            barrier.wait()
            job, _ = submit_job(s, tenant, world["alice"], spec, T0)
            results.append(job.id)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and len(set(results)) == 1
    with db.sessions() as s:
        assert len(jobs(s)) == 1


def test_readmitting_elsewhere_taken_or_unknown_devices_changes_nothing(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    job = submit(db, world, gang("held", 2, 2, duration=100))
    reconciler.step(T0 + 1)
    engine = reconciler.engine
    assert engine is not None and engine.pool is not None
    before = engine.pool.snapshot.state()
    tracked = reconciler.jobs[job]
    recorded = tracked.placement or []
    flavors = engine.admitted[str(job)].flavors
    twin = replace(tracked.workload, name="twin")
    with pytest.raises(PlacementLost, match="GPU"):  # the same GPUs again: already taken
        readmit(engine, twin, flavors, T0, recorded)
    moved = [dict(p, node="gone") for p in recorded]
    with pytest.raises(PlacementLost, match="no longer in the fleet"):
        readmit(engine, twin, flavors, T0, moved)
    assert engine.pool.snapshot.state() == before
    assert "twin" not in engine.admitted
