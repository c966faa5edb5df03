"""Topology scopes: required never violated, best fit keeps big domains whole, exact counts."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.engine.gang import GangPlacement, place_workload
from gpuaas.engine.place import Unschedulable, place_pod
from gpuaas.engine.policies import make_policy
from gpuaas.engine.snapshot import Snapshot
from gpuaas.engine.topology import (
    any_per_row,
    domain_fits,
    domain_members,
    iter_pack_scopes,
    pack_scopes,
    parents,
    plan_scopes,
    pods_per_node,
    required_domain,
    sum_per_row,
)
from gpuaas.model.devices import GPU
from gpuaas.model.node import Node
from gpuaas.model.topology import Level, Topology
from gpuaas.model.workload import PodRequest, PodSet, TopologyMode, TopologyRequest, Workload
from gpuaas.sim.synthetic import H100, FleetSpec, synthetic_fleet

GIB = 2**30
EIGHT = PodRequest(cpu_milli=8000, memory_bytes=64 * GIB, gpus=8)


def node(name: str, rack: str, block: str = "b0", nvlink: str = "", gpus: int = 8) -> Node:
    return Node(
        name=name,
        cpu_milli=64_000,
        memory_bytes=512 * GIB,
        gpus=[GPU(g, f"GPU-{name}-{g}", "H100-80GB", 81559) for g in range(gpus)],
        topology=Topology(zone="z0", block=block, rack=rack, nvlink_domain=nvlink or f"{name}-nv"),
    )


def two_racks() -> list[Node]:
    """rack-small holds 2 nodes, rack-big 4; both in block b0."""
    return [node(f"s{i}", "rack-small") for i in range(2)] + [
        node(f"b{i}", "rack-big") for i in range(4)
    ]


def test_required_rack_goes_best_fit_and_keeps_the_big_rack_whole() -> None:
    fleet = two_racks()
    snap = Snapshot.from_nodes(fleet)
    policy = make_policy("packing")
    req = TopologyRequest(Level.RACK, TopologyMode.REQUIRED)
    small = place_workload(snap, Workload("small", (PodSet("w", 2, EIGHT, req),)), policy)
    assert isinstance(small, GangPlacement)
    assert {fleet[n].topology.rack for n in small.nodes} == {"rack-small"}
    big = place_workload(snap, Workload("big", (PodSet("w", 4, EIGHT, req),)), policy)
    assert isinstance(big, GangPlacement)
    assert {fleet[n].topology.rack for n in big.nodes} == {"rack-big"}


def test_required_is_never_spread_even_when_the_fleet_has_room() -> None:
    snap = Snapshot.from_nodes(two_racks())
    before = snap.state()
    req = TopologyRequest(Level.RACK, TopologyMode.REQUIRED)
    result = place_workload(
        snap, Workload("t", (PodSet("w", 5, EIGHT, req),)), make_policy("packing")
    )
    assert isinstance(result, Unschedulable)
    assert "needs 5 pods of 8 GPUs in one rack; best rack rack-big fits 4" in result.reason
    assert snap.state() == before


def test_preferred_widens_to_the_block_then_spreads_over_the_fewest_racks() -> None:
    fleet = two_racks()
    snap = Snapshot.from_nodes(fleet)
    pref = TopologyRequest(Level.RACK, TopologyMode.PREFERRED)
    result = place_workload(
        snap, Workload("p", (PodSet("w", 5, EIGHT, pref),)), make_policy("packing")
    )
    assert isinstance(result, GangPlacement)
    assert result.scopes[0][1] == "block b0"
    # Racks in different zones: no single domain at any level fits 7, so the fewest racks do.
    apart = [
        Node(
            name=f"n{i}",
            cpu_milli=64_000,
            memory_bytes=512 * GIB,
            gpus=[GPU(g, f"GPU-{i}-{g}", "H100-80GB", 81559) for g in range(8)],
            topology=Topology(zone=f"z{i % 3}", block=f"b{i % 3}", rack=f"r{i % 3}"),
        )
        for i in range(9)
    ]
    snap = Snapshot.from_nodes(apart)
    result = place_workload(
        snap, Workload("q", (PodSet("w", 5, EIGHT, pref),)), make_policy("packing")
    )
    assert isinstance(result, GangPlacement)
    assert result.scopes[0][1].startswith("2 racks")
    assert len({apart[n].topology.rack for n in result.nodes}) == 2


def test_preferred_starts_at_the_innermost_level() -> None:
    fleet = [node(f"n{i}", "r0", nvlink="nv-a" if i < 2 else "nv-b") for i in range(6)]
    snap = Snapshot.from_nodes(fleet)
    pref = TopologyRequest(Level.ZONE, TopologyMode.PREFERRED)
    result = place_workload(
        snap, Workload("p", (PodSet("w", 2, EIGHT, pref),)), make_policy("packing")
    )
    assert isinstance(result, GangPlacement)
    assert {fleet[n].topology.nvlink_domain for n in result.nodes} == {"nv-a"}
    assert result.scopes[0][1] == "nvlink nv-a"


def test_required_block_prefers_a_nested_rack() -> None:
    fleet = [node(f"a{i}", "ra", "b0") for i in range(3)] + [
        node(f"c{i}", "rc", "b0") for i in range(2)
    ]
    snap = Snapshot.from_nodes(fleet)
    req = TopologyRequest(Level.BLOCK, TopologyMode.REQUIRED)
    plan = plan_scopes(snap, PodSet("w", 2, EIGHT, req))
    assert plan.scopes[0].level is Level.RACK
    assert plan.scopes[0].domain == "rc"  # the tightest rack that fits
    assert plan.scopes[1].level is Level.BLOCK


def test_required_hostname_puts_all_pods_on_one_node() -> None:
    snap = Snapshot.from_nodes(two_racks())
    one = PodRequest(cpu_milli=1000, gpus=1)
    req = TopologyRequest(Level.HOSTNAME, TopologyMode.REQUIRED)
    result = place_workload(
        snap, Workload("h", (PodSet("w", 6, one, req),)), make_policy("packing")
    )
    assert isinstance(result, GangPlacement)
    assert len(set(result.nodes)) == 1
    too_many = place_workload(
        snap, Workload("h2", (PodSet("w", 9, one, req),)), make_policy("packing")
    )
    assert isinstance(too_many, Unschedulable)
    assert "on one node; best node" in too_many.reason


def test_nodes_without_the_level_are_never_used_for_it() -> None:
    fleet = [node("n0", "r0"), node("n1", "")]
    snap = Snapshot.from_nodes(fleet)
    req = TopologyRequest(Level.RACK, TopologyMode.REQUIRED)
    result = place_workload(
        snap, Workload("r", (PodSet("w", 2, EIGHT, req),)), make_policy("packing")
    )
    assert isinstance(result, Unschedulable)
    single = place_workload(
        snap, Workload("r1", (PodSet("w", 1, EIGHT, req),)), make_policy("packing")
    )
    assert isinstance(single, GangPlacement)
    assert single.nodes == [0]


def test_parents_and_members() -> None:
    fleet = synthetic_fleet(FleetSpec(nodes=40, nodes_per_rack=5, racks_per_block=2), seed=1)
    snap = Snapshot.from_nodes(fleet)
    rack_of_nvlink = parents(snap, Level.NVLINK, Level.RACK)
    assert (rack_of_nvlink >= 0).all()
    for d in range(len(snap.domains[Level.RACK].names)):
        members = domain_members(snap, Level.RACK, d)
        assert len(members) == 5
        assert required_domain(snap, Level.RACK, members.tolist()) == d
    mixed = [node("x0", "r0", "b0", nvlink="nv"), node("x1", "r1", "b0", nvlink="nv")]
    assert parents(Snapshot.from_nodes(mixed), Level.NVLINK, Level.RACK).tolist() == [-1]


def test_pack_scopes_prefer_the_fullest_rack() -> None:
    fleet = two_racks()
    snap = Snapshot.from_nodes(fleet)
    policy = make_policy("packing")
    first = place_pod(snap, EIGHT, policy, np.array([3]))  # one node of rack-big
    assert not isinstance(first, Unschedulable)
    snap.reserve(first.node, first.assignment)
    scopes = pack_scopes(snap, PodRequest(cpu_milli=1000, gpus=1), Level.RACK)
    assert [s.domain for s in scopes] == ["rack-small", "rack-big"]  # 16 free < 24 free
    share = pack_scopes(snap, PodRequest(cpu_milli=1, gpus=1, gpu_milli=500), Level.RACK)
    assert share[0].domain == "rack-small"


@settings(max_examples=30, deadline=None)
@given(
    fills=st.lists(
        st.tuples(st.integers(0, 11), st.sampled_from([1, 2, 8, 300, 700])), max_size=30
    ),
    probe=st.sampled_from(
        [
            PodRequest(cpu_milli=4000, memory_bytes=64 * GIB, gpus=2),
            PodRequest(cpu_milli=2000, gpus=1),
            PodRequest(cpu_milli=1000, gpus=1, gpu_milli=250),
            PodRequest(cpu_milli=30_000, memory_bytes=GIB),
            PodRequest(memory_bytes=200 * GIB, gpus=1, gpu_milli=600),
        ]
    ),
)
def test_pods_per_node_is_exact(fills, probe: PodRequest) -> None:
    """Counted capacity == what repeatedly placing the pod on that one node achieves."""
    fleet = [node(f"n{i}", f"r{i // 4}") for i in range(12)]
    snap = Snapshot.from_nodes(fleet)
    policy = make_policy("bestfit")
    for n, amount in fills:
        pod = (
            PodRequest(cpu_milli=3000, gpus=amount)
            if amount <= 8
            else PodRequest(cpu_milli=3000, gpus=1, gpu_milli=amount)
        )
        result = place_pod(snap, pod, policy, np.array([n]))
        if not isinstance(result, Unschedulable):
            snap.reserve(result.node, result.assignment)
    counts = pods_per_node(snap, probe)
    assert counts.tolist() == pods_per_node(snap, probe, nodes=np.arange(12)).tolist()
    rack_fits = domain_fits(snap, Level.RACK, counts)
    assert rack_fits.sum() == counts.sum()
    for n in range(12):
        placed = 0
        while True:
            result = place_pod(snap, probe, policy, np.array([n]))
            if isinstance(result, Unschedulable):
                break
            snap.reserve(result.node, result.assignment)
            placed += 1
            assert placed <= 64
        assert placed == counts[n], f"node {n}"


def test_synthetic_gang_respects_required_rack_at_scale() -> None:
    fleet = synthetic_fleet(FleetSpec(nodes=320, model_shares=((H100, 1.0),), mig_node_share=0), 3)
    snap = Snapshot.from_nodes(fleet)
    policy = make_policy("bestfit")
    req = TopologyRequest(Level.RACK, TopologyMode.REQUIRED)
    placed = 0
    for i in range(40):
        result = place_workload(snap, Workload(f"g{i}", (PodSet("w", 6, EIGHT, req),)), policy)
        if isinstance(result, GangPlacement):
            placed += 1
            assert required_domain(snap, Level.RACK, result.nodes) is not None
    # 20 racks of 16 nodes: two 6-node gangs per rack by best fit = 40 gangs.
    assert placed == 40


@settings(max_examples=50, deadline=None)
@given(
    rows=st.integers(0, 40),
    width=st.sampled_from([1, 2, 3, 4, 8]),
    seed=st.integers(0, 2**16),
)
def test_row_reductions_match_numpy(rows: int, width: int, seed: int) -> None:
    values = np.random.default_rng(seed).integers(-1, 3, size=(rows, width))
    assert any_per_row(values > 0).tolist() == (values > 0).any(axis=1).tolist()
    assert sum_per_row(values).tolist() == values.sum(axis=1).tolist()


def test_pack_scopes_spare_the_scarce_model() -> None:
    """Unrestricted work goes to the model with the most free GPUs, so work restricted to a
    scarce model still finds it."""
    fleet = [node(f"h{i}", "rack-h") for i in range(3)] + [
        Node(
            name="b0",
            cpu_milli=64_000,
            memory_bytes=512 * GIB,
            gpus=[GPU(g, f"GPU-b0-{g}", "B200-180GB", 183359) for g in range(8)],
            topology=Topology(zone="z0", block="b0", rack="rack-b"),
        )
    ]
    snap = Snapshot.from_nodes(fleet)
    anywhere = pack_scopes(snap, PodRequest(cpu_milli=1000, gpus=1), Level.RACK)
    assert anywhere[0].domain == "rack-h"  # 24 free H100 > 8 free B200, though rack-b is fuller
    only_b200 = PodRequest(cpu_milli=1000, gpus=1, gpu_models=frozenset({"B200-180GB"}))
    assert [s.domain for s in pack_scopes(snap, only_b200, Level.RACK)] == ["rack-b"]


def _reference_pack(snap: Snapshot, pod: PodRequest, level: Level, tries: int = 2) -> list[str]:
    """pack_scopes' rule computed the plain way, from the base arrays over every node."""
    from gpuaas.engine.framework import DEFAULT_FILTERS, CycleState, PodShape

    index = snap.domains[level]
    shape = PodShape.of(pod)
    state = CycleState(pod=pod, shape=shape)
    everything = np.arange(snap.size)
    static = np.ones(snap.size, dtype=bool)
    for plugin in DEFAULT_FILTERS[:3]:  # GPU model, node selector, taints
        static &= plugin.filter(state, snap, everything)
    known = index.of_node >= 0
    if shape.whole:
        eligible = np.bincount(index.of_node[known & static], minlength=len(index.names))
        ok = (index.free_gpus >= shape.whole) & (eligible > 0)
        key = index.free_gpus.copy()
    else:
        fit = static & (snap.cpu_free >= shape.cpu) & (snap.mem_free >= shape.mem)
        if shape.share:
            fit &= (snap.gpu_free >= shape.share).any(axis=1)
        for profile, count in shape.mig:
            fit &= snap.mig_free[:, snap.profile_id(profile)] >= count
        if shape.replicas:
            fit &= snap.replica_free.sum(axis=1) >= shape.replicas
        per_domain = np.bincount(index.of_node[known & fit], minlength=len(index.names))
        ok = per_domain > 0
        key = index.free_gpus * (snap.size + 1) + per_domain
    if (shape.whole or shape.share) and not (shape.mig or shape.replicas):
        free = snap.model_free_milli if shape.share else snap.model_free_gpus
        model = int(np.argmax(free))
        models = np.array([_rack_model(snap, index, d) for d in range(len(index.names))])
        if (ok & (models == model)).any():
            ok &= models == model
    ids = np.flatnonzero(ok)
    if len(ids) > tries:
        ids = ids[np.argpartition(key[ids], tries - 1)[:tries]]
    return [index.names[d] for _, d in sorted(zip(key[ids].tolist(), ids.tolist(), strict=True))]


def _rack_model(snap: Snapshot, index: object, d: int) -> int:
    models = set(snap.model_of_node[index.of_node == d].tolist())  # type: ignore[attr-defined]
    return models.pop() if len(models) == 1 else -1


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**16), st.integers(0, 400))
def test_pack_scopes_equal_a_full_scan(seed: int, steps: int) -> None:
    """The indexed pack_scopes (maintained max_free / replica_sum, per-model domains, capable
    nodes) picks exactly the domains a plain full scan picks, on busy fleets."""
    from gpuaas.sim.synthetic import synthetic_workloads

    snap = Snapshot.from_nodes(synthetic_fleet(FleetSpec(nodes=96), seed=seed % 7))
    policy = make_policy("packing")
    mix = synthetic_workloads(steps + 30, seed=seed)
    for workload in mix[:steps]:
        if not any(ps.pod.claims for ps in workload.pod_sets):
            place_workload(snap, workload, policy)
    probes = [ps.pod for w in mix[steps:] for ps in w.pod_sets if not ps.pod.claims][:12]
    for pod in probes:
        for level in (Level.RACK, Level.BLOCK):
            got = [s.domain for s in pack_scopes(snap, pod, level)]
            assert got == _reference_pack(snap, pod, level), (pod, level)
            # the lazy form's first scope alone (argpartition deferred) is the same
            first = next(iter_pack_scopes(snap, pod, level), None)
            assert ([first.domain] if first else []) == got[:1], (pod, level)


@settings(max_examples=200, deadline=None)
@given(
    fits=st.lists(st.integers(0, 6), min_size=1, max_size=40),
    seed=st.integers(0, 2**16),
    count=st.integers(0, 6),
    first=st.integers(1, 4),
    masked=st.booleans(),
)
def test_best_fit_is_the_full_sort(
    fits: list[int], seed: int, count: int, first: int, masked: bool
) -> None:
    """The best-fit domains (least room to spare, then fewest free GPUs, then lowest id) and
    how many qualify, with or without a list of the only domains that can qualify, are those
    of sorting every domain."""
    from gpuaas.engine.topology import _best_fit

    rng = np.random.default_rng(seed)
    f = np.array(fits, dtype=np.int64)
    free = rng.integers(0, 4, len(f))
    ok = rng.random(len(f)) < 0.7 if masked else None
    good = [d for d in range(len(f)) if f[d] >= count and (ok is None or ok[d])]
    expected = sorted(good, key=lambda d: (int(f[d]), int(free[d]), d))[:first]
    ids, total = _best_fit(f, count, free, ok, first)
    assert (ids.tolist(), total) == (expected, len(good))
    among = np.union1d(np.flatnonzero(f >= count), np.flatnonzero(rng.random(len(f)) < 0.3))
    ids, total = _best_fit(f, count, free, ok, first, among=among)
    assert (ids.tolist(), total) == (expected, len(good))


@settings(max_examples=30, deadline=None)
@given(
    fills=st.lists(st.tuples(st.integers(0, 319), st.sampled_from([1, 2, 8])), max_size=200),
    whole=st.sampled_from([1, 2, 4, 8]),
    count=st.integers(1, 40),
)
def test_domains_skipped_by_their_gpus_can_never_qualify(
    fills: list[tuple[int, int]], whole: int, count: int
) -> None:
    """:func:`_big_enough` (a domain's total GPUs against the pod set's) keeps every domain
    where ``count`` pods fit now, at every level, nested in an outer one or not; and
    :func:`fits_one` agrees with :func:`fit_mask` on every node."""
    from gpuaas.engine.fit import fit_mask, fits_one
    from gpuaas.engine.framework import PodShape
    from gpuaas.engine.topology import _big_enough, nested_in

    snap = _FLEET_320.copy()
    for n, gpus in fills:
        done = place_pod(snap, PodRequest(cpu_milli=1000, gpus=gpus), _BESTFIT, np.array([n]))
        if not isinstance(done, Unschedulable):
            snap.reserve(done.node, done.assignment)
    pod = PodRequest(cpu_milli=1000, gpus=whole)
    per_node = pods_per_node(snap, pod)
    for level in (Level.NVLINK, Level.RACK, Level.BLOCK):
        fits = domain_fits(snap, level, per_node)
        for outer in (None, Level.BLOCK, Level.ZONE):
            among = _big_enough(snap, level, pod, count, outer)
            if among is None:
                continue
            can = fits >= count
            if outer is not None:
                can &= nested_in(snap, level, outer)
            assert set(np.flatnonzero(can).tolist()) <= set(among.tolist())
    shape = PodShape.of(pod)
    mask = fit_mask(snap, shape, slice(None), snap.size)
    assert [fits_one(snap, shape, n) for n in range(snap.size)] == (
        [True] * snap.size if mask is None else mask.tolist()
    )


_FLEET_320 = Snapshot.from_nodes(
    synthetic_fleet(FleetSpec(nodes=320, nodes_per_rack=8, nvlink_nodes_b200=4), 5)
)
_BESTFIT = make_policy("bestfit")
