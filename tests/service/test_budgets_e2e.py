"""Budgets on the live reconciler, with explicit times: a hard budget holds the scope's next
admission within one cycle with its reason and never touches running work (unless asked);
each soft threshold's webhook fires exactly once (a real HTTP receiver), across a restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from billing_world import budget, price, receiving
from job_world import build_world, job_spec
from sqlalchemy import select

from gpuaas.service.jobs import submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import BudgetEvent, Job, Tenant

T0 = 1_000_000.0


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    ids = build_world(db, quota_gpus=8, nodes=2)
    price(db)  # one dollar per GPU-second
    return ids


@pytest.fixture
def reconciler(db: Database, world: dict[str, int], tmp_path: Path) -> Iterator[Reconciler]:
    r = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path))
    yield r
    r.stop()


def submit(db: Database, world: dict[str, int], name: str, gpus: int, at: float) -> int:
    spec = job_spec(name, gpus=gpus, duration=100_000)
    with db.session() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        job, _ = submit_job(s, tenant, world["alice"], JobSpec.model_validate(spec), at)
        return job.id


def job(db: Database, job_id: int) -> Job:
    with db.sessions() as s:
        row = s.get(Job, job_id)
        assert row is not None
        s.expunge(row)
        return row


def test_a_hard_budget_holds_the_next_admission_within_one_cycle(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    a = submit(db, world, "a", 2, T0)
    reconciler.step(T0 + 1)  # admitted: two GPUs cost two dollars a second from here
    reconciler.step(T0 + 2)
    budget(db, world["tenant"], name="month", amount="100", hard=True)
    b = submit(db, world, "b", 1, T0 + 10)
    reconciler.step(T0 + 11)  # spent 20 of 100: admitted
    assert job(db, b).state in ("Admitted", "Running")
    c = submit(db, world, "c", 1, T0 + 40)
    reconciler.step(T0 + 41)  # spent 2 x 40 + 1 x 30 = 110: c is held in this very cycle
    held = job(db, c)
    assert held.state == "Pending"
    assert held.reason_code == "BudgetExhausted"
    fields = (held.reason_fields or {})["fields"]
    assert fields["budget"] == "month" and fields["scope"] == "tenant acme"
    assert fields["amount"] == "100" and fields["currency"] == "USD"
    assert fields["period"] == "1970-01" and float(fields["spent"]) >= 100
    assert "held by budget month" in held.reason
    # running work is never killed by a budget
    reconciler.step(T0 + 60)
    assert job(db, a).state == "Running" and job(db, b).state == "Running"
    assert job(db, c).state == "Pending"
    with db.sessions() as s:
        holds = s.scalars(select(BudgetEvent.kind).where(BudgetEvent.kind == "hold")).all()
    assert holds == ["hold"]  # recorded once
    # a larger budget lets it in at the next cycle, in its place
    budget(db, world["tenant"], update=True, name="month", amount="100000", hard=True)
    reconciler.step(T0 + 61)
    assert job(db, c).state == "Admitted", job(db, c).reason


def test_a_queue_budget_holds_only_its_queue_and_a_soft_one_holds_nothing(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    budget(db, world["tenant"], name="soft", amount="1", thresholds=[100])
    budget(db, world["tenant"], name="other", scope_kind="user", scope="bob", amount="0",
           hard=True)  # fmt: skip
    a = submit(db, world, "a", 1, T0)  # alice's: bob's budget does not hold it
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 50)
    b = submit(db, world, "b", 1, T0 + 50)
    reconciler.step(T0 + 51)
    assert job(db, a).state == "Running" and job(db, b).state == "Admitted"


def test_stop_running_requeues_the_scope_s_running_work_and_holds_it(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    a = submit(db, world, "a", 2, T0)
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)
    budget(db, world["tenant"], name="strict", amount="10", hard=True, stop_running=True)
    reconciler.step(T0 + 20)  # spent 38 of 10: asked to stop running work too
    stopped = job(db, a)
    assert stopped.state == "Pending" and stopped.reason_code == "BudgetExhausted"
    assert stopped.attempts == 1
    reconciler.step(T0 + 21)
    assert job(db, a).state == "Pending"


def test_a_user_rate_cap_holds_that_user_s_new_work(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    # alice may run 2.5 GPUs' worth: 9000 dollars an hour
    budget(db, world["tenant"], name="alice-rate", scope_kind="user", scope="alice",
           max_rate_per_hour="9000")  # fmt: skip
    a = submit(db, world, "a", 2, T0)
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 5)
    b = submit(db, world, "b", 1, T0 + 5)
    reconciler.step(T0 + 8)  # 7200/h running + 3600/h > 9000/h: held
    held = job(db, b)
    assert job(db, a).state == "Running"
    assert held.state == "Pending" and held.reason_code == "BudgetRateCap"
    assert (held.reason_fields or {})["fields"]["rate"] == "7200"


def _delivered(db: Database, receiver: Any, want: int) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with db.sessions() as s:
            done = s.scalars(select(BudgetEvent).where(BudgetEvent.delivered_at.isnot(None)))
            if len(done.all()) >= want and len(receiver.bodies) >= want:
                return
        time.sleep(0.05)


def test_each_soft_threshold_fires_its_webhook_exactly_once(
    db: Database, world: dict[str, int], reconciler: Reconciler, tmp_path: Path
) -> None:
    with receiving(fail_first=1) as receiver:  # the first POST is refused: retried
        budget(db, world["tenant"], name="alerts", amount="100", thresholds="50,80,100",
               webhook=receiver.url)  # fmt: skip
        submit(db, world, "a", 2, T0)
        reconciler.step(T0 + 1)
        for at in (T0 + 10, T0 + 30, T0 + 31, T0 + 45, T0 + 46, T0 + 60, T0 + 70, T0 + 90):
            reconciler.step(at)
        # a restart (a new leader) sees what fired and fires nothing again
        reconciler.stop()
        again = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path))
        try:
            for at in (T0 + 100, T0 + 130, T0 + 200):
                again.step(at)
            _delivered(db, receiver, 3)
            time.sleep(0.3)  # nothing more arrives
        finally:
            again.stop()
        thresholds = sorted(body["threshold"] for body in receiver.bodies)
        assert thresholds == [50, 80, 100]
        assert [b["threshold"] for b in receiver.refused] == [50]
        first = next(b for b in receiver.bodies if b["threshold"] == 50)
        assert first["budget"] == "alerts" and first["tenant"] == "acme"
        assert first["scope"] == {"kind": "tenant", "name": "acme"}
        assert first["period"] == "1970-01" and first["event"] == "threshold"
    with db.sessions() as s:
        events = s.scalars(select(BudgetEvent).order_by(BudgetEvent.threshold)).all()
        assert [(e.kind, e.threshold) for e in events] == [
            ("threshold", 50), ("threshold", 80), ("threshold", 100)
        ]  # fmt: skip
        assert all(e.delivered_at is not None for e in events)
        assert [e.attempts for e in events] == [2, 1, 1]
