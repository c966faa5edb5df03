"""A new leader loads its pending backlog over several steps and admits from the first
(service/backlog.py): it books no device twice, keeps every admitted job where it was, ends with
every pending job of the database, and decides what a leader that loaded everything first
decides."""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from job_world import devices_given_twice
from sqlalchemy import select

from gpuaas.model.job_state import ACTIVE, JobState
from gpuaas.service import backlog, failover_bench
from gpuaas.service.jobs import cancel_job, submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, Tenant

NOW = failover_bench.T0 + 100


def seeded(url: str, tmp_path: Path, pending: int, seed: int = 1) -> tuple[Database, Settings]:
    """Three tenants' ClusterQueues in a cohort over 2 nodes of 8 GPUs, full, ``pending`` jobs
    behind (a fifth of them high priority: they may preempt), 3 running jobs ended meanwhile."""
    db = Database(url)
    settings = Settings(db_url=url, data_dir=tmp_path)
    world = failover_bench.build(db, tenants=3, nodes=2)
    failover_bench.seed(db, world, settings, pending, seed=seed)
    failover_bench.free(db, 3, seed=seed)
    return db, settings


def held(db: Database) -> dict[int, Any]:
    """Every active job: where it is (a started job is still where it was admitted)."""
    with db.sessions() as s:
        rows = s.scalars(select(Job).where(Job.state.in_([a.value for a in ACTIVE])))
        return {j.id: (j.cluster_queue, j.flavors, j.placement) for j in rows}


def pending_ids(db: Database) -> set[int]:
    with db.sessions() as s:
        return set(s.scalars(select(Job.id).where(Job.state == JobState.PENDING.value)))


def test_admits_from_the_first_step_and_ends_with_the_whole_backlog(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, settings = seeded(db_url, tmp_path, pending=60)
    monkeypatch.setattr(backlog, "CHUNK", 4)
    settings.backlog_budget = 0.0  # one chunk a step
    before = held(db)
    leader = Reconciler(db, settings)
    try:
        assert leader.step(NOW)
        assert not leader.loaded
        assert leader.engine is not None and leader.engine.loaded_until is not None
        after = held(db)
        assert len(after) > len(before)  # admitted in its first step, 56 jobs still to load
        kept = {i: where for i, where in after.items() if i in before}
        assert kept == before  # every admitted job where it was
        steps = 1
        while not leader.loaded:
            leader.step(NOW + steps)
            steps += 1
            with db.sessions() as s:
                assert devices_given_twice(s) == []
        assert steps > 5
        assert leader.engine.loaded_until is None
        engine_pending = {int(n) for names in leader.engine.pending.values() for n in names}
        assert engine_pending == pending_ids(db)
        assert {int(n) for n in leader.engine.admitted} == set(held(db))
    finally:
        leader.stop()
        db.dispose()


def test_jobs_submitted_or_cancelled_while_it_loads_are_found(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, settings = seeded(db_url, tmp_path, pending=40)
    monkeypatch.setattr(backlog, "CHUNK", 4)
    settings.backlog_budget = 0.0
    leader = Reconciler(db, settings)
    try:
        leader.step(NOW)
        loaded = sorted(i for i, t in leader.jobs.items() if t.state is JobState.PENDING)
        with db.session() as s:
            cancel_job(s, s.get_one(Job, loaded[0]), NOW)
            tenant = s.scalars(select(Tenant).order_by(Tenant.id)).first()
            assert tenant is not None
            user = s.scalar(select(Job.user_id).where(Job.tenant_id == tenant.id))
            spec = failover_bench.spec("late", 1, "high", 1.0)
            late, _ = submit_job(s, tenant, user, JobSpec.model_validate(spec), NOW)
            late_id = late.id
        steps = 1
        while not leader.loaded:
            leader.step(NOW + steps)
            steps += 1
        assert loaded[0] not in leader.jobs
        assert late_id in leader.jobs
        engine = leader.engine
        assert engine is not None
        in_engine = {int(n) for names in engine.pending.values() for n in names}
        assert in_engine == pending_ids(db)
    finally:
        leader.stop()
        db.dispose()


def _outcome(db: Database) -> dict[int, tuple[str, Any, Any, Any]]:
    """Every job's state (admitted and running alike) and where it is."""
    with db.sessions() as s:
        return {
            j.id: (
                "Active" if j.state in {a.value for a in ACTIVE} else j.state,
                j.cluster_queue, j.flavors,
                [(p["node"], p["assignment"]) for p in j.placement or []],
            )
            for j in s.scalars(select(Job))
        }  # fmt: skip


def _copy(source: Path, target: Path) -> None:
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)


def _disturb(db: Database, cancel: list[int]) -> None:
    """Cancel ``cancel`` (running: the leader stops them, freeing their GPUs) and submit a
    high-priority job of 8 GPUs (it may preempt)."""
    with db.session() as s:
        for job_id in cancel:
            cancel_job(s, s.get_one(Job, job_id), NOW + 1)
        tenant = s.scalars(select(Tenant).order_by(Tenant.id)).first()
        assert tenant is not None
        user = s.scalar(select(Job.user_id).where(Job.tenant_id == tenant.id))
        spec = JobSpec.model_validate(failover_bench.spec("urgent", 8, "high", 1.0))
        submit_job(s, tenant, user, spec, NOW + 1)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_once_loaded_it_decides_as_a_full_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """A leader that loaded its backlog 4 jobs a step, and a fresh leader that loads the same
    database whole, decide the same next step: the same jobs admitted, on the same devices,
    the same evicted (SQLite: the engine's decisions do not depend on the store)."""
    db, settings = seeded(f"sqlite:///{tmp_path / 'gpuaas.db'}", tmp_path, 80, seed)
    monkeypatch.setattr(backlog, "CHUNK", 4)
    settings.backlog_budget = 0.0
    streamed = Reconciler(db, settings)
    whole_dir = tmp_path / "whole"
    whole_dir.mkdir()
    try:
        while not streamed.loaded:
            streamed.step(NOW)
        _copy(tmp_path / "gpuaas.db", whole_dir / "gpuaas.db")
        twin = Database(f"sqlite:///{whole_dir / 'gpuaas.db'}")
        assert _outcome(twin) == _outcome(db)
        running = sorted(held(db))[:3]
        for each in (db, twin):
            _disturb(each, running)
        monkeypatch.setattr(backlog, "CHUNK", 500)
        whole = Reconciler(twin, Settings(db_url=twin.url, data_dir=whole_dir,
                                          backlog_budget=math.inf))  # fmt: skip
        try:
            for _ in range(2):
                streamed.step(NOW + 2)
                whole.step(NOW + 2)
            assert whole.loaded
            after = _outcome(db)
            assert after == _outcome(twin)
            assert all(after[i][0] == "Cancelled" for i in running)
        finally:
            whole.stop()
            twin.dispose()
    finally:
        streamed.stop()
        db.dispose()


def test_a_leader_measures_its_takeover(tmp_path: Path) -> None:
    """The benchmark's own path, small: a takeover admits and loads everything."""
    db = Database(f"sqlite:///{tmp_path / 'gpuaas.db'}")
    settings = Settings(db_url=db.url, data_dir=tmp_path)
    try:
        failover_bench.seed(db, failover_bench.build(db, 2, 1), settings, 30)
        started = time.perf_counter()
        timing = failover_bench.takeover(db, settings, freed=2)
        assert 0 < timing.first_admission <= time.perf_counter() - started
        assert timing.admitted_at_first >= 1
        assert timing.full_load >= timing.first_admission or timing.steps_to_full_load >= 1
    finally:
        db.dispose()
