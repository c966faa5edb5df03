"""Tracked per-node counts (engine/domain_counts.py): after any sequence of reservations,
releases, node additions, removals, cordons and repartitions, queried at any points in
between, the tracked counts and their per-domain sums equal a computation from scratch; and the
packed best-fit order equals the plain sort."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_snapshot_fleet_changes import INITIAL, OPS, Fleet, make_node

from gpuaas.engine import domain_counts, share_counts, snapshot
from gpuaas.engine.domain_counts import counts_of
from gpuaas.engine.framework import PodShape
from gpuaas.engine.snapshot import DOMAIN_LEVELS, Snapshot
from gpuaas.engine.topology import (
    _best_fit,
    _capable_nodes,
    _fits_on,
    _fitting_per_domain,
    _fitting_per_domain_within,
    _pods_per_node,
    domain_fits,
    pods_per_node,
)
from gpuaas.model.node import Toleration
from gpuaas.model.topology import Level
from gpuaas.model.workload import PodRequest

GI = 2**30
PROBES = (
    PodRequest(cpu_milli=1000, gpus=1),
    PodRequest(cpu_milli=16000, memory_bytes=64 * GI, gpus=2),
    PodRequest(cpu_milli=1000, gpus=4),
    PodRequest(cpu_milli=1000, gpus=1, gpu_milli=250),
    PodRequest(cpu_milli=16000, gpus=1, gpu_milli=500),
    # the same share family as the 250 above (engine/share_counts.py): one room, three sizes
    PodRequest(cpu_milli=1000, gpus=1, gpu_milli=700),
    PodRequest(cpu_milli=1000, gpus=1, gpu_milli=100),
    PodRequest(cpu_milli=1000, mig=(("1g.10gb", 1),)),
    PodRequest(cpu_milli=1000, mig=(("3g.40gb", 1),)),
    PodRequest(cpu_milli=1000, replicas=2),
    PodRequest(cpu_milli=8000),
    PodRequest(cpu_milli=1000, gpus=1, node_selector=(("pool", "p0"),)),
    PodRequest(cpu_milli=1000, gpus=1, gpu_milli=250, gpu_models=frozenset({"A100"})),
    PodRequest(
        cpu_milli=1000,
        gpus=1,
        tolerations=(Toleration(key="node.kubernetes.io/unschedulable", operator="Exists"),),
    ),
)


def _fresh_fits_per_domain(snap: Snapshot, pod: PodRequest, level: Level, model: int):
    shape = PodShape.of(pod)
    nodes = _capable_nodes(snap, level, shape, model)
    fit = _fits_on(snap, pod, shape, nodes)
    index = snap.domains[level]
    return np.bincount(index.of_node[nodes[fit]], minlength=len(index.names))


def _fresh_fits_within(snap: Snapshot, pod: PodRequest, level: Level, model: int, extra):
    shape = PodShape.of(pod)
    nodes = _capable_nodes(snap, level, shape, model)
    fit = _fits_on(snap, pod, shape, nodes) & extra[nodes]
    index = snap.domains[level]
    return np.bincount(index.of_node[nodes[fit]], minlength=len(index.names))


def _check(snap: Snapshot, probes: list[int]) -> None:
    extra = np.random.default_rng(snap.size + len(probes)).random(snap.size) < 0.7
    for p in probes:
        pod = PROBES[p]
        fresh = _pods_per_node(snap, pod, None, None)
        got = pods_per_node(snap, pod)
        assert got.tolist() == fresh.tolist(), pod
        assert not got.flags.writeable
        counts = counts_of(snap, got)
        assert counts is not None and counts.total == int(fresh.sum())
        for level in DOMAIN_LEVELS:
            index = snap.domains[level]
            known = index.of_node >= 0
            expect = np.bincount(index.of_node[known], fresh[known], len(index.names))
            assert domain_fits(snap, level, got).tolist() == expect.astype(np.int64).tolist()
        for level in (Level.RACK, Level.BLOCK):
            for model in range(-1, len(snap.model_names)):
                got_d = _fitting_per_domain(snap, pod, PodShape.of(pod), level, model)
                want = _fresh_fits_per_domain(snap, pod, level, model)
                assert got_d.tolist() == want.tolist(), (pod, level, model)
                got_w = _fitting_per_domain_within(snap, pod, PodShape.of(pod), level, model, extra)
                want_w = _fresh_fits_within(snap, pod, level, model, extra)
                assert got_w.tolist() == want_w.tolist(), (pod, level, model)


@settings(max_examples=60, deadline=None)
@given(
    INITIAL,
    st.lists(st.tuples(OPS, st.lists(st.integers(0, len(PROBES) - 1), max_size=3)), max_size=40),
    st.sampled_from([0, 16]),
    st.sampled_from([snapshot._JOURNAL_MAX, 3]),
    st.sampled_from([0, 8, 10**6]),
    st.sampled_from([snapshot.WATCH_CAP, 2]),
)
def test_tracked_counts_equal_a_computation_from_scratch(
    initial: list, steps: list, few: int, journal: int, one_by_one: int, cap: int
) -> None:
    """``few``: sums moved by ``np.add.at`` (0) or in Python for up to 16 moved nodes;
    ``journal``: a journal so short that counts often fall back to comparing versions;
    ``one_by_one``: watched counts re-check changed nodes with scalars never (0), up to 8 of
    them, or always; ``cap``: watch lists so short that they often overflow (a full pass)."""
    saved = (
        domain_counts._FEW,
        snapshot._JOURNAL_MAX,
        share_counts._FEW,
        domain_counts._ONE_BY_ONE,
        share_counts._ONE_BY_ONE,
        snapshot.WATCH_CAP,
    )
    domain_counts._FEW = few
    share_counts._FEW = few * 32  # 0: every share count moved by np.add.at
    snapshot._JOURNAL_MAX = journal
    domain_counts._ONE_BY_ONE = share_counts._ONE_BY_ONE = one_by_one
    snapshot.WATCH_CAP = cap
    try:
        fleet = Fleet([make_node(f"i{k}", *spec) for k, spec in enumerate(initial)])
        _check(fleet.snap, list(range(len(PROBES))))
        for op, probes in steps:
            fleet.apply(op)
            _check(fleet.snap, probes)  # often none: changes pile up between queries
        _check(fleet.snap, list(range(len(PROBES))))
    finally:
        (
            domain_counts._FEW,
            snapshot._JOURNAL_MAX,
            share_counts._FEW,
            domain_counts._ONE_BY_ONE,
            share_counts._ONE_BY_ONE,
            snapshot.WATCH_CAP,
        ) = saved


@settings(max_examples=60, deadline=None)
@given(
    INITIAL,
    st.lists(st.tuples(OPS, st.integers(0, 3)), max_size=40),
    st.lists(st.lists(st.integers(0, 99), max_size=6), min_size=1, max_size=3),
)
def test_a_watch_lists_exactly_the_watched_nodes_that_changed(
    initial: list, steps: list, watched: list
) -> None:
    """After any sequence of reservations and releases, a watch's change list holds
    exactly the watched nodes whose version moved since it was last emptied (read: ``read``
    0 empties the first watch, and so on), and nothing else; an ended watch (``unwatch``, or
    any layout change) is told nothing more."""
    fleet = Fleet([make_node(f"i{k}", *spec) for k, spec in enumerate(initial)])
    snap = fleet.snap
    uid = snap.uid

    def start() -> list[tuple[np.ndarray, list[int], np.ndarray]]:
        size = max(fleet.snap.size, 1)
        sets = [np.unique(np.array(w, dtype=np.int64) % size) for w in watched]
        sets = [w[w < fleet.snap.size] for w in sets]
        return [(w, fleet.snap.watch(w), fleet.snap.version.copy()) for w in sets]

    watches = start()
    ended = watches[-1]
    snap.unwatch(ended[1], ended[0])
    watches = watches[:-1]
    for op, read in steps:
        fleet.apply(op)
        if fleet.snap is not snap or fleet.snap.uid != uid:  # a layout change ends every watch
            assert fleet.snap.watchers == {} and fleet.snap._watch_sets == []
            snap, uid = fleet.snap, fleet.snap.uid
            watches = start()
            ended = watches[-1]
            snap.unwatch(ended[1], ended[0])
            watches = watches[:-1]
            continue
        assert not ended[1]
        for i, (nodes, dirty, seen) in enumerate(watches):
            moved = nodes[snap.version[nodes] != seen[nodes]]
            assert sorted(set(dirty)) == moved.tolist()
            assert set(dirty) <= set(nodes.tolist())
            if read == i:
                dirty.clear()
                seen[:] = snap.version


def test_reserve_copies_tells_the_watch() -> None:
    """The bulk path (:meth:`Snapshot.reserve_copies`) tells a watch as one reservation does."""
    from gpuaas.engine.snapshot import Assignment

    snap = Snapshot.from_nodes([make_node(f"n{k}", 0, 0, k % 2) for k in range(3)])
    dirty = snap.watch(np.array([1], dtype=np.int64))
    snap.reserve_copies(0, Assignment(0, cpu_milli=1000), 2)
    assert dirty == []
    snap.reserve_copies(1, Assignment(1, cpu_milli=1000), 2)
    assert dirty == [1]


@settings(max_examples=60, deadline=None)
@given(
    INITIAL,
    st.lists(st.tuples(OPS, st.booleans()), max_size=40),
    st.sampled_from([snapshot._JOURNAL_MAX, 2, 5]),
    st.sampled_from([snapshot._JOURNAL_COMPARE, 0]),
)
def test_the_journal_lists_exactly_the_nodes_whose_version_moved(
    initial: list, steps: list, journal: int, compare: int
) -> None:
    """At any tick read before, ``changed_since`` is the version compare's answer (ascending,
    each node once), or None once the journal was trimmed past that tick or holds more entries
    than comparing costs (``compare`` 0: the journal is always read)."""
    saved = snapshot._JOURNAL_MAX, snapshot._JOURNAL_COMPARE
    snapshot._JOURNAL_MAX, snapshot._JOURNAL_COMPARE = journal, compare
    try:
        fleet = Fleet([make_node(f"i{k}", *spec) for k, spec in enumerate(initial)])
        readers = [(fleet.snap.uid, fleet.snap.tick(), fleet.snap.version.copy())]
        for op, read in steps:
            fleet.apply(op)
            snap = fleet.snap
            for uid, tick, seen in readers:
                if uid != snap.uid or len(seen) != snap.size:
                    continue  # a layout change: readers key on the uid and start afresh
                got = snap.changed_since(tick)
                want = np.flatnonzero(snap.version != seen)
                if got is None:
                    entries = snap.tick() - tick
                    assert tick < snap._journal_start or (
                        entries > 16 and entries * compare > snap.size
                    )
                else:
                    assert got.dtype == np.int64 and got.tolist() == want.tolist()
            if read:
                readers.append((snap.uid, snap.tick(), snap.version.copy()))
    finally:
        snapshot._JOURNAL_MAX, snapshot._JOURNAL_COMPARE = saved


def test_a_copy_keeps_its_own_counts() -> None:
    snap = Snapshot.from_nodes([make_node(f"n{k}", 0, 0, k % 2) for k in range(4)])
    pod = PROBES[0]
    before = pods_per_node(snap, pod).tolist()
    twin = snap.copy()
    fleet = Fleet([])
    fleet.snap = twin
    fleet.apply(("place", PodRequest(cpu_milli=1000, gpus=4)))
    assert pods_per_node(snap, pod).tolist() == before
    assert pods_per_node(twin, pod).tolist() == _pods_per_node(twin, pod, None, None).tolist()
    assert sum(pods_per_node(twin, pod).tolist()) == sum(before) - 4


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=0, max_size=30),
    st.data(),
    st.integers(1, 4),
    st.integers(1, 5),
)
def test_best_fit_equals_the_plain_sort(fits: list, data: st.DataObject, count: int, first: int):
    fits_a = np.array(fits, dtype=np.int64)
    free = np.array(data.draw(st.lists(st.integers(0, 9), min_size=len(fits), max_size=len(fits))))
    ok = np.array(data.draw(st.lists(st.booleans(), min_size=len(fits), max_size=len(fits))))
    ok = ok.astype(bool) if len(fits) else np.zeros(0, dtype=bool)
    ids = np.flatnonzero((fits_a >= count) & ok)
    plain = ids[np.lexsort((ids, free[ids], fits_a[ids]))] if len(ids) else ids
    got, total = _best_fit(fits_a, count, free.astype(np.int64), ok, first)
    assert total == len(plain)
    assert got.tolist() == plain[:first].tolist()


def test_watch_classes_are_compacted_and_still_route_every_change() -> None:
    """Many watches started and ended (as the least recently used counts go) leave classes
    no node is in; they are dropped, and every live watch still hears of its nodes alone."""
    from gpuaas.engine.snapshot import Assignment

    snap = Snapshot.from_nodes([make_node(f"n{k}", 0, 0, k % 2) for k in range(6)])
    keep = snap.watch(np.array([0, 2, 4], dtype=np.int64))
    for k in range(200):
        nodes = np.array([k % 6, (k + 1) % 6], dtype=np.int64)
        snap.unwatch(snap.watch(nodes), nodes)
    assert len(snap._watch_sets) < 100
    late = snap.watch(np.array([1, 2], dtype=np.int64))
    for n in range(6):
        snap.reserve(n, Assignment(n, cpu_milli=1000))
    assert keep == [0, 2, 4] and late == [1, 2]
