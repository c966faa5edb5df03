"""One scheduling path, observed: the simulator and the service reconciler decide the same.

The same arrivals, on the same fleet, under the same governance, go once through the
simulator (the admission strategy, on a virtual clock) and once through the service (jobs
submitted to the database, the reconciler stepped every second, jobs run by the simulated
backend). What the reconciler stores (admission events with their placements, preemptions,
pending jobs' reasons) must be what the simulator's scheduler decided: who is admitted, when,
on which devices and in which order, who is evicted by whom, who waits and why.

The service starts a job at the backend's poll one step after its admission, so a job that runs
``d`` seconds in the service runs ``d + 1`` in the simulator: both then free their devices at
the same instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from job_world import build_world, job_spec
from sqlalchemy import select

from gpuaas.engine.reasons import WAITING_FOR_ADMISSION
from gpuaas.engine.scheduling import Decisions
from gpuaas.engine.scheduling.admission import AdmissionScheduler
from gpuaas.model.workload import PodRequest, PodSet, Workload
from gpuaas.service import reconciler as reconciler_module
from gpuaas.service.fleet import load_nodes
from gpuaas.service.governance import load_governance
from gpuaas.service.jobs import JobState, submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.sim.simulate import FINISHED, SimConfig, Simulator
from gpuaas.sim.traces import SimJob
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, JobEvent, Tenant

T0 = 1_000_000.0
GIB = 1 << 30

#: (arrival offset s, pods, GPUs per pod, priority class, run time s)
ARRIVALS = [
    (0, 1, 2, "low", 30),
    (0, 1, 4, "low", 50),
    (1, 1, 1, "low", 20),
    (2, 1, 3, "low", 40),  # does not fit beside the others: waits
    (3, 1, 1, "low", 10),
    (5, 2, 4, "high", 25),  # a gang of the whole fleet: preempts every low job
    (6, 1, 2, "low", 15),
    (8, 1, 4, "high", 20),  # waits for the gang, then quota
    (40, 1, 1, "low", 5),
    (41, 2, 3, "low", 5),  # a gang that needs both nodes
    (41, 1, 3, "low", 5),
]
PRIORITY = {"low": 0, "high": 1000}


def _spec(k: int, pods: int, gpus: int, priority: str, run: int) -> dict[str, Any]:
    spec = job_spec(f"job-{k}", gpus=gpus, priorityClass=priority, duration=run)
    spec["podSets"][0]["count"] = pods
    return spec


def _service_run(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, until: float
) -> tuple[list[int], list[tuple[float, str, str, object]], dict[float, dict[str, str]]]:
    """Submit ARRIVALS through the service, step the reconciler every second; returns the job
    ids, the stored admission/eviction log and every step's pending reasons."""
    monkeypatch.setattr(reconciler_module, "REASONS_EVERY", 0.0)  # store reasons every step
    world = build_world(db, quota_gpus=8, nodes=2)
    reconciler = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path, speed=1.0))
    ids: list[int] = []
    waiting: dict[float, dict[str, str]] = {}
    try:
        pending = sorted(enumerate(ARRIVALS), key=lambda a: a[1][0])
        t = T0
        while t <= until:
            while pending and T0 + pending[0][1][0] <= t:
                k, (_, pods, gpus, priority, run) = pending.pop(0)
                with db.session() as s:
                    tenant = s.get(Tenant, world["tenant"])
                    assert tenant is not None
                    spec = JobSpec.model_validate(_spec(k, pods, gpus, priority, run))
                    job, _ = submit_job(s, tenant, world["alice"], spec, t)
                    ids.append(job.id)
            assert reconciler.step(t)
            with db.sessions() as s:
                waiting[t] = {
                    str(job.id): job.reason
                    for job in s.scalars(select(Job).where(Job.state == JobState.PENDING.value))
                }
            t += 1.0
    finally:
        reconciler.stop()
    log: list[tuple[float, str, str, object]] = []
    with db.sessions() as s:
        for event in s.scalars(select(JobEvent).order_by(JobEvent.id)):
            name = str(event.job_id)
            if event.to_state == JobState.ADMITTED.value:
                log.append((event.at, "admit", name, None))
            elif event.to_state == JobState.PREEMPTED.value:
                log.append((event.at, "evict", name, event.reason))
        assert all(job.state == JobState.SUCCEEDED.value for job in s.scalars(select(Job)))
    return ids, log, waiting


def _sim_run(
    db: Database, ids: list[int]
) -> tuple[list[tuple[float, str, str, object]], dict[float, dict[str, str]], list[Decisions]]:
    """The same arrivals through the simulator, on the fleet and governance the service
    stored."""
    with db.sessions() as s:
        gov, config = load_governance(s)
        nodes = load_nodes(s)
    jobs = []
    for job_id, (at, pods, gpus, priority, run) in zip(ids, ARRIVALS, strict=True):
        pod = PodRequest(gpus=gpus, cpu_milli=2000, memory_bytes=8 * GIB)
        workload = Workload(str(job_id), (PodSet("main", pods, pod),), PRIORITY[priority])
        jobs.append(
            SimJob(str(job_id), T0 + at, run + 1, workload, "acme/default", PRIORITY[priority])
        )
    sim = Simulator(nodes, jobs, SimConfig(policy="packing"), gov=gov, admission=config)
    scheduler = sim.scheduler
    assert isinstance(scheduler, AdmissionScheduler)
    seen: list[Decisions] = []
    waiting: dict[float, dict[str, str]] = {}
    cycle = scheduler.cycle

    def observed(now: float) -> Decisions:
        decisions = cycle(now)
        seen.append(decisions)
        engine = scheduler.engine
        waiting[now] = {
            name: str(decisions.waiting.get(name, WAITING_FOR_ADMISSION.render()))
            for pending in engine.pending.values()
            for name in pending
        }
        return decisions

    scheduler.cycle = observed  # type: ignore[method-assign]
    result = sim.run()
    log: list[tuple[float, str, str, object]] = []
    for decisions in seen:
        for ev in decisions.evicted:
            if ev.held_before:
                by = f" to admit job {ev.preemptor}" if ev.preemptor else ""
                log.append((decisions.at, "evict", ev.name, f"preempted ({ev.reason}){by}"))
        for admitted in decisions.admitted:
            log.append((decisions.at, "admit", admitted.name, None))
    assert all(status == FINISHED for status in result.status)
    return log, waiting, seen


def test_simulator_and_reconciler_take_the_same_decisions(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    until = T0 + 200
    ids, service_log, service_waiting = _service_run(db, tmp_path, monkeypatch, until)
    sim_log, sim_waiting, decisions = _sim_run(db, ids)

    # who is admitted and evicted, when, by whom, in which order
    assert sim_log == service_log
    assert sum(1 for e in sim_log if e[1] == "evict") >= 4  # the gang preempted the low jobs
    assert sum(1 for e in sim_log if e[1] == "admit") >= len(ARRIVALS) - 1 + 4

    # where: every admission's devices, as the service stored them with its admission event
    admitted_where = [
        (d.at, a.name, sorted((p.placement.node_name, p.assignment.gpu_milli) for p in a.placement))
        for d in decisions
        for a in d.admitted
        if a.placement is not None
    ]
    with db.sessions() as s:
        stored = {
            (e.at, str(e.job_id)) for e in s.scalars(select(JobEvent))
            if e.to_state == JobState.ADMITTED.value
        }  # fmt: skip
    assert {(at, name) for at, name, _ in admitted_where} == stored
    final = {name: where for _, name, where in admitted_where}  # the last admission of each
    with db.sessions() as s:
        for job in s.scalars(select(Job)):
            if job.state != JobState.SUCCEEDED.value:
                continue
            got = sorted(
                (p["node"], tuple(tuple(g) for g in p["assignment"]["gpus"]))
                for p in job.placement or []
            )
            assert got == [(n, tuple(g)) for n, g in final[str(job.id)]], job.id

    # who waits and why, at every instant the simulator decided
    for at, reasons in sim_waiting.items():
        assert service_waiting[at] == reasons, at
    assert any(reasons for reasons in sim_waiting.values())
