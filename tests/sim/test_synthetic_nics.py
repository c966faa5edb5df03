"""Synthetic fleets with RDMA NICs (gpuaas.sim.synthetic): NICs beside the GPUs, one fabric per
block, and a mix whose 8-GPU pods ask one VF per GPU placed aligned, gangs on one fabric."""

from __future__ import annotations

from gpuaas.engine.gang import GangPlacement, place_workload
from gpuaas.engine.policies import make_policy
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.network import Alignment
from gpuaas.sim.synthetic import FleetSpec, WorkloadMix, synthetic_fleet, synthetic_workloads


def test_default_fleets_and_mixes_have_no_nics() -> None:
    assert all(not node.nics and not any(g.pcie_root for g in node.gpus)
               for node in synthetic_fleet(64))  # fmt: skip
    assert all(ps.pod.network is None for w in synthetic_workloads(500) for ps in w.pod_sets)
    # asking no networks leaves the stream as it was (same workloads for the seed)
    mix = synthetic_workloads(300, seed=3, mix=WorkloadMix(network_share=0.0))
    assert [w.name for w in mix] == [w.name for w in synthetic_workloads(300, seed=3)]


def test_nics_sit_beside_their_gpus_and_fabrics_follow_blocks() -> None:
    fleet = synthetic_fleet(FleetSpec(nodes=200, nics_per_node=4, nic_vfs=2), seed=1)
    for node in fleet:
        assert [nic.name for nic in node.nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
        roots = {gpu.pcie_root for gpu in node.gpus}
        assert roots == {nic.pcie_root for nic in node.nics}
        for gpu in node.gpus:
            [nic] = [n for n in node.nics if n.pcie_root == gpu.pcie_root]
            assert nic.numa_node == gpu.numa_node
        assert {nic.fabric for nic in node.nics} == {f"ib-{node.topology.block}"}
    blind = synthetic_fleet(FleetSpec(nodes=16, nics_per_node=2, nic_topology=False))
    assert not any(nic.has_topology for node in blind for nic in node.nics)


def test_a_mix_with_networks_places_aligned_vfs_and_gangs_on_one_fabric() -> None:
    fleet = synthetic_fleet(FleetSpec(nodes=256, nics_per_node=8, nic_vfs=1), seed=2)
    mix = WorkloadMix(claim=0.0, network_share=1.0, network_alignment=Alignment.REQUIRED)
    workloads = synthetic_workloads(300, seed=2, mix=mix)
    snap = Snapshot.from_nodes(fleet)
    policy = make_policy("packing")
    with_nics = 0
    for workload in workloads:
        placed = place_workload(snap, workload, policy)
        if not isinstance(placed, GangPlacement):
            continue
        fabrics = set()
        for pod in placed:
            if pod.pod.network is None:
                continue
            with_nics += 1
            node = fleet[pod.placement.node]
            gpus = [g for g, _ in pod.assignment.gpu_milli]
            assert len(pod.assignment.nics) == len(gpus)
            for j, _ in pod.assignment.nics:
                assert node.nics[j].pcie_root in {node.gpus[g].pcie_root for g in gpus}
            fabrics.add(node.nics[0].fabric)
        assert len(fabrics) <= 1
    snap.check_indexes()
    assert with_nics > 20
