"""Fleet changes in the admission engine: nodes come, go, are cordoned, drained and
repartitioned in place; only the workloads whose devices went away are displaced (requeued and
reported), every other admitted workload keeps exactly its devices, and the engine's snapshot
equals one built from scratch for the same fleet and placements."""

from __future__ import annotations

import dataclasses

import pytest
from admission_builders import make_gov
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.admission import (
    AddNode,
    AdmissionEngine,
    CordonNode,
    NodeCapacity,
    RemoveNode,
    RepartitionNode,
    fleet_diff,
)
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    ClusterQueue,
    FlavorQuotas,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
)
from gpuaas.model.node import UNSCHEDULABLE

GPU_R = "nvidia.com/gpu"
MIG_R = "nvidia.com/mig-1g.10gb"
BIG = 10**9
#: Capacities a node may have (or be repartitioned to): whole GPUs, MIG instances, both.
LAYOUTS = (
    {GPU_R: 8, "cpu": 64000},
    {GPU_R: 4, "cpu": 64000},
    {MIG_R: 14, "cpu": 64000},
    {GPU_R: 2, MIG_R: 7, "cpu": 8000},
    {GPU_R: 2, "nvidia.com/mig-3g.40gb": 4, "cpu": 64000},
)


def gov():
    resources = ("cpu", GPU_R, MIG_R)
    group = ResourceGroup(
        resources, (FlavorQuotas("default", tuple(ResourceQuota(r, BIG) for r in resources)),)
    )
    g = make_gov([ClusterQueue("a", (group,))])
    g.flavors["default"] = ResourceFlavor("default", {})
    return g


def node(name: str, layout: int) -> NodeCapacity:
    return NodeCapacity(name, {}, dict(LAYOUTS[layout]))


def workload(name: str, form: int, count: int, created: float) -> AdmissionWorkload:
    requests = [{GPU_R: 2, "cpu": 4000}, {GPU_R: 8}, {MIG_R: 1, "cpu": 1000}, {GPU_R: 1}][form]
    return AdmissionWorkload(
        name, "ns/a", (AdmissionPodSet("main", count, requests),), created=created
    )


def rebuilt(engine: AdmissionEngine) -> Snapshot:
    """A snapshot from scratch for the engine's current nodes and admitted placements."""
    pool = engine.pool
    assert pool is not None
    live = [n for n in pool.nodes if n is not None]
    snap = Snapshot.from_nodes(list(reversed(live)))
    for aw in engine.admitted.values():
        assert aw.placement is not None
        for pod in aw.placement.gang.pods:
            n = snap.index_of(pool.snapshot.names[pod.placement.node])
            snap.reserve(n, dataclasses.replace(pod.assignment, node=n))
    return snap


def devices(engine: AdmissionEngine) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """Each admitted workload's pods: (node name, devices, the profile of each MIG device)."""
    assert engine.pool is not None
    snap = engine.pool.snapshot

    def profiles(n: int, mig: tuple[tuple[int, int], ...]) -> tuple[str, ...]:
        return tuple(snap.profile_names[snap.mig_profile_of[(n, g, k)]] for g, k in mig)

    return {
        name: [
            (
                snap.names[p.placement.node],
                p.assignment.devices,
                profiles(p.placement.node, p.assignment.mig),
            )
            for p in aw.placement.gang.pods
        ]
        for name, aw in engine.admitted.items()
        if aw.placement is not None
    }


OPS = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 3), st.integers(1, 3)),
    st.tuples(st.just("submit"), st.integers(0, 3), st.integers(1, 2)),
    st.tuples(st.just("finish"), st.integers(0, 99)),
    st.tuples(st.just("add"), st.integers(0, len(LAYOUTS) - 1)),
    st.tuples(st.just("remove"), st.integers(0, 99)),
    st.tuples(st.just("cordon"), st.integers(0, 99), st.booleans(), st.booleans()),
    st.tuples(st.just("repartition"), st.integers(0, 99), st.integers(0, len(LAYOUTS) - 1)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, len(LAYOUTS) - 1), max_size=4), st.lists(OPS, max_size=30))
def test_only_displaced_workloads_lose_devices(initial: list[int], ops: list) -> None:
    engine = AdmissionEngine(gov(), nodes=[node(f"i{k}", lay) for k, lay in enumerate(initial)])
    pool = engine.pool
    assert pool is not None
    serial = 0
    for t, op in enumerate(ops):
        live = sorted(n.name for n in pool.nodes if n is not None)
        before = devices(engine)
        change = None
        if op[0] == "submit":
            serial += 1
            engine.submit(workload(f"w{serial}", op[1], op[2], float(t)))
        elif op[0] == "finish" and engine.admitted:
            engine.finish(sorted(engine.admitted)[op[1] % len(engine.admitted)])
        elif op[0] == "add":
            serial += 1
            change = AddNode(node(f"n{serial}", op[1]))
        elif live and op[0] == "remove":
            change = RemoveNode(live[op[1] % len(live)])
        elif live and op[0] == "cordon":
            change = CordonNode(live[op[1] % len(live)], op[2], drain=op[3])
        elif live and op[0] == "repartition":
            change = RepartitionNode(node(live[op[1] % len(live)], op[2]))
        if change is not None:
            displaced = engine.nodes_changed([change])
            gone = {d.workload for d in displaced}
            after = devices(engine)
            for name, held in before.items():  # the others keep exactly their devices
                assert (name in gone) == (name not in after), name
                if name not in gone:
                    assert after[name] == held, name
            for d in displaced:
                assert d.workload in engine.pending_names()
                assert any(held[0] == d.node for held in before[d.workload])
            if isinstance(change, RemoveNode):  # everything on a removed node is displaced
                assert gone == {
                    w for w, held in before.items() if any(pod[0] == change.name for pod in held)
                }
            if isinstance(change, CordonNode) and not change.drain:
                assert not gone
        engine.run(float(t))
        pool.snapshot.check_indexes()
    assert pool.snapshot.canonical() == rebuilt(engine).canonical()


def test_a_repartition_keeps_the_pods_whose_devices_remain() -> None:
    engine = AdmissionEngine(gov(), nodes=[node("a", 3)])  # 2 whole GPUs + 7 MIG instances
    engine.submit(workload("whole", 3, 2, 0.0))
    engine.submit(workload("mig", 2, 3, 1.0))
    engine.run(1.0)
    assert sorted(engine.admitted) == ["mig", "whole"]
    kept = devices(engine)["whole"]
    # GPUs 0-1 stay whole; the MIG GPU is cut into 3g.40gb instances: the 1g.10gb ones are gone
    displaced = engine.nodes_changed([RepartitionNode(node("a", 4))])
    assert [d.workload for d in displaced] == ["mig"]
    assert displaced[0].reason.render() == (
        "its devices are no longer available: node a was repartitioned and its devices are gone"
    )
    assert displaced[0].reason.code == "DeviceLost"
    assert devices(engine)["whole"] == kept
    assert engine.pending_names() == ["mig"]
    engine.pool.snapshot.check_indexes()


def test_cordon_places_nothing_new_and_drain_displaces() -> None:
    engine = AdmissionEngine(gov(), nodes=[node("a", 1), node("b", 1)])
    engine.submit(workload("w1", 1, 1, 0.0))  # 8 GPUs: fits nowhere (4-GPU nodes)
    engine.submit(workload("w2", 3, 4, 1.0))
    engine.run(1.0)
    assert "w2" in engine.admitted
    (where,) = {pod[0] for pod in devices(engine)["w2"]}
    other = "b" if where == "a" else "a"
    assert engine.nodes_changed([CordonNode(other)]) == []
    engine.submit(workload("w3", 3, 4, 2.0))
    engine.run(2.0)
    assert "w3" not in engine.admitted  # the free node is cordoned
    engine.nodes_changed([CordonNode(other, cordoned=False)])
    engine.run(3.0)
    assert "w3" in engine.admitted
    displaced = engine.nodes_changed([CordonNode(where, drain=True)])
    assert [d.workload for d in displaced] == ["w2"] and "draining" in displaced[0].reason.render()
    engine.nodes_changed([AddNode(node("c", 0))])  # 8 GPUs: the older w1 fits there now
    engine.run(4.0)
    assert {pod[0] for pod in devices(engine)["w1"]} == {"c"}
    assert engine.pending_names() == ["w2"]  # the drained node stays cordoned


def test_unknown_node_is_refused() -> None:
    engine = AdmissionEngine(gov(), nodes=[node("a", 0)])
    with pytest.raises(InvalidValue, match="not in the fleet"):
        engine.nodes_changed([RemoveNode("nope")])
    with pytest.raises(InvalidValue, match="already in the fleet"):
        engine.nodes_changed([AddNode(node("a", 1))])


def test_fleet_diff_names_each_kind_of_change() -> None:
    a, b, c = (node(x, 0).to_node() for x in "abc")
    cordoned = dataclasses.replace(b, taints=[UNSCHEDULABLE])
    mig = node("c", 2).to_node()
    d = node("d", 1).to_node()
    changes = fleet_diff([a, b, c], [cordoned, mig, d], draining=frozenset())
    assert changes == [RemoveNode("a"), CordonNode("b", True), RepartitionNode(mig), AddNode(d)]
    assert fleet_diff([a], [a], draining=frozenset({"a"})) == [CordonNode("a", True, drain=True)]
    assert fleet_diff([a, b], [a, b]) == []
