"""A recorded placement stores a run of identical device-less pods as one entry with a count
(issue 19: a 10,000-pod gang of ``cpu: 1m`` pods was 10,000 entries, 23 MB, typed four times
per admission); every reader that needs each pod sees exactly the pods the engine placed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.admission.cycle import AdmissionEngine
from gpuaas.engine.admission.restore import (
    PlacementLost,
    expand,
    pods_in,
    record,
    restore,
    typed_pods,
)
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
from gpuaas.model.node import Node
from gpuaas.model.resources import CPU, MEMORY, NVIDIA_GPU


def node(name: str, cpu_milli: int = 8000) -> Node:
    gpus = [GPU(g, f"GPU-{name}-{g}", "H100", 81920) for g in range(4)]
    return Node(name, cpu_milli, 64 << 30, gpus)


def gov() -> Governance:
    quotas = (ResourceQuota(CPU, 10**9), ResourceQuota(MEMORY, 1 << 50),
              ResourceQuota(NVIDIA_GPU, 1000))  # fmt: skip
    g = Governance()
    g.flavors["f"] = ResourceFlavor("f")
    group = ResourceGroup((CPU, MEMORY, NVIDIA_GPU), (FlavorQuotas("f", quotas),))
    g.cluster_queues["cq"] = ClusterQueue("cq", (group,))
    lq = LocalQueue("lq", "ns", "cq")
    g.local_queues[lq.key] = lq
    g.validate()
    return g


def workload(sets: list[tuple[int, int, int]]) -> AdmissionWorkload:
    """Pod sets of (pods, milli-CPU, GPUs per pod)."""
    pod_sets = tuple(
        AdmissionPodSet(f"s{i}", pods, {CPU: cpu, MEMORY: 1 << 20, NVIDIA_GPU: gpus} if gpus
                        else {CPU: cpu, MEMORY: 1 << 20})
        for i, (pods, cpu, gpus) in enumerate(sets)
    )  # fmt: skip
    return AdmissionWorkload("w", "ns/lq", pod_sets)


FLAVORS = {f"s{i}": {CPU: "f", MEMORY: "f", NVIDIA_GPU: "f"} for i in range(4)}


def admitted(nodes: list[Node], sets: list[tuple[int, int, int]]) -> Any:
    engine = AdmissionEngine(gov(), nodes=nodes)
    engine.submit(workload(sets))
    engine.run(0.0)
    if "w" not in engine.admitted:
        return None
    return engine.admitted["w"].placement


pod_sets = st.lists(
    st.tuples(st.integers(1, 40), st.sampled_from([1, 10, 250]), st.sampled_from([0, 0, 1])),
    min_size=1, max_size=4,
)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(sets=pod_sets, spread=st.integers(1, 4))
def test_runs_expand_to_exactly_the_pods_placed(sets: list[tuple[int, int, int]],
                                                spread: int) -> None:  # fmt: skip
    nodes = [node(f"n{i}", cpu_milli=2000) for i in range(spread)]
    placement = admitted(nodes, sets)
    if placement is None:
        return  # did not fit: nothing recorded
    recorded = record(placement)
    pods = placement.gang.pods
    assert sum(pods_in(e) for e in recorded) == len(pods)
    for entry in recorded:  # only device-less pods are merged
        if pods_in(entry) > 1:
            a = entry["assignment"]
            assert not (a["gpus"] or a["mig"] or a["replicas"] or a["devices"])
    flat = expand(recorded)
    assert [(e["podSet"], e["index"], e["node"]) for e in flat] == [
        (p.pod_set, p.index, p.placement.node_name) for p in pods
    ]
    assert [(e["assignment"]["cpu"], e["assignment"]["gpus"]) for e in flat] == [
        (p.assignment.cpu_milli, [list(x) for x in p.assignment.gpu_milli]) for p in pods
    ]
    typed = typed_pods(recorded, {n.name: n for n in nodes}.get)
    assert [t.rank for t in typed] == list(range(len(pods)))
    assert typed == typed_pods(flat, {n.name: n for n in nodes}.get)
    # restored on a fresh engine: the same pods on the same nodes, all or nothing
    fresh = AdmissionEngine(gov(), nodes=nodes)
    assert fresh.pool is not None
    again = restore(fresh.pool, workload(sets), FLAVORS, recorded)
    assert [(p.pod_set, p.index, p.placement.node_name, p.assignment) for p in again.gang.pods] \
        == [(p.pod_set, p.index, p.placement.node_name, p.assignment) for p in pods]  # fmt: skip


def test_ten_thousand_one_millicore_pods_are_a_few_entries() -> None:
    nodes = [node(f"n{i}", cpu_milli=64000) for i in range(4)]
    placement = admitted(nodes, [(625, 1, 0)] * 16)
    assert placement is not None
    recorded = record(placement)
    assert len(recorded) <= 16 * 4  # one run per pod set and node at most
    assert sum(pods_in(e) for e in recorded) == 10_000
    assert len(typed_pods(recorded, {n.name: n for n in nodes}.get)) == 10_000


def test_placements_recorded_one_entry_a_pod_read_as_before() -> None:
    nodes = [node("n0")]
    placement = admitted(nodes, [(3, 1, 0)])
    assert placement is not None
    old = expand(record(placement))  # the form stored before runs existed: no count
    assert all("count" not in e for e in old) and len(old) == 3
    fresh = AdmissionEngine(gov(), nodes=nodes)
    assert fresh.pool is not None
    assert len(restore(fresh.pool, workload([(3, 1, 0)]), FLAVORS, old).gang.pods) == 3


def test_a_run_that_no_longer_fits_restores_nothing() -> None:
    nodes = [node("n0", cpu_milli=1000)]
    placement = admitted(nodes, [(4, 250, 0)])
    assert placement is not None
    recorded = record(placement)
    assert [pods_in(e) for e in recorded] == [4]
    fresh = AdmissionEngine(gov(), nodes=nodes)
    assert fresh.pool is not None
    too_many = [{**recorded[0], "count": 5}]
    with pytest.raises(PlacementLost):
        restore(fresh.pool, workload([(4, 250, 0)]), FLAVORS, too_many)
    assert fresh.pool.snapshot.cpu_free[0] == 1000  # nothing left reserved
    with pytest.raises(PlacementLost, match="bad count"):
        pods_in({"podSet": "s0", "count": 0})
