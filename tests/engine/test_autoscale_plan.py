"""The cluster autoscaler's planner: pending demand bin-packed on template nodes by the one fit
rule, utilisation above target, unneeded nodes with hysteresis, cooldowns, the disruption
budget, min and the hard max, cheapest-to-drain first; properties over random clusters."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.autoscale import (
    Action,
    ClusterView,
    NodeFacts,
    Pending,
    PoolView,
    plan,
    waits_for_capacity,
)
from gpuaas.engine.reasons import Code, Reason, reason
from gpuaas.model.autoscale import AutoscaleSpec
from gpuaas.model.devices import GPU, Partition
from gpuaas.model.node import Node
from gpuaas.model.telemetry import UtilSummary
from gpuaas.model.workload import PodRequest, PodSet, Workload

GI = 2**30
NOW = 10_000.0
FULL = Reason(Code.INSUFFICIENT_GPU, {"detail": "0/2 nodes fit"})
QUOTA = Reason(Code.UNUSED_QUOTA_SHORT, ("f", "nvidia.com/gpu", 1, None, None))


def template(gpus: int = 8, model: str = "H100") -> Node:
    return Node(
        "tpl",
        64_000,
        512 * GI,
        [GPU(i, f"tpl-{i}", model, 81920, Partition.whole()) for i in range(gpus)],
    )


TPL = template()


def util(mean: float, samples: int = 10) -> UtilSummary:
    return UtilSummary(mean, mean, samples, 300.0, NOW)


def facts(
    name: str,
    allocated: float = 0.0,
    mean: float | None = 0.0,
    since: float | None = 0.0,
    cost: float = 0.0,
    ready: bool = True,
) -> NodeFacts:
    return NodeFacts(name, "p", allocated, None if mean is None else util(mean), since, cost, ready)


def job(i: int, pods: int = 1, gpus: int = 8, why: Reason = FULL, model: str = "") -> Pending:
    models = frozenset({model}) if model else frozenset()
    pod = PodRequest(cpu_milli=1000, gpus=gpus, gpu_models=models)
    return Pending(i, Workload(f"job-{i}", (PodSet("main", pods, pod),)), why, float(i))


def view(
    nodes: list[NodeFacts],
    pending: list[Pending] = (),  # type: ignore[assignment]
    spec: AutoscaleSpec | None = None,
    lo: int = 0,
    hi: int = 10,
    leaving: int = 0,
    **kw: object,
) -> ClusterView:
    pool = PoolView("p", lo, hi, TPL, tuple(nodes), leaving)
    return ClusterView("t.c", spec or AutoscaleSpec(), (pool,), tuple(pending), **kw)  # type: ignore[arg-type]


def busy(name: str) -> NodeFacts:
    return facts(name, allocated=1.0, mean=0.5, since=None)


# --- scale out ---------------------------------------------------------------------------


def test_pending_jobs_are_bin_packed_on_template_nodes() -> None:
    # three 4-GPU jobs and one 8-GPU job: 2 + 1 = 3 nodes of 8 GPUs
    pending = [job(1, gpus=4), job(2, gpus=8), job(3, gpus=4), job(4, gpus=4)]
    (d,) = plan([view([busy("n1")], pending)], NOW)
    assert d.action is Action.SCALE_OUT and d.count == 3
    assert d.reason.code is Code.SCALED_OUT_PENDING
    assert d.reason.fields["jobs"] == [1, 2, 3, 4]
    assert "adding 3 node(s) for 4 waiting job(s)" in d.reason.render()


def test_a_gang_counts_a_node_per_pod_that_needs_one() -> None:
    (d,) = plan([view([busy("n1")], [job(1, pods=3, gpus=8)])], NOW)
    assert d.count == 3


def test_only_capacity_reasons_and_workloads_a_template_fits_ask_for_nodes() -> None:
    pending = [
        job(1, why=QUOTA),  # a quota hold: no node helps
        job(2, gpus=16),  # bigger than any template node
        job(3, model="A100"),  # another GPU model
        job(4, why=Reason(Code.WAITING_FOR_ADMISSION)),
    ]
    assert plan([view([busy("n1")], pending)], NOW) == []
    combined = QUOTA.plus(FULL)  # a capacity cause among others counts
    assert waits_for_capacity(combined) and not waits_for_capacity(QUOTA)


def test_provisioning_nodes_absorb_pending_work_and_count_toward_max() -> None:
    # one node provisioning: the job that asked for it does not ask again
    assert plan([view([busy("n1"), facts("n2", ready=False)], [job(1)])], NOW) == []
    # two jobs, one provisioning node: one more
    (d,) = plan([view([busy("n1"), facts("n2", ready=False)], [job(1), job(2)])], NOW)
    assert d.count == 1
    # max 2, one ready and one provisioning: no room
    (d,) = plan([view([busy("n1"), facts("n2", ready=False)], [job(1), job(2)], hi=2)], NOW)
    assert d.count == 0 and d.reason.code is Code.SCALE_OUT_AT_MAX


def test_max_is_hard_and_leaving_nodes_count() -> None:
    pending = [job(i) for i in range(1, 6)]
    (d,) = plan([view([busy("n1")], pending, hi=3)], NOW)
    assert d.count == 2 and d.reason.fields["wanted"] == 5
    assert "held to the pool's max of 3" in d.reason.render()
    (d,) = plan([view([busy("n1")], pending, hi=3, leaving=2)], NOW)
    assert d.count == 0 and d.reason.code is Code.SCALE_OUT_AT_MAX
    assert d.reason.fields == {"pool": "p", "max": 3, "wanted": 5, "cause": "pending"}


def test_utilisation_above_target_scales_out_by_the_hpa_rule() -> None:
    nodes = [facts(f"n{i}", allocated=1.0, mean=0.95, since=None) for i in range(4)]
    (d,) = plan([view(nodes)], NOW)
    # ceil(4 * 95 / 70) = 6: two more
    assert d.count == 2 and d.reason.code is Code.SCALED_OUT_UTILIZATION
    assert d.reason.fields["utilization"] == 95.0 and d.reason.fields["target"] == 70.0


def test_unknown_telemetry_is_never_judged_and_cooldowns_hold_utilisation_scale_out() -> None:
    unknown = [facts(f"n{i}", allocated=1.0, mean=None, since=None) for i in range(4)]
    assert plan([view(unknown)], NOW) == []
    no_samples = [NodeFacts("n1", "p", 1.0, UtilSummary(0.99, 1, 0, 0, NOW), None)]
    assert plan([view(no_samples)], NOW) == []
    hot = [facts(f"n{i}", allocated=1.0, mean=0.95, since=None) for i in range(4)]
    assert plan([view(hot, last_scale_out=NOW - 10)], NOW) == []
    assert plan([view(hot, last_scale_in=NOW - 10)], NOW) == []
    assert len(plan([view(hot, last_scale_out=NOW - 301)], NOW)) == 1
    # a node still provisioning: its capacity is not in yet
    assert plan([view([*hot, facts("n9", ready=False)])], NOW) == []


def test_a_pool_below_its_min_grows_to_it() -> None:
    (d,) = plan([view([busy("n1")], lo=3)], NOW)
    assert d.count == 2 and d.reason.code is Code.SCALED_OUT_TO_MIN


# --- scale in ----------------------------------------------------------------------------


def test_unneeded_nodes_go_after_the_unneeded_time_cheapest_first_within_the_budget() -> None:
    nodes = [
        busy("n1"),
        facts("n2", since=NOW - 700, cost=5.0, allocated=0.1, mean=0.05),
        facts("n3", since=NOW - 700),
        facts("n4", since=NOW - 100),  # not yet unneeded long enough
    ]
    (d,) = plan([view(nodes)], NOW)
    assert d.action is Action.SCALE_IN and d.nodes == ("n3",)
    assert d.reason.code is Code.SCALED_IN_UNNEEDED
    assert "releasing node n3" in d.reason.render()
    (d,) = plan([view(nodes, spec=AutoscaleSpec(disruption_budget=3))], NOW)
    assert d.nodes == ("n3", "n2")
    # nodes draining already use the budget
    assert plan([view(nodes, spec=AutoscaleSpec(disruption_budget=3), draining=3)], NOW) == []


def test_scale_in_needs_both_allocation_and_utilisation_low_and_known() -> None:
    spec = AutoscaleSpec(disruption_budget=5)
    nodes = [
        busy("n1"),
        facts("n2", since=0.0, mean=None),  # no telemetry: not idle
        facts("n3", since=0.0, mean=0.5),  # allocated nothing, but busy (measured)
        facts("n4", since=0.0, allocated=0.5),  # allocated
        facts("n5", since=None),  # needed
        facts("n6", since=0.0, mean=0.25),  # between threshold (20) and target (70): kept
    ]
    assert plan([view(nodes, spec=spec)], NOW) == []


def test_scale_in_respects_min_cooldown_and_pending_demand() -> None:
    idle = [facts(f"n{i}", since=0.0) for i in range(4)]
    spec = AutoscaleSpec(disruption_budget=10)
    (d,) = plan([view(idle, spec=spec, lo=3)], NOW)
    assert len(d.nodes) == 1
    assert plan([view(idle, spec=spec, last_scale_out=NOW - 60)], NOW) == []
    # pending work the template fits: no scale-in (the idle nodes will take it)
    assert all(d.action is Action.SCALE_OUT for d in plan([view(idle, [job(1)], spec=spec)], NOW))


def test_scale_in_keeps_the_remaining_nodes_under_target() -> None:
    # 3 nodes at 0.6 allocation and one empty idle: removing the idle one leaves 1.8 over 3
    # (60 %, under 70): allowed; with 0.65 each two leaving would not be
    spec = AutoscaleSpec(disruption_budget=5, target_percent=70)
    nodes = [facts(f"b{i}", allocated=0.6, mean=0.6, since=None) for i in range(3)]
    (d,) = plan([view([*nodes, facts("i1", since=0.0)], spec=spec)], NOW)
    assert d.nodes == ("i1",)
    idle = [facts("i1", since=0.0), facts("i2", since=0.0)]
    two = [facts(f"b{i}", allocated=0.65, mean=0.3, since=None) for i in range(2)]
    (d,) = plan([view([*two, *idle], spec=spec)], NOW)
    assert d.nodes == ("i1", "i2")  # 1.3 GPUs of work on 2 nodes: 65 % <= 70 %
    two = [facts(f"b{i}", allocated=0.75, mean=0.3, since=None) for i in range(2)]
    (d,) = plan([view([*two, *idle], spec=spec)], NOW)
    assert d.nodes == ("i1",)  # 1.5 on 3 nodes is 50 %, on 2 it would be 75 %


def test_cpu_only_pods_do_not_pin_a_gpu_node() -> None:
    # a node whose only work is CPU pods: GPU allocation 0, a drain cost, and it goes
    nodes = [facts("n1", allocated=0.5, mean=0.5, since=None), facts("n2", since=0.0, cost=1.0)]
    (d,) = plan([view(nodes)], NOW)
    assert d.nodes == ("n2",)


# --- properties ----------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> list[ClusterView]:
    out = []
    for c in range(draw(st.integers(1, 4))):
        lo = draw(st.integers(0, 3))
        hi = draw(st.integers(max(lo, 1), 8))
        spec = AutoscaleSpec(
            target_percent=draw(st.sampled_from([50.0, 70.0, 90.0])),
            scale_in_below_percent=draw(st.sampled_from([0.0, 10.0, 30.0])),
            unneeded_seconds=draw(st.sampled_from([0.0, 300.0])),
            cooldown_seconds=draw(st.sampled_from([0.0, 300.0])),
            disruption_budget=draw(st.integers(1, 3)),
        )
        pools = []
        for p in range(draw(st.integers(1, 2))):
            nodes = []
            for i in range(draw(st.integers(0, hi))):
                nodes.append(
                    NodeFacts(
                        f"c{c}p{p}n{i}",
                        f"p{p}",
                        draw(st.sampled_from([0.0, 0.05, 0.5, 1.0])),
                        draw(st.none() | st.builds(util, st.sampled_from([0.0, 0.05, 0.5, 0.99]))),
                        draw(st.none() | st.sampled_from([0.0, NOW - 100, NOW])),
                        draw(st.sampled_from([0.0, 1.0, 3.0])),
                        draw(st.booleans() | st.just(True)),
                    )
                )
            leaving = draw(st.integers(0, max(0, hi - len(nodes))))
            pools.append(PoolView(f"p{p}", lo, hi, template(draw(st.sampled_from([4, 8]))),
                                  tuple(nodes), leaving))  # fmt: skip
        pending = tuple(
            job(
                j,
                pods=draw(st.integers(1, 3)),
                gpus=draw(st.sampled_from([1, 4, 8])),
                why=draw(st.sampled_from([FULL, QUOTA])),
            )
            for j in range(draw(st.integers(0, 5)))
        )
        out.append(
            ClusterView(
                f"t.c{c}",
                spec,
                tuple(pools),
                pending,
                draw(st.none() | st.sampled_from([NOW - 1000, NOW - 10])),
                draw(st.none() | st.sampled_from([NOW - 1000, NOW - 10])),
                draw(st.integers(0, 2)),
            )
        )
    return out


@settings(max_examples=150, deadline=None)
@given(clusters(), st.randoms(use_true_random=False))
def test_max_min_budget_and_no_node_released_twice(
    views: list[ClusterView], rnd: random.Random
) -> None:
    decisions = plan(views, NOW)
    by_key = {c.key: c for c in views}
    released: list[str] = []
    per_pool: set[tuple[str, str]] = set()
    for d in decisions:
        cluster = by_key[d.cluster]
        pool = next(p for p in cluster.pools if p.name == d.pool)
        assert (d.cluster, d.pool) not in per_pool  # one decision per pool per cycle
        per_pool.add((d.cluster, d.pool))
        if d.action is Action.SCALE_OUT:
            assert d.count >= 0 and not d.nodes
            assert pool.size + d.count <= max(pool.max_count, pool.size)  # max is hard
            if pool.size >= pool.max_count:
                assert d.count == 0
            if d.count == 0:
                assert d.reason.code is Code.SCALE_OUT_AT_MAX
        else:
            assert d.count == len(d.nodes) > 0
            assert set(d.nodes) <= {n.name for n in pool.nodes if n.ready}
            assert len(pool.nodes) - len(d.nodes) >= pool.min_count
            released.extend(d.nodes)
        d.reason.render()
    assert len(released) == len(set(released))
    for cluster in views:
        mine = [d for d in decisions if d.cluster == cluster.key]
        out = sum(len(d.nodes) for d in mine if d.action is Action.SCALE_IN)
        assert out <= max(0, cluster.spec.disruption_budget - cluster.draining)
    shuffled = list(views)
    rnd.shuffle(shuffled)
    assert plan(shuffled, NOW) == decisions  # deterministic, whatever the order given
    assert plan(views, NOW) == decisions


def test_reason_of_a_scale_out_is_stored_and_read_back() -> None:
    (d,) = plan([view([busy("n1")], [job(7)])], NOW)
    back = Reason.stored(d.reason.code.value, d.reason.detail())
    assert back is not None and back.same(d.reason)
    assert reason(Code.SCALE_OUT_SHORT, pool="p", missing=2, detail="x").render() == (
        "pool p: 2 node(s) short of the scale-out: x"
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from([0, 1, 2, 4, 8]), st.integers(0, 40)),
        min_size=1,
        max_size=8,
    ),
    st.integers(0, 3),
)
def test_packing_by_amounts_agrees_with_packing_on_a_snapshot(
    sets: list[tuple[int, int, int]], upcoming: int
) -> None:
    """The per-rule amounts the planner packs with give the node count that reserving each
    pod's devices on a snapshot of template nodes gives (for pods without GPU shares)."""
    from gpuaas.engine.autoscale import _Templates

    templates = _Templates()
    groups = [
        (PodRequest(cpu_milli=cpu * 1000, memory_bytes=cpu * GI, gpus=gpus), pods)
        for pods, gpus, cpu in sets
    ]
    assert templates._pack(TPL, groups, upcoming) == templates._pack_on_snapshot(
        TPL, groups, upcoming
    )


def test_a_share_is_packed_on_the_snapshot() -> None:
    half = PodRequest(gpus=1, gpu_milli=500)
    pending = [Pending(1, Workload("w", (PodSet("main", 20, half),)), FULL, 0.0)]
    (d,) = plan([view([busy("n1")], pending)], NOW)
    assert d.count == 2  # 16 halves on one 8-GPU node, 4 on the next


def test_capacity_is_read_from_the_placement_failure_and_the_admission_decision() -> None:
    # the engine's code is the first filter (the cluster's node selector); the counts say
    # the cluster's own node was short of GPUs
    selector = Reason(
        Code.NODE_SELECTOR,
        {"rejected": {"NodeSelector": 3, "InsufficientGpu": 1}, "detail": "0/4 nodes fit"},
    )
    assert waits_for_capacity(selector)
    assert not waits_for_capacity(Reason(Code.NODE_SELECTOR, {"rejected": {"NodeSelector": 4}}))
    # quota was there, the flavor's nodes were not (a cluster with no node yet)
    flavors = {"main": {"nvidia.com/gpu": "cluster.t.c"}}
    assert waits_for_capacity(Reason(Code.NODE_SELECTOR, {"flavors": flavors, "detail": "x"}))
    warm = Reason(Code.DATASET_NOT_WARM, {"dataset": "d", "warm": 0, "flavors": flavors})
    assert not waits_for_capacity(warm)
