"""Snapshot fleet changes in place: after any sequence of node additions, removals, cordons and
repartitions, with pods placed and released throughout, the snapshot equals one built from
scratch for the same fleet and reservations, and no pod loses or gains a device except those on
a removed node or on a device the repartition took away (which the test sees reported)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.framework import CycleState, PodShape, default_assignment, feasible_nodes
from gpuaas.engine.snapshot import Assignment, OvercommitError, Snapshot
from gpuaas.model.devices import GPU, MigInstance, Partition, PartitionMode
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import UNSCHEDULABLE, Node
from gpuaas.model.topology import Topology
from gpuaas.model.workload import PodRequest

GI = 2**30
MIG = Partition(
    mode=PartitionMode.MIG,
    instances=(
        MigInstance(0, 4, "3g.40gb", 3),
        MigInstance(4, 2, "2g.20gb", 2),
        MigInstance(6, 1, "1g.10gb", 1),
    ),
)
MIG_SMALL = Partition(
    mode=PartitionMode.MIG, instances=tuple(MigInstance(k, 1, "1g.10gb", 1) for k in range(7))
)
#: GPU layouts a node may have or be repartitioned to (same uuids: the same physical GPUs).
LAYOUTS: tuple[tuple[Partition, ...], ...] = (
    (Partition.whole(),) * 4,
    (MIG, Partition.whole(), Partition.whole(), MIG_SMALL),
    (Partition.time_sliced(4), Partition.time_sliced(2), Partition.whole(), Partition.whole()),
    (Partition.whole(),) * 8,
    (),
)
MODELS = ("H100", "A100", "L40S")


def make_node(name: str, layout: int, model: int, rack: int, cpu: int = 64000) -> Node:
    gpus = [
        GPU(g, f"{name}-gpu-{g}", MODELS[model], 81920, part)
        for g, part in enumerate(LAYOUTS[layout])
    ]
    topology = Topology("z1", f"b{rack % 2}", f"r{rack}", f"nv{rack}-{name}" if rack % 3 else "")
    return Node(name, cpu, 512 * GI, gpus, topology, labels={"pool": f"p{rack % 2}"})


@st.composite
def requests(draw: st.DrawFn) -> PodRequest:
    form = draw(st.sampled_from(["whole", "share", "mig", "replicas", "cpu"]))
    cpu = draw(st.sampled_from([0, 1000, 16000]))
    if form == "whole":
        return PodRequest(cpu_milli=cpu, gpus=draw(st.integers(1, 4)))
    if form == "share":
        return PodRequest(cpu_milli=cpu, gpus=1, gpu_milli=draw(st.sampled_from([250, 500])))
    if form == "mig":
        profile = draw(st.sampled_from(["1g.10gb", "3g.40gb", "2g.20gb"]))
        return PodRequest(cpu_milli=cpu, mig=((profile, draw(st.integers(1, 2))),))
    if form == "replicas":
        return PodRequest(cpu_milli=cpu, replicas=draw(st.integers(1, 3)))
    return PodRequest(cpu_milli=max(cpu, 1000))


OPS = st.one_of(
    st.tuples(
        st.just("add"), st.integers(0, len(LAYOUTS) - 1), st.integers(0, 2), st.integers(0, 5)
    ),
    st.tuples(st.just("remove"), st.integers(0, 99)),
    st.tuples(st.just("cordon"), st.integers(0, 99), st.booleans()),
    st.tuples(st.just("repartition"), st.integers(0, 99), st.integers(0, len(LAYOUTS) - 1)),
    st.tuples(st.just("place"), requests()),
    st.tuples(st.just("place"), requests()),
    st.tuples(st.just("release"), st.integers(0, 99)),
)


class Fleet:
    """The test's own record of the fleet and the pods placed on it, by node name."""

    def __init__(self, nodes: list[Node]) -> None:
        self.snap = Snapshot.from_nodes(nodes)
        self.nodes = {node.name: node for node in nodes}
        self.pods: dict[int, tuple[str, Assignment]] = {}
        self.lost: set[int] = set()
        self.next_pod = 0
        self.next_node = len(nodes)

    def live(self) -> list[str]:
        return sorted(self.nodes)

    def on(self, name: str) -> list[int]:
        return [p for p, (node, _) in self.pods.items() if node == name]

    def apply(self, op: tuple) -> None:
        kind = op[0]
        if kind == "add":
            name = f"n{self.next_node}"
            self.next_node += 1
            node = make_node(name, op[1], op[2], op[3])
            (index,) = self.snap.add_nodes([node]).tolist()
            assert self.snap.names[index] == name
            self.nodes[name] = node
        elif kind in ("remove", "cordon", "repartition"):
            if not self.nodes:
                return
            name = self.live()[op[1] % len(self.nodes)]
            n = self.snap.index_of(name)
            if kind == "cordon":
                taints = [UNSCHEDULABLE] if op[2] else []
                self.nodes[name] = dataclasses.replace(self.nodes[name], taints=taints)
                self.snap.set_taints(n, taints)
                return
            here = self.on(name)
            if kind == "remove":
                for p in here:  # reported and given back before the node goes
                    self.snap.unreserve(self.pods.pop(p)[1])
                    self.lost.add(p)
                self.snap.remove_node(n)
                del self.nodes[name]
                return
            old = self.nodes[name]
            new = make_node(name, op[2], MODELS.index(old.gpu_model) if old.gpus else 0, 1)
            new = dataclasses.replace(new, topology=old.topology, taints=list(old.taints))
            kept = [p for p in here if self.snap.devices_kept(self.pods[p][1], new)]
            for p in here:
                self.snap.unreserve(self.pods[p][1])
            self.snap.replace_node(n, new)
            self.nodes[name] = new
            for p in here:
                if p in kept:
                    try:
                        self.snap.reserve(n, self.pods[p][1])
                        continue
                    except OvercommitError:
                        pass
                del self.pods[p]
                self.lost.add(p)
        elif kind == "place":
            pod = op[1]
            state = CycleState(pod=pod, shape=PodShape.of(pod))
            feasible = feasible_nodes(state, self.snap, None)
            if len(feasible) == 0:
                return
            n = int(feasible[-1])
            assert self.snap.live[n] and UNSCHEDULABLE not in self.snap.taints[n]
            assignment = default_assignment(state, self.snap, n)
            self.snap.reserve(n, assignment)
            self.pods[self.next_pod] = (self.snap.names[n], assignment)
            self.next_pod += 1
        elif kind == "release" and self.pods:
            p = sorted(self.pods)[op[1] % len(self.pods)]
            self.snap.unreserve(self.pods.pop(p)[1])

    def from_scratch(self) -> Snapshot:
        """The same fleet and the same pods, built anew (slots in another order)."""
        names = self.live()
        snap = Snapshot.from_nodes([self.nodes[name] for name in reversed(names)])
        for name, assignment in self.pods.values():
            n = snap.index_of(name)
            snap.reserve(n, dataclasses.replace(assignment, node=n))
        return snap


#: A starting fleet: (layout, model, rack) per node.
INITIAL = st.lists(
    st.tuples(st.integers(0, len(LAYOUTS) - 1), st.integers(0, 2), st.integers(0, 5)),
    min_size=0,
    max_size=4,
)


@settings(max_examples=80, deadline=None)
@given(INITIAL, st.lists(OPS, max_size=40))
def test_changes_in_place_equal_a_snapshot_built_from_scratch(initial: list, ops: list) -> None:
    fleet = Fleet([make_node(f"i{k}", *spec) for k, spec in enumerate(initial)])
    for op in ops:
        fleet.apply(op)
        fleet.snap.check_indexes()
    assert fleet.snap.canonical() == fleet.from_scratch().canonical()
    # every pod still placed holds exactly its devices: giving them all back leaves a free fleet
    for _, assignment in fleet.pods.values():
        fleet.snap.unreserve(assignment)
    empty = Snapshot.from_nodes([fleet.nodes[name] for name in fleet.live()])
    assert fleet.snap.canonical() == empty.canonical()


def test_add_reuses_a_removed_slot_and_keeps_other_indices() -> None:
    snap = Snapshot.from_nodes([make_node(f"n{k}", 0, 0, k) for k in range(4)])
    a = default_assignment(CycleState(PodRequest(gpus=2), PodShape.of(PodRequest(gpus=2))), snap, 3)
    snap.reserve(3, a)
    snap.remove_node(1)
    assert snap.holes == [1] and not snap.live[1]
    assert snap.index_of("n3") == 3  # other nodes keep their index
    with pytest.raises(KeyError):
        snap.index_of("n1")
    (slot,) = snap.add_nodes([make_node("new", 2, 1, 9)]).tolist()
    assert slot == 1 and snap.index_of("new") == 1 and snap.holes == []
    grown = snap.add_nodes([make_node("big", 3, 2, 9)])
    assert grown.tolist() == [4] and snap.gmax == 8
    snap.check_indexes()
    snap.unreserve(a)
    snap.check_indexes()


def test_refusals_change_nothing() -> None:
    snap = Snapshot.from_nodes([make_node(f"n{k}", 0, 0, k) for k in range(2)])
    before = snap.canonical()
    with pytest.raises(InvalidValue, match="already in the fleet"):
        snap.add_nodes([make_node("n0", 0, 0, 0)])
    a = default_assignment(CycleState(PodRequest(gpus=1), PodShape.of(PodRequest(gpus=1))), snap, 0)
    snap.reserve(0, a)
    held = snap.canonical()
    with pytest.raises(OvercommitError, match="holds reservations"):
        snap.remove_node(0)
    with pytest.raises(OvercommitError, match="holds reservations"):
        snap.replace_node(0, make_node("n0", 1, 0, 0))
    assert snap.canonical() == held
    snap.unreserve(a)
    assert snap.canonical() == before


def test_a_removed_or_cordoned_node_is_never_feasible() -> None:
    snap = Snapshot.from_nodes([make_node(f"n{k}", 0, 0, k) for k in range(3)])
    pod = PodRequest(gpus=1)
    state = CycleState(pod=pod, shape=PodShape.of(pod))
    snap.remove_node(0)
    snap.set_taints(1, [UNSCHEDULABLE])
    assert feasible_nodes(state, snap, None).tolist() == [2]
    snap.set_taints(1, [])
    assert feasible_nodes(state, snap, None).tolist() == [1, 2]


def test_a_copy_does_not_see_a_later_change() -> None:
    snap = Snapshot.from_nodes([make_node(f"n{k}", 0, 0, k) for k in range(3)])
    copy = snap.copy()
    before = copy.canonical()
    snap.remove_node(2)
    snap.add_nodes([make_node("x", 1, 1, 4)])
    snap.set_taints(0, [UNSCHEDULABLE])
    assert copy.canonical() == before
    copy.check_indexes()
    snap.check_indexes()
    assert np.array_equal(copy.live, [True, True, True])
