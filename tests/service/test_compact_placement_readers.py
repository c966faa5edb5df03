"""A gang of identical device-less pods is stored as a few entries with a count, and every
reader of a job's placement still sees each pod: the job's API view, the node's allocation,
metering (a run of pods is one held row, read as one CPU item per pod), the backend's job,
and a restarted reconciler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from job_world import build_world, job_row
from sqlalchemy import select

from gpuaas.engine.admission.restore import pods_in
from gpuaas.service.fleet import placements_on
from gpuaas.service.jobs import job_view, submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.service.usage import held_of
from gpuaas.store.db import Database
from gpuaas.store.tables import Tenant, UsageOpen

T0 = 1_000_000.0
SETS, PODS = 3, 200


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    return build_world(db, quota_gpus=8, nodes=2)


def tiny_pods_job() -> dict[str, Any]:
    return {
        "name": "tiny", "queue": "default", "command": ["sleep", "1"], "duration": 1000,
        "podSets": [{"name": f"s{i}", "count": PODS, "resources": {"cpu": "1m"}}
                    for i in range(SETS)],
    }  # fmt: skip


def submit(db: Database, world: dict[str, int], spec: dict[str, Any]) -> int:
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        job, _ = submit_job(s, tenant, world["alice"], JobSpec.model_validate(spec), T0)
        return job.id


def test_every_reader_sees_each_pod_of_a_compact_placement(
    db: Database, world: dict[str, int], tmp_path: Path
) -> None:
    first = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path))
    job = submit(db, world, tiny_pods_job())
    gpu_job = submit(db, world, {**tiny_pods_job(), "name": "gpus", "podSets": [
        {"name": "main", "count": 2, "resources": {"cpu": "1", "nvidia.com/gpu": 1}}]})  # fmt: skip
    try:
        first.step(T0 + 1)
        row = job_row(db, job)
        assert row.state == "Admitted"
        stored = row.placement or []
        assert len(stored) < SETS * PODS // 10  # runs, not one entry a pod
        assert sum(pods_in(e) for e in stored) == SETS * PODS
        # the GPU job's pods hold devices: one entry each, with the devices given
        gpu_pods = job_row(db, gpu_job).placement or []
        assert len(gpu_pods) == 2 and all(p["given"] for p in gpu_pods)
        # the API's job view lists each pod, ranks in order
        view = job_view(row, "acme", "alice")
        assert [p.rank for p in view.pods] == list(range(SETS * PODS))
        assert [(p.podSet, p.index) for p in view.pods] == [
            (f"s{i}", k) for i in range(SETS) for k in range(PODS)
        ]
        # a node's allocation lists each pod placed there
        with db.sessions() as s:
            on_nodes = [pod for n in ("node-1", "node-2") for j, pod in placements_on(s, n)
                        if j.id == job]  # fmt: skip
            assert len(on_nodes) == SETS * PODS
            held = s.scalar(select(UsageOpen.held).where(UsageOpen.job_id == job))
        # metering: a run of identical pods is one held row with a count, which reads as
        # each pod's CPU, named by its pod
        assert len(held or []) < SETS * PODS // 10
        cpu = [h for raw in held or [] for h in held_of(raw) if h.device == "cpu"]
        assert sorted(h.pod for h in cpu) == sorted(
            f"s{i}-{k}" for i in range(SETS) for k in range(PODS)
        )
        # each pass's own CPU time is observed beside its wall time
        registry = first.telemetry.registry
        steps = registry.get_sample_value("gpuaas_reconcile_cycle_cpu_seconds_count")
        assert steps == registry.get_sample_value("gpuaas_reconcile_cycle_seconds_count") == 1
        cpu = registry.get_sample_value("gpuaas_reconcile_cycle_cpu_seconds_sum") or 0.0
        wall = registry.get_sample_value("gpuaas_reconcile_cycle_seconds_sum") or 0.0
        # two clocks read one after the other: the CPU time may pass the wall time by microseconds
        assert 0 < cpu <= wall + 0.001
        # the backend (sim: launched within the step) was given every pod
        launched = first.backend._runs[job].job.pods  # type: ignore[attr-defined]
        assert [p.rank for p in launched] == list(range(SETS * PODS))
    finally:
        first.stop()
    second = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path))
    try:
        second.step(T0 + 2)
        assert second.engine is not None and second.engine.pool is not None
        assert job_row(db, job).state in ("Admitted", "Running")
        assert job_row(db, job).placement == stored  # readmitted on exactly the same
        cpu_used = sum(second.engine.pool.used(n)["cpu"] for n in ("node-1", "node-2"))
        assert cpu_used == SETS * PODS * 1 + 2 * 1000
    finally:
        second.stop()
