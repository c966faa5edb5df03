"""Snapshot: indexes follow reserve/unreserve exactly; nothing is ever over-committed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.framework import CycleState, PodShape, default_assignment
from gpuaas.engine.snapshot import MILLI, Assignment, OvercommitError, Snapshot
from gpuaas.model.devices import GPU, MigInstance, Partition, PartitionMode
from gpuaas.model.node import Node
from gpuaas.model.topology import Level, Topology
from gpuaas.model.workload import PodRequest

GI = 2**30


def gpu(i: int, model: str = "H100", partition: Partition | None = None) -> GPU:
    return GPU(i, f"uuid-{i}", model, 81920, partition or Partition.whole())


def fleet() -> list[Node]:
    mig = Partition(
        mode=PartitionMode.MIG,
        instances=(
            MigInstance(0, 4, "3g.40gb", 3),
            MigInstance(4, 2, "2g.20gb", 2),
            MigInstance(6, 1, "1g.10gb", 1),
            MigInstance(7, 1, "1g.10gb", 1),
        ),
    )
    return [
        Node("a", 64000, 512 * GI, [gpu(i) for i in range(8)], Topology("z", "b1", "r1", "nv1")),
        Node("b", 64000, 512 * GI, [gpu(i) for i in range(4)], Topology("z", "b1", "r2", "nv2")),
        Node(
            "c",
            32000,
            256 * GI,
            [gpu(0, "A100-80GB", mig), gpu(1, "A100-80GB")],
            Topology("z", "b2", "r3"),
        ),
        Node(
            "d",
            32000,
            128 * GI,
            [gpu(0, "L40S", Partition.time_sliced(4)), gpu(1, "L40S", Partition.time_sliced(4))],
        ),
    ]


def test_arrays_and_indexes() -> None:
    snap = Snapshot.from_nodes(fleet())
    assert snap.size == 4 and snap.gmax == 8
    assert (
        snap.gpu_free[1, :4].tolist() == [MILLI] * 4 and snap.gpu_free[1, 4:].tolist() == [-1] * 4
    )
    assert snap.gpu_free[2, 0] == -1 and snap.gpu_free[2, 1] == MILLI  # MIG GPU is not whole
    assert snap.full_free.tolist() == [8, 4, 1, 0]
    assert snap.replica_free[3, :2].tolist() == [4, 4]
    assert snap.mig_free[2, snap.profile_id("1g.10gb")] == 2
    assert snap.model_free_gpus[snap.model_id("H100")] == 12
    rack = snap.domains[Level.RACK]
    assert rack.free_gpus[snap.domain_of(Level.RACK, 0)] == 8
    assert snap.domains[Level.BLOCK].free_nodes.tolist() == [2, 1]
    assert snap.domain_of(Level.NVLINK, 2) == -1
    assert snap.label_mask(Level.RACK.value, "r2").tolist() == [False, True, False, False]


def test_reserve_updates_indexes_and_unreserve_restores() -> None:
    snap = Snapshot.from_nodes(fleet())
    before = snap.state()
    a = Assignment(0, 1000, GI, gpu_milli=((0, 500), (1, MILLI)))
    snap.reserve(0, a)
    assert snap.gpu_free[0, :2].tolist() == [500, 0]
    assert snap.full_free[0] == 6 and snap.model_free_gpus[snap.model_id("H100")] == 10
    block = snap.domains[Level.BLOCK]
    assert block.free_nodes[snap.domain_of(Level.BLOCK, 0)] == 1
    assert block.free_gpus[snap.domain_of(Level.BLOCK, 0)] == 10
    snap.unreserve(a)
    assert snap.state() == before


def test_overcommit_is_refused_and_changes_nothing() -> None:
    snap = Snapshot.from_nodes(fleet())
    before = snap.state()
    with pytest.raises(OvercommitError):
        snap.reserve(0, Assignment(0, gpu_milli=((0, 600), (0, 600))))
    with pytest.raises(OvercommitError):
        snap.reserve(0, Assignment(0, cpu_milli=65000))
    with pytest.raises(OvercommitError):
        snap.reserve(3, Assignment(3, replicas=((0, 5),)))
    with pytest.raises(OvercommitError):
        snap.reserve(2, Assignment(2, mig=((0, 9),)))
    assert snap.state() == before


def _request(draw: st.DrawFn) -> PodRequest:
    kind = draw(st.sampled_from(["share", "whole", "mig", "replicas", "cpu"]))
    cpu = draw(st.integers(0, 20000))
    mem = draw(st.integers(0, 64)) * GI
    if kind == "share":
        return PodRequest(cpu, mem, gpus=1, gpu_milli=draw(st.integers(1, 999)))
    if kind == "whole":
        return PodRequest(cpu, mem, gpus=draw(st.integers(1, 8)))
    if kind == "mig":
        profile = draw(st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb"]))
        return PodRequest(cpu, mem, mig=((profile, draw(st.integers(1, 2))),))
    if kind == "replicas":
        return PodRequest(cpu, mem, replicas=draw(st.integers(1, 6)))
    return PodRequest(cpu, mem)


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, int, PodRequest | int]]:
    ops = []
    for _ in range(draw(st.integers(1, 40))):
        if draw(st.booleans()):
            ops.append(("place", draw(st.integers(0, 3)), _request(draw)))
        else:
            ops.append(("undo", 0, draw(st.integers(0, 1000))))
    return ops


@settings(max_examples=150, deadline=None)
@given(operations())
def test_random_reserve_unreserve_never_overcommits(ops: list) -> None:
    from gpuaas.engine.framework import DEFAULT_FILTERS

    snap = Snapshot.from_nodes(fleet())
    initial = snap.state()
    held: list[tuple[Assignment, tuple]] = []
    for op, node, arg in ops:
        if op == "place":
            state = CycleState(pod=arg, shape=PodShape.of(arg))
            nodes = np.array([node])
            if all(f.filter(state, snap, nodes)[0] for f in DEFAULT_FILTERS):
                before = snap.state()
                a = default_assignment(state, snap, node)
                snap.reserve(node, a)
                held.append((a, before))
        elif held:
            a, before = held.pop()  # undo the latest: state must be exactly as before it
            snap.unreserve(a)
            assert snap.state() == before
        present = snap.gpu_free >= 0
        assert ((snap.gpu_free[present] >= 0) & (snap.gpu_free[present] <= MILLI)).all()
        assert (snap.cpu_free >= 0).all() and (snap.mem_free >= 0).all()
        assert ((snap.replica_free >= 0) & (snap.replica_free <= snap.replica_total)).all()
        assert (snap.mig_free >= 0).all()
        assert snap.full_free.tolist() == (snap.gpu_free == MILLI).sum(axis=1).tolist()
        snap.check_indexes()  # max_free, replica_sum, per-model, per-domain: all follow
    while held:
        snap.unreserve(held.pop()[0])
    assert snap.state() == initial


def test_maintained_indexes_follow_reservations() -> None:
    snap = Snapshot.from_nodes(fleet())
    assert snap.max_free.tolist() == [MILLI, MILLI, MILLI, -1]
    assert snap.replica_sum.tolist() == [0, 0, 0, 8]
    a = Assignment(0, gpu_milli=(*((g, MILLI) for g in range(7)), (7, 300)))
    snap.reserve(0, a)
    assert snap.max_free[0] == 700
    r = Assignment(3, replicas=((0, 3), (1, 1)))
    snap.reserve(3, r)
    assert snap.replica_sum[3] == 4
    m = Assignment(2, mig=((0, 2),))
    p = snap.profile_id("1g.10gb")
    snap.reserve(2, m)
    assert snap.mig_total[p] == 1
    snap.check_indexes()
    for done in (m, r, a):
        snap.unreserve(done)
    assert snap.max_free.tolist() == [MILLI, MILLI, MILLI, -1] and snap.mig_total[p] == 2
    copy = snap.copy()
    copy.reserve(1, Assignment(1, gpu_milli=((0, 500),)))
    assert snap.max_free[1] == MILLI and copy.max_free[1] == MILLI
    copy.reserve(1, Assignment(1, gpu_milli=((1, 500), (2, 500), (3, 500))))
    assert copy.max_free[1] == 500 and snap.max_free[1] == MILLI
    copy.check_indexes()
