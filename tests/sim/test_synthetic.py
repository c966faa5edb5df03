"""The synthetic fleet and workload mix: shape, validity and determinism."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.model.devices import PartitionMode
from gpuaas.model.errors import InvalidValue
from gpuaas.model.topology import Level
from gpuaas.model.workload import TopologyMode
from gpuaas.sim.synthetic import (
    B200,
    SINGLE_POD_KINDS,
    FleetSpec,
    WorkloadMix,
    is_gang,
    synthetic_fleet,
    synthetic_workloads,
)
from gpuaas.supply.mig import check_layout


def test_fleet_shape_and_determinism() -> None:
    nodes = synthetic_fleet(FleetSpec(nodes=200), seed=3)
    assert len(nodes) == 200
    assert all(len(node.gpus) == 8 for node in nodes)
    assert len({node.name for node in nodes}) == 200
    assert len({gpu.uuid for node in nodes for gpu in node.gpus}) == 1600
    again = synthetic_fleet(FleetSpec(nodes=200), seed=3)
    assert [(n.name, n.gpu_model, n.gpus[0].partition) for n in nodes] == [
        (n.name, n.gpu_model, n.gpus[0].partition) for n in again
    ]
    other = synthetic_fleet(FleetSpec(nodes=200), seed=4)
    assert [n.gpu_model for n in nodes] != [n.gpu_model for n in other]


def test_racks_are_one_sku_and_domains_nest() -> None:
    spec = FleetSpec(nodes=700, nodes_per_rack=10, racks_per_block=4, blocks_per_zone=3)
    nodes = synthetic_fleet(spec, seed=1)
    models: dict[str, set[str]] = defaultdict(set)
    parent: dict[tuple[Level, str], set[str]] = defaultdict(set)
    per_rack = Counter(node.topology.rack for node in nodes)
    for node in nodes:
        t = node.topology
        models[t.rack].add(node.gpu_model)
        parent[Level.RACK, t.rack].add(t.block)
        parent[Level.BLOCK, t.block].add(t.zone)
        parent[Level.NVLINK, t.nvlink_domain].add(t.rack)
        assert node.labels[Level.RACK.value] == t.rack
        assert node.labels[Level.HOSTNAME.value] == node.name
    assert all(len(m) == 1 for m in models.values())
    assert all(len(p) == 1 for p in parent.values())
    assert max(per_rack.values()) == 10
    assert len({n.topology.block for n in nodes}) == 18  # 70 racks / 4 per block
    assert len({n.topology.zone for n in nodes}) == 6


def test_nvlink_domains_multi_node_only_on_b200() -> None:
    spec = FleetSpec(nodes=400, model_shares=((B200, 0.5), ("L40S", 0.5)))
    nodes = synthetic_fleet(spec, seed=2)
    members: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        members[node.topology.nvlink_domain].append(node.gpu_model)
    for models in members.values():
        if models[0] == B200:
            assert len(models) <= spec.nvlink_nodes_b200
        else:
            assert len(models) == 1
    assert any(len(m) == spec.nvlink_nodes_b200 for m in members.values())


def test_partitions_are_valid_and_mixed() -> None:
    nodes = synthetic_fleet(FleetSpec(nodes=2000), seed=0)
    modes = Counter(node.gpus[0].partition.mode for node in nodes)
    assert modes[PartitionMode.MIG] > 0
    assert modes[PartitionMode.TIME_SLICED] > 0
    assert modes[PartitionMode.WHOLE] > modes[PartitionMode.MIG]
    for node in nodes:
        partition = node.gpus[0].partition
        if partition.mode is PartitionMode.MIG:
            check_layout(node.gpu_model, partition.instances)  # raises if invalid
            assert node.labels["nvidia.com/mig.config"] == partition.config
        if partition.mode is PartitionMode.TIME_SLICED:
            assert node.gpu_model == "L40S"
            assert partition.replicas == 4


def test_model_shares_are_respected() -> None:
    nodes = synthetic_fleet(FleetSpec(nodes=16_000), seed=0)
    counts = Counter(node.gpu_model for node in nodes)
    for model, share in FleetSpec(nodes=1).model_shares:
        assert abs(counts[model] / len(nodes) - share) < 0.05, model


@pytest.mark.parametrize(
    "spec, field",
    [
        (FleetSpec(nodes=0), "nodes"),
        (FleetSpec(nodes=5, nodes_per_rack=0), "nodes_per_rack"),
        (FleetSpec(nodes=5, model_shares=(("Z9", 1.0),)), "model_shares"),
        (FleetSpec(nodes=5, mig_node_share=1.5), "mig_node_share"),
    ],
)
def test_bad_fleet_spec_names_the_field(spec: FleetSpec, field: str) -> None:
    with pytest.raises(InvalidValue) as info:
        synthetic_fleet(spec)
    assert info.value.field == field


def test_workload_mix() -> None:
    workloads = synthetic_workloads(5000, seed=7)
    assert len({w.name for w in workloads}) == 5000
    kinds = Counter(w.labels["kind"] for w in workloads)
    weights = dict(WorkloadMix().kinds())
    total = sum(weights.values())
    for kind, weight in weights.items():
        assert abs(kinds[kind] / 5000 - weight / total) < 0.03, kind
    for w in workloads:
        kind = w.labels["kind"]
        assert is_gang(w) == (kind not in SINGLE_POD_KINDS)
        pod = w.pod_sets[-1].pod
        if kind == "fractional":
            assert pod.gpus == 1 and 0 < pod.gpu_milli < 1000
        if kind == "mig":
            assert len(pod.mig) == 1
        if kind == "claim":
            assert pod.claims[0].match_attributes == ("gpu.nvidia.com/nvlinkDomain",)
        if kind == "gang_nvlink":
            assert pod.gpu_models == frozenset({B200})
            assert w.pod_sets[0].topology is not None
            assert w.pod_sets[0].topology.level is Level.NVLINK
        if kind in ("gang_sets", "gang_rack") and pod.gpus == 8:
            for pod_set in w.pod_sets:
                assert pod_set.topology is not None
                assert pod_set.topology.level is Level.RACK
                assert pod_set.topology.mode is TopologyMode.REQUIRED
                assert pod_set.count <= WorkloadMix().max_gang_pods
    assert synthetic_workloads(300, seed=7) == workloads[:300]


def test_identical_requests_are_shared() -> None:
    workloads = synthetic_workloads(2000, seed=1)
    pods = {id(ps.pod) for w in workloads for ps in w.pod_sets}
    assert len(pods) < 100


def test_bad_mix_is_rejected() -> None:
    with pytest.raises(InvalidValue):
        synthetic_workloads(10, mix=WorkloadMix(one_gpu=-1))
    with pytest.raises(InvalidValue):
        synthetic_workloads(-1)
    with pytest.raises(InvalidValue):
        synthetic_workloads(10, mix=WorkloadMix(max_gang_pods=1))


@settings(max_examples=25, deadline=None)
@given(
    nodes=st.integers(1, 120),
    per_rack=st.integers(1, 20),
    racks=st.integers(1, 6),
    blocks=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_any_spec_gives_a_consistent_hierarchy(
    nodes: int, per_rack: int, racks: int, blocks: int, seed: int
) -> None:
    spec = FleetSpec(
        nodes=nodes, nodes_per_rack=per_rack, racks_per_block=racks, blocks_per_zone=blocks
    )
    fleet = synthetic_fleet(spec, seed=seed)
    assert len(fleet) == nodes
    racks_seen = Counter(node.topology.rack for node in fleet)
    assert max(racks_seen.values()) <= per_rack
    blocks_seen: dict[str, set[str]] = defaultdict(set)
    for node in fleet:
        blocks_seen[node.topology.block].add(node.topology.rack)
    assert max(len(r) for r in blocks_seen.values()) <= racks
