"""Topology-aware placement of a pod set: which domain(s) to try, in which order.

A pod set may **require** that all its pods share one domain of a level (NVLink domain, rack,
block, zone) or only **prefer** it. This module turns that request into an ordered list of
:class:`Scope` s (a set of candidate nodes with a description); :mod:`gpuaas.engine.gang` places
the pods inside the first scope that works.

- Required: only domains of the level are ever scopes, so the constraint cannot be violated.
  Domains are tried best-fit first (the one that fits the pod set with the least room to spare),
  so that big domains stay whole for the big jobs that need them; before them, the tightest
  domain of an inner level that lies wholly inside one domain of the level (a rack-bound job that
  fits one NVLink domain goes there).
- Preferred: like Kueue's topology-aware scheduling, start with the innermost level and widen:
  the best-fit domain of the innermost level where one domain fits, then the fewest domains of
  the requested level that together fit (largest first), and finally anywhere.

How many pods fit a node is computed exactly for identical pods from the snapshot's arrays
(vectorised), and summed per domain; both are kept per pod kind by
:mod:`gpuaas.engine.domain_counts`, which re-counts only the nodes changed since the last query
of that kind (O(changed nodes + domains) instead of O(nodes)). The snapshot's per-domain free-GPU
index rejects a whole level in O(domains) before any per-node work when even the roomiest
domain lacks the GPUs. Static facts (which nodes a pod may use at all, which inner domains nest
in which outer one) are cached per snapshot layout.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from gpuaas.engine.domain_counts import TrackedCounts, counts_of, tracked
from gpuaas.engine.fit import fit_count, fit_mask, fits_one, sum_per_row  # noqa: F401 (re-exported)
from gpuaas.engine.framework import PodShape, static_mask
from gpuaas.engine.share_counts import share_counts
from gpuaas.engine.snapshot import DOMAIN_LEVELS, MILLI, Snapshot
from gpuaas.model.topology import Level
from gpuaas.model.workload import PodRequest, PodSet, TopologyMode

#: Levels from the innermost to the outermost.
INNER_TO_OUTER: tuple[Level, ...] = tuple(reversed(DOMAIN_LEVELS))
_BIG = np.iinfo(np.int64).max // 4


@dataclass(frozen=True, slots=True)
class Scope:
    """Candidate nodes for a pod set: ``nodes`` (int indices) or None for the whole fleet."""

    nodes: np.ndarray | None
    description: str
    level: Level | None = None
    domain: str = ""
    fits: int = 0


@dataclass(frozen=True, slots=True)
class ScopePlan:
    """Scopes in the order to try, and the reason to give when none works."""

    scopes: tuple[Scope, ...]
    reason: str


class _LayoutCache:
    """Static facts per snapshot layout (shared by a snapshot and its copies)."""

    def __init__(self, snap: Snapshot) -> None:
        self.key = snap.names
        self.eligible: OrderedDict[tuple[object, ...], np.ndarray] = OrderedDict()
        self.eligible_domains: OrderedDict[tuple[object, ...], np.ndarray] = OrderedDict()
        self.parents: dict[tuple[Level, Level], np.ndarray] = {}
        self.members: dict[Level, tuple[np.ndarray, np.ndarray]] = {}
        self.domain_models: dict[Level, np.ndarray] = {}
        self.everything: np.ndarray | None = None
        self.capable: dict[tuple[object, ...], np.ndarray] = {}
        self.model_domains: dict[tuple[Level, int], np.ndarray] = {}
        self.model_eligible: OrderedDict[tuple[object, ...], np.ndarray] = OrderedDict()
        self.scopes: dict[tuple[Level, int], Scope] = {}
        self.big_enough: dict[tuple[Level, Level | None, int], np.ndarray | None] = {}
        self.nested: dict[tuple[Level, Level], np.ndarray] = {}


_LAYOUTS: OrderedDict[int, _LayoutCache] = OrderedDict()
_MAX_LAYOUTS = 8
_MAX_ELIGIBLE = 256


def _layout(snap: Snapshot) -> _LayoutCache:
    key = id(snap.names)
    cache = _LAYOUTS.get(key)
    if cache is None or cache.key is not snap.names:
        cache = _LAYOUTS[key] = _LayoutCache(snap)
        while len(_LAYOUTS) > _MAX_LAYOUTS:
            _LAYOUTS.popitem(last=False)
    return cache


def _noun(level: Level) -> str:
    """The level as a reason names it: ``rack``, ``block``, ``zone``, ``NVLink domain``."""
    return "NVLink domain" if level is Level.NVLINK else level.short


def eligible_nodes(snap: Snapshot, pod: PodRequest) -> np.ndarray:
    """Bool mask of nodes the pod may use at all (GPU model, node selector, taints); cached
    (read-only)."""
    mask = static_mask(snap, pod)
    if mask is None:
        cache = _layout(snap)
        mask = cache.everything
        if mask is None or len(mask) != snap.size:
            mask = cache.everything = np.ones(snap.size, dtype=bool)
            mask.flags.writeable = False
    return mask


def _eligible_per_domain(snap: Snapshot, pod: PodRequest, level: Level) -> np.ndarray:
    """Eligible nodes per domain of ``level`` (int64[D]); cached like :func:`eligible_nodes`."""
    cache = _layout(snap)
    key = (level, pod.gpu_models, pod.node_selector, pod.tolerations)
    counts = cache.eligible_domains.get(key)
    if counts is None:
        index = snap.domains[level]
        mask = eligible_nodes(snap, pod) & (index.of_node >= 0)
        counts = np.bincount(index.of_node[mask], minlength=len(index.names)).astype(np.int64)
        cache.eligible_domains[key] = counts
        while len(cache.eligible_domains) > _MAX_ELIGIBLE:
            cache.eligible_domains.popitem(last=False)
    return counts


def _members(snap: Snapshot, level: Level) -> tuple[np.ndarray, np.ndarray]:
    """Nodes sorted by domain of ``level`` and each domain's bounds in that order (cached)."""
    cache = _layout(snap)
    found = cache.members.get(level)
    if found is None:
        of_node = snap.domains[level].of_node
        order = np.argsort(of_node, kind="stable")
        bounds = np.searchsorted(of_node[order], np.arange(len(snap.domains[level].names) + 1))
        found = cache.members[level] = (order, bounds)
    return found


def domain_members(snap: Snapshot, level: Level, domain: int) -> np.ndarray:
    """Node indices of one domain, in O(1) after a one-off sort per layout."""
    order, bounds = _members(snap, level)
    return order[bounds[domain] : bounds[domain + 1]]


_ROW_VIEWS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def any_per_row(matrix: np.ndarray) -> np.ndarray:
    """``matrix.any(axis=1)`` for a bool [N, G] matrix, fast: numpy reduces a short inner axis
    slowly (~330 us at 10,000 x 8), so rows of 1/2/4/8 bools are read as one integer (~35 us)."""
    view = _ROW_VIEWS.get(matrix.shape[1])
    if view is None or not matrix.flags.c_contiguous:
        return matrix.any(axis=1)
    return matrix.view(view).ravel() != 0


def fits_somewhere(snap: Snapshot, pod: PodRequest) -> np.ndarray:
    """Bool mask of nodes where one more ``pod`` fits now (the static filters and the fit rule
    of :mod:`gpuaas.engine.fit`, vectorised over the whole fleet; claims not included)."""
    mask = eligible_nodes(snap, pod).copy()
    fits = fit_mask(snap, PodShape.of(pod), slice(None), snap.size)
    return mask if fits is None else np.logical_and(mask, fits, out=mask)


def _domain_models(snap: Snapshot, level: Level) -> np.ndarray:
    """The one GPU model id of each domain's nodes, or -1 when mixed or without GPUs (cached)."""
    cache = _layout(snap)
    found = cache.domain_models.get(level)
    if found is None:
        of_node = snap.domains[level].of_node
        d = len(snap.domains[level].names)
        known = (of_node >= 0) & (snap.model_of_node >= 0)
        lo = np.full(d, _BIG, dtype=np.int64)
        hi = np.full(d, -2, dtype=np.int64)
        np.minimum.at(lo, of_node[known], snap.model_of_node[known])
        np.maximum.at(hi, of_node[known], snap.model_of_node[known])
        found = np.where(lo == hi, lo, -1)
        cache.domain_models[level] = found
    return found


def model_ids(snap: Snapshot, models: frozenset[str]) -> list[int]:
    """The ids of the GPU models named in ``models`` that the fleet has (any order), cached:
    every decision of a pod restricted to models asks, and looking names up in the model list
    costs more than the rest of a quick check. Keyed by the snapshot's model list and its
    length, since a fleet change only ever appends names to it (in place) or replaces it."""
    names = snap.model_names
    key = (id(names), len(names), models)
    found = _MODEL_IDS.get(key)
    if found is None or found[0] is not names:
        if len(_MODEL_IDS) >= 1024:
            _MODEL_IDS.clear()
        ids = [i for i in (snap.model_id(m) for m in models) if i >= 0]
        found = _MODEL_IDS[key] = (names, ids)
    return found[1]


_MODEL_IDS: dict[tuple[int, int, frozenset[str]], tuple[list[str], list[int]]] = {}


def _roomiest_model(snap: Snapshot, pod: PodRequest, share: bool) -> int:
    """Among the models the pod may use, the one with the most free whole GPUs (free milli-GPU
    for a share); -1 when it may use no known model."""
    free = snap.model_free_milli if share else snap.model_free_gpus
    if not pod.gpu_models:
        return int(free.argmax()) if len(free) else -1
    ids = model_ids(snap, pod.gpu_models)
    if not ids:
        return -1
    values = free.tolist()  # a few models: Python ints beat numpy scalars
    return max(ids, key=lambda i: (values[i], -i))


def _fits_on(snap: Snapshot, pod: PodRequest, shape: PodShape, nodes: np.ndarray) -> np.ndarray:
    """:func:`fits_somewhere` restricted to ``nodes`` (int indices): a bool per node."""
    static = static_mask(snap, pod)
    mask = np.ones(len(nodes), dtype=bool) if static is None else static[nodes]
    fits = fit_mask(snap, shape, nodes, len(nodes))
    return mask if fits is None else np.logical_and(mask, fits, out=mask)


def _capable_nodes(snap: Snapshot, level: Level, shape: PodShape, model: int) -> np.ndarray:
    """Nodes (ascending) that could ever hold ``shape``'s GPU form, by static capacity, and lie
    in a domain of ``level``; only those of domains of GPU model ``model`` when ``model >= 0``.
    Cached per layout: it lets the per-decision scan skip nodes that can never fit."""
    cache = _layout(snap)
    p = snap.profile_id(shape.mig[0][0]) if shape.mig else -1
    form: tuple[str, int] = ("any", 0)
    if shape.whole:
        form = ("whole", shape.whole)
    elif shape.share:
        form = ("share", 0)
    elif len(shape.mig) == 1 and shape.mig[0][1] >= 1 and not shape.replicas:
        form = ("mig", p)
    elif shape.replicas and not shape.mig:
        form = ("replicas", 0)
    key = (level, model, form)
    found = cache.capable.get(key)
    if found is None:
        of_node = snap.domains[level].of_node
        ok = of_node >= 0
        if model >= 0:
            ok &= _domain_models(snap, level)[np.where(ok, of_node, 0)] == model
        kind, amount = form
        if kind == "whole":
            ok &= snap.whole_gpus >= amount
        elif kind == "share":
            ok &= snap.whole_gpus > 0
        elif kind == "mig":
            ok &= snap.mig_capacity[:, p] > 0
        elif kind == "replicas":
            ok &= snap.replica_total.sum(axis=1) > 0
        found = cache.capable[key] = np.flatnonzero(ok)
    return found


def _model_domains(snap: Snapshot, level: Level, model: int) -> np.ndarray:
    """Domain ids of ``level`` whose nodes are all of GPU model ``model`` (cached)."""
    cache = _layout(snap)
    found = cache.model_domains.get((level, model))
    if found is None:
        found = cache.model_domains[(level, model)] = np.flatnonzero(
            _domain_models(snap, level) == model
        )
    return found


def pack_scopes(
    snap: Snapshot,
    pod: PodRequest,
    level: Level,
    tries: int = 2,
    extra: np.ndarray | None = None,
) -> list[Scope]:
    """Every scope :func:`iter_pack_scopes` gives, best first."""
    return list(iter_pack_scopes(snap, pod, level, tries, extra))


def iter_pack_scopes(
    snap: Snapshot,
    pod: PodRequest,
    level: Level,
    tries: int = 2,
    extra: np.ndarray | None = None,
) -> Iterator[Scope]:
    """Best-fit domains of ``level`` for one pod without a topology request: among the domains
    of the GPU model with the most free capacity, those where it fits with the fewest free whole
    GPUs (then the fewest nodes where it fits), so single pods fill partly used racks and leave
    empty ones whole for gangs; the policy then chooses the node inside. For whole-GPU pods
    the choice reads only the snapshot's per-domain and per-model indexes and the cached
    eligibility (O(domains)); other forms scan only the nodes that could ever hold the pod
    (cached per layout), those of the chosen model's domains first. ``extra`` (bool[N], e.g.
    the DRA claim filter) further restricts the nodes counted. Lazy: a caller that stops at
    the first scope pays only for it (see the end)."""
    index = snap.domains[level]
    if not len(index.names):
        return
    shape = PodShape.of(pod)
    # Spread over GPU models, pack within one: the model with the most free capacity
    # (per-model index, O(models)) takes the pod, so that work which could run anywhere
    # does not use up a scarce model that other work is restricted to.
    by_model = bool(shape.whole or shape.share) and not (shape.mig or shape.replicas)
    model = _roomiest_model(snap, pod, shape.share > 0) if by_model else -1
    ids: np.ndarray | None = None
    free_gpus = index.free_gpus
    if shape.whole and extra is None:
        if model >= 0:
            ids = _model_eligible_domains(snap, pod, level, model)
            ids = ids[free_gpus[ids] >= shape.whole]
        if ids is None or len(ids) == 0:
            eligible = _eligible_per_domain(snap, pod, level)
            ids = np.flatnonzero((free_gpus >= shape.whole) & (eligible > 0))
        keys = free_gpus[ids]
    else:
        per_domain = np.zeros(0, dtype=np.int64)
        for restrict in (model, -1) if model >= 0 else (-1,):
            if extra is None:
                per_domain = _fitting_per_domain(snap, pod, shape, level, restrict)
            else:
                per_domain = _fitting_per_domain_within(snap, pod, shape, level, restrict, extra)
            ids = np.flatnonzero(per_domain)
            if len(ids):
                break
        assert ids is not None
        keys = free_gpus[ids] * (snap.size + 1) + per_domain[ids]
    if len(ids) == 0:
        return
    if len(ids) <= tries:
        for _, d in sorted(zip(keys.tolist(), ids.tolist(), strict=True)):
            yield _domain_scope(snap, level, d)
        return
    # The first ``tries`` keys come from one argpartition, whose pick among equal keys is its
    # own (numpy's SIMD select), then sorted by (key, id). When one domain alone has the least
    # key it is first whatever that pick, so it is given before the argpartition runs: most
    # pods fit in the first scope and never pay for the rest (``keys`` and ``ids`` are this
    # call's own arrays, so the later argpartition sees what the eager one would have).
    first = int(keys.argmin())
    alone = int(np.count_nonzero(keys == keys[first])) == 1
    if alone:
        yield _domain_scope(snap, level, int(ids[first]))
    best = keys.argpartition(tries - 1)[:tries]
    chosen = sorted(zip(keys[best].tolist(), ids[best].tolist(), strict=True))
    for _, d in chosen[1:] if alone else chosen:
        yield _domain_scope(snap, level, d)


def _fitting_per_domain(
    snap: Snapshot, pod: PodRequest, shape: PodShape, level: Level, model: int
) -> np.ndarray:
    """Per domain of ``level``, the nodes among :func:`_capable_nodes` where one more ``pod``
    fits now (int64[D], read-only): kept in step with reservations by
    :mod:`gpuaas.engine.domain_counts`, so a decision re-checks only the nodes that changed
    since the last one of this pod kind instead of every capable node."""
    if shape.share and not (shape.mig or shape.replicas):
        return _share_fitting_per_domain(snap, pod, shape, level, model)
    return _tracked_fits(snap, pod, shape, level, model).per_domain(snap, level)


def _tracked_fits(
    snap: Snapshot, pod: PodRequest, shape: PodShape, level: Level, model: int
) -> TrackedCounts:
    """Per node among :func:`_capable_nodes`, 1 where one more ``pod`` fits now (0 elsewhere),
    kept in step with reservations (:mod:`gpuaas.engine.domain_counts`)."""
    kind = ("fits", level, model, shape, pod.node_selector, pod.tolerations)
    nodes = _capable_nodes(snap, level, shape, model)
    capable: list[np.ndarray] = []  # built on first use: static per layout

    def evaluate(now: Snapshot, which: np.ndarray) -> np.ndarray:
        if which is nodes:  # the first pass: all capable, no mask needed
            return _fits_on(now, pod, shape, which)
        if not capable:
            capable.append(np.zeros(now.size, dtype=bool))
            capable[0][nodes] = True
        return capable[0][which] & _fits_on(now, pod, shape, which)

    def evaluate_one(now: Snapshot, node: int) -> int:
        # a watched node is capable and passes the static filters: the fit rule alone
        return int(fits_one(now, shape, node))

    return tracked(snap, kind, evaluate, nodes, evaluate_one, lambda: _usable(snap, pod, nodes))


def _usable(snap: Snapshot, pod: PodRequest, nodes: np.ndarray) -> np.ndarray:
    """Those of ``nodes`` (int indices) that pass ``pod``'s static filters: the only ones
    whose fit can move before the layout changes, so the only ones counts need to watch."""
    static = static_mask(snap, pod)
    return nodes if static is None else nodes[static[nodes]]


def _fitting_per_domain_within(
    snap: Snapshot, pod: PodRequest, shape: PodShape, level: Level, model: int, extra: np.ndarray
) -> np.ndarray:
    """:func:`_fitting_per_domain` counting only the nodes of ``extra`` (bool[N], e.g. the DRA
    claim filter). But for shares, from the tracked per-node fits (the nodes that moved since
    the last query of the pod kind re-checked) instead of the fit rule over every capable
    node: two vector operations over the fleet instead of a dozen gathers."""
    index = snap.domains[level]
    d = len(index.names)
    if not shape.share:
        fit = _tracked_fits(snap, pod, shape, level, model).values != 0
        return np.bincount(index.of_node[fit & extra], minlength=d)
    nodes = _capable_nodes(snap, level, shape, model)
    fit = _fits_on(snap, pod, shape, nodes)
    fit &= extra[nodes]
    return np.bincount(index.of_node[nodes[fit]], minlength=d)


def _share_fitting_per_domain(
    snap: Snapshot, pod: PodRequest, shape: PodShape, level: Level, model: int
) -> np.ndarray:
    """:func:`_fitting_per_domain` for a pod that asks a share of one GPU, from the counts its
    share family keeps for every share size (:mod:`gpuaas.engine.share_counts`): one family
    serves every size, so a decision re-checks only the nodes changed since the last share
    pod of the family, whatever its size. Restricted to GPU model ``model``, the counts of
    the domains of other models are 0 (the capable nodes are then those of its domains)."""
    found = _REST.get(id(shape))
    if found is None or found[0] is not shape:
        if len(_REST) >= 4096:
            _REST.clear()
        found = _REST[id(shape)] = (shape, dataclasses.replace(shape, share=0))
    rest = found[1]  # everything but the share's size (one object per shape: cheap to hash)
    family = ("share", level, rest, pod.node_selector, pod.tolerations)
    nodes = _capable_nodes(snap, level, shape, -1)
    capable: list[np.ndarray] = []  # built on first use: static per layout

    def room_of(now: Snapshot, which: np.ndarray) -> np.ndarray:
        fits = _fits_on(now, pod, rest, which)
        if which is not nodes:
            if not capable:
                capable.append(np.zeros(now.size, dtype=bool))
                capable[0][nodes] = True
            fits &= capable[0][which]
        return np.where(fits, now.max_free[which], -1)

    def room_one(now: Snapshot, node: int) -> int:
        # a watched node is capable and passes the static filters: the fit rule alone
        return int(now.max_free[node]) if fits_one(now, rest, node) else -1

    counts = share_counts(
        snap, family, level, room_of, nodes, room_one, lambda: _usable(snap, pod, nodes)
    ).per_domain(snap, shape.share)
    if model < 0:
        return counts
    return np.where(_domain_models(snap, level) == model, counts, 0)


#: Per share shape object: the shape without its share (the family's), see above.
_REST: dict[int, tuple[PodShape, PodShape]] = {}


def _domain_scope(snap: Snapshot, level: Level, d: int) -> Scope:
    """The scope of all nodes of domain ``d`` of ``level`` (built once per layout: a scope is
    immutable and its node array is never written)."""
    cache = _layout(snap)
    found = cache.scopes.get((level, d))
    if found is None:
        order, bounds = _members(snap, level)
        name = snap.domains[level].names[d]
        nodes = order[bounds[d] : bounds[d + 1]]
        nodes.flags.writeable = False
        found = cache.scopes[(level, d)] = Scope(nodes, f"{level.short} {name}", level, name)
    return found


def _model_eligible_domains(
    snap: Snapshot, pod: PodRequest, level: Level, model: int
) -> np.ndarray:
    """Domain ids of ``level`` of GPU model ``model`` (ascending) with a node ``pod`` may use
    at all (cached per layout like :func:`_eligible_per_domain`)."""
    cache = _layout(snap)
    key = (level, model, pod.gpu_models, pod.node_selector, pod.tolerations)
    found = cache.model_eligible.get(key)
    if found is None:
        mine = _model_domains(snap, level, model)
        found = mine[_eligible_per_domain(snap, pod, level)[mine] > 0]
        cache.model_eligible[key] = found
        while len(cache.model_eligible) > _MAX_ELIGIBLE:
            cache.model_eligible.popitem(last=False)
    return found


def pods_per_node(
    snap: Snapshot,
    pod: PodRequest,
    extra: np.ndarray | None = None,
    nodes: np.ndarray | None = None,
) -> np.ndarray:
    """How many more pods like ``pod`` fit each node now; exact for identical pods.

    Over the whole fleet (int64[N]) or only ``nodes`` (int indices; one count each). ``extra``
    is an optional bool mask over the fleet (e.g. the DRA claim filter) that zeroes other nodes;
    a pod with claims counts at most one per node. Over the whole fleet without ``extra`` the
    array is read-only and tracked (:mod:`gpuaas.engine.domain_counts`), so the next query of
    the same pod kind and :func:`domain_fits` on it cost the changed nodes, not the fleet.
    """
    if extra is None and nodes is None:
        return _tracked_pods_per_node(snap, pod).values
    return _pods_per_node(snap, pod, extra, nodes)


def _tracked_pods_per_node(snap: Snapshot, pod: PodRequest) -> TrackedCounts:
    """:func:`pods_per_node` over the fleet, kept in step with reservations (see
    :mod:`gpuaas.engine.domain_counts`): only nodes changed since the last query of this pod
    kind are counted again, and their domains' sums moved."""
    shape = PodShape.of(pod)
    kind = ("pods", shape, pod.node_selector, pod.tolerations, bool(pod.claims))
    return tracked(snap, kind, lambda now, nodes: _pods_per_node(now, pod, None, nodes))


def _pods_per_node(
    snap: Snapshot, pod: PodRequest, extra: np.ndarray | None, nodes: np.ndarray | None
) -> np.ndarray:
    shape = PodShape.of(pod)
    sel = slice(None) if nodes is None else nodes
    size = snap.size if nodes is None else len(nodes)
    fit = fit_count(snap, shape, sel, size)
    if pod.claims:
        np.minimum(fit, 1, out=fit)
    fit[~eligible_nodes(snap, pod)[sel]] = 0
    if extra is not None:
        fit[~extra[sel]] = 0
    return fit


def domain_fits(snap: Snapshot, level: Level, per_node: np.ndarray) -> np.ndarray:
    """Pods that fit each domain of ``level`` (int64[D]); nodes without a domain are ignored.
    O(domains) when ``per_node`` is the tracked array :func:`pods_per_node` returned."""
    counts = counts_of(snap, per_node)
    if counts is not None:
        return counts.per_domain(snap, level)
    index = snap.domains[level]
    of_node = index.of_node
    known = of_node >= 0
    if known.all():
        return np.bincount(of_node, weights=per_node, minlength=len(index.names)).astype(np.int64)
    return np.bincount(of_node[known], weights=per_node[known], minlength=len(index.names)).astype(
        np.int64
    )


def parents(snap: Snapshot, inner: Level, outer: Level) -> np.ndarray:
    """For each domain of ``inner``, the one domain of ``outer`` holding all its nodes, or -1
    (its nodes span several, or some lack ``outer``). Cached per layout."""
    cache = _layout(snap)
    key = (inner, outer)
    found = cache.parents.get(key)
    if found is None:
        a = snap.domains[inner].of_node
        b = snap.domains[outer].of_node
        d = len(snap.domains[inner].names)
        found = np.full(d, -1, dtype=np.int64)
        known = a >= 0
        lo = np.full(d, _BIG, dtype=np.int64)
        hi = np.full(d, -2, dtype=np.int64)
        np.minimum.at(lo, a[known], b[known])
        np.maximum.at(hi, a[known], b[known])
        same = (lo == hi) & (lo >= 0)
        found[same] = lo[same]
        cache.parents[key] = found
    return found


def describe_pod(pod: PodRequest) -> str:
    """ "pods of 8 GPUs", "pods of 0.25 GPU", "pods of MIG 1x1g.10gb", ... for reasons."""
    shape = PodShape.of(pod)
    if shape.share:
        return f"pods of {shape.share / MILLI:g} GPU"
    if shape.whole:
        return f"pods of {shape.whole} GPU" + ("s" if shape.whole > 1 else "")
    if shape.mig:
        return "pods of MIG " + ",".join(f"{n}x{p}" for p, n in shape.mig)
    if shape.replicas:
        return f"pods of {shape.replicas} time-sliced replica" + ("s" if shape.replicas > 1 else "")
    if pod.claims:
        return "pods with claims " + ",".join(c.name for c in pod.claims)
    return "CPU-only pods"


def _whole_gpu_bound(snap: Snapshot, level: Level, pod: PodRequest, count: int) -> bool:
    """O(domains) check with the snapshot's index: can any domain hold ``count`` pods' whole
    GPUs at all? (False means no; True means maybe.)"""
    shape = PodShape.of(pod)
    if not shape.whole or pod.claims:
        return True
    index = snap.domains[level]
    return bool(len(index.free_gpus)) and int(index.free_gpus.max()) >= count * shape.whole


def _big_enough(
    snap: Snapshot, level: Level, pod: PodRequest, count: int, outer: Level | None = None
) -> np.ndarray | None:
    """The domains of ``level`` (ascending ids) that could ever hold ``count`` pods like
    ``pod`` by their GPUs alone (nested in one domain of ``outer`` when given), or None when
    the bound does not apply (the pod asks no whole GPUs: every domain may qualify).

    Why: a gang's best fit is asked of every domain of a level, and the innermost level has a
    domain per node or per few nodes (23,047 NVLink domains at 25,000 nodes) of which only the
    multi-node ones can hold a gang; the rest are skipped without a compare. The bound is
    exact: a whole-GPU pod needs ``whole`` fully free GPUs, so a domain fits at most its
    total whole GPUs // ``whole`` such pods, whatever else the fit rule says; a domain left
    out can never reach ``count``, so the qualifying domains and their order are those of the
    full pass. Cached per layout (total GPUs per domain change only with the layout). None
    too when the bound leaves most domains in (gathering them costs more than one compare of
    all)."""
    shape = PodShape.of(pod)
    if not shape.whole:
        return None
    need = count * shape.whole
    cache = _layout(snap)
    key = (level, outer, need)
    if key in cache.big_enough:
        return cache.big_enough[key]
    ok = snap.domains[level].total_gpus >= need
    if outer is not None:
        ok &= nested_in(snap, level, outer)
    qualify = np.flatnonzero(ok)
    found = None if 2 * len(qualify) > len(ok) else qualify
    if len(cache.big_enough) >= _MAX_ELIGIBLE:
        cache.big_enough.clear()
    cache.big_enough[key] = found
    return found


def nested_in(snap: Snapshot, inner: Level, outer: Level) -> np.ndarray:
    """Bool per domain of ``inner``: it lies wholly inside one domain of ``outer``
    (``parents(...) >= 0``, cached per layout: read-only)."""
    cache = _layout(snap)
    found = cache.nested.get((inner, outer))
    if found is None:
        found = cache.nested[(inner, outer)] = parents(snap, inner, outer) >= 0
        found.flags.writeable = False
    return found


def _best_fit(
    fits: np.ndarray,
    count: int,
    free_gpus: np.ndarray,
    ok: np.ndarray | None = None,
    first: int = 1,
    among: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """The first ``first`` domain ids with ``fits >= count`` (and ``ok``), best fit first:
    least room to spare, then fewest free GPUs, then lowest id; and how many domains qualify.
    ``among`` (ascending domain ids, from :func:`_big_enough`): the only domains that can
    qualify; only they are compared.

    The three keys are packed into one integer (each below the next one's unit), so the first
    few come from one ``argpartition`` instead of sorting every qualifying domain."""
    if among is not None:
        hit = fits[among] >= count
        ids = among[hit if ok is None else hit & ok[among]]
    elif first == 1:
        # the one best by (fits, free GPUs, id) over every domain without gathering them
        # (the innermost level has a domain per node or few: 23,047 at 25,000 nodes)
        good = fits >= count
        if ok is not None:
            good &= ok
        total = int(np.count_nonzero(good))
        if total <= 1:
            return np.flatnonzero(good), total
        least = np.where(good, fits, _BIG)
        tied = np.flatnonzero(least == least.min())
        if len(tied) > 1:
            free = free_gpus[tied]
            tied = tied[free == free.min()]
        return tied[:1], total
    else:
        hit = fits >= count
        ids = np.flatnonzero(hit if ok is None else hit & ok)
    total = len(ids)
    if total <= 1:
        return ids, total
    f, free = fits[ids], free_gpus[ids]
    d = len(fits)
    unit = (int(free.max()) + 1) * d
    if int(f.max()) >= _BIG // max(unit, 1):  # cannot pack without overflow: sort
        return ids[np.lexsort((ids, free, f))][:first], total
    key = f * unit + free * d + ids
    if first == 1:  # keys are distinct (the id is part of each): the one least is argmin's
        best = int(key.argmin())
        return ids[best : best + 1], total
    if total > first:
        part = np.argpartition(key, first - 1)[:first]
        ids, key = ids[part], key[part]
    return ids[np.argsort(key)], total


def plan_scopes(
    snap: Snapshot,
    pod_set: PodSet,
    per_node: np.ndarray | None = None,
    max_domains: int = 3,
) -> ScopePlan:
    """Ordered scopes for ``pod_set`` (see the module docstring) and the reason if none fits.

    ``per_node`` is :func:`pods_per_node` for the pod set's pod (computed when omitted).
    ``max_domains`` caps how many domains of the required level are offered.
    """
    count = pod_set.count
    pod = pod_set.pod
    what = f"{count} {describe_pod(pod)}"
    request = pod_set.topology
    if request is not None and request.level is Level.HOSTNAME:
        return _plan_hostname(snap, pod_set, per_node)
    if request is not None and request.mode is TopologyMode.REQUIRED:
        level = request.level
        if not _whole_gpu_bound(snap, level, pod, count):
            index = snap.domains[level]
            if not len(index.names):
                return ScopePlan(
                    (), f"needs {what} in one {_noun(level)}; no node has a {_noun(level)}"
                )
            # Rejected in O(domains); the reason still gives the roomiest domain's exact fit.
            best = int(np.argmax(index.free_gpus))
            fits = int(pods_per_node(snap, pod, nodes=domain_members(snap, level, best)).sum())
            return ScopePlan(
                (),
                f"needs {what} in one {_noun(level)}; best {_noun(level)} {index.names[best]} "
                f"fits {fits} ({int(index.free_gpus[best])} free GPUs)",
            )
    if per_node is None:
        per_node = pods_per_node(snap, pod)
    counts = counts_of(snap, per_node)
    total = counts.total if counts is not None else int(per_node.sum())
    if request is None:
        if total < count:
            return ScopePlan((), f"needs {what}; the fleet fits {total}")
        return ScopePlan(
            (Scope(None, "anywhere", fits=total),),
            f"needs {what}; the fleet fits {total} by count, but placement failed",
        )
    if request.mode is TopologyMode.REQUIRED:
        return _plan_required(snap, pod_set, per_node, max_domains)
    return _plan_preferred(snap, pod_set, per_node, total)


def _plan_hostname(snap: Snapshot, pod_set: PodSet, per_node: np.ndarray | None) -> ScopePlan:
    """All pods on one node: best-fit single node."""
    count = pod_set.count
    if per_node is None:
        per_node = pods_per_node(snap, pod_set.pod)
    ok = np.flatnonzero(per_node >= count)
    what = f"{count} {describe_pod(pod_set.pod)}"
    if len(ok) == 0:
        best = int(np.argmax(per_node)) if snap.size else -1
        fits = int(per_node[best]) if best >= 0 else 0
        name = snap.names[best] if best >= 0 else "-"
        return ScopePlan((), f"needs {what} on one node; best node {name} fits {fits}")
    order = ok[np.lexsort((ok, per_node[ok]))]
    scopes = tuple(
        Scope(
            np.array([n]), f"node {snap.names[n]}", Level.HOSTNAME, snap.names[n], int(per_node[n])
        )
        for n in order[:3].tolist()
    )
    return ScopePlan(scopes, "")


def _plan_required(
    snap: Snapshot, pod_set: PodSet, per_node: np.ndarray, max_domains: int
) -> ScopePlan:
    assert pod_set.topology is not None
    level = pod_set.topology.level
    count = pod_set.count
    index = snap.domains[level]
    fits = domain_fits(snap, level, per_node)
    what = f"{count} {describe_pod(pod_set.pod)}"
    ids, qualify = _best_fit(
        fits,
        count,
        index.free_gpus,
        first=max(max_domains, 1),
        among=_big_enough(snap, level, pod_set.pod, count),
    )
    if qualify == 0:
        if len(fits) == 0:
            return ScopePlan(
                (), f"needs {what} in one {_noun(level)}; no node has a {_noun(level)}"
            )
        best = int(np.argmax(fits))
        return ScopePlan(
            (),
            f"needs {what} in one {_noun(level)}; best {_noun(level)} {index.names[best]} "
            f"fits {int(fits[best])}",
        )
    scopes: list[Scope] = []
    # Tightest inner domain nested in one domain of the level, innermost level first.
    position = INNER_TO_OUTER.index(level)
    for inner in INNER_TO_OUTER[:position]:
        inner_fits = domain_fits(snap, inner, per_node)
        among = _big_enough(snap, inner, pod_set.pod, count, level)
        nested = None if among is not None else nested_in(snap, inner, level)
        inner_ids, _ = _best_fit(
            inner_fits, count, snap.domains[inner].free_gpus, nested, among=among
        )
        if len(inner_ids):
            d = int(inner_ids[0])
            name = snap.domains[inner].names[d]
            scopes.append(
                Scope(
                    domain_members(snap, inner, d),
                    f"{inner.short} {name}",
                    inner,
                    name,
                    int(inner_fits[d]),
                )
            )
            break
    for d in ids[:max_domains].tolist():
        name = index.names[d]
        scopes.append(
            Scope(
                domain_members(snap, level, d), f"{level.short} {name}", level, name, int(fits[d])
            )
        )
    best = int(ids[0])
    reason = (
        f"needs {what} in one {_noun(level)}; {qualify} {_noun(level)}(s) fit by count, "
        f"e.g. {index.names[best]} fits {int(fits[best])}, but placement failed"
    )
    return ScopePlan(tuple(scopes), reason)


def _plan_preferred(snap: Snapshot, pod_set: PodSet, per_node: np.ndarray, total: int) -> ScopePlan:
    assert pod_set.topology is not None
    level = pod_set.topology.level
    count = pod_set.count
    what = f"{count} {describe_pod(pod_set.pod)}"
    if total < count:
        return ScopePlan(
            (), f"needs {what} (preferably in one {_noun(level)}); the fleet fits {total}"
        )
    scopes: list[Scope] = []
    level_fits: np.ndarray | None = None
    for candidate in INNER_TO_OUTER:
        fits = domain_fits(snap, candidate, per_node)
        if candidate is level:
            level_fits = fits
        ids, _ = _best_fit(
            fits,
            count,
            snap.domains[candidate].free_gpus,
            among=_big_enough(snap, candidate, pod_set.pod, count),
        )
        if len(ids):
            d = int(ids[0])
            name = snap.domains[candidate].names[d]
            scopes.append(
                Scope(
                    domain_members(snap, candidate, d),
                    f"{candidate.short} {name}",
                    candidate,
                    name,
                    int(fits[d]),
                )
            )
            break
    if level_fits is None:
        level_fits = domain_fits(snap, level, per_node)
    # Fewest domains of the level that together fit: largest first.
    order = np.argsort(-level_fits, kind="stable")  # ties by domain id, as a lexsort would
    cumulative = np.cumsum(level_fits[order])
    need = int(np.searchsorted(cumulative, count)) + 1
    if need <= len(order) and cumulative[need - 1] >= count and need > 1:
        chosen = order[:need]
        nodes = np.sort(np.concatenate([domain_members(snap, level, int(d)) for d in chosen]))
        names = ", ".join(snap.domains[level].names[d] for d in chosen[:4].tolist())
        more = "" if need <= 4 else f" and {need - 4} more"
        scopes.append(
            Scope(
                nodes,
                f"{need} {level.short}s ({names}{more})",
                level,
                "",
                int(cumulative[need - 1]),
            )
        )
    scopes.append(Scope(None, "anywhere", None, "", total))
    return ScopePlan(
        tuple(scopes), f"needs {what}; the fleet fits {total} by count, but placement failed"
    )


def required_domain(snap: Snapshot, level: Level, nodes: Sequence[int]) -> int | None:
    """The one domain of ``level`` holding all ``nodes``, or None (for checks and tests)."""
    of_node = snap.domains[level].of_node
    ids = {int(of_node[n]) for n in nodes}
    if len(ids) != 1 or -1 in ids:
        return None
    return ids.pop()
