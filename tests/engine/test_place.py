"""place_pod: filters with readable reasons, candidates mask, device choice, reserve/unreserve."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.framework import CycleState, PodShape, feasible_nodes, run_filters
from gpuaas.engine.place import (
    NodeSampling,
    Placement,
    Unschedulable,
    place_pod,
    reserve,
    unreserve,
)
from gpuaas.engine.policies import TaskMix, make_policy
from gpuaas.engine.snapshot import MILLI, Assignment, Snapshot
from gpuaas.model.devices import GPU, Partition
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Node, Taint, TaintEffect, Toleration
from gpuaas.model.workload import PodRequest

GI = 2**30


def node(name: str, gpus: int, model: str = "T4", cpu: int = 32000, **kw: object) -> Node:
    return Node(
        name,
        cpu,
        64 * GI,
        [GPU(i, f"{name}-{i}", model, 16384, Partition.whole()) for i in range(gpus)],
        **kw,  # type: ignore[arg-type]
    )


def test_unschedulable_reason_counts_nodes_per_filter() -> None:
    snap = Snapshot.from_nodes([node("a", 1), node("b", 2, "V100"), node("c", 4, "V100")])
    result = place_pod(
        snap, PodRequest(1000, GI, gpus=4, gpu_models=frozenset({"V100"})), make_policy("bestfit")
    )
    assert isinstance(result, Placement) and result.node_name == "c"
    result = place_pod(snap, PodRequest(1000, GI, gpus=8), make_policy("bestfit"))
    assert isinstance(result, Unschedulable)
    assert result.reason == "0/3 nodes fit: 3 insufficient GPU"
    result = place_pod(
        snap, PodRequest(1000, GI, gpus=2, gpu_models=frozenset({"T4"})), make_policy("bestfit")
    )
    assert isinstance(result, Unschedulable)
    assert result.reason == "0/3 nodes fit: 2 gpu model not in {T4}, 1 insufficient GPU"


def test_candidates_restrict_and_place_pod_does_not_mutate() -> None:
    snap = Snapshot.from_nodes([node("a", 2), node("b", 2), node("c", 2)])
    before = snap.state()
    mask = np.array([False, False, True])
    result = place_pod(snap, PodRequest(gpus=1), make_policy("gpuaas"), candidates=mask)
    assert isinstance(result, Placement) and result.node == 2
    assert snap.state() == before
    result = place_pod(snap, PodRequest(gpus=1), make_policy("bestfit"), candidates=np.array([1]))
    assert isinstance(result, Placement) and result.node == 1


def test_share_goes_to_fullest_gpu_and_reserve_roundtrip() -> None:
    snap = Snapshot.from_nodes([node("a", 4)])
    policy = make_policy("packing")
    first = place_pod(snap, PodRequest(gpus=1, gpu_milli=600), policy)
    assert isinstance(first, Placement)
    reserve(snap, PodRequest(gpus=1, gpu_milli=600), first, policy)
    after_first = snap.state()
    second = place_pod(snap, PodRequest(gpus=1, gpu_milli=300), policy)
    assert isinstance(second, Placement)
    assert second.assignment.gpu_milli == ((first.assignment.gpu_milli[0][0], 300),)
    reserve(snap, PodRequest(gpus=1, gpu_milli=300), second, policy)
    assert sorted(snap.gpu_free[0].tolist()) == [100, MILLI, MILLI, MILLI]
    unreserve(snap, PodRequest(gpus=1, gpu_milli=300), second, policy)
    assert snap.state() == after_first


def test_node_selector_and_taints() -> None:
    tainted = node("t", 2, taints=[Taint("dedicated", "ml")])
    labelled = node("l", 2, labels={"pool": "a"})
    snap = Snapshot.from_nodes([tainted, labelled])
    res = place_pod(
        snap,
        PodRequest(gpus=1, node_selector=(("pool", "b"),)),
        make_policy("bestfit"),
    )
    assert isinstance(res, Unschedulable) and "node selector pool=b" in res.reason
    res = place_pod(snap, PodRequest(gpus=1), make_policy("bestfit"), candidates=np.array([0]))
    assert isinstance(res, Unschedulable) and "untolerated taint" in res.reason
    tol = (Toleration(key="dedicated", operator="Equal", value="ml"),)
    res = place_pod(
        snap, PodRequest(gpus=1, tolerations=tol), make_policy("bestfit"), candidates=np.array([0])
    )
    assert isinstance(res, Placement) and res.node_name == "t"


def test_mig_and_time_sliced_requests() -> None:
    from gpuaas.model.devices import MigInstance, PartitionMode

    mig = Partition(
        mode=PartitionMode.MIG,
        instances=(MigInstance(0, 4, "3g.40gb", 3), MigInstance(4, 4, "3g.40gb", 3)),
    )
    n_mig = Node("m", 32000, 64 * GI, [GPU(0, "m-0", "A100-80GB", 81920, mig)])
    n_ts = Node("s", 32000, 64 * GI, [GPU(0, "s-0", "L40S", 46068, Partition.time_sliced(4))])
    snap = Snapshot.from_nodes([n_mig, n_ts])
    policy = make_policy("gpuaas")
    pod = PodRequest(mig=(("3g.40gb", 2),))
    res = place_pod(snap, pod, policy)
    assert isinstance(res, Placement) and res.node_name == "m" and len(res.assignment.mig) == 2
    reserve(snap, pod, res, policy)
    again = place_pod(snap, PodRequest(mig=(("3g.40gb", 1),)), policy)
    assert isinstance(again, Unschedulable) and "MIG" in again.reason
    pod = PodRequest(replicas=3)
    res = place_pod(snap, pod, policy)
    assert isinstance(res, Placement) and res.node_name == "s"
    reserve(snap, pod, res, policy)
    assert snap.replica_free[1, 0] == 1


def test_malformed_requests_are_rejected() -> None:
    snap = Snapshot.from_nodes([node("a", 1)])
    with pytest.raises(InvalidValue):
        place_pod(snap, PodRequest(gpus=2, gpu_milli=500), make_policy("bestfit"))
    with pytest.raises(InvalidValue):
        place_pod(snap, PodRequest(gpus=1, replicas=1), make_policy("bestfit"))
    with pytest.raises(InvalidValue, match="mask has 2 entries for 1 nodes"):
        place_pod(snap, PodRequest(gpus=1), make_policy("bestfit"), candidates=np.ones(2, bool))
    with pytest.raises(InvalidValue, match="node indices"):
        place_pod(snap, PodRequest(gpus=1), make_policy("bestfit"), candidates=np.array([3]))


@st.composite
def _pods(draw: st.DrawFn) -> PodRequest:
    kind = draw(st.sampled_from(["share", "whole", "cpu"]))
    cpu = draw(st.integers(0, 16000))
    if kind == "share":
        return PodRequest(cpu, GI, gpus=1, gpu_milli=draw(st.integers(1, 999)))
    if kind == "whole":
        return PodRequest(cpu, GI, gpus=draw(st.integers(1, 4)))
    return PodRequest(cpu, GI)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["random", "dotprod", "clustering", "packing", "bestfit", "fgd", "gpuaas"]),
    st.lists(st.tuples(_pods(), st.integers(0, 10)), min_size=1, max_size=30),
)
def test_place_reserve_unreserve_in_any_order_never_overcommits(
    name: str, steps: list[tuple[PodRequest, int]]
) -> None:
    snap = Snapshot.from_nodes([node("a", 4), node("b", 2, cpu=16000), node("c", 1, "V100")])
    initial = snap.state()
    policy = make_policy(name, mix=TaskMix.from_pods([p for p, _ in steps]), seed=0)
    rng = np.random.default_rng(0)
    held: list[tuple[PodRequest, Placement]] = []
    for pod, undo in steps:
        res = place_pod(snap, pod, policy, rng=rng)
        if isinstance(res, Placement):
            reserve(snap, pod, res, policy)
            held.append((pod, res))
        if undo < 3 and held:  # give back an arbitrary earlier placement
            victim = held.pop(undo % len(held))
            unreserve(snap, victim[0], victim[1], policy)
        present = snap.gpu_free >= 0
        assert ((snap.gpu_free[present] >= 0) & (snap.gpu_free[present] <= MILLI)).all()
        assert (snap.cpu_free >= 0).all() and (snap.mem_free >= 0).all()
    for pod, res in reversed(held):
        unreserve(snap, pod, res, policy)
    assert snap.state() == initial


# ---------------------------------------------------------------------------- fused filters
def _mixed_fleet() -> list[Node]:
    from gpuaas.model.devices import MigInstance, PartitionMode

    mig = Partition(
        mode=PartitionMode.MIG,
        instances=(MigInstance(0, 4, "3g.40gb", 3), MigInstance(4, 1, "1g.10gb", 1)),
    )
    taint = Taint("gpu", "reserved", TaintEffect.NO_SCHEDULE)
    return [
        node("a", 4),
        node("b", 2, "V100", cpu=8000),
        node("c", 8, "V100", labels={"pool": "x"}),
        node("d", 1, taints=(taint,)),
        Node("e", 16000, 32 * GI, [GPU(0, "e-0", "A100", 40960, mig)]),
        Node("f", 16000, 32 * GI, [GPU(0, "f-0", "L4", 24576, Partition.time_sliced(4))]),
        Node("g", 4000, 8 * GI, []),
    ]


@st.composite
def _any_pod(draw: st.DrawFn) -> PodRequest:
    kind = draw(st.sampled_from(["share", "whole", "mig", "replicas", "cpu"]))
    cpu = draw(st.integers(0, 20000))
    extra: dict[str, object] = {}
    if draw(st.booleans()):
        extra["gpu_models"] = frozenset(draw(st.sets(st.sampled_from(["T4", "V100", "H9"]))))
    if draw(st.integers(0, 3)) == 0:
        extra["node_selector"] = (("pool", "x"),)
    if draw(st.integers(0, 3)) == 0:
        extra["tolerations"] = (Toleration("gpu", "Equal", "reserved"),)
    if kind == "share":
        return PodRequest(cpu, GI, gpus=1, gpu_milli=draw(st.integers(1, 999)), **extra)
    if kind == "whole":
        return PodRequest(cpu, GI, gpus=draw(st.integers(1, 8)), **extra)
    if kind == "mig":
        profile = draw(st.sampled_from(["1g.10gb", "3g.40gb", "7g.80gb"]))
        return PodRequest(cpu, GI, mig=((profile, draw(st.integers(1, 2))),), **extra)
    if kind == "replicas":
        return PodRequest(cpu, GI, replicas=draw(st.integers(1, 5)), **extra)
    return PodRequest(cpu, GI, **extra)


@settings(max_examples=120, deadline=None)
@given(st.lists(_any_pod(), min_size=1, max_size=25), st.lists(st.booleans(), min_size=7))
def test_fused_filters_equal_the_filter_chain(pods: list[PodRequest], keep: list[bool]) -> None:
    """feasible_nodes (maintained indexes, cached static masks) keeps exactly the nodes that
    the six filter plugins keep, on every snapshot state along a run of placements."""
    snap = Snapshot.from_nodes(_mixed_fleet())
    policy = make_policy("bestfit")
    subset = np.flatnonzero(np.array(keep[:7]))
    for pod in pods:
        state = CycleState(pod=pod, shape=PodShape.of(pod))
        for nodes in (None, subset):
            chain, _ = run_filters(state, snap, np.arange(snap.size) if nodes is None else nodes)
            fused = feasible_nodes(state, snap, nodes)
            assert fused.tolist() == chain.tolist()
        res = place_pod(snap, pod, policy)
        if isinstance(res, Placement):
            reserve(snap, pod, res, policy)


# ---------------------------------------------------------------------------- node sampling
def test_node_sampling_follows_kube_scheduler_numbers() -> None:
    adaptive = NodeSampling()
    assert adaptive.count(16) == 16  # below the minimum: everything
    assert adaptive.count(150) == 100  # 48.8 % is 73: raised to the minimum
    assert adaptive.count(1_000) == 420  # 50 - 8 = 42 %
    assert adaptive.count(5_000) == 500  # 50 - 40 = 10 %
    assert adaptive.count(10_000) == 500  # 50 - 80 < 5: the 5 % floor
    assert NodeSampling(percentage=30).count(1_000) == 300
    assert NodeSampling(percentage=100).count(10_000) == 10_000
    with pytest.raises(InvalidValue, match="percentage"):
        NodeSampling(percentage=120)
    with pytest.raises(InvalidValue, match="minimum"):
        NodeSampling(minimum=0)


def test_node_sampling_is_round_robin_and_covers_every_node() -> None:
    sampling = NodeSampling(percentage=10, minimum=3)
    feasible = np.arange(0, 40, 2)  # 20 feasible nodes out of 40 candidates: 4 per pick
    seen: list[int] = []
    for _ in range(5):
        picked = sampling.pick(feasible, 40)
        assert len(picked) == 4 and (np.diff(picked) > 0).all()
        assert set(picked.tolist()) <= set(feasible.tolist())
        seen.extend(picked.tolist())
    assert sorted(seen) == feasible.tolist()  # 5 picks of 4 visit all 20 once
    wrapped = sampling.pick(feasible[:3], 40)  # fewer feasible than the count: all of them
    assert wrapped.tolist() == [0, 2, 4]
    sampling.next_start = 37
    assert sampling.pick(feasible, 40).tolist() == [0, 2, 4, 38]  # 38, then wraps to 0
    assert sampling.next_start == 5
    assert sampling.sampled == 6 and sampling.skipped == 6 * 16


def test_place_pod_with_sampling_scores_only_the_sample() -> None:
    snap = Snapshot.from_nodes([node(f"n{i:03d}", 2) for i in range(300)])
    pod = PodRequest(1000, GI, gpus=1)
    # best fit prefers the fullest node; make the last node the fullest
    snap.reserve(299, Assignment(299, gpu_milli=((0, MILLI),)))
    full = place_pod(snap, pod, make_policy("bestfit"))
    assert isinstance(full, Placement) and full.node == 299
    sampling = NodeSampling(percentage=10, minimum=100)  # 100 of 300, starting at node 0
    sampled = place_pod(snap, pod, make_policy("bestfit"), sampling=sampling)
    assert isinstance(sampled, Placement) and sampled.node < 100
    assert sampling.next_start == 100 and sampling.sampled == 1
    for _ in range(2):
        sampled = place_pod(snap, pod, make_policy("bestfit"), sampling=sampling)
    assert isinstance(sampled, Placement) and sampled.node == 299  # its turn came
    # a small candidate set is never sampled
    small = place_pod(snap, pod, make_policy("bestfit"), candidates=np.arange(250, 300))
    assert isinstance(small, Placement) and small.node == 299


def test_mps_clients_are_placed_as_replicas_and_never_as_whole_gpus() -> None:
    n_mps = Node("p", 32000, 64 * GI, [GPU(0, "p-0", "L40S", 46068, Partition.mps(4))])
    snap = Snapshot.from_nodes([n_mps])
    policy = make_policy("gpuaas")
    pod = PodRequest(replicas=3)
    res = place_pod(snap, pod, policy)
    assert isinstance(res, Placement) and res.assignment.replicas == ((0, 3),)
    reserve(snap, pod, res, policy)
    assert snap.replica_free[0, 0] == 1
    assert isinstance(place_pod(snap, PodRequest(replicas=2), policy), Unschedulable)
    assert isinstance(place_pod(snap, PodRequest(gpus=1), policy), Unschedulable)
