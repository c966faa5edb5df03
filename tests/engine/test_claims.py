"""DRA-style claims: CEL selection, counts, shared attributes, exact allocation, caching."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.claims import DeviceClaims, place_with_claims
from gpuaas.engine.gang import GangPlacement, place_workload, release
from gpuaas.engine.place import Unschedulable
from gpuaas.engine.policies import make_policy
from gpuaas.engine.snapshot import MILLI, Snapshot
from gpuaas.model.devices import GPU, Partition
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Node
from gpuaas.model.topology import Topology
from gpuaas.model.workload import DeviceClaim, PodRequest, PodSet, Workload
from gpuaas.sim.synthetic import FleetSpec, synthetic_fleet
from gpuaas.supply.device_class import DeviceClass
from gpuaas.supply.mig import plan_layout

GIB = 2**30
ALL = DeviceClass("gpu.nvidia.com", ('device.driver == "gpu.nvidia.com"',))
H100 = 'device.attributes["gpu.nvidia.com"].productName == "H100-80GB"'
BIG = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("64Gi")) >= 0'
MIG = DeviceClass("mig.nvidia.com", ('device.attributes["gpu.nvidia.com"].type == "mig"',))


def small_fleet() -> list[Node]:
    mig = Partition(mode=Partition().mode.MIG, instances=plan_layout("A100-80GB", "all-1g.10gb"))
    return [
        Node(
            "h0",
            64_000,
            512 * GIB,
            [GPU(g, f"GPU-h0-{g}", "H100-80GB", 81559, numa_node=g // 4) for g in range(8)],
            Topology(rack="r0", nvlink_domain="nv0"),
        ),
        Node(
            "l0",
            64_000,
            512 * GIB,
            [GPU(g, f"GPU-l0-{g}", "L40S", 46068, Partition.time_sliced(4)) for g in range(2)],
            Topology(rack="r0", nvlink_domain="nv1"),
        ),
        Node(
            "a0",
            64_000,
            512 * GIB,
            [GPU(g, f"GPU-a0-{g}", "A100-80GB", 81920, mig) for g in range(2)],
            Topology(rack="r1", nvlink_domain="nv2"),
        ),
    ]


def resolver(fleet: list[Node]) -> DeviceClaims:
    return DeviceClaims.build(fleet, [ALL, MIG])


def claim(count: int, *selectors: str, cls: str = "gpu.nvidia.com", match=()) -> DeviceClaim:
    return DeviceClaim("c", cls, count, tuple(selectors), tuple(match))


def test_claim_selects_devices_by_cel_and_counts() -> None:
    fleet = small_fleet()
    snap = Snapshot.from_nodes(fleet)
    claims = resolver(fleet)
    want = (claim(3, H100),)
    assert claims.feasible(snap, want).tolist() == [True, False, False]
    allocation = claims.allocate(snap, 0, want)
    assert allocation is not None
    assert allocation.gpu_milli == ((0, MILLI), (1, MILLI), (2, MILLI))
    assert allocation.devices == tuple(f"gpu.nvidia.com/h0/gpu-{g}" for g in range(3))
    assert allocation.by_claim == (("c", allocation.devices),)


def test_match_attributes_keeps_devices_in_one_group() -> None:
    fleet = small_fleet()
    snap = Snapshot.from_nodes(fleet)
    claims = resolver(fleet)
    numa = ("gpu.nvidia.com/numaNode",)
    assert claims.feasible(snap, (claim(4, H100, match=numa),))[0]
    assert not claims.feasible(snap, (claim(5, H100, match=numa),))[0]
    assert claims.feasible(snap, (claim(5, H100),))[0]
    # Take GPUs 0 and 1 (numa 0): a 3-device claim sharing numaNode must use numa 1 (best fit
    # would pick numa 0 with 2 left, but it no longer fits).
    first = claims.allocate(snap, 0, (claim(2, H100, match=numa),))
    assert first is not None and first.gpu_milli == ((0, MILLI), (1, MILLI))
    base = PodRequest(cpu_milli=1)
    snap.reserve(0, first.merge(_empty(0, base)))
    second = claims.allocate(snap, 0, (claim(3, H100, match=numa),))
    assert second is not None
    assert {g for g, _ in second.gpu_milli} <= {4, 5, 6, 7}
    # Best fit: a 2-device claim now goes to numa 0's two free GPUs, keeping numa 1 whole.
    third = claims.allocate(snap, 0, (claim(2, H100, match=numa),))
    assert third is not None and {g for g, _ in third.gpu_milli} == {2, 3}


def _empty(node: int, pod: PodRequest):
    from gpuaas.engine.snapshot import Assignment

    return Assignment(node=node, cpu_milli=pod.cpu_milli)


def test_mig_and_shared_devices_become_snapshot_resources() -> None:
    fleet = small_fleet()
    snap = Snapshot.from_nodes(fleet)
    claims = resolver(fleet)
    mig = claims.allocate(snap, 2, (claim(3, cls="mig.nvidia.com"),))
    assert mig is not None and len(mig.mig) == 3 and not mig.gpu_milli
    assert all(name.startswith("gpu.nvidia.com/a0/gpu-0-mig-1g10gb-") for name in mig.devices)
    shared = claims.allocate(
        snap, 1, (claim(3, 'device.attributes["gpu.nvidia.com"].type == "shared"'),)
    )
    assert shared is not None
    assert sum(n for _, n in shared.replicas) == 3
    assert shared.devices[0] == "gpu.nvidia.com/l0/gpu-0-ts-0"


def test_claimed_devices_are_not_given_twice() -> None:
    fleet = small_fleet()
    snap = Snapshot.from_nodes(fleet)
    claims = resolver(fleet)
    policy = make_policy("packing")
    pod = PodRequest(cpu_milli=1000, claims=(claim(3, BIG),))
    placed = []
    for _ in range(2):
        result = place_with_claims(snap, pod, policy, claims)
        assert not isinstance(result, Unschedulable)
        snap.reserve(result.node, result.assignment)
        placed.append(result)
    third = place_with_claims(snap, pod, policy, claims)
    assert isinstance(third, Unschedulable)
    assert "no node has claim c: 3 free device(s) of class gpu.nvidia.com" in third.reason
    devices = [d for p in placed for d in p.assignment.devices]
    assert len(devices) == len(set(devices)) == 6
    # A plain whole-GPU pod still sees the 2 GPUs left on h0 and no more.
    plain = PodRequest(cpu_milli=1000, gpus=3, gpu_models=frozenset({"H100-80GB"}))
    assert isinstance(place_with_claims(snap, plain, policy, claims), Unschedulable)


def test_pod_gpus_and_claims_do_not_overlap() -> None:
    fleet = small_fleet()
    snap = Snapshot.from_nodes(fleet)
    claims = resolver(fleet)
    pod = PodRequest(cpu_milli=1000, gpus=5, claims=(claim(3, H100),))
    result = place_with_claims(snap, pod, make_policy("packing"), claims)
    assert not isinstance(result, Unschedulable)
    gpus = [g for g, _ in result.assignment.gpu_milli]
    assert len(gpus) == len(set(gpus)) == 8
    too_many = PodRequest(cpu_milli=1000, gpus=6, claims=(claim(3, H100),))
    assert isinstance(
        place_with_claims(snap, too_many, make_policy("packing"), claims), Unschedulable
    )


def test_cel_is_evaluated_once_per_distinct_attribute_value(monkeypatch) -> None:
    fleet = synthetic_fleet(FleetSpec(nodes=200), seed=2)
    snap = Snapshot.from_nodes(fleet)
    claims = DeviceClaims.build(fleet, [ALL])
    calls = {"n": 0}
    original = DeviceClass.matches

    def counting(self, device):
        calls["n"] += 1
        return original(self, device)

    monkeypatch.setattr(DeviceClass, "matches", counting)
    mask = claims.feasible(snap, (claim(2, BIG, match=("gpu.nvidia.com/nvlinkDomain",)),))
    assert mask.any()
    assert calls["n"] < 40  # ~1,600 GPUs and MIG instances; a handful of distinct values


def test_per_node_matching_agrees_with_templates() -> None:
    """Selectors reading node-specific attributes take the per-node path; both paths must see
    the same devices."""
    fleet = synthetic_fleet(FleetSpec(nodes=120, nodes_per_rack=6), seed=4)
    snap = Snapshot.from_nodes(fleet)
    claims = DeviceClaims.build(fleet, [ALL])
    by_template = claims._index(snap, claim(1), "c")
    by_node = claims._index(snap, claim(1, 'device.attributes["gpu.nvidia.com"].uuid != ""'), "c")
    for field in ("node", "kind", "slot", "inst", "profile", "pair", "pair_node", "node_start"):
        assert np.array_equal(getattr(by_template, field), getattr(by_node, field)), field
    assert by_template.names == by_node.names
    nv = ("gpu.nvidia.com/nvlinkDomain",)
    grouped = claims._index(snap, claim(1, match=nv), "c")
    grouped_node = claims._index(
        snap, claim(1, 'device.attributes["gpu.nvidia.com"].uuid != ""', match=nv), "c"
    )
    assert np.array_equal(grouped.pair, grouped_node.pair)


def test_bad_claims_name_the_field() -> None:
    fleet = small_fleet()
    snap = Snapshot.from_nodes(fleet)
    claims = resolver(fleet)
    with pytest.raises(InvalidValue) as info:
        claims.feasible(snap, (claim(1, cls="tpu.google.com"),))
    assert info.value.field == "claims[0].device_class"
    assert "unknown DeviceClass 'tpu.google.com'" in str(info.value)
    with pytest.raises(InvalidValue) as info:
        claims.feasible(snap, (claim(0),))
    assert info.value.field == "claims[0].count"
    with pytest.raises(InvalidValue):
        place_with_claims(snap, PodRequest(claims=(claim(1),)), make_policy("packing"), None)


@settings(max_examples=25, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.integers(1, 4),
            st.sampled_from([(), ("gpu.nvidia.com/numaNode",), ("gpu.nvidia.com/nvlinkDomain",)]),
            st.sampled_from([(), (H100,), (BIG,)]),
            st.integers(0, 2),
        ),
        min_size=1,
        max_size=15,
    ),
    seed=st.integers(0, 3),
)
def test_claims_never_overcommit_and_release_exactly(ops, seed: int) -> None:
    fleet = synthetic_fleet(FleetSpec(nodes=16, nodes_per_rack=4), seed=seed)
    snap = Snapshot.from_nodes(fleet)
    claims = DeviceClaims.build(fleet, [ALL])
    policy = make_policy("bestfit")
    initial = snap.state()
    live = []
    for i, (count, match, selectors, gpus) in enumerate(ops):
        pod = PodRequest(
            cpu_milli=100,
            gpus=gpus,
            claims=(DeviceClaim("c", "gpu.nvidia.com", count, selectors, match),),
        )
        workload = Workload(f"w{i}", (PodSet("main", 1, pod),))
        before = snap.state()
        result = place_workload(snap, workload, policy, claims=claims)
        if isinstance(result, Unschedulable):
            assert snap.state() == before
            continue
        assert isinstance(result, GangPlacement)
        live.append(result)
        a = result.pods[0].assignment
        claimed = [d for d in a.devices if d.startswith("gpu.nvidia.com/")]
        assert len(claimed) == count
        if match:
            attribute = match[0].split("/")[1]
            node = fleet[a.node]
            values = {
                (
                    node.gpus[int(d.split("/gpu-")[1].split("-")[0])].numa_node
                    if attribute == "numaNode"
                    else node.topology.nvlink_domain
                )
                for d in claimed
            }
            assert len(values) == 1
    devices = [d for r in live for p in r for d in p.assignment.devices if "-ts-" not in d]
    assert len(devices) == len(set(devices))
    taken: dict[tuple[int, int], int] = {}
    for r in live:
        for p in r:
            for g, m in p.assignment.gpu_milli:
                taken[p.assignment.node, g] = taken.get((p.assignment.node, g), 0) + m
    assert all(m <= MILLI for m in taken.values())
    for r in reversed(live):
        release(snap, r, policy)
    assert snap.state() == initial


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**16), st.integers(5, 120))
def test_incremental_claim_filter_equals_a_fresh_one(seed: int, steps: int) -> None:
    """The per-node claim feasibility kept across decisions (recomputed only where the
    snapshot's node versions moved) equals one computed from scratch, through reservations
    and releases."""
    from gpuaas.sim.synthetic import synthetic_device_classes, synthetic_workloads

    fleet = synthetic_fleet(FleetSpec(nodes=64), seed=seed % 5)
    snap = Snapshot.from_nodes(fleet)
    classes = synthetic_device_classes()
    kept = DeviceClaims.build(fleet, classes)
    fresh = DeviceClaims.build(fleet, classes)
    mix = synthetic_workloads(300, seed=seed)
    probes = [c for w in mix for ps in w.pod_sets for c in ps.pod.claims]
    assert probes, "the mix has DRA claims"
    policy = make_policy("packing")
    running: list[GangPlacement] = []
    for i, workload in enumerate(mix[:steps]):
        result = place_workload(snap, workload, policy, claims=kept)
        if isinstance(result, GangPlacement):
            running.append(result)
        if i % 3 == 0 and running:
            release(snap, running.pop(0), policy)
        claim = probes[i % len(probes)]
        fresh._best.clear()
        assert kept.feasible(snap, [claim]).tolist() == fresh.feasible(snap, [claim]).tolist()


def test_a_claim_pod_is_ranked_by_the_whole_gpus_its_claims_take() -> None:
    """Ranked as the CPU-only pod left without its claims, a 2-GPU claim would tie on every
    node and break the first idle 8-GPU node; ranked as 2 whole GPUs, packing puts it on the
    node that has exactly 2 free."""
    fleet = [
        Node(
            name,
            64_000,
            512 * GIB,
            [GPU(g, f"GPU-{name}-{g}", "H100-80GB", 81559) for g in range(8)],
        )
        for name in ("h0", "h1")
    ]
    snap = Snapshot.from_nodes(fleet)
    from gpuaas.engine.snapshot import Assignment

    snap.reserve(1, Assignment(node=1, gpu_milli=tuple((g, MILLI) for g in range(6))))
    claims = resolver(fleet)
    pod = PodRequest(cpu_milli=4000, claims=(claim(2, H100),))
    assert claims.scoring_request(snap, pod) == PodRequest(cpu_milli=4000, gpus=2)
    placed = place_with_claims(snap, pod, make_policy("packing"), claims)
    assert not isinstance(placed, Unschedulable)
    assert placed.node == 1
    assert placed.assignment.gpu_milli == ((6, MILLI), (7, MILLI))  # the claim's own devices
    assert placed.assignment.devices == ("gpu.nvidia.com/h1/gpu-6", "gpu.nvidia.com/h1/gpu-7")
    snap.reserve(placed.node, placed.assignment)
    snap.check_indexes()
    # MIG or time-sliced claim devices have no whole-GPU stand-in: the pod is ranked as it is
    mixed = small_fleet()
    mixed_snap, mixed_claims = Snapshot.from_nodes(mixed), resolver(mixed)
    for cls in ("mig.nvidia.com", "gpu.nvidia.com"):  # the latter matches replicas and MIG too
        pod = PodRequest(cpu_milli=1, claims=(claim(1, cls=cls),))
        assert mixed_claims.scoring_request(mixed_snap, pod) == PodRequest(cpu_milli=1)
    # nor does a pod that asks for GPUs of its own
    own = PodRequest(cpu_milli=1, gpus=1, claims=(claim(1, H100),))
    assert claims.scoring_request(snap, own) == PodRequest(cpu_milli=1, gpus=1)
