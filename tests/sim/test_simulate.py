"""The simulator: queue policies, preemption with checkpoints, failures, scaling, conservation."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import check_conservation, fleet, job, starts

from gpuaas.sim.fleet_auto import auto_fleet
from gpuaas.sim.metrics import summarize
from gpuaas.sim.simulate import (
    FINISHED,
    NodeFailure,
    QueuePolicy,
    ScaleEvent,
    SimConfig,
    simulate,
)
from gpuaas.sim.traces import generate_jobs, load_itp

ITP01 = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "itp" / "cluster01.csv"


# A 4-GPU job runs; an 8-GPU job cannot start until it ends; then a short and a long small job.
HEAD_BLOCKED = [
    job("a", 0, 4, 100),
    job("big", 1, 8, 100),
    job("short", 2, 2, 10),
    job("long", 3, 2, 500),
]


def test_fifo_blocks_behind_the_head() -> None:
    r = simulate(fleet(1), HEAD_BLOCKED, SimConfig(queue_policy=QueuePolicy.FIFO))
    s = starts(r)
    assert s == {"a": 0, "big": 100, "short": 200, "long": 200}
    check_conservation(r)


def test_backfill_starts_only_what_does_not_delay_the_head() -> None:
    r = simulate(fleet(1), HEAD_BLOCKED, SimConfig(queue_policy=QueuePolicy.BACKFILL))
    s = starts(r)
    assert s["short"] == 2  # ends at 12, before the head's reservation at 100
    assert s["big"] == 100  # not delayed
    assert s["long"] == 200  # would have delayed the head
    check_conservation(r)


def test_default_best_effort_until_the_guard_then_reserves() -> None:
    r = simulate(fleet(1), HEAD_BLOCKED, SimConfig(reserve_after=3600))
    s = starts(r)
    assert s["short"] == 2 and s["long"] == 3  # best effort: nothing reserved yet
    assert s["big"] == 503  # the head waited for the long job
    r = simulate(fleet(1), HEAD_BLOCKED, SimConfig(reserve_after=0))
    assert starts(r) == starts(
        simulate(fleet(1), HEAD_BLOCKED, SimConfig(queue_policy=QueuePolicy.BACKFILL))
    )


def test_backfill_is_node_aware_for_gangs() -> None:
    # two nodes, one GPU busy on each: the 16-GPU gang needs both nodes whole; a 1-GPU job
    # that would outlive the reservation must not take a GPU of those nodes
    jobs = [
        job("x", 0, 1, 100),
        job("y", 0, 1, 200),
        job("gang", 1, 16, 50),
        job("late", 2, 1, 1000),
    ]
    r = simulate(fleet(2), jobs, SimConfig(queue_policy=QueuePolicy.BACKFILL))
    s = starts(r)
    assert s["gang"] == 200 and s["late"] == 250
    check_conservation(r)


def test_preemption_restarts_from_the_last_checkpoint() -> None:
    jobs = [
        job("low", 0, 8, 1000, checkpoint=100.0),
        job("high", 250, 8, 50, priority=10),
    ]
    r = simulate(fleet(1), jobs, SimConfig())
    i = {j.name: k for k, j in enumerate(r.jobs)}
    assert r.preemptions == 1
    assert r.first_start[i["high"]] == 250
    assert r.restarts[i["low"]] == 1
    assert r.lost_gpu_s[i["low"]] == pytest.approx(8 * 50)  # ran 250 s, checkpoint at 200
    assert r.finish[i["low"]] == pytest.approx(300 + 800)
    check_conservation(r)
    # without a checkpoint it starts over
    jobs[0] = job("low", 0, 8, 1000)
    r = simulate(fleet(1), jobs, SimConfig())
    assert r.lost_gpu_s[i["low"]] == pytest.approx(8 * 250)
    assert r.finish[i["low"]] == pytest.approx(300 + 1000)
    check_conservation(r)
    # FIFO does not preempt
    r = simulate(fleet(1), jobs, SimConfig(queue_policy=QueuePolicy.FIFO))
    assert r.preemptions == 0 and r.first_start[i["high"]] == 1000


def test_node_failure_evicts_requeues_and_repairs() -> None:
    nodes = fleet(1)
    jobs = [job("a", 0, 8, 100), job("b", 10, 1, 10)]
    cfg = SimConfig(failures=(NodeFailure(50, nodes[0].name, 30),))
    r = simulate(nodes, jobs, cfg)
    i = {j.name: k for k, j in enumerate(r.jobs)}
    assert r.node_failures == 1
    assert r.restarts[i["a"]] == 1
    assert r.lost_gpu_s[i["a"]] == pytest.approx(8 * 50)
    # a keeps its place in the queue (arrived first) and restarts from zero at the repair
    assert r.finish[i["a"]] == pytest.approx(80 + 100)
    assert r.first_start[i["b"]] == 180
    # capacity dropped to zero while the node was down
    down = [c for t, c in zip(r.series_t, r.series_cap, strict=True) if 50 <= t < 80]
    assert down and all(c == 0 for c in down)
    check_conservation(r)


def test_scale_up_and_down_are_events() -> None:
    jobs = [job("a", 0, 8, 100), job("b", 1, 8, 100), job("c", 500, 8, 100)]
    cfg = SimConfig(scale=(ScaleEvent(20, +1), ScaleEvent(550, -1)))
    r = simulate(fleet(1), jobs, cfg)
    s = starts(r)
    assert s["b"] == 20  # the new node
    i = {j.name: k for k, j in enumerate(r.jobs)}
    # at 550 one of the two nodes goes; c was running on one of them
    assert r.series_cap[-1] == 8
    assert max(r.series_cap) == 16
    assert r.finish[i["c"]] >= 600
    check_conservation(r)


def test_a_job_larger_than_the_fleet_is_pending_with_a_reason() -> None:
    r = simulate(fleet(1), [job("huge", 0, 16, 10), job("ok", 1, 1, 10)], SimConfig())
    s = summarize(r)
    assert s["jobs"] == {"total": 2, "finished": 1, "pending": 1, "running": 0}
    assert "never has more than 8" in r.reasons[0]
    check_conservation(r)


def test_horizon_leaves_running_jobs_accounted() -> None:
    r = simulate(fleet(1), [job("a", 0, 8, 1000), job("b", 5, 8, 10)], SimConfig(until=100))
    s = summarize(r)
    assert s["jobs"]["running"] == 1 and s["jobs"]["pending"] == 1
    assert r.alloc_gpu_s[0] == pytest.approx(800)
    check_conservation(r)


def test_generated_multi_tenant_run_is_reproducible_and_conserves() -> None:
    doc = {
        "seed": 5,
        "horizon": "12h",
        "tenants": [
            {"name": "a", "rate_per_hour": 6, "gpus": {"choices": [1, 4, 8]}, "weight": 2},
            {"name": "b", "rate_per_hour": 6, "gpus": {"choices": [2, 16]}, "checkpoint": "20m"},
            {"name": "urgent", "rate_per_hour": 1, "gpus": 8, "priority": 10, "duration": "20m"},
        ],
    }
    jobs = generate_jobs(doc)
    nodes = auto_fleet(jobs, 0.9)
    cfg = SimConfig(tenant_weights={"a": 2.0}, mtbf=2 * 86400.0, mttr=1800.0, seed=3)
    r1 = simulate(nodes, jobs, cfg)
    r2 = simulate(nodes, jobs, cfg)
    assert r1.first_start == r2.first_start and r1.finish == r2.finish
    check_conservation(r1)
    s = summarize(r1)
    assert set(s["tenants"]) == {"a", "b", "urgent"}
    assert s["tenants"]["a"]["fair_share"] == pytest.approx(0.5)
    assert s["jobs"]["finished"] == len(jobs)


@pytest.mark.parametrize("queue_policy", list(QueuePolicy))
def test_conservation_on_itp_cluster01(queue_policy: QueuePolicy) -> None:
    if not ITP01.exists():
        pytest.skip(f"ITP trace not at {ITP01} (see ../shared/data/README.md)")
    jobs = load_itp(ITP01)
    r = simulate(auto_fleet(jobs, 0.85), jobs, SimConfig(queue_policy=queue_policy))
    check_conservation(r)
    s = summarize(r)
    assert s["jobs"]["total"] == 1595
    assert s["jobs"]["finished"] == 1595
    assert s["gpu_hours"]["served"] == pytest.approx(22740.13, abs=0.01)
    assert 0 < s["gpu_utilization"] <= 1
    assert all(not math.isnan(x) for x in r.first_start)


def test_conservation_on_itp_with_failures_and_restarts() -> None:
    if not ITP01.exists():
        pytest.skip(f"ITP trace not at {ITP01} (see ../shared/data/README.md)")
    jobs = load_itp(ITP01)[:500]
    cfg = SimConfig(mtbf=7 * 86400.0, mttr=4 * 3600.0, seed=1)
    r = simulate(auto_fleet(jobs, 0.85), jobs, cfg)
    assert r.node_failures > 0 and sum(r.restarts) > 0
    assert sum(r.lost_gpu_s) > 0
    check_conservation(r)


_JOB = st.tuples(
    st.integers(0, 500),  # submit
    st.sampled_from([1, 2, 4, 8, 16]),  # GPUs
    st.integers(1, 400),  # duration
    st.integers(0, 2),  # priority
    st.sampled_from([0.0, 50.0]),  # checkpoint interval
)


@settings(max_examples=30)
@given(
    specs=st.lists(_JOB, min_size=1, max_size=25),
    queue_policy=st.sampled_from(list(QueuePolicy)),
    fail_at=st.none() | st.integers(0, 600),
)
def test_every_run_conserves_and_finishes_everything(
    specs: list[tuple[int, int, int, int, float]],
    queue_policy: QueuePolicy,
    fail_at: int | None,
) -> None:
    nodes = fleet(2)
    jobs = [
        job(f"j{k}", s, g, d, priority=p, checkpoint=c) for k, (s, g, d, p, c) in enumerate(specs)
    ]
    failures = (NodeFailure(fail_at, nodes[0].name, 100),) if fail_at is not None else ()
    r = simulate(nodes, jobs, SimConfig(queue_policy=queue_policy, failures=failures))
    check_conservation(r)
    assert all(s == FINISHED for s in r.status)  # everything fits the fleet, so all finish
    for i, j in enumerate(r.jobs):
        assert r.first_start[i] >= j.submit
        assert r.finish[i] >= r.first_start[i] + j.duration - 1e-9  # restarts never gain time


def test_scaled_up_nodes_come_in_racks_of_their_own() -> None:
    from gpuaas.sim.simulate import Simulator

    base = fleet(2)
    sim = Simulator(base, [job("a", 0, 1, 10)], SimConfig(scale=(ScaleEvent(5, +3),)))
    assert len(sim.nodes) == 2 and sim.snap.size == 2  # nothing built before it arrives
    r = sim.run()
    added = sim.nodes[2:]
    assert [n.name for n in added] == ["scale-00000", "scale-00001", "scale-00002"]
    assert [sim.snap.index_of(n.name) for n in added] == [2, 3, 4]  # real nodes, in the fleet
    assert r.series_cap[-1] == 5 * 8 and r.fleet_gpus == 16
    originals = {n.topology.rack for n in base}
    for k, node in enumerate(added):
        template = base[k % 2]
        assert node.topology.zone == template.topology.zone
        assert node.topology.rack == f"{template.topology.rack}-scale{k // 2 + 1}"
        assert node.topology.rack not in originals
        assert node.labels["topology.gpuaas.io/rack"] == node.topology.rack
        assert node.labels["kubernetes.io/hostname"] == node.name
