"""place_pod: filters with readable reasons, candidates mask, device choice, reserve/unreserve."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.place import Placement, Unschedulable, place_pod, reserve, unreserve
from gpuaas.engine.policies import TaskMix, make_policy
from gpuaas.engine.snapshot import MILLI, Snapshot
from gpuaas.model.devices import GPU, Partition
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Node, Taint, Toleration
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
