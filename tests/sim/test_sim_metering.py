"""Billing's properties, driven through the simulator (issue 18).

Generated histories: arrivals of whole-GPU, GPU-share, MIG 1g and time-slice jobs of two
tenants (one buying from the idle pool), with priorities (so preemptions), checkpoints (so a
preempted or failed job requeues from its last checkpoint, a new attempt), node failures, and a
price book whose prices change on whole hours during the run, which starts two hours before a
month boundary. The simulator's :class:`~gpuaas.sim.metering.Meter` writes the usage records
with the service's cutting and pricing code; the properties:

1. for every window and capacity SKU, allocated cost + idle cost = capacity cost (0.01 %),
   where capacity is the fleet's devices over the window, computed apart from the records
   (and no device is ever allocated beyond the window: its idle is never negative);
2. a job's billed device-seconds equal the time its devices were held, per run and device
   (fraction included), whatever preemptions, restarts and price changes happened; and for
   whole-GPU and share jobs they equal the simulator's own GPU-second accounting;
3. every record is priced by its SKU's entry in force at its start: a MIG 1g record costs the
   MIG SKU's price, never a GPU's; a job's cost is the integral of its SKU's price over the
   time it held it (prices change on whole hours).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuaas.billing.allocation import allocate, capacity_sku, fleet_capacity
from gpuaas.billing.metering import HOUR_US, US, in_force, period_of, to_us
from gpuaas.billing.skus import parse_sku
from gpuaas.model.billing import CapacityPool, PriceEntry, Shape, Sku
from gpuaas.model.devices import Partition, PartitionMode
from gpuaas.model.node import Node
from gpuaas.model.workload import PodRequest, PodSet, Workload
from gpuaas.sim.metering import Meter
from gpuaas.sim.simulate import NodeFailure, SimConfig, SimResult, Simulator
from gpuaas.sim.synthetic import H100, FleetSpec, synthetic_fleet
from gpuaas.sim.traces import GPU_TOLERATION, SimJob
from gpuaas.supply.mig import plan_layout

#: 2026-11-30 22:00 UTC: runs cross into December (a billing period boundary)
T0 = 1_796_076_000.0
assert to_us(T0) % HOUR_US == 0
HORIZON = 8 * 3600.0
MIG_1G = capacity_sku(Sku(H100, Shape.MIG, profile="1g.10gb").id)
TS_4 = capacity_sku(Sku(H100, Shape.TIME_SLICE, profile="4").id)
WHOLE = capacity_sku(Sku(H100, Shape.WHOLE).id)
#: list price per unit-hour of each capacity SKU at the start; each change multiplies them
BASE = {WHOLE: Decimal("4.00"), MIG_1G: Decimal("0.61"), TS_4: Decimal("1.20")}
TENANTS = {"acme": CapacityPool.ON_DEMAND, "spotco": CapacityPool.SPOT}


def fleet() -> list[Node]:
    """Three H100 nodes of 2 GPUs: whole, MIG (all 1g.10gb: 14 instances), time-sliced by 4."""
    spec = FleetSpec(nodes=3, gpus_per_node=2, model_shares=((H100, 1.0),), mig_node_share=0,
                     time_sliced_node_share=0)  # fmt: skip
    nodes = synthetic_fleet(spec)
    mig = Partition(mode=PartitionMode.MIG, instances=plan_layout(H100, "all-1g.10gb"),
                    config="all-1g.10gb")  # fmt: skip
    sliced = Partition.time_sliced(4)
    out = [nodes[0]]
    for node, partition in ((nodes[1], mig), (nodes[2], sliced)):
        gpus = [dataclasses.replace(g, partition=partition) for g in node.gpus]
        out.append(dataclasses.replace(node, gpus=gpus))
    return out


def pod(kind: str, size: int) -> PodRequest:
    common = {"cpu_milli": 1000, "memory_bytes": 1 << 30, "tolerations": GPU_TOLERATION}
    if kind == "whole":
        return PodRequest(gpus=size, **common)  # type: ignore[arg-type]
    if kind == "share":
        return PodRequest(gpus=1, gpu_milli=250 * size, **common)  # type: ignore[arg-type]
    if kind == "mig":
        return PodRequest(mig=(("1g.10gb", size),), **common)  # type: ignore[arg-type]
    return PodRequest(replicas=size, **common)  # type: ignore[arg-type]


@st.composite
def histories(draw):
    n = draw(st.integers(2, 14))
    jobs = []
    for i in range(n):
        kind = draw(st.sampled_from(["whole", "share", "mig", "replica"]))
        size = draw(st.integers(1, 2 if kind != "share" else 3))
        pods = draw(st.integers(1, 2)) if kind == "whole" else 1
        name = f"j{i}"
        priority = draw(st.integers(0, 2))
        workload = Workload(name, (PodSet("main", pods, pod(kind, size)),), priority=priority)
        jobs.append(
            SimJob(
                name,
                T0 + draw(st.integers(0, 5 * 3600)),
                float(draw(st.integers(60, 3 * 3600))),
                workload,
                tenant=draw(st.sampled_from(sorted(TENANTS))),
                priority=priority,
                checkpoint=float(draw(st.sampled_from([0, 300, 900]))),
            )
        )
    failures = tuple(
        NodeFailure(
            T0 + draw(st.integers(0, 6 * 3600)),
            f"node-{draw(st.integers(0, 2)):05d}",
            float(draw(st.integers(60, 3600))),
        )
        for _ in range(draw(st.integers(0, 2)))
    )
    # price changes on whole hours: (hour, factor) per SKU
    changes = {
        sku: sorted({draw(st.integers(1, 7)) for _ in range(draw(st.integers(0, 2)))})
        for sku in BASE
    }
    factors = st.sampled_from([Decimal("0.5"), Decimal("1.25"), Decimal("2")])
    book, entry_id = [], 0
    for sku, base in BASE.items():
        for pool in CapacityPool:
            hours = [-24, *changes[sku]]
            price = base if pool is not CapacityPool.SPOT else base / 2
            for h in hours:
                if h > 0:
                    price = price * draw(factors)
                entry_id += 1
                book.append(PriceEntry(entry_id, "provider", f"{sku}@{pool.value}", price,
                                       price * Decimal("0.9"), "USD", T0 + h * 3600))  # fmt: skip
    return jobs, failures, book


def run(jobs, failures, book) -> tuple[Simulator, Meter, list[Node], SimResult]:
    nodes = fleet()
    meter = Meter({n.name: n for n in nodes}, book, TENANTS)
    config = SimConfig(failures=failures, until=T0 + HORIZON, mttr=600.0)
    sim = Simulator(nodes, jobs, config, meter=meter)
    result = sim.run()
    _label(result, meter)
    return sim, meter, nodes, result


def _label(result: SimResult, meter: Meter) -> None:
    """What the history exercised (``--hypothesis-show-statistics``; the coverage test)."""
    if result.preemptions:
        event("preemption")
    if any(result.restarts):
        event("restart")
    shapes = {parse_sku(r.sku).shape for r in meter.records}
    for shape in (Shape.MIG, Shape.TIME_SLICE):
        if shape in shapes:
            event(f"{shape.value} records")
    if any(period_of(r.start) == "2026-12" for r in meter.records):
        event("crosses a billing period")
    prices = {(r.sku, r.price) for r in meter.records if r.price}
    if len(prices) > len({sku for sku, _ in prices}):
        event("a price change")


def list_price(book, sku_id: str, at: float) -> Decimal:
    entry = in_force([e for e in book if e.sku == sku_id], at)
    assert entry is not None
    return entry.list_per_hour


SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])  # fmt: skip


@SETTINGS
@given(histories(), st.lists(st.tuples(st.integers(0, 7 * 3600), st.integers(1, 4 * 3600)),
                             min_size=1, max_size=4))  # fmt: skip
def test_allocated_plus_idle_is_capacity_for_every_window_and_sku(history, windows):
    jobs, failures, book = history
    _, meter, nodes, _ = run(jobs, failures, book)
    for offset, width in windows:
        start, end = T0 + offset, T0 + offset + width

        def per_hour(sku: str, at: float = start) -> Decimal:
            return list_price(book, sku, at)  # the on-demand SKU id

        devices = fleet_capacity(nodes, width, per_hour)
        view = allocate(devices, meter.records, start, end, share_idle=bool(offset % 2))
        assert set(view.capacity) <= set(BASE)
        for sku, capacity in view.capacity.items():
            # capacity from the fleet alone: the records added no device and no second
            expected = sum((d.seconds * d.per_hour / 3600 for d in devices if d.sku == sku),
                           Decimal(0))  # fmt: skip
            assert abs(capacity - expected) <= expected * Decimal("1e-4")
            assert view.idle[sku] >= -capacity * Decimal("1e-9")  # never over-allocated
            total = view.allocated[sku] + view.idle[sku]
            assert abs(total - capacity) <= capacity * Decimal("1e-4")
            rows = sum((r.total for r in view.rows if r.sku == sku), Decimal(0))
            spot = sum((r.cost for r in view.spot if r.sku == sku), Decimal(0))
            assert abs(rows + spot - capacity) <= capacity * Decimal("1e-4")


def _no_device_held_twice(meter: Meter) -> None:
    """A MIG instance or a time-slice replica is one job's at a time (a whole GPU may hold
    several shares at once, each at its fraction)."""
    by_device = defaultdict(list)
    for r in meter.records:
        if parse_sku(r.sku).shape in (Shape.MIG, Shape.TIME_SLICE):
            by_device[r.node, r.device].append(r)
    for (_, device), recs in by_device.items():
        recs.sort(key=lambda r: r.start)
        for a, b in itertools.pairwise(recs):
            assert a.end <= b.start, f"{device} held by two jobs at once"


@SETTINGS
@given(histories())
def test_billed_device_seconds_are_the_time_devices_were_held(history):
    jobs, failures, book = history
    _, meter, _, result = run(jobs, failures, book)
    assert not meter._open  # every run was closed (finished, evicted, or the horizon)
    billed = defaultdict(int)  # (job, attempt, pod, device) -> micro-units
    for r in meter.records:
        billed[r.job, r.attempt, r.pod, r.device] += int(r.quantity.scaleb(6))
        assert (
            r.end - r.start <= 3600 and to_us(r.start) // HOUR_US == (to_us(r.end) - 1) // HOUR_US
        )
    held = defaultdict(Fraction)
    gpu_seconds = defaultdict(Fraction)
    for run_ in meter.runs:
        length = run_.end_us - run_.start_us
        for item in run_.held:
            held[run_.job, run_.attempt, item.pod, item.device] += length * item.fraction
            if item.device not in ("cpu", "memory"):
                shape = parse_sku(item.sku).shape
                if shape is Shape.WHOLE:
                    gpu_seconds[run_.job] += length * item.fraction
    assert set(billed) == {k for k, v in held.items() if v}
    pieces = defaultdict(int)
    for r in meter.records:
        pieces[r.job, r.attempt, r.pod, r.device] += 1
    for key, micro in billed.items():
        # exact for whole units; a share rounds each hour's piece half-even once
        assert abs(micro - held[key]) <= Fraction(pieces[key], 2)
    # the simulator's own accounting of GPU-seconds (milli x run time) for whole and share jobs
    for i, job in enumerate(result.jobs):
        if job.milli_gpu:
            assert abs(float(gpu_seconds[i]) / US - result.alloc_gpu_s[i]) <= 1e-3 * (
                1 + result.alloc_gpu_s[i]
            )
        restarts = result.restarts[i]
        attempts = {r.attempt for r in meter.runs if r.job == i}
        assert attempts <= set(range(restarts + 1))
    _no_device_held_twice(meter)


@SETTINGS
@given(histories())
def test_every_record_is_priced_by_its_sku_in_force_and_mig_is_not_a_gpu(history):
    jobs, failures, book = history
    _, meter, _, _ = run(jobs, failures, book)
    by_sku = defaultdict(list)
    for e in book:
        by_sku[e.sku].append(e)
    for r in meter.records:
        entry = in_force(by_sku.get(r.sku, []), r.start)
        if entry is None:  # CPU and memory have no price in this book
            assert r.price == 0 and r.list_cost == 0
            continue
        assert r.price == entry.id
        hours = r.quantity / 3600
        assert abs(r.list_cost - hours * entry.list_per_hour) <= Decimal("1e-9")
        assert abs(r.effective_cost - hours * entry.contracted_per_hour) <= Decimal("1e-9")
        if capacity_sku(r.sku) == MIG_1G:
            gpu = in_force(by_sku[f"{WHOLE}@{parse_sku(r.sku).pool.value}"], r.start)
            assert gpu is not None and entry.list_per_hour != gpu.list_per_hour
            assert r.quantity == Decimal(to_us(r.end) - to_us(r.start)).scaleb(-6)  # a unit
    # a job's cost is the integral of its SKU's price over the time it held it (prices change
    # on whole hours, so the hour pieces never straddle a change)
    for run_ in meter.runs:
        for item in run_.held:
            entries = by_sku.get(item.sku)
            if not entries:
                continue
            expected = Decimal(0)
            a = run_.start_us
            while a < run_.end_us:
                b = min(run_.end_us, (a // HOUR_US + 1) * HOUR_US)
                price = in_force(entries, a / US).list_per_hour
                frac = Decimal(item.fraction.numerator) / Decimal(item.fraction.denominator)
                expected += Decimal(b - a) / US * frac * price / 3600
                a = b
            got = sum(
                (r.list_cost for r in meter.records
                 if (r.job, r.attempt, r.pod, r.device) == (run_.job, run_.attempt, item.pod,
                                                            item.device)),
                Decimal(0),
            )  # fmt: skip
            n = max(1, (run_.end_us - run_.start_us) // HOUR_US + 2)
            assert abs(got - expected) <= Decimal(n) * Decimal("1e-9") + expected * Decimal("1e-12")


def test_the_histories_exercise_preemption_restart_mig_shares_and_price_changes():
    """The generated histories are not vacuous: over a fixed sample each case happens."""
    seen: set[str] = set()

    @settings(max_examples=40, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(histories())
    def collect(history):
        _, meter, _, result = run(*history)
        seen.update(["preemption"] if result.preemptions else [])
        seen.update(["restart"] if any(result.restarts) else [])
        seen.update(parse_sku(r.sku).shape.value for r in meter.records)
        december = any(period_of(r.start) == "2026-12" for r in meter.records)
        seen.update(["december"] if december else [])
        seen.update(["spot"] if any("@idle-pool" in r.sku for r in meter.records) else [])
        prices = {(r.sku, r.price) for r in meter.records if r.price}
        seen.update(["repriced"] if len(prices) > len({s for s, _ in prices}) else [])

    collect()
    assert {"preemption", "restart", "mig", "timeslice", "whole", "december", "spot",
            "repriced"} <= seen, seen  # fmt: skip
