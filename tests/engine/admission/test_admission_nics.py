"""NIC VFs at admission: quota covers them as the pool's resource, the node pool places them,
and a recorded placement is reserved again on exactly the same VFs (never one twice)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.admission.cycle import AdmissionEngine
from gpuaas.engine.admission.restore import PlacementLost, record, restore, typed_pods
from gpuaas.engine.nics import ANY_POOL_RESOURCE
from gpuaas.model.devices import GPU
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    ClusterQueue,
    FlavorQuotas,
    Governance,
    LocalQueue,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
)
from gpuaas.model.network import Alignment, NetworkRequest, Nic
from gpuaas.model.node import Node
from gpuaas.model.placement import DeviceKind
from gpuaas.model.resources import CPU, NVIDIA_GPU

POOL = "openshift.io/mlnx_ib"


def node(name: str, vfs: int = 2) -> Node:
    gpus = [GPU(g, f"GPU-{name}-{g}", "H100", 81920, numa_node=g // 2, pcie_root=f"pci-{g // 2}")
            for g in range(4)]  # fmt: skip
    nics = [Nic(f"mlx5_{k}", POOL, vfs=vfs, pcie_root=f"pci-{k}", numa_node=k,
                pci_address=f"0000:1{k}:00.0") for k in range(2)]  # fmt: skip
    return Node(name, 64000, 512 << 30, gpus, nics=nics)


def gov(vf_quota: int | None, resource: str = POOL) -> Governance:
    quotas = [ResourceQuota(CPU, 1_000_000), ResourceQuota(NVIDIA_GPU, 1000)]
    covered = [CPU, NVIDIA_GPU]
    if vf_quota is not None:
        quotas.append(ResourceQuota(resource, vf_quota))
        covered.append(resource)
    g = Governance()
    g.flavors["f"] = ResourceFlavor("f")
    group = ResourceGroup(tuple(covered), (FlavorQuotas("f", tuple(quotas)),))
    g.cluster_queues["cq"] = ClusterQueue("cq", (group,))
    lq = LocalQueue("lq", "ns", "cq")
    g.local_queues[lq.key] = lq
    g.validate()
    return g


def workload(name: str, gpus: int, pods: int = 1, **net: object) -> AdmissionWorkload:
    network = NetworkRequest(**{"pool": POOL, "per_gpu": True, **net})  # type: ignore[arg-type]
    ps = AdmissionPodSet("w", pods, {CPU: 1000, NVIDIA_GPU: gpus}, network=network)
    return AdmissionWorkload(name, "ns/lq", (ps,))


def vfs_of(engine: AdmissionEngine, name: str) -> int:
    placement = engine.admitted[name].placement
    assert placement is not None
    return sum(len(p.assignment.nics) for p in placement.gang.pods)


@settings(max_examples=40, deadline=None)
@given(
    quota=st.integers(0, 12),
    asks=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 2)), min_size=1, max_size=10),
)
def test_quota_holds_for_nic_counts(quota: int, asks: list[tuple[int, int]]) -> None:
    engine = AdmissionEngine(gov(quota), nodes=[node("a"), node("b"), node("c")])
    for i, (gpus, pods) in enumerate(asks):
        engine.submit(workload(f"w{i}", gpus, pods))
    engine.run(0.0)
    used = sum(vfs_of(engine, name) for name in engine.admitted)
    assert used <= quota
    taken = [
        (p.placement.node, j, vf)
        for name in engine.admitted
        for p in engine.admitted[name].placement.gang.pods  # type: ignore[union-attr]
        for j, vf in p.assignment.nics
    ]
    assert len(taken) == len(set(taken))
    for name in engine.admitted:  # a gang is whole: every pod of every admitted workload
        placement = engine.admitted[name].placement
        assert placement is not None
        wanted = next(w for i, w in enumerate(asks) if f"w{i}" == name)
        assert len(placement.gang.pods) == wanted[1]


def test_an_uncovered_pool_is_not_limited_and_pool_less_requests_use_their_own_name() -> None:
    engine = AdmissionEngine(gov(None), nodes=[node("a")])
    engine.submit(workload("w", 4))
    engine.run(0.0)
    assert vfs_of(engine, "w") == 4  # no quota for the pool: only the nodes limit it
    limited = AdmissionEngine(gov(1, ANY_POOL_RESOURCE), nodes=[node("a")])
    limited.submit(workload("x", 1, pool=""))
    limited.submit(workload("y", 1, pool=""))
    limited.run(0.0)
    assert set(limited.admitted) == {"x"}
    assert ANY_POOL_RESOURCE in limited.reasons["y"]


def test_a_recorded_placement_is_restored_on_the_same_vfs_and_never_twice() -> None:
    nodes = [node("a")]
    first = AdmissionEngine(gov(None), nodes=nodes)
    first.submit(workload("w", 2, alignment=Alignment.REQUIRED))
    first.run(0.0)
    placement = first.admitted["w"].placement
    assert placement is not None
    recorded = record(placement)
    assert recorded[0]["assignment"]["nics"]
    [pod] = typed_pods(recorded, {"a": nodes[0]}.get)
    nic_refs = [d for d in pod.devices if d.kind is DeviceKind.NIC]
    assert [d.name for d in nic_refs] == [d.name for d in pod.nics]
    assert all("-vf-" in d.name and d.uuid.startswith("0000:1") for d in nic_refs)
    assert pod.visible_devices == "GPU-a-0,GPU-a-1"  # NICs are not CUDA devices
    second = AdmissionEngine(gov(None), nodes=nodes)
    assert second.pool is not None
    wl = workload("w", 2, alignment=Alignment.REQUIRED)
    flavors = {"w": {NVIDIA_GPU: "f", CPU: "f"}}
    again = restore(second.pool, wl, flavors, recorded)
    assert [p.assignment.nics for p in again.gang.pods] == [
        p.assignment.nics for p in placement.gang.pods
    ]
    try:
        restore(second.pool, wl, flavors, recorded)
    except PlacementLost as lost:
        assert "VF" in str(lost) or "free" in str(lost)
    else:
        raise AssertionError("the same VFs were given twice")
