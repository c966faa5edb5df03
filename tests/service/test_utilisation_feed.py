"""The reconciler feeds the utilisation windows each cycle: the simulated fleet's samples,
who holds which device (from the recorded placements), and the staleness rule when the
samples stop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from job_world import build_world, job_spec

from gpuaas.service.jobs import submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.service.utilisation import Utilisation
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, Tenant

T0 = 1_000_000.0


class Clock:
    now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    return build_world(db, quota_gpus=8, nodes=2)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def reconciler(
    db: Database, world: dict[str, int], tmp_path: Path, clock: Clock
) -> Iterator[Reconciler]:
    settings = Settings(db_url=db.url, data_dir=tmp_path, telemetry_interval=0)
    # a 10 s window: the samples taken while the job was admitted but not yet started are out
    r = Reconciler(db, settings, utilisation=Utilisation(window=10, stale_after=60, clock=clock))
    yield r
    r.stop()


def submit(db: Database, world: dict[str, int], spec: dict[str, Any]) -> int:
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        job, _ = submit_job(s, tenant, world["alice"], JobSpec.model_validate(spec), T0)
        return job.id


def step(r: Reconciler, clock: Clock, at: float) -> None:
    clock.now = at
    r.step(at)


def test_a_running_job_reads_its_profile_and_the_idle_devices_zero(
    db: Database, world: dict[str, int], reconciler: Reconciler, clock: Clock
) -> None:
    job = submit(db, world, job_spec("busy", gpus=2, duration=1000, utilization={"gpu": 60}))
    for t in range(1, 30, 2):
        step(reconciler, clock, T0 + t)
    u = reconciler.utilisation
    with db.sessions() as s:
        row = s.get(Job, job)
        assert row is not None and row.state == "Running"
        (pod,) = row.placement or []
        given = [name for name, _ in pod["given"]]
        node = pod["node"]
    summary = u.job(job)
    assert summary is not None and summary.known
    assert summary.mean == pytest.approx(0.6, abs=0.03)
    holding = u.holding(job)
    assert holding is not None and {d for _, d in holding.devices} == set(given)
    assert holding.tenant == "acme"
    for device in given:
        one = u.device(node, device)
        assert one is not None and one.mean == pytest.approx(0.6, abs=0.03)
    # the node's other two GPUs are idle: the node reads half busy
    whole = u.node(node)
    assert whole is not None and whole.mean == pytest.approx(0.3, abs=0.02)
    other = "node-2" if node == "node-1" else "node-1"
    idle = u.node(other)
    assert idle is not None and idle.known and idle.mean == 0.0 and idle.peak == 0.0


def test_when_samples_stop_the_windows_read_unknown_not_idle(
    db: Database, world: dict[str, int], reconciler: Reconciler, clock: Clock
) -> None:
    submit(db, world, job_spec("idle", gpus=1, duration=1000, utilization={"gpu": 0}))
    for t in range(1, 11, 2):
        step(reconciler, clock, T0 + t)
    before = reconciler.utilisation.node("node-1")
    assert before is not None and before.known and before.mean < 0.05
    clock.now = T0 + 200  # no reconciler step for 190 s: nothing was fed
    after = reconciler.utilisation.node("node-1")
    assert after is not None and not after.known
