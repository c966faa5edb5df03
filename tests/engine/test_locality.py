"""Data locality in the engine (gpuaas.engine.locality): warm sets name only nodes of the fleet;
a required dataset never lands on a cold node and waits with DatasetNotWarm; a preferred one
goes warm when a warm placement exists and anywhere otherwise; the strategies take warm sets in
place and try again."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaas.engine.admission.fleet_changes import AddNode, RemoveNode
from gpuaas.engine.gang import GangPlacement
from gpuaas.engine.locality import WarmSets, place_reading
from gpuaas.engine.place import Unschedulable
from gpuaas.engine.policies import make_policy
from gpuaas.engine.reasons import Code
from gpuaas.engine.scheduling import Request
from gpuaas.engine.scheduling.fleet import FleetScheduler
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.dataset import DataLocality, DataRequest
from gpuaas.model.node import Node
from gpuaas.model.topology import Level
from gpuaas.model.workload import PodRequest, PodSet, TopologyMode, TopologyRequest, Workload
from gpuaas.sim.synthetic import H100, FleetSpec, synthetic_fleet

GIB = 2**30
SPEC = FleetSpec(
    nodes=12, nodes_per_rack=4, racks_per_block=3, blocks_per_zone=1, model_shares=((H100, 1.0),),
    mig_node_share=0.0, time_sliced_node_share=0.0,
)  # fmt: skip
KEY = ("acme", "imagenet")


def fleet() -> list[Node]:
    return synthetic_fleet(SPEC, seed=3)


def reading(name: str, gpus: int, count: int = 1, required: bool = False, **kw: object) -> Workload:
    locality = DataLocality.REQUIRED if required else DataLocality.PREFERRED
    pod = PodRequest(cpu_milli=1000 * gpus, memory_bytes=8 * GIB * gpus, gpus=gpus)
    return Workload(
        name, (PodSet("main", count, pod, **kw),), data=DataRequest("imagenet", locality)
    )  # type: ignore[arg-type]


def state(snap: Snapshot) -> tuple[bytes, ...]:
    return (snap.gpu_free.tobytes(), snap.cpu_free.tobytes(), snap.mem_free.tobytes())


def test_warm_sets_drop_names_outside_the_fleet_and_count_changes() -> None:
    warm = WarmSets(["a", "b"])
    assert warm.update({KEY: ["a", "zz"]})
    assert warm.nodes(KEY) == {"a"}
    version = warm.version
    assert not warm.update({KEY: ["a"]}) and warm.version == version
    warm.forget_node("a")
    assert warm.nodes(KEY) == frozenset() and KEY not in warm.datasets()


def test_preferred_goes_warm_and_required_waits_with_the_reason() -> None:
    nodes = fleet()
    snap = Snapshot.from_nodes(nodes)
    policy = make_policy("packing")
    warm = WarmSets(n.name for n in nodes)
    cold_choice = place_reading(snap, reading("x", 4), policy, warm, "acme")
    assert isinstance(cold_choice, GangPlacement)
    snap.unreserve(cold_choice.pods[0].assignment)
    target = next(n.name for n in nodes if n.name != cold_choice.pods[0].placement.node_name)
    warm.update({KEY: [target]})
    placed = place_reading(snap, reading("y", 4), policy, warm, "acme")
    assert isinstance(placed, GangPlacement) and placed.pods[0].placement.node_name == target
    # the warm node now has 4 GPUs free: a required 8-GPU job cannot go there and waits
    before = state(snap)
    failed = place_reading(snap, reading("z", 8, required=True), policy, warm, "acme")
    assert isinstance(failed, Unschedulable) and failed.code is Code.DATASET_NOT_WARM
    why = failed.cause()
    assert why.fields["dataset"] == "imagenet" and why.fields["warm"] == 1
    assert "imagenet" in why.render() and state(snap) == before
    # a preferred one of the same size runs on a cold node instead
    assert isinstance(place_reading(snap, reading("w", 8), policy, warm, "acme"), GangPlacement)
    # another tenant's dataset of the same name is not warm anywhere
    other = place_reading(snap, reading("v", 1, required=True), policy, warm, "globex")
    assert isinstance(other, Unschedulable) and other.cause().fields["warm"] == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    warm_idx=st.sets(st.integers(0, 11), max_size=6),
    jobs=st.lists(
        st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.booleans(), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    policy=st.sampled_from(["packing", "bestfit", "gpuaas"]),
)
def test_required_never_lands_on_a_cold_node(
    warm_idx: set[int], jobs: list[tuple[int, int, bool, bool]], policy: str
) -> None:
    nodes = fleet()
    snap = Snapshot.from_nodes(nodes)
    plugin = make_policy(policy)
    warm = WarmSets(n.name for n in nodes)
    warm.update({KEY: [nodes[i].name for i in warm_idx]})
    names = warm.nodes(KEY)
    for k, (gpus, count, required, in_rack) in enumerate(jobs):
        topology = TopologyRequest(Level.RACK, TopologyMode.REQUIRED) if in_rack else None
        wl = reading(f"j{k}", gpus, count, required, topology=topology)
        before = state(snap)
        result = place_reading(snap, wl, plugin, warm, "acme")
        if isinstance(result, Unschedulable):
            assert state(snap) == before
            if required:
                assert result.code is Code.DATASET_NOT_WARM
            continue
        on = {p.placement.node_name for p in result.pods}
        if required:
            assert on <= names, (on, names)


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("warm"), st.sets(st.integers(0, 15), max_size=5)),
            st.tuples(st.just("remove"), st.integers(0, 15)),
            st.tuples(st.just("add"), st.integers(0, 15)),
        ),
        max_size=20,
    )
)
def test_warm_sets_never_name_a_node_outside_the_fleet(ops: list[tuple[str, object]]) -> None:
    base = fleet()
    pool = {f"n{i}": n for i, n in enumerate(base + [base[0]] * 4)}  # 16 names
    nodes = [pool_node(pool, f"n{i}") for i in range(12)]
    fleet_scheduler = FleetScheduler(nodes, make_policy("packing"))
    present = {n.name for n in nodes}
    for op, arg in ops:
        if op == "warm":
            fleet_scheduler.datasets_changed({KEY: [f"n{i}" for i in arg]})  # type: ignore[union-attr]
        elif op == "remove" and f"n{arg}" in present:
            fleet_scheduler.nodes_changed([RemoveNode(f"n{arg}")])
            present.discard(f"n{arg}")
        elif op == "add" and f"n{arg}" not in present:
            fleet_scheduler.nodes_changed([AddNode(pool_node(pool, f"n{arg}"))])
            present.add(f"n{arg}")
        live = set(fleet_scheduler.snapshot._name_index)
        assert live == present
        for names in fleet_scheduler.warm.datasets().values():
            assert names <= live


def pool_node(pool: dict[str, Node], name: str) -> Node:
    import dataclasses

    return dataclasses.replace(pool[name], name=name)


def test_a_strategy_takes_warm_sets_in_place_and_tries_again() -> None:
    nodes = fleet()
    scheduler = FleetScheduler(nodes, make_policy("packing"))
    scheduler.submit(Request("r", reading("r", 1, required=True), queue="acme"), 0.0)
    first = scheduler.cycle(0.0)
    assert not first.admitted and first.waiting["r"].code is Code.DATASET_NOT_WARM
    target = nodes[5].name
    scheduler.datasets_changed({KEY: [target]})
    second = scheduler.cycle(1.0)
    [admitted] = second.admitted
    assert admitted.placement is not None
    assert {scheduler.snapshot.names[n] for n in admitted.placement.nodes} == {target}


@pytest.mark.parametrize("weight", [0.0, 0.5, 2.0])
def test_the_warm_bonus_only_reorders_feasible_nodes(weight: float) -> None:
    """A gang that cannot fit on its warm nodes alone is placed anyway, on feasible nodes."""
    nodes = fleet()
    snap = Snapshot.from_nodes(nodes)
    warm = WarmSets(n.name for n in nodes)
    warm.update({KEY: [nodes[0].name]})
    result = place_reading(snap, reading("g", 8, 3), make_policy("gpuaas"), warm, "acme",
                           weight=weight)  # fmt: skip
    assert isinstance(result, GangPlacement) and len(result.pods) == 3
    assert np.all(snap.gpu_free >= 0)
