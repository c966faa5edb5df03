"""Admission with known nodes: the placement engine must place what quota admits."""

from __future__ import annotations

import pytest
from admission_builders import make_gov, quota_group
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.admission import AdmissionEngine, NodeCapacity
from gpuaas.engine.admission.gpu_size import GPU_MILLI
from gpuaas.engine.admission.nodes import node_from_capacity
from gpuaas.engine.reasons import Code
from gpuaas.model.devices import GPU, MigInstance, Partition, PartitionMode
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    ClusterQueue,
    EvictionReason,
    FlavorQuotas,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
)
from gpuaas.model.node import Node, Taint, Toleration
from gpuaas.model.topology import Level, Topology
from gpuaas.model.workload import TopologyRequest

GPU_R = "nvidia.com/gpu"
BIG = 10**9


def gpu_gov(flavors: dict[str, dict[str, str]], resources: tuple[str, ...] = (GPU_R,)):
    group = ResourceGroup(
        resources,
        tuple(FlavorQuotas(f, tuple(ResourceQuota(r, BIG) for r in resources)) for f in flavors),
    )
    gov = make_gov([ClusterQueue("a", (group,))])
    for name, labels in flavors.items():
        gov.flavors[name] = ResourceFlavor(name, labels)
    return gov


def job(
    name: str,
    gpus: int,
    count: int = 1,
    created: float = 0.0,
    priority: int = 0,
    **kwargs: object,
) -> AdmissionWorkload:
    return AdmissionWorkload(
        name,
        "ns/a",
        (AdmissionPodSet("main", count, {GPU_R: gpus}, **kwargs),),  # type: ignore[arg-type]
        priority=priority,
        created=created,
    )


def one(name: str, requests: dict[str, int], created: float = 0.0) -> AdmissionWorkload:
    return AdmissionWorkload(name, "ns/a", (AdmissionPodSet("main", 1, requests),), created=created)


def milli_cq(nominal: int) -> ClusterQueue:
    flavor = FlavorQuotas("default", (ResourceQuota(GPU_MILLI, nominal),))
    return ClusterQueue("a", (ResourceGroup((GPU_MILLI,), (flavor,)),))


def gpu_nodes(n: int, labels: dict[str, str] | None = None, gpus: int = 8) -> list[NodeCapacity]:
    return [NodeCapacity(f"n{i}", dict(labels or {}), {GPU_R: gpus}) for i in range(n)]


def test_a_gang_is_admitted_whole_or_not_at_all() -> None:
    engine = AdmissionEngine(gpu_gov({"default": {}}), nodes=gpu_nodes(2))
    engine.submit(job("big", 8, count=3))  # 24 GPUs on 16: quota says yes, nodes say no
    engine.submit(job("fits", 8, count=2, created=1))
    engine.run(1)
    assert sorted(engine.admitted) == ["fits"]
    assert "do not fit on the nodes" in engine.reasons["big"]
    why = engine.why["big"]  # the same reason, structured: the fleet lacks GPUs
    assert why.code is Code.INSUFFICIENT_GPU
    assert why.fields["flavors"] == {"main": {GPU_R: "default"}}
    assert why.render() == engine.reasons["big"]
    placement = engine.admitted["fits"].placement
    assert placement is not None and sorted(placement.nodes["main"]) == ["n0", "n1"]
    assert engine.pool is not None
    assert engine.pool.used("n0")[GPU_MILLI] == 8000  # nothing left over from "big"


def test_a_gang_with_enough_gpus_in_all_but_not_per_node_waits_as_not_whole() -> None:
    engine = AdmissionEngine(gpu_gov({"default": {}}), nodes=gpu_nodes(2))
    engine.submit(job("spread", 5, count=3))  # 15 GPUs of 16 free, but one 5-GPU pod per node
    engine.run(1)
    why = engine.why["spread"]
    assert why.code is Code.GANG_NOT_WHOLE
    assert "gang spread: pod set main" in why.fields["detail"]
    assert why.render() == engine.reasons["spread"]


def test_candidates_are_the_nodes_of_the_assigned_flavor() -> None:
    gov = gpu_gov({"h100": {"gpu": "h100"}, "a100": {"gpu": "a100"}})
    nodes = [*gpu_nodes(1, {"gpu": "a100"}), NodeCapacity("h0", {"gpu": "h100"}, {GPU_R: 4})]
    engine = AdmissionEngine(gov, nodes=nodes)
    engine.submit(job("w0", 4))
    engine.submit(job("w1", 4, created=1))
    engine.run(1)
    assert engine.admitted["w0"].flavors["main"][GPU_R] == "h100"
    assert engine.admitted["w0"].placement.nodes == {"main": ["h0"]}  # type: ignore[union-attr]
    # h100's only node is full: physical fit moves w1 to the next flavor
    assert engine.admitted["w1"].flavors["main"][GPU_R] == "a100"
    assert engine.admitted["w1"].placement.nodes == {"main": ["n0"]}  # type: ignore[union-attr]


def test_taints_need_tolerations_from_the_pod_or_the_flavor() -> None:
    taint = Taint("dedicated", "ml")
    gov = gpu_gov({"default": {}})
    nodes = [NodeCapacity("t0", {}, {GPU_R: 8}, (taint,))]
    engine = AdmissionEngine(gov, nodes=nodes)
    engine.submit(job("plain", 1))
    engine.submit(job("tolerant", 1, created=1, tolerations=(Toleration("dedicated", "Exists"),)))
    engine.run(1)
    assert sorted(engine.admitted) == ["tolerant"]
    assert "untolerated taint" in engine.reasons["plain"]
    assert engine.why["plain"].code is Code.TAINT
    assert engine.why["plain"].fields["rejected"] == {"Taint": 1}
    gov.flavors["default"] = ResourceFlavor(
        "default", tolerations=(Toleration("dedicated", "Exists"),)
    )
    engine2 = AdmissionEngine(gov, nodes=nodes)
    engine2.submit(job("plain", 1))
    engine2.run(0)
    assert sorted(engine2.admitted) == ["plain"]


def test_eviction_releases_the_nodes() -> None:
    engine = AdmissionEngine(gpu_gov({"default": {}}), nodes=gpu_nodes(1))
    engine.submit(job("w0", 8))
    engine.submit(job("w1", 8, created=1))
    engine.run(1)
    assert sorted(engine.admitted) == ["w0"]
    engine.evict("w0", EvictionReason.IN_CLUSTER_QUEUE)
    assert engine.pool is not None and engine.pool.used("n0")[GPU_MILLI] == 0
    engine.run(2)
    assert "w0" in engine.admitted  # older, so it comes back first
    assert engine.pool.used("n0")[GPU_MILLI] == 8000


def test_required_topology_keeps_a_gang_in_one_rack() -> None:
    nodes = [
        Node(
            f"n{i}",
            64_000,
            2**40,
            [GPU(g, f"u{i}-{g}", "H100-80GB", 81559) for g in range(8)],
            Topology(rack=f"rack-{i // 2}"),
        )
        for i in range(4)
    ]
    engine = AdmissionEngine(gpu_gov({"default": {}}), nodes=nodes)
    engine.submit(job("filler", 8))
    engine.submit(
        job("gang", 8, count=2, created=1, topology=TopologyRequest(Level.RACK)),
    )
    engine.submit(
        job("too-wide", 8, count=3, created=2, topology=TopologyRequest(Level.RACK)),
    )
    engine.run(2)
    assert sorted(engine.admitted) == ["filler", "gang"]
    placement = engine.admitted["gang"].placement
    assert placement is not None
    racks = {nodes[int(name[1:])].topology.rack for name in placement.nodes["main"]}
    assert len(racks) == 1
    assert engine.pending_names() == ["too-wide"]


def mig_node(name: str, gpus: int = 1) -> Node:
    instances = tuple(MigInstance(k, 1, "1g.10gb", 1) for k in range(7))
    part = Partition(mode=PartitionMode.MIG, instances=instances)
    return Node(
        name, 64_000, 2**40, [GPU(g, f"{name}-{g}", "H100-80GB", 81559, part) for g in range(gpus)]
    )


def test_mig_instances_are_placed_and_charged_by_size() -> None:
    mig = "nvidia.com/mig-1g.10gb"
    group = ResourceGroup(
        (GPU_MILLI,), (FlavorQuotas("default", (ResourceQuota(GPU_MILLI, 2000),)),)
    )
    engine = AdmissionEngine(make_gov([ClusterQueue("a", (group,))]), nodes=[mig_node("m0")])
    for i in range(8):
        engine.submit(
            AdmissionWorkload(f"w{i}", "ns/a", (AdmissionPodSet("main", 1, {mig: 1}),), created=i)
        )
    engine.run(8)
    # quota (2 GPUs' worth) would take 14; the node has 7 instances
    assert sorted(engine.admitted) == [f"w{i}" for i in range(7)]
    assert "MIG" in engine.reasons["w7"]


def test_gpu_shares_pack_onto_one_gpu() -> None:
    group = ResourceGroup(
        (GPU_MILLI,), (FlavorQuotas("default", (ResourceQuota(GPU_MILLI, BIG),)),)
    )
    engine = AdmissionEngine(make_gov([ClusterQueue("a", (group,))]), nodes=gpu_nodes(1, gpus=1))
    for i in range(5):
        engine.submit(
            AdmissionWorkload(
                f"s{i}", "ns/a", (AdmissionPodSet("main", 1, {GPU_MILLI: 250}),), created=i
            )
        )
    engine.run(5)
    assert sorted(engine.admitted) == ["s0", "s1", "s2", "s3"]


def test_extended_resources_are_checked_against_node_extras() -> None:
    fpga = "example.com/fpga"
    gov = make_gov([ClusterQueue("a", (quota_group(fpga, [("default", 10, None, None)]),))])
    engine = AdmissionEngine(gov, nodes=[NodeCapacity("f0", {}, {fpga: 2, "cpu": 8000})])
    for i in range(3):
        engine.submit(
            AdmissionWorkload(f"w{i}", "ns/a", (AdmissionPodSet("main", 1, {fpga: 1}),), created=i)
        )
    engine.run(3)
    assert sorted(engine.admitted) == ["w0", "w1"]
    assert "example.com/fpga" in engine.reasons["w2"]


def test_node_capacity_builds_mig_gpus_by_geometry() -> None:
    node = node_from_capacity(
        "x", {}, {GPU_R: 1, "nvidia.com/mig-1g.10gb": 9, "nvidia.com/mig-3g.40gb": 2}
    )
    per_gpu = [
        (g.partition.mode, len(g.partition.instances), {i.profile for i in g.partition.instances})
        for g in node.gpus
    ]
    assert per_gpu == [
        (PartitionMode.WHOLE, 0, set()),
        (PartitionMode.MIG, 7, {"1g.10gb"}),
        (PartitionMode.MIG, 2, {"1g.10gb"}),
        (PartitionMode.MIG, 2, {"3g.40gb"}),
    ]
    with pytest.raises(InvalidValue, match=r"node x: capacity\.nvidia\.com/mig-bogus"):
        node_from_capacity("x", {}, {"nvidia.com/mig-bogus": 7})
    with pytest.raises(InvalidValue, match=r"node x: capacity\.gpuaas\.io/gpu-milli"):
        node_from_capacity("x", {}, {GPU_MILLI: 500})


def test_scenario_nodes_with_mig_capacity_take_mig_pods() -> None:
    mig = "nvidia.com/mig-1g.10gb"
    nodes = [NodeCapacity("m0", {}, {mig: 3})]
    engine = AdmissionEngine(make_gov([milli_cq(BIG)]), nodes=nodes)
    for i in range(4):
        engine.submit(one(f"w{i}", {mig: 1}, created=i))
    engine.run(4)
    assert sorted(engine.admitted) == ["w0", "w1", "w2"]


def test_two_gpu_forms_in_one_pod_are_rejected_at_submit() -> None:
    engine = AdmissionEngine(gpu_gov({"default": {}}, (GPU_R, GPU_MILLI)), nodes=gpu_nodes(1))
    with pytest.raises(InvalidValue, match="one GPU form"):
        engine.submit(
            AdmissionWorkload(
                "w", "ns/a", (AdmissionPodSet("main", 1, {GPU_R: 1, GPU_MILLI: 500}),)
            )
        )


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from((1, 2, 4, 8)), st.integers(1, 3), st.integers(0, 2)),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.integers(0, 11), max_size=4),
)
def test_nodes_are_never_overcommitted_and_usage_matches(
    jobs: list[tuple[int, int, int]], evict: list[int]
) -> None:
    engine = AdmissionEngine(gpu_gov({"default": {}}), nodes=gpu_nodes(3))
    for i, (gpus, count, priority) in enumerate(jobs):
        engine.submit(job(f"w{i}", gpus, count=count, created=i, priority=priority))
    engine.run(len(jobs))
    for name in evict:
        if f"w{name}" in engine.admitted:
            engine.evict(f"w{name}", EvictionReason.IN_CLUSTER_QUEUE)
    engine.run(len(jobs) + 1)
    assert engine.pool is not None
    per_node = {f"n{i}": 0 for i in range(3)}
    for aw in engine.admitted.values():
        assert aw.placement is not None
        gpus = aw.workload.pod_sets[0].requests[GPU_R]
        for node in aw.placement.nodes["main"]:
            per_node[node] += gpus * 1000
    for node, used in per_node.items():
        assert used <= 8000
        assert engine.pool.used(node)[GPU_MILLI] == used


def test_finish_gives_back_quota_and_nodes() -> None:
    engine = AdmissionEngine(gpu_gov({"default": {}}), nodes=gpu_nodes(1))
    engine.submit(job("w0", 8))
    engine.submit(job("w1", 8, created=1))
    engine.run(1)
    engine.finish("w0")
    assert "w0" not in engine.pending_names() and engine.evictions == []
    engine.run(2)
    assert sorted(engine.admitted) == ["w1"]
    with pytest.raises(InvalidValue, match="workload w0: is not admitted"):
        engine.finish("w0")


def test_only_the_pod_set_that_does_not_fit_moves_to_the_next_flavor() -> None:
    gov = gpu_gov({"h100": {"gpu": "h100"}, "a100": {"gpu": "a100"}})
    nodes = [
        NodeCapacity("h0", {"gpu": "h100"}, {GPU_R: 8}),
        NodeCapacity("h1", {"gpu": "h100"}, {GPU_R: 8}),
        *(NodeCapacity(f"a{i}", {"gpu": "a100"}, {GPU_R: 8}) for i in range(2)),
    ]
    engine = AdmissionEngine(gov, nodes=nodes)
    engine.submit(job("filler", 4))
    engine.submit(
        AdmissionWorkload(
            "train",
            "ns/a",
            (AdmissionPodSet("driver", 1, {GPU_R: 1}), AdmissionPodSet("workers", 2, {GPU_R: 8})),
            created=1,
        )
    )
    engine.run(1)
    aw = engine.admitted["train"]
    assert aw.flavors == {"driver": {GPU_R: "h100"}, "workers": {GPU_R: "a100"}}
    assert aw.placement is not None and sorted(aw.placement.nodes["workers"]) == ["a0", "a1"]


def _l40s_node(
    name: str,
    labels: dict[str, str],
    replicas: int,
    shared: PartitionMode = PartitionMode.TIME_SLICED,
) -> Node:
    mode = shared if replicas else PartitionMode.WHOLE
    partition = Partition(mode, replicas=replicas) if replicas else Partition(mode)
    gpus = [GPU(i, f"GPU-{name}-{i}", "L40S", 46_068, partition) for i in range(2)]
    return Node(name, 64_000, 256 * 2**30, gpus, labels=labels)


@pytest.mark.parametrize("shared", [PartitionMode.TIME_SLICED, PartitionMode.MPS])
def test_nvidia_gpu_on_a_time_sliced_flavor_takes_replicas(shared: PartitionMode) -> None:
    # The GPU operator advertises each time-slice replica as one nvidia.com/gpu: on a flavor
    # whose GPUs are all time-sliced, four jobs of 2 fit on two GPUs of 4 replicas each. MPS
    # clients are advertised the same way (each one a share of memory and SMs) and count alike.
    gov = gpu_gov({"shared": {"pool": "shared"}, "whole": {"pool": "whole"}})
    nodes = [
        _l40s_node("ts-0", {"pool": "shared"}, replicas=4, shared=shared),
        _l40s_node("w-0", {"pool": "whole"}, replicas=0),
    ]
    engine = AdmissionEngine(gov, nodes=nodes)
    for i in range(4):
        engine.submit(job(f"j{i}", 2, created=float(i)))
    engine.run(0.0)
    placed = {name: aw.placement for name, aw in engine.admitted.items()}
    assert sorted(placed) == ["j0", "j1", "j2", "j3"]
    on_shared = [n for n, p in placed.items() if p is not None and p.nodes["main"] == ["ts-0"]]
    assert len(on_shared) == 4
    for name in on_shared:
        assignment = placed[name].gang.pods[0].assignment  # type: ignore[union-attr]
        assert assignment.replicas and not assignment.gpu_milli
