"""Usage records written at the one transition choke point, driven through the real
reconciler with explicit times: exact device-seconds whatever happens to the job, hour and
period cuts, prices in force at each record's start, idempotent replay."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from job_world import build_world, job_spec

from gpuaas.service import usage
from gpuaas.service.jobs import submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Tenant

T0 = 1_000_000.0


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    return build_world(db, quota_gpus=8, nodes=2)


@pytest.fixture
def reconciler(db: Database, world: dict[str, int], tmp_path: Path) -> Iterator[Reconciler]:
    r = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path))
    yield r
    r.stop()


def submit(db: Database, world: dict[str, int], spec: dict[str, Any], at: float = T0) -> int:
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        job, _ = submit_job(s, tenant, world["alice"], JobSpec.model_validate(spec), at)
        return job.id


def test_a_finished_job_is_billed_for_exactly_the_time_it_held_its_gpus(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    job = submit(db, world, job_spec("train", gpus=2, duration=100))
    reconciler.step(T0 + 1)  # admitted: held from here
    reconciler.step(T0 + 2)
    reconciler.step(T0 + 102)  # ends at T0 + 2 + 100
    with db.sessions() as s:
        assert usage.open_jobs(s) == {}
        held = usage.held_seconds(s, job)
        recs = [stored.record for stored in usage.records(s, "acme")]
    assert held == Decimal(2 * 101)
    assert {r.device for r in recs} == {"gpu-0", "gpu-1", "cpu", "memory"}
    assert all(r.tenant == "acme" and r.user == "alice" and r.queue == "default" for r in recs)
