"""The reconciler as a process of its own (what ``gpuaas serve`` runs)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from job_world import build_world, job_spec

from gpuaas.model.job_state import JobState
from gpuaas.service.jobs import submit_job
from gpuaas.service.leader import RECONCILER_NICE, ReconcilerProcess, prepare_metrics_dir
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, Tenant


def test_the_child_leads_admits_and_stops(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gpuaas.db'}"
    db = Database(url)
    world = build_world(db, quota_gpus=8, nodes=2)
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        job, _ = submit_job(
            s, tenant, world["alice"], JobSpec.model_validate(job_spec("one", 2)), time.time()
        )
        job_id = job.id
    settings = Settings(db_url=url, data_dir=tmp_path, reconcile_interval=0.1, speed=1.0)
    child = ReconcilerProcess(settings)
    child.start()
    try:
        deadline = time.monotonic() + 90
        state = JobState.PENDING.value
        # the child stores its admissions inside a step and says it leads when the step
        # returns: on a loaded machine the test can see the first before the second
        while time.monotonic() < deadline and (
            state == JobState.PENDING.value or not child.is_leader
        ):
            time.sleep(0.1)
            with db.sessions() as s:
                state = s.get(Job, job_id).state  # type: ignore[union-attr]
        # admitted by the child (it may even have finished by the time a loaded machine looks)
        assert state in (JobState.ADMITTED, JobState.RUNNING, JobState.SUCCEEDED)
        assert child.is_leader
        # it yields the CPU to the server (RECONCILER_NICE above the server's niceness)
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        pid = child._process.pid
        assert pid is not None
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, ours + RECONCILER_NICE)
    finally:
        child.stop()
        db.dispose()
    assert not child.is_leader
    # the leader lock is free again: a new reconciler can lead at once
    second = ReconcilerProcess(settings)
    second.start()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not second.is_leader:
            time.sleep(0.1)
        assert second.is_leader
    finally:
        second.stop()


def test_metrics_dir_is_fresh_and_exported(tmp_path: Path, monkeypatch) -> None:
    # recorded by monkeypatch, so the variable prepare_metrics_dir sets is undone afterwards
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "unset-after-the-test")
    stale = tmp_path / "metrics-999999999"
    stale.mkdir()
    path = prepare_metrics_dir(tmp_path)
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(path)
    assert path.is_dir() and not any(path.iterdir())
    assert not stale.exists()  # its server is gone
