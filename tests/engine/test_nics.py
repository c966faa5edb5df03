"""RDMA NICs in placement: VFs as one more fit rule, alignment with the GPUs, gangs on one
fabric, reservations and fleet changes (gpuaas.engine.nics, gpuaas.engine.nic_placement)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.gang import GangPlacement, place_workload, release
from gpuaas.engine.nics import NicIndex, device_name
from gpuaas.engine.place import Placement, Unschedulable, place_pod, reserve, unreserve
from gpuaas.engine.policies import make_policy
from gpuaas.engine.reasons import Code
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.devices import GPU
from gpuaas.model.network import Alignment, NetworkRequest, Nic
from gpuaas.model.node import Node
from gpuaas.model.workload import PodRequest, PodSet, Workload

POOL = "openshift.io/mlnx_ib"


def nic_node(
    name: str,
    gpus: int = 8,
    nics: int = 4,
    vfs: int = 2,
    fabric: str = "fab-a",
    topology: bool = True,
    pool: str = POOL,
) -> Node:
    """A node with ``gpus`` GPUs on ``nics`` PCIe roots (GPUs spread evenly), one NIC per root,
    two NUMA nodes (roots split in halves)."""
    per_root = max(gpus // nics, 1)
    half = max(nics // 2, 1)
    gpu_list = [
        GPU(g, f"GPU-{name}-{g}", "H100", 81920, numa_node=(g // per_root) // half,
            pcie_root=f"pci-{g // per_root}")
        for g in range(gpus)
    ]  # fmt: skip
    nic_list = [
        Nic(
            name=f"mlx5_{k}",
            pool=pool,
            vfs=vfs,
            pcie_root=f"pci-{k}" if topology else "",
            numa_node=k // half if topology else None,
            rail=f"rail-{k}",
            fabric=fabric,
            pci_address=f"0000:{k + 10:02x}:00.0",
        )
        for k in range(nics)
    ]
    return Node(name, 64000, 512 << 30, gpu_list, nics=nic_list)


def pod(gpus: int, count: int = 0, per_gpu: bool = False, align: str = "required") -> PodRequest:
    net = NetworkRequest(POOL, count, per_gpu, Alignment(align))
    return PodRequest(cpu_milli=1000, gpus=gpus, network=net)


def aligned(snap: Snapshot, p: Placement, per_gpu: bool) -> bool:
    """Every VF shares a PCIe root or NUMA node with the pod's GPUs (per GPU with perGpu)."""
    n = p.node
    nics = snap.nics.nics[n]
    topo = snap.nics.gpus[n]
    gpus = [g for g, _ in p.assignment.gpu_milli]
    taken = [nics[j] for j, _ in p.assignment.nics]
    if not gpus:
        return True  # a pod without GPUs is aligned wherever it lands

    def ok(nic: Nic, g: int) -> bool:
        root, numa = topo[g]
        return (nic.pcie_root and nic.pcie_root == root) or nic.numa_node == numa

    if per_gpu:
        # a perfect matching exists iff greedy by finest tier succeeds; check by brute force
        from itertools import permutations

        return any(
            all(ok(nic, g) for nic, g in zip(perm, gpus, strict=True))
            for perm in permutations(taken)
        )
    return all(any(ok(nic, g) for g in gpus) for nic in taken)


def test_per_gpu_pod_gets_one_aligned_vf_per_gpu() -> None:
    snap = Snapshot.from_nodes([nic_node("n0")])
    result = place_pod(snap, pod(2, per_gpu=True), make_policy("packing"))
    assert isinstance(result, Placement)
    a = result.assignment
    assert len(a.nics) == 2
    assert aligned(snap, result, per_gpu=True)
    names = snap.nics.devices(0, a.nics)
    assert all(name.startswith("mlx5_") and "-vf-" in name for name in names)


def test_policy_gpus_are_chosen_again_to_align() -> None:
    # GPUs 0-1 sit on pci-0, whose NIC has no VF left: a 2-GPU pod must move to other GPUs
    snap = Snapshot.from_nodes([nic_node("n0", vfs=1)])
    first = place_pod(snap, pod(0, count=1, align="none"), make_policy("packing"))
    assert isinstance(first, Placement)
    assert first.assignment.nics == ((0, 0),)
    reserve(snap, PodRequest(), first, None)
    result = place_pod(snap, pod(2, per_gpu=True), make_policy("packing"))
    assert isinstance(result, Placement)
    assert aligned(snap, result, per_gpu=True)
    assert 0 not in [g for g, _ in result.assignment.gpu_milli]


def test_required_alignment_waits_with_a_reason_preferred_and_none_land() -> None:
    snap = Snapshot.from_nodes([nic_node("n0", topology=False)])
    policy = make_policy("packing")
    result = place_pod(snap, pod(2, count=1), policy)
    assert isinstance(result, Unschedulable)
    assert result.code is Code.NIC_ALIGNMENT
    assert "aligned" in result.reason
    for align in ("preferred", "none"):
        assert isinstance(place_pod(snap, pod(2, count=1, align=align), policy), Placement)


def test_preferred_prefers_the_aligned_node() -> None:
    snap = Snapshot.from_nodes([nic_node("a", topology=False), nic_node("b")])
    result = place_pod(snap, pod(1, count=1, align="preferred"), make_policy("packing"))
    assert isinstance(result, Placement) and result.node_name == "b"


def test_too_few_vfs_is_insufficient_nic() -> None:
    snap = Snapshot.from_nodes([nic_node("n0", nics=1, vfs=1)])
    result = place_pod(snap, pod(1, count=2, align="none"), make_policy("packing"))
    assert isinstance(result, Unschedulable)
    assert result.code is Code.INSUFFICIENT_NIC
    assert POOL in result.reason


def test_unknown_pool_fits_nowhere_and_pods_without_nics_cost_no_nic_state() -> None:
    snap = Snapshot.from_nodes([nic_node("n0")])
    net = NetworkRequest("nvidia.com/other", 1)
    result = place_pod(snap, PodRequest(gpus=1, network=net), make_policy("packing"))
    assert isinstance(result, Unschedulable) and result.code is Code.INSUFFICIENT_NIC
    plain = place_pod(snap, PodRequest(gpus=1), make_policy("packing"))
    assert isinstance(plain, Placement) and plain.assignment.nics == ()
    assert Snapshot.from_nodes([Node("x", 1000, 1 << 30)]).nics.pool_free == {}


def test_any_pool_takes_rdma_nics_only() -> None:
    node = nic_node("n0", nics=2)
    node.nics.append(Nic("eth0", "example.com/eth", rdma=False, vfs=8, numa_node=0))
    snap = Snapshot.from_nodes([node])
    net = NetworkRequest("", 3, alignment=Alignment.NONE)
    result = place_pod(snap, PodRequest(gpus=1, network=net), make_policy("packing"))
    assert isinstance(result, Placement)
    assert {j for j, _ in result.assignment.nics} <= {0, 1}
    assert int(snap.nics.free_of("")[0]) == 4


def test_gang_prefers_one_fabric() -> None:
    nodes = [nic_node("a0", fabric="fab-a"), nic_node("b0", fabric="fab-b")]
    nodes += [nic_node("b1", fabric="fab-b")]
    snap = Snapshot.from_nodes(nodes)
    wl = Workload("g", (PodSet("w", 2, pod(8, per_gpu=True, align="preferred")),))
    result = place_workload(snap, wl, make_policy("packing"))
    assert isinstance(result, GangPlacement)
    assert sorted(snap.names[n] for n in result.nodes) == ["b0", "b1"]
    assert ("w", "fabric fab-b") in result.scopes


def test_reserve_unreserve_and_fleet_changes_keep_the_index() -> None:
    snap = Snapshot.from_nodes([nic_node("n0"), nic_node("n1")])
    before = snap.state()
    policy = make_policy("packing")
    result = place_pod(snap, pod(4, per_gpu=True), policy)
    assert isinstance(result, Placement)
    copy = snap.copy()
    reserve(snap, pod(4, per_gpu=True), result, policy)
    snap.check_indexes()
    assert copy.state() == before  # a copy never sees the other's reservations
    assert snap.holds_reservation(result.node)
    unreserve(snap, pod(4, per_gpu=True), result, policy)
    assert snap.state() == before
    snap.remove_node(0)
    snap.check_indexes()
    snap.add_nodes([nic_node("n2", nics=2, vfs=4)])
    snap.check_indexes()
    snap.replace_node(1, nic_node("n1", nics=1, vfs=1))
    snap.check_indexes()
    fresh = Snapshot.from_nodes([nic_node("n2", nics=2, vfs=4), nic_node("n1", nics=1, vfs=1)])
    assert snap.canonical() == fresh.canonical()


def test_index_device_names() -> None:
    whole = Nic("mlx5_0", POOL, vfs=1)
    assert device_name(whole, 0) == "mlx5_0"
    assert device_name(Nic("mlx5_1", POOL, vfs=4), 3) == "mlx5_1-vf-3"
    assert NicIndex.build([]).free_of(POOL) is None


# ------------------------------------------------------------------ properties
requests = st.tuples(
    st.integers(0, 4),  # GPUs
    st.integers(0, 3),  # count (0 = perGpu)
    st.sampled_from(["required", "preferred", "none"]),
)


@settings(max_examples=60, deadline=None)
@given(
    fleet=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 3), st.booleans()), min_size=1, max_size=4
    ),
    pods=st.lists(requests, min_size=1, max_size=20),
    release_every=st.integers(2, 5),
)
def test_no_vf_twice_and_required_alignment_holds(
    fleet: list[tuple[int, int, bool]], pods: list[tuple[int, int, str]], release_every: int
) -> None:
    nodes = [
        nic_node(f"n{i}", gpus=8, nics=nics, vfs=vfs, topology=topo)
        for i, (nics, vfs, topo) in enumerate(fleet)
    ]
    snap = Snapshot.from_nodes(nodes)
    policy = make_policy("packing")
    held: list[tuple[PodRequest, Placement]] = []
    for k, (gpus, count, align) in enumerate(pods):
        request = pod(gpus, count=count, per_gpu=count == 0, align=align)
        result = place_pod(snap, request, policy)
        if isinstance(result, Placement):
            if align == "required":
                assert aligned(snap, result, per_gpu=count == 0)
            reserve(snap, request, result, policy)
            held.append((request, result))
        if k % release_every == release_every - 1 and held:
            request, done = held.pop(0)
            unreserve(snap, request, done, policy)
        taken = [(p.node, j, vf) for _, p in held for j, vf in p.assignment.nics]
        assert len(taken) == len(set(taken))
        snap.check_indexes()
        for n, rows in snap.nics.free.items():
            free = {(n, j, vf) for j, vfs in enumerate(rows) for vf in vfs}
            assert not free & set(taken)
            total = sum(nic.vfs for nic in snap.nics.nics[n])
            assert len(free) + sum(1 for t in taken if t[0] == n) == total


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(1, 4),
    per_pod=st.integers(1, 8),
    vfs=st.integers(1, 3),
    nodes=st.integers(1, 4),
)
def test_gangs_whole_or_not_at_all(count: int, per_pod: int, vfs: int, nodes: int) -> None:
    snap = Snapshot.from_nodes([nic_node(f"n{i}", vfs=vfs) for i in range(nodes)])
    before = snap.state()
    wl = Workload("g", (PodSet("w", count, pod(per_pod, per_gpu=True)),))
    result = place_workload(snap, wl, make_policy("packing"))
    if isinstance(result, Unschedulable):
        assert snap.state() == before
        return
    assert len(result) == count
    taken = [(p.placement.node, j, vf) for p in result for j, vf in p.assignment.nics]
    assert len(taken) == len(set(taken)) == count * per_pod
    release(snap, result)
    assert snap.state() == before
    assert np.all(snap.nics.free_of(POOL) == 4 * vfs)


def test_two_mig_instances_per_gpu_want_two_vfs_beside_it() -> None:
    from gpuaas.model.devices import MigInstance, Partition, PartitionMode

    node = nic_node("n0", gpus=2, nics=2, vfs=2)
    mig = Partition(
        mode=PartitionMode.MIG,
        instances=(MigInstance(0, 1, "1g.10gb", 1), MigInstance(1, 1, "1g.10gb", 1)),
    )
    node.gpus = [GPU(g.index, g.uuid, g.model, g.memory_mib, mig, g.numa_node, g.pcie_root)
                 for g in node.gpus]  # fmt: skip
    snap = Snapshot.from_nodes([node])
    net = NetworkRequest(POOL, per_gpu=True, alignment=Alignment.REQUIRED)
    request = PodRequest(mig=(("1g.10gb", 2),), network=net)
    result = place_pod(snap, request, make_policy("packing"))
    assert isinstance(result, Placement)
    assert len(result.assignment.nics) == 2
    gpus = {g for g, _ in result.assignment.mig}
    roots = {snap.nics.gpus[0][g][0] for g in gpus}
    assert {snap.nics.nics[0][j].pcie_root for j, _ in result.assignment.nics} <= roots
