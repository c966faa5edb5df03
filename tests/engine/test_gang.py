"""Gang placement: whole or nothing, exact rollback, readable reasons, no over-commit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaas.engine.claims import DeviceClaims
from gpuaas.engine.gang import GangPlacement, place_workload, release
from gpuaas.engine.place import Unschedulable
from gpuaas.engine.policies import make_policy
from gpuaas.engine.snapshot import MILLI, Snapshot
from gpuaas.model.errors import InvalidValue
from gpuaas.model.topology import Level
from gpuaas.model.workload import (
    DeviceClaim,
    PodRequest,
    PodSet,
    TopologyMode,
    TopologyRequest,
    Workload,
)
from gpuaas.sim.synthetic import (
    B200,
    H100,
    L40S,
    FleetSpec,
    synthetic_device_classes,
    synthetic_fleet,
)

GIB = 2**30
SPEC = FleetSpec(
    nodes=48,
    nodes_per_rack=6,
    racks_per_block=2,
    blocks_per_zone=2,
    nvlink_nodes_b200=3,
    model_shares=((H100, 0.5), (B200, 0.3), (L40S, 0.2)),
)
RACK = TopologyRequest(Level.RACK, TopologyMode.REQUIRED)
EIGHT = PodRequest(cpu_milli=8000, memory_bytes=64 * GIB, gpus=8)


@pytest.fixture(scope="module")
def fleet():
    return synthetic_fleet(SPEC, seed=11)


def gang(name: str, *sets: PodSet) -> Workload:
    return Workload(name=name, pod_sets=tuple(sets))


def test_gang_is_placed_whole_in_one_rack(fleet) -> None:
    snap = Snapshot.from_nodes(fleet)
    policy = make_policy("bestfit")
    workload = gang("train-1", PodSet("workers", 4, EIGHT, RACK))
    result = place_workload(snap, workload, policy)
    assert isinstance(result, GangPlacement)
    assert len(result) == 4
    racks = {fleet[n].topology.rack for n in result.nodes}
    assert len(racks) == 1
    assert len(set(result.nodes)) == 4  # 8 GPUs each: one node per pod
    assert result.scopes[0][0] == "workers"
    assert int(snap.full_free[result.nodes].sum()) == 0


def test_failed_gang_leaves_the_snapshot_untouched(fleet) -> None:
    snap = Snapshot.from_nodes(fleet)
    policy = make_policy("packing")
    before = snap.state()
    too_big = gang("train-7", PodSet("workers", SPEC.nodes_per_rack + 1, EIGHT, RACK))
    result = place_workload(snap, too_big, policy)
    assert isinstance(result, Unschedulable)
    assert result.reason.startswith("gang train-7: pod set workers needs 7 pods of 8 GPUs")
    assert "in one rack; best rack rack-" in result.reason
    assert "fits 6" in result.reason
    assert snap.state() == before


def test_second_pod_set_failure_rolls_back_the_first(fleet) -> None:
    snap = Snapshot.from_nodes(fleet)
    policy = make_policy("packing")
    before = snap.state()
    impossible = PodRequest(cpu_milli=1000, memory_bytes=GIB, mig=(("7g.80gb", 1),))
    workload = gang(
        "mpi-3",
        PodSet("workers", 3, EIGHT, RACK),
        PodSet("helper", 1, PodRequest(cpu_milli=1000, gpus=1, gpu_milli=500)),
        PodSet("odd", 1, impossible),
    )
    result = place_workload(snap, workload, policy)
    assert isinstance(result, Unschedulable)
    assert "7g.80gb" in result.reason
    assert snap.state() == before


def test_rollback_after_partial_reservation(fleet) -> None:
    """The launcher fits only where the workers went; when it cannot, everything is undone."""
    snap = Snapshot.from_nodes(fleet)
    policy = make_policy("packing")
    before = snap.state()
    greedy_launcher = PodRequest(cpu_milli=10**9)  # fits no node: placed after the workers
    workload = gang(
        "mpi-4",
        PodSet("launcher", 1, greedy_launcher, RACK),
        PodSet("workers", 2, EIGHT, RACK),
    )
    result = place_workload(snap, workload, policy)
    assert isinstance(result, Unschedulable)
    assert "pod set launcher" in result.reason
    assert snap.state() == before


def test_release_restores_exactly(fleet) -> None:
    snap = Snapshot.from_nodes(fleet)
    policy = make_policy("bestfit")
    before = snap.state()
    placed = []
    for i in range(5):
        result = place_workload(
            snap,
            gang(
                f"w{i}",
                PodSet("workers", 2, EIGHT, RACK),
                PodSet("side", 3, PodRequest(cpu_milli=500, gpus=1, gpu_milli=300)),
            ),
            policy,
        )
        assert isinstance(result, GangPlacement)
        placed.append(result)
    assert snap.state() != before
    for result in reversed(placed):
        release(snap, result, policy)
    assert snap.state() == before


def test_quick_rejection_needs_no_node_scan(fleet) -> None:
    snap = Snapshot.from_nodes(fleet)
    workload = gang("huge", PodSet("w", 100, EIGHT))
    result = place_workload(snap, workload, make_policy("packing"))
    assert isinstance(result, Unschedulable)
    assert "needs 800 free whole GPUs; the fleet has" in result.reason


def test_quick_rejection_sees_a_model_added_in_place() -> None:
    """A model the fleet gains by an in-place node addition counts at once: the model ids
    cached for a pod's GPU models follow the snapshot's model list as it grows."""
    h100 = FleetSpec(nodes=6, nodes_per_rack=6, model_shares=((H100, 1.0),))
    b200 = FleetSpec(nodes=6, nodes_per_rack=6, model_shares=((B200, 1.0),))
    snap = Snapshot.from_nodes(synthetic_fleet(h100, seed=1))
    pod = PodRequest(cpu_milli=1000, memory_bytes=GIB, gpus=1, gpu_models=frozenset({B200}))
    policy = make_policy("packing")
    refused = place_workload(snap, gang("b200", PodSet("w", 1, pod)), policy)
    assert isinstance(refused, Unschedulable)
    assert f"of {B200}; the fleet has 0" in refused.reason
    added = [
        dataclasses.replace(node, name=f"added-{i}")
        for i, node in enumerate(synthetic_fleet(b200, seed=2))
    ]
    snap.add_nodes(added)
    placed = place_workload(snap, gang("b200", PodSet("w", 1, pod)), policy)
    assert isinstance(placed, GangPlacement)
    assert snap.names[placed.nodes[0]].startswith("added-")


def test_single_pod_packs_into_partly_used_rack(fleet) -> None:
    snap = Snapshot.from_nodes(fleet)
    policy = make_policy("bestfit")
    first = place_workload(snap, gang("a", PodSet("main", 1, EIGHT)), policy)
    assert isinstance(first, GangPlacement)
    rack = fleet[first.nodes[0]].topology.rack
    one = PodRequest(
        cpu_milli=1000, gpus=1, gpu_models=frozenset({fleet[first.nodes[0]].gpu_model})
    )
    second = place_workload(snap, gang("b", PodSet("main", 1, one)), policy)
    assert isinstance(second, GangPlacement)
    assert fleet[second.nodes[0]].topology.rack == rack
    assert second.scopes[0][1] == f"rack {rack}"


@pytest.mark.parametrize(
    "workload",
    [
        Workload("empty", ()),
        Workload("zero", (PodSet("w", 0, EIGHT),)),
        Workload("dup", (PodSet("w", 1, EIGHT), PodSet("w", 1, EIGHT))),
    ],
)
def test_malformed_workloads_are_rejected(fleet, workload: Workload) -> None:
    snap = Snapshot.from_nodes(fleet)
    with pytest.raises(InvalidValue) as info:
        place_workload(snap, workload, make_policy("packing"))
    assert workload.name in str(info.value)


# ---------------------------------------------------------------------------- properties
_PODS = st.sampled_from(
    [
        PodRequest(cpu_milli=4000, memory_bytes=32 * GIB, gpus=8),
        PodRequest(cpu_milli=4000, memory_bytes=32 * GIB, gpus=2),
        PodRequest(cpu_milli=1000, memory_bytes=8 * GIB, gpus=1),
        PodRequest(cpu_milli=1000, memory_bytes=8 * GIB, gpus=1, gpu_milli=300),
        PodRequest(cpu_milli=1000, memory_bytes=8 * GIB, gpus=1, gpu_milli=700),
        PodRequest(cpu_milli=1000, memory_bytes=8 * GIB, replicas=1),
        PodRequest(cpu_milli=1000, memory_bytes=8 * GIB, mig=(("1g.10gb", 1),)),
        PodRequest(cpu_milli=1000, memory_bytes=8 * GIB, mig=(("3g.40gb", 1),)),
        PodRequest(cpu_milli=60_000, memory_bytes=GIB),
        PodRequest(
            cpu_milli=1000,
            claims=(
                DeviceClaim(
                    "gpus",
                    "gpu.nvidia.com",
                    count=2,
                    match_attributes=("gpu.nvidia.com/numaNode",),
                ),
            ),
        ),
    ]
)
_TOPOLOGY = st.one_of(
    st.none(),
    st.builds(
        TopologyRequest,
        st.sampled_from([Level.NVLINK, Level.RACK, Level.BLOCK, Level.ZONE, Level.HOSTNAME]),
        st.sampled_from(list(TopologyMode)),
    ),
)
_SETS = st.lists(st.tuples(st.integers(1, 7), _PODS, _TOPOLOGY), min_size=1, max_size=3)
_MIG_SPEC = FleetSpec(
    nodes=24,
    nodes_per_rack=4,
    racks_per_block=2,
    blocks_per_zone=2,
    nvlink_nodes_b200=2,
    model_shares=((H100, 0.5), (B200, 0.25), (L40S, 0.25)),
    mig_node_share=0.5,
)


class Ledger:
    """What the live placements hold, counted independently of the snapshot."""

    def __init__(self, fleet) -> None:
        self.fleet = fleet
        self.live: list[GangPlacement] = []

    def check(self) -> None:
        milli: dict[tuple[int, int], int] = {}
        mig: set[tuple[int, int, int]] = set()
        replicas: dict[tuple[int, int], int] = {}
        cpu: dict[int, int] = {}
        mem: dict[int, int] = {}
        devices: set[str] = set()
        for placement in self.live:
            for pod in placement:
                a = pod.assignment
                cpu[a.node] = cpu.get(a.node, 0) + a.cpu_milli
                mem[a.node] = mem.get(a.node, 0) + a.memory_bytes
                for g, m in a.gpu_milli:
                    milli[a.node, g] = milli.get((a.node, g), 0) + m
                for g, k in a.mig:
                    assert (a.node, g, k) not in mig, "MIG instance given twice"
                    mig.add((a.node, g, k))
                for g, r in a.replicas:
                    replicas[a.node, g] = replicas.get((a.node, g), 0) + r
                for name in a.devices:
                    if name.startswith("gpu.nvidia.com/") and "-ts-" not in name:
                        assert name not in devices, f"device {name} claimed twice"
                        devices.add(name)
        for (n, g), m in milli.items():
            assert m <= MILLI, f"GPU {g} of node {n} over-committed: {m}"
            assert self.fleet[n].gpus[g].partition.mode.value == "whole"
        for (n, g), r in replicas.items():
            assert r <= self.fleet[n].gpus[g].partition.replicas
        for n, c in cpu.items():
            assert c <= self.fleet[n].cpu_milli
        for n, m in mem.items():
            assert m <= self.fleet[n].memory_bytes


def _check_topology(snap: Snapshot, placement: GangPlacement, workload: Workload) -> None:
    by_set = {ps.name: ps for ps in workload.pod_sets}
    for name, pod_set in by_set.items():
        request = pod_set.topology
        nodes = [p.placement.node for p in placement if p.pod_set == name]
        assert len(nodes) == pod_set.count
        if request is None or request.mode is not TopologyMode.REQUIRED:
            continue
        if request.level is Level.HOSTNAME:
            assert len(set(nodes)) == 1
        else:
            of_node = snap.domains[request.level].of_node
            assert len({int(of_node[n]) for n in nodes}) == 1
            assert int(of_node[nodes[0]]) >= 0


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    workloads=st.lists(_SETS, min_size=1, max_size=12),
    seed=st.integers(0, 3),
    policy=st.sampled_from(["packing", "bestfit", "gpuaas"]),
    release_order=st.randoms(use_true_random=False),
)
def test_gangs_are_all_or_nothing_and_never_overcommit(
    workloads, seed: int, policy: str, release_order
) -> None:
    fleet = synthetic_fleet(_MIG_SPEC, seed=seed)
    snap = Snapshot.from_nodes(fleet)
    claims = DeviceClaims.build(fleet, synthetic_device_classes())
    chosen = make_policy(policy)
    initial = snap.state()
    ledger = Ledger(fleet)
    for i, sets in enumerate(workloads):
        workload = Workload(
            f"w{i}",
            tuple(PodSet(f"s{j}", count, pod, topo) for j, (count, pod, topo) in enumerate(sets)),
        )
        before = snap.state()
        result = place_workload(snap, workload, chosen, claims=claims, rng=np.random.default_rng(i))
        if isinstance(result, Unschedulable):
            assert snap.state() == before
            assert result.reason.startswith(("gang w", "workload w"))
        else:
            assert len(result) == workload.pod_count
            _check_topology(snap, result, workload)
            ledger.live.append(result)
            ledger.check()
        assert (snap.cpu_free >= 0).all() and (snap.mem_free >= 0).all()
        assert (snap.replica_free >= 0).all() and (snap.mig_free >= 0).all()
    release_order.shuffle(ledger.live)
    for result in ledger.live:
        release(snap, result, chosen)
    assert snap.state() == initial


_SET_PODS = [
    EIGHT,
    PodRequest(cpu_milli=8000, memory_bytes=64 * GIB, gpus=1),
    PodRequest(cpu_milli=2000, memory_bytes=16 * GIB, gpus=2),
    PodRequest(cpu_milli=2000, memory_bytes=16 * GIB, gpus=1, gpu_milli=300),
    PodRequest(cpu_milli=30_000, memory_bytes=8 * GIB),
]
_POD_SET_PODS = st.sampled_from(_SET_PODS)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    fills=st.lists(st.tuples(st.integers(0, 47), _POD_SET_PODS), max_size=30),
    pod=_POD_SET_PODS,
    count=st.integers(2, 40),
    policy=st.sampled_from(["gpuaas", "fgd", "dotprod"]),
    seed=st.integers(0, 3),
)
def test_a_pod_set_places_as_its_pods_one_at_a_time(
    fleet, fills, pod: PodRequest, count: int, policy: str, seed: int
) -> None:
    """A pod set keeps its feasible nodes from pod to pod (only the node a pod went to is
    checked again): every pod lands where placing the pods one at a time, each filtering
    every node afresh, puts it, with the same devices and the same random tie draws."""
    from gpuaas.engine.framework import CycleState, PodShape
    from gpuaas.engine.place import place_nodes, place_pod
    from gpuaas.engine.policies import TaskMix

    mix = TaskMix.from_shapes([PodShape.of(p) for p in _SET_PODS])
    snap = Snapshot.from_nodes(fleet)
    for n, filler in fills:
        done = place_pod(snap, filler, make_policy("bestfit"), np.array([n]))
        if not isinstance(done, Unschedulable):
            snap.reserve(done.node, done.assignment)
    reference = snap.copy()
    result = place_workload(
        snap,
        gang("g", PodSet("w", count, pod)),
        make_policy(policy, mix),
        rng=np.random.default_rng(seed),
    )
    rng = np.random.default_rng(seed)
    chosen = make_policy(policy, mix)
    expected: list[tuple[int, object]] = []
    for _ in range(count):
        state = CycleState(pod=pod, shape=PodShape.of(pod), rng=rng)
        one = place_nodes(reference, state, chosen, None)
        if isinstance(one, Unschedulable):
            expected = []
            break
        reference.reserve(one.node, one.assignment)
        expected.append((one.node, one.assignment))
    if isinstance(result, Unschedulable):
        assert expected == []
    else:
        assert [(p.placement.node, p.assignment) for p in result] == expected
