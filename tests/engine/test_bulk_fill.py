"""Bulk fill (gpuaas.engine.bulk): a pod set of identical pods placed in bulk gets exactly the
decisions of the one-at-a-time path, for every policy that declares it can, on drawn fleets
(names out of index order, GPUs whole, MIG and time-sliced, racks, nodes already in use) and
drawn pod sets (every kind of pod, topology or none, fitting or not)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaas.engine.bulk import bulk_fill, fills_in_bulk
from gpuaas.engine.framework import CycleState
from gpuaas.engine.gang import GangPlacement, PodPlacement, place_workload
from gpuaas.engine.place import Placement, Unschedulable, place_pod, reserve
from gpuaas.engine.policies import POLICY_NAMES, TaskMix, make_policy
from gpuaas.engine.snapshot import Assignment, Snapshot
from gpuaas.model.devices import GPU, MigInstance, Partition, PartitionMode
from gpuaas.model.node import Node
from gpuaas.model.topology import Level, Topology
from gpuaas.model.workload import PodRequest, PodSet, TopologyMode, TopologyRequest, Workload

GI = 2**30
#: The policies that declare bulk fill; the test below checks the list is complete.
BULK_POLICIES = ("clustering", "packing", "bestfit")


class OneAtATime:
    """The same policy with its bulk declaration hidden: every pod through place_nodes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return self.inner.score(state, snap, nodes)  # type: ignore[no-any-return]

    def assign(self, state: CycleState, snap: Snapshot, node: int) -> Assignment:
        return self.inner.assign(state, snap, node)  # type: ignore[no-any-return]


class OneAtATimeWithHooks(OneAtATime):
    def on_reserve(self, snap: Snapshot, pod: PodRequest, assignment: Assignment) -> None:
        self.inner.on_reserve(snap, pod, assignment)

    def on_unreserve(self, snap: Snapshot, pod: PodRequest, assignment: Assignment) -> None:
        self.inner.on_unreserve(snap, pod, assignment)


def one_at_a_time(policy: Any) -> OneAtATime:
    return (OneAtATimeWithHooks if hasattr(policy, "on_reserve") else OneAtATime)(policy)


@st.composite
def fleets(draw: st.DrawFn) -> list[Node]:
    count = draw(st.integers(1, 10))
    names = draw(st.permutations([f"n{i:02}" for i in range(count)]))
    nodes: list[Node] = []
    for i, name in enumerate(names):
        kind = draw(st.sampled_from(["whole", "whole", "whole", "mig", "sliced", "none"]))
        gpus: list[GPU] = []
        if kind == "whole":
            model = draw(st.sampled_from(["T4", "V100"]))
            gpus = [
                GPU(g, f"{name}-{g}", model, 16384, Partition.whole())
                for g in range(draw(st.integers(1, 8)))
            ]
        elif kind == "mig":
            mig = Partition(
                mode=PartitionMode.MIG,
                instances=(MigInstance(0, 4, "3g.40gb", 3), MigInstance(4, 1, "1g.10gb", 1),
                           MigInstance(5, 1, "1g.10gb", 1)),
            )  # fmt: skip
            gpus = [
                GPU(g, f"{name}-{g}", "A100", 40960, mig) for g in range(draw(st.integers(1, 2)))
            ]
        elif kind == "sliced":
            gpus = [
                GPU(0, f"{name}-0", "L4", 24576, Partition.time_sliced(draw(st.integers(2, 6))))
            ]
        cpu = draw(st.sampled_from([500, 4000, 32000, 128000, 192000]))
        memory = draw(st.sampled_from([4 * GI, 64 * GI]))
        rack = f"rack-{i % draw(st.integers(1, 3))}"
        nodes.append(
            Node(name, cpu, memory, gpus, topology=Topology(zone="z", rack=rack),
                 labels={Level.RACK.value: rack, Level.ZONE.value: "z"})
        )  # fmt: skip
    return nodes


@st.composite
def pods(draw: st.DrawFn) -> PodRequest:
    kind = draw(st.sampled_from(["cpu", "whole", "whole", "share", "mig", "replicas", "nothing"]))
    cpu = draw(st.sampled_from([0, 1, 250, 1000, 8000, 40000]))
    memory = draw(st.sampled_from([0, 0, GI, 16 * GI]))
    extra: dict[str, Any] = {}
    if draw(st.integers(0, 4)) == 0:
        extra["gpu_models"] = frozenset({draw(st.sampled_from(["T4", "V100"]))})
    if kind == "nothing":
        return PodRequest()
    if kind == "whole":
        return PodRequest(cpu, memory, gpus=draw(st.sampled_from([1, 1, 2, 3])), **extra)
    if kind == "share":
        return PodRequest(cpu, memory, gpus=1, gpu_milli=draw(st.integers(1, 999)), **extra)
    if kind == "mig":
        profile = draw(st.sampled_from(["1g.10gb", "3g.40gb"]))
        return PodRequest(cpu, memory, mig=((profile, draw(st.integers(1, 2))),))
    if kind == "replicas":
        return PodRequest(cpu, memory, replicas=draw(st.integers(1, 3)))
    return PodRequest(cpu, memory, **extra)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    sets = []
    for k in range(draw(st.integers(1, 3))):
        topology = None
        if draw(st.integers(0, 3)) == 0:
            mode = draw(st.sampled_from([TopologyMode.REQUIRED, TopologyMode.PREFERRED]))
            topology = TopologyRequest(Level.RACK, mode)
        count = draw(st.one_of(st.integers(1, 12), st.integers(13, 80)))
        sets.append(PodSet(f"s{k}", count, draw(pods()), topology))
    return Workload("w", tuple(sets))


def decisions(result: GangPlacement | Unschedulable, snap: Snapshot) -> object:
    if isinstance(result, Unschedulable):
        return ("U", result.code, result.reason)
    return (
        "P",
        result.scopes,
        [(p.pod_set, p.index, snap.names[p.placement.node], p.assignment) for p in result.pods],
    )


@st.composite
def shares(draw: st.DrawFn) -> PodRequest:
    """GPU shares placed before the pod set, so GPUs are partly used (packing's shared bucket)."""
    return PodRequest(draw(st.sampled_from([0, 250])), 0, gpus=1,
                      gpu_milli=draw(st.sampled_from([100, 300, 500, 700])))  # fmt: skip


def test_the_policies_that_declare_bulk() -> None:
    mix = TaskMix.from_pods([PodRequest(1000, GI, gpus=1)])
    declared = {n for n in POLICY_NAMES if fills_in_bulk(make_policy(n, mix=mix)) is not None}
    assert declared == set(BULK_POLICIES)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(BULK_POLICIES),
    fleets(),
    st.lists(st.one_of(pods(), shares()), max_size=10),
    workloads(),
    st.booleans(),
    st.sampled_from([None, Level.RACK]),
)
def test_bulk_fill_decides_exactly_as_one_pod_at_a_time(
    name: str,
    fleet: list[Node],
    before: list[PodRequest],
    workload: Workload,
    with_rng: bool,
    pack_level: Level | None,
) -> None:
    runs = []
    for bulk in (True, False):
        snap = Snapshot.from_nodes(fleet)
        inner = make_policy(name)
        policy = inner if bulk else one_at_a_time(inner)
        for pod in before:  # nodes already in use, the same way in both runs
            placed = place_pod(snap, pod, policy)
            if isinstance(placed, Placement):
                reserve(snap, pod, placed, policy)
        rng = np.random.default_rng(7) if with_rng else None
        result = place_workload(snap, workload, policy, rng=rng, pack_level=pack_level)
        counts = getattr(inner, "_counts", None)  # clustering's memory of what runs where
        runs.append((decisions(result, snap), snap.state(), snap.version.tobytes(), snap.tick(),
                     None if counts is None else counts.tolist()))  # fmt: skip
    assert runs[0] == runs[1]


def test_ten_thousand_tiny_pods_fill_the_first_node_by_name() -> None:
    """The abusive pod set of issue 19: every pod on the node packing's name order picks first,
    in one ranking, each pod its own placement and reservation."""
    nodes = [Node(f"b-{i}", 192_000, 2048 * GI, []) for i in (3, 1, 2)]
    snap = Snapshot.from_nodes(nodes)
    placed: list[PodPlacement] = []
    pod_set = PodSet("s", 10_000, PodRequest(cpu_milli=1))
    assert bulk_fill(snap, pod_set, None, make_policy("packing"), None, None, placed) == 10_000
    assert {p.placement.node_name for p in placed} == {"b-1"}
    assert [p.index for p in placed] == list(range(10_000))
    assert int(snap.cpu_free[1]) == 192_000 - 10_000


def test_a_full_node_moves_the_fill_to_the_next_and_a_shortfall_is_left_to_the_caller() -> None:
    nodes = [Node("a", 1000, GI, []), Node("b", 1500, GI, [])]
    snap = Snapshot.from_nodes(nodes)
    placed: list[PodPlacement] = []
    pod_set = PodSet("s", 5, PodRequest(cpu_milli=500))
    assert bulk_fill(snap, pod_set, None, make_policy("bestfit"), None, None, placed) == 5
    # best fit: a (less left after one pod) first, filled to its 2 pods, then b
    assert [p.placement.node_name for p in placed] == ["a", "a", "b", "b", "b"]
    more: list[PodPlacement] = []
    bigger = PodSet("s", 6, pod_set.pod)
    fresh = Snapshot.from_nodes(nodes)
    assert bulk_fill(fresh, bigger, None, make_policy("bestfit"), None, None, more) == 5
    # as a gang, the shortfall reads as one pod at a time would say it
    gang = Workload("w", (bigger,))
    bulk = place_workload(Snapshot.from_nodes(nodes), gang, make_policy("bestfit"))
    alone = place_workload(Snapshot.from_nodes(nodes), gang, one_at_a_time(make_policy("bestfit")))
    assert isinstance(bulk, Unschedulable) and isinstance(alone, Unschedulable)
    assert (
        bulk.reason == alone.reason == "gang w: pod set s needs 6 CPU-only pods; the fleet fits 5"
    )


def test_pods_that_ask_nothing_all_go_to_the_first_node() -> None:
    snap = Snapshot.from_nodes([Node("b", 1000, GI, []), Node("a", 1000, GI, [])])
    placed: list[PodPlacement] = []
    pod_set = PodSet("s", 5, PodRequest())
    assert bulk_fill(snap, pod_set, None, make_policy("packing"), None, None, placed) == 5
    assert {p.placement.node_name for p in placed} == {"a"}


def test_packing_keeps_shares_one_at_a_time_where_a_node_falls_out_of_the_shared_bucket() -> None:
    """n's partly used GPU takes one more share, then n has only a free GPU (49) and m's partly
    used GPU (95) wins: a fill of n to its capacity would decide otherwise."""
    gpus = [GPU(0, "n-0", "T4", 1, Partition.whole()), GPU(1, "n-1", "T4", 1, Partition.whole())]
    fleet = [
        Node("n", 8000, GI, gpus),
        Node("m", 8000, GI, [GPU(0, "m-0", "T4", 1, Partition.whole())]),
    ]
    share = PodRequest(gpus=1, gpu_milli=300)
    runs = []
    for policy in (make_policy("packing"), one_at_a_time(make_policy("packing"))):
        snap = Snapshot.from_nodes(fleet)
        for node, milli in ((0, 700), (1, 500)):  # n-0 has 300 free, m-0 500
            reserve(snap, share, Placement(node, fleet[node].name,
                    Assignment(node, gpu_milli=((0, milli),)), 0.0), policy)  # fmt: skip
        result = place_workload(snap, Workload("w", (PodSet("s", 3, share),)), policy)
        runs.append(decisions(result, snap))
    assert runs[0] == runs[1]
    assert [pod[2] for pod in runs[1][2]] == ["n", "m", "n"]  # type: ignore[index]


def test_policies_that_spread_keep_one_pod_at_a_time() -> None:
    snap = Snapshot.from_nodes([Node("a", 4000, GI, []), Node("b", 4000, GI, [])])
    placed: list[PodPlacement] = []
    pod_set = PodSet("s", 4, PodRequest(cpu_milli=500))
    for name in ("dotprod", "random"):
        assert bulk_fill(snap, pod_set, None, make_policy(name), None, None, placed) == 0
    share = PodSet("s", 4, PodRequest(gpus=1, gpu_milli=300))
    gpus = Snapshot.from_nodes([Node("g", 4000, GI, [GPU(0, "g-0", "T4", 1, Partition.whole())])])
    assert bulk_fill(gpus, share, None, make_policy("packing"), None, None, placed) == 0
    assert placed == []
