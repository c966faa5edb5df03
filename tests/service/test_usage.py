"""Usage records written at the one transition choke point, driven through the real
reconciler with explicit times (no sleeping): exact device-seconds whatever happens to the
job (preemption, drains, restarts, price changes), hour and period cuts, the hourly step, the
price in force at each record's start, MIG and time-slice SKUs, the idle pool, idempotent
replay."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from job_world import build_world, job_spec, kueue_objects
from sqlalchemy import delete, func, insert, select, update
from usage_checks import check_records

from gpuaas.billing.metering import nano
from gpuaas.model.job_state import ACTIVE, FINAL
from gpuaas.model.telemetry import UtilSummary
from gpuaas.service import usage
from gpuaas.service.fleet import delete_node, register_nodes, set_schedulable
from gpuaas.service.governance import put_objects
from gpuaas.service.jobs import cancel_job, submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import (
    ClusterRow,
    Job,
    PriceEntryRow,
    Tenant,
    UsageOpen,
    UsageRow,
)

#: 2026-11-30T22:00Z: two hours before a billing period ends
T0 = datetime(2026, 11, 30, 22, tzinfo=UTC).timestamp()
H100 = "H100-80GB/whole@on-demand"
ACTIVE_STATES = {s.value for s in ACTIVE}


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


def add_price(db: Database, name: str, sku: str, per_hour: str, at: float,
              contracted: str | None = None) -> int:  # fmt: skip
    with db.session() as s:
        row = PriceEntryRow(
            book="provider", name=name, sku=sku, list_per_hour=nano(Decimal(per_hour)),
            contracted_per_hour=nano(Decimal(contracted or per_hour)), currency="USD",
            valid_from=at, valid_until=None, description="", created_at=at, updated_at=at,
        )  # fmt: skip
        s.add(row)
        s.flush()
        return row.id


def near(got: Decimal, exact: Decimal, records: int) -> bool:
    """Each record's cost is rounded once, to the nano-unit."""
    return abs(got - exact) <= Decimal("0.5e-9") * records


def test_a_finished_job_is_billed_for_exactly_the_time_it_held_its_gpus(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    price = add_price(db, "h100", H100, "2.49", T0 - 3600, contracted="2.00")
    job = submit(db, world, job_spec("train", gpus=2, duration=100))
    reconciler.step(T0 + 1)  # admitted: held from here
    reconciler.step(T0 + 2)
    reconciler.step(T0 + 102)  # ends at T0 + 2 + 100
    with db.sessions() as s:
        assert usage.open_jobs(s) == {}
        assert usage.held_seconds(s, job) == Decimal(2 * 101)
        recs = [stored.record for stored in usage.records(s, "acme")]
        (total,) = usage.totals(s, tenant="acme", by=("sku",), sku=H100)
    assert {r.device for r in recs} == {"gpu-0", "gpu-1", "cpu", "memory"}
    assert all(r.tenant == "acme" and r.user == "alice" and r.queue == "default" for r in recs)
    assert all(r.attempt == 0 and r.pod == "main-0" and r.node for r in recs)
    gpu = [r for r in recs if r.device.startswith("gpu-")]
    assert {r.price for r in gpu} == {price}
    assert total.quantity == 202
    assert near(total.list_cost, Decimal("2.49") * 202 / 3600, total.records)
    assert near(total.effective_cost, Decimal("2.00") * 202 / 3600, total.records)
    check_records(db, {job: 2})


def test_a_long_job_is_cut_at_hours_and_at_the_period_and_recorded_hourly_while_it_runs(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    job = submit(db, world, job_spec("long", gpus=1, duration=4 * 3600), at=T0 + 1800)
    reconciler.step(T0 + 1800)  # admitted at 22:30
    reconciler.step(T0 + 1801)
    reconciler.step(T0 + 3 * 3600 + 600)  # 01:10 on December 1st
    with db.sessions() as s:
        # the step wrote up to the last whole hour at least LAG before now: 01:00
        assert usage.open_jobs(s) == {job: T0 + 3 * 3600}
        periods = {t.group["period"]: t.quantity for t in usage.totals(s, by=("period",),
                   sku=H100)}  # fmt: skip
    assert periods == {"2026-11": Decimal(5400), "2026-12": Decimal(3600)}
    reconciler.step(T0 + 3 * 3600 + 700)  # the step ran a minute ago or less: nothing new
    reconciler.step(T0 + 1801 + 4 * 3600)  # ends
    with db.sessions() as s:
        assert usage.open_jobs(s) == {}
        assert usage.held_seconds(s, job) == Decimal(4 * 3600 + 1)
    check_records(db, {job: 1})


def test_preemption_and_a_drain_bill_each_run_for_its_own_time(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    add_price(db, "h100", H100, "3", T0 - 1)
    low = submit(db, world, job_spec("low", gpus=4, duration=10_000, priorityClass="low"))
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)
    add_price(db, "h100-cheaper", H100, "1", T0 + 50)  # a price change mid-run
    high_spec = job_spec("high", gpus=4, duration=100, priorityClass="high")
    high_spec["podSets"][0]["count"] = 2
    high = submit(db, world, high_spec, at=T0 + 60)
    reconciler.step(T0 + 61)  # low preempted, high admitted
    reconciler.step(T0 + 62)
    reconciler.step(T0 + 163)  # high ends; low admitted again (attempt 1)
    reconciler.step(T0 + 164)
    with db.sessions() as s:
        row = s.get(Job, low)
        assert row is not None and row.state == "Running" and row.attempts == 1
        node = row.placement[0]["node"]  # type: ignore[index]
    with db.session() as s:
        set_schedulable(s, node, T0 + 200, cordoned=True, draining=True)
    reconciler.step(T0 + 201)  # requeued, and placed on the other node (attempt 2)
    with db.session() as s:
        row = s.get(Job, low)
        assert row is not None
        cancel_job(s, row, T0 + 300)
    reconciler.step(T0 + 301)
    with db.sessions() as s:
        attempts = {t.group["job_id"]: t for t in usage.totals(s, by=("job_id",), sku=H100)}
        runs = s.execute(
            select(UsageRow.attempt, func.sum(UsageRow.quantity))
            .where(UsageRow.job_id == low, UsageRow.sku == H100)
            .group_by(UsageRow.attempt)
        ).all()
    assert dict(runs) == {0: 4 * 60 * 10**6, 1: 4 * 38 * 10**6, 2: 4 * 100 * 10**6}
    # a record is priced by the entry in force at its start: the first run's one record
    # (within one hour) started before the price change, the later runs' after it
    exact = (Decimal(3) * 4 * 60 + Decimal(1) * 4 * (38 + 100)) / 3600
    assert near(attempts[low].list_cost, exact, attempts[low].records)
    check_records(db, {low: 4, high: 8})


def test_a_restarted_reconciler_bills_the_outage_once(
    db: Database, world: dict[str, int], tmp_path: Path
) -> None:
    first = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path))
    job = submit(db, world, job_spec("j", gpus=2, duration=5000))
    first.step(T0 + 1)
    first.step(T0 + 2)
    first.step(T0 + 3600 + 400)  # the hourly step wrote up to T0 + 3600
    first.stop()
    second = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path))
    try:
        second.step(T0 + 3 * 3600)  # 2 h later; the sim job ended meanwhile at T0 + 5002
        second.step(T0 + 3 * 3600 + 1)
    finally:
        second.stop()
    with db.sessions() as s:
        assert s.get(Job, job).state == "Succeeded"  # type: ignore[union-attr]
        assert usage.held_seconds(s, job) == Decimal(2 * 5001)
    check_records(db, {job: 2})


def test_writing_the_same_interval_again_stores_nothing_new(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    job = submit(db, world, job_spec("j", gpus=1, duration=3 * 3600))
    reconciler.step(T0 + 1)
    with db.sessions() as s:
        opened = {c.name: getattr(s.get(UsageOpen, job), c.name)
                  for c in UsageOpen.__table__.columns}  # fmt: skip
    reconciler.step(T0 + 2 * 3600 + 400)
    with db.session() as s:  # a replay: the open row as it was before the step
        s.execute(delete(UsageOpen).where(UsageOpen.job_id == job))
        s.execute(insert(UsageOpen).values(**opened))
    with db.sessions() as s:
        before = s.scalar(select(func.count()).select_from(UsageRow))
    with db.session() as s:
        assert usage.step(s, T0 + 2 * 3600 + 400) == before  # the same pieces, again
    with db.sessions() as s:
        assert s.scalar(select(func.count()).select_from(UsageRow)) == before
    reconciler.step(T0 + 6 * 3600)
    reconciler.step(T0 + 6 * 3600 + 1)
    check_records(db, {job: 1})


def test_records_are_never_rewritten_when_prices_change(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    add_price(db, "old", H100, "2", T0 - 10)
    job = submit(db, world, job_spec("j", gpus=1, duration=100))
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)
    reconciler.step(T0 + 103)
    with db.sessions() as s:
        before = [(r.key, r.list_cost, r.price_id) for r in s.execute(select(UsageRow.__table__))]
    add_price(db, "new", H100, "9", T0 + 200)
    reconciler.step(T0 + 3600 * 5)
    with db.sessions() as s:
        after = [(r.key, r.list_cost, r.price_id) for r in s.execute(select(UsageRow.__table__))]
    assert after == before and job


# --- MIG, time-slicing and the idle pool -------------------------------------------------

SHARED_FLEET = [
    {"name": "mig-1", "cpu": "64", "memory": "512Gi",
     "gpus": {"model": "A100-80GB", "count": 1, "partitioning": "all-1g.10gb"}},
    {"name": "ts-1", "cpu": "64", "memory": "512Gi",
     "gpus": {"model": "L40S", "count": 1, "partitioning": {"timeSlicing": {"replicas": 4}}}},
]  # fmt: skip


def shared_world(db: Database, node: dict[str, Any]) -> dict[str, int]:
    """acme with a queue covering MIG 1g.10gb instances and GPUs, on ``node`` alone (a flavor
    whose GPUs are all time-sliced counts ``nvidia.com/gpu`` as replicas)."""
    ids = build_world(db, quota_gpus=8, nodes=1)
    objects = kueue_objects(8)
    cq = objects[1]["spec"]["resourceGroups"][0]
    cq["coveredResources"].append("nvidia.com/mig-1g.10gb")
    cq["flavors"][0]["resources"].append({"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 7})
    with db.session() as s:
        put_objects(s, [(objects[1], None, None)], 1.0)
        delete_node(s, "node-1")
        register_nodes(s, [node], 1.0)
    return ids


def run_for_an_hour(db: Database, tmp_path: Path) -> None:
    r = Reconciler(db, Settings(db_url=db.url, data_dir=tmp_path))
    try:
        r.step(T0)
        r.step(T0 + 1)
        r.step(T0 + 3601)
    finally:
        r.stop()


def by_job_and_sku(db: Database) -> tuple[dict[tuple[int, str], usage.Total], dict[int, str]]:
    with db.sessions() as s:
        got = {(t.group["job_id"], t.group["sku"]): t for t in
               usage.totals(s, by=("job_id", "sku"))}  # fmt: skip
        devices = {r.job_id: r.device for r in s.execute(select(UsageRow.__table__))
                   if r.device not in ("cpu", "memory")}  # fmt: skip
    return got, devices


def test_a_mig_slice_costs_what_its_sku_says_not_a_gpu(db: Database, tmp_path: Path) -> None:
    world = shared_world(db, SHARED_FLEET[0])
    add_price(db, "a100", "A100-80GB/whole@on-demand", "4.00", T0 - 10)
    add_price(db, "a100-1g", "A100-80GB/mig/1g.10gb@on-demand", "0.50", T0 - 10)
    mig = job_spec("mig", duration=3600)
    mig["podSets"][0]["resources"] = {"cpu": "1", "nvidia.com/mig-1g.10gb": 1}
    job = submit(db, world, mig)
    run_for_an_hour(db, tmp_path)
    got, devices = by_job_and_sku(db)
    one_g = got[(job, "A100-80GB/mig/1g.10gb@on-demand")]
    assert one_g.quantity == 3601
    assert near(one_g.list_cost, Decimal("0.50") * 3601 / 3600, one_g.records)
    assert (job, "A100-80GB/whole@on-demand") not in got  # never billed as a GPU
    assert devices[job].startswith("gpu-0-mig-1g10gb-")
    check_records(db, {})


def test_a_time_sliced_replica_is_a_quarter_of_a_gpu(db: Database, tmp_path: Path) -> None:
    world = shared_world(db, SHARED_FLEET[1])
    add_price(db, "l40s-4", "L40S/timeslice/4@on-demand", "2.00", T0 - 10)
    share = job_spec("share", duration=3600)
    share["podSets"][0]["resources"] = {"cpu": "1", "nvidia.com/gpu": 1}
    job = submit(db, world, share)
    run_for_an_hour(db, tmp_path)
    got, devices = by_job_and_sku(db)
    quarter = got[(job, "L40S/timeslice/4@on-demand")]
    assert quarter.quantity == Decimal(3601) / 4
    assert near(quarter.list_cost, Decimal("2.00") * Decimal(3601) / 4 / 3600, quarter.records)
    assert devices[job].startswith("gpu-0-ts-")


def test_jobs_of_the_idle_pool_cluster_are_spot_and_its_usage_is_counted(
    db: Database, world: dict[str, int], reconciler: Reconciler
) -> None:
    with db.session() as s:
        s.add(ClusterRow(tenant_id=world["tenant"], name="spot", kind="baremetal",
                         spec={"pools": [], "idlePool": {"marketplace": "nvcf"}},
                         state="Ready", created_at=0.0, updated_at=0.0))  # fmt: skip
    job = submit(db, world, job_spec("spot-job", gpus=2, duration=600))
    with db.session() as s:  # as if submitted into the pool cluster
        spec = dict(s.get(Job, job).spec)  # type: ignore[union-attr]
        s.execute(update(Job).where(Job.id == job).values(spec={**spec, "cluster": "spot"}))
    reconciler.step(T0 + 1)
    reconciler.step(T0 + 2)
    reconciler.step(T0 + 603)
    with db.sessions() as s:
        pool = usage.pool_usage(s, "2026-11")
        skus = {r.sku for r in s.execute(select(UsageRow.__table__))}
    assert "H100-80GB/whole@idle-pool" in skus and "cpu/cpu@idle-pool" in skus
    assert [(u.gpu_model, u.shape, u.gpu_seconds) for u in pool] == [
        ("H100-80GB", "whole", Decimal(2 * 601))
    ]


# --- the property: any schedule, exact device-seconds ----------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from([1, 2, 3, 4]),
                  st.integers(min_value=30, max_value=3 * 3600),
                  st.sampled_from(["low", "high"])),
        st.tuples(st.just("advance"), st.floats(min_value=0.3, max_value=5000)),
        st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=20)),
        st.tuples(st.just("restart")),
        st.tuples(st.just("drain"), st.sampled_from(["node-1", "node-2"])),
        st.tuples(st.just("undrain"), st.sampled_from(["node-1", "node-2"])),
        st.tuples(st.just("price"), st.integers(min_value=0, max_value=500)),
    ),
    min_size=3,
    max_size=25,
)  # fmt: skip


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(schedule=ops)
def test_billed_device_seconds_equal_the_time_devices_were_held_whatever_happened(
    schedule: list[tuple[Any, ...]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"sqlite:///{Path(tmp) / 'gpuaas.db'}")
        try:
            _run_schedule(db, Path(tmp), schedule)
        finally:
            db.dispose()


def _run_schedule(db: Database, tmp: Path, schedule: list[tuple[Any, ...]]) -> None:
    world = build_world(db, quota_gpus=8, nodes=2)
    now = T0
    r = Reconciler(db, Settings(db_url=db.url, data_dir=tmp))
    gpus_of: dict[int, int] = {}
    prices = 0
    try:
        for op in schedule:
            match op:
                case ("submit", gpus, duration, priority):
                    spec = job_spec(f"j{len(gpus_of)}", gpus=gpus, duration=duration,
                                    priorityClass=priority)  # fmt: skip
                    gpus_of[submit(db, world, spec, at=now)] = gpus
                case ("advance", dt):
                    now += dt
                    r.step(now)
                case ("cancel", index) if gpus_of:
                    job_id = sorted(gpus_of)[index % len(gpus_of)]
                    with db.session() as s:
                        row = s.get(Job, job_id)
                        if row is not None and row.state not in FINAL:
                            cancel_job(s, row, now)
                case ("restart",):
                    r.stop()
                    r = Reconciler(db, Settings(db_url=db.url, data_dir=tmp))
                case ("drain" | "undrain", node):
                    with db.session() as s:
                        drain = op[0] == "drain"
                        set_schedulable(s, node, now, cordoned=drain, draining=drain)
                case ("price", cents):
                    prices += 1
                    add_price(db, f"p{prices}", H100, f"{cents / 100}", now)
                case _:
                    pass
        for node in ("node-1", "node-2"):
            with db.session() as s:
                set_schedulable(s, node, now, cordoned=False)
        for _ in range(200):  # run every job to its end
            now += 3600
            r.step(now)
            with db.sessions() as s:
                left = s.scalar(select(func.count()).where(Job.state.not_in(list(FINAL))))
            if not left:
                break
        assert not left
    finally:
        r.stop()
    with db.sessions() as s:
        assert usage.open_jobs(s) == {}
    check_records(db, gpus_of)


class Telemetry:
    """A :class:`~gpuaas.model.telemetry.UtilisationReader` that knows one device."""

    def device(self, node: str, device: str) -> UtilSummary | None:
        if (node, device) == ("n1", "gpu-0"):
            return UtilSummary(mean=0.75, peak=1.0, samples=12, span=60, until=T0)
        if (node, device) == ("n1", "gpu-1"):
            return UtilSummary(mean=0.0, peak=0.0, samples=0, span=60, until=T0)  # unknown
        return None

    def node(self, node: str) -> UtilSummary | None:
        return None

    def job(self, job_id: int) -> UtilSummary | None:
        return None

    def cluster(self, key: str) -> UtilSummary | None:
        return None


def test_records_carry_measured_utilisation_where_telemetry_has_it(db: Database) -> None:
    db.upgrade()
    held = [["main-0", d, "n1", H100, 1, 1] for d in ("gpu-0", "gpu-1", "gpu-2")]
    with db.session() as s:
        s.add(UsageOpen(job_id=7, attempt=0, since=T0, tenant="acme", user="alice",
                        queue="default", cluster="", held=held))  # fmt: skip
        s.flush()
        assert usage.close(s, 7, T0 + 60, reader=Telemetry()) == 3
    with db.sessions() as s:
        got = {stored.record.device: stored.record.utilization for stored in usage.records(s, None)}
    # unknown (no samples) and absent telemetry are None, never 0: idle is not assumed
    assert got == {"gpu-0": 0.75, "gpu-1": None, "gpu-2": None}
