"""The idle-capacity pool's two choices, pure: which idle nodes move into the pool, and which
pool nodes to take back when tenants need capacity.

CONTRACT (written by the lead, implemented by the ``idlepool`` helper): the service
(``service/idle_pool.py``) and the simulator (``sim/whatif.py``) call these.

Semantics:

- **Settle.** A node is offered (:class:`FreeNode`) only when it is whole and free: in no
  cluster, holding no admitted work, healthy and not cordoned; the caller decides that, this
  module never sees a busy node. A node with no GPU is never taken (the pool sells GPUs, and
  a CPU-only node in it would only be capacity the tenants lose). A node settles once it has
  been idle for at least ``settle_seconds``; those idle longest move first (then by name, so a
  choice is deterministic), and only as many as keep the pool within ``max_nodes`` (0: no
  limit but the fleet). A pool already at or over its limit takes none and gives none back
  here: shrinking is a reclaim's job.
- **Reclaim.** A reclaim gives back ``count`` whole pool nodes that ``matches`` accepts (a
  flavor, a GPU model, whatever the tenant's demand needs) and never more; fewer only when
  fewer match. Taking a node back disturbs every pool job on it (each gets its checkpoint
  signal and grace, then is evicted), and a job spanning several nodes is disturbed once
  whichever of its nodes is taken. The choice **minimises the number of pool jobs
  disturbed**: empty nodes first, then nodes whose jobs are already being disturbed
  (``disturbed``: jobs in their grace from an earlier reclaim cost nothing more), then the
  cheapest groups, which keeps a multi-node job's nodes together (its second node is free
  once its first is taken). Exactly: nodes that share a job form a group (a connected
  component of the node-job graph); for each group the fewest jobs that free ``k`` of its
  nodes is found by enumeration (over its jobs or over its nodes, whichever is smaller, when
  that is at most :data:`EXACT_LIMIT`; otherwise greedily by jobs disturbed per node freed),
  and the groups are combined by a knapsack over ``count``, which is exact whenever every
  group was. Ties go to fewer GPUs of busy nodes taken, then to names in order.
- **Which pool nodes a waiting workload could use** (:func:`nodes_for`) is the placement
  engine's answer, not a guess: the pool's nodes as they would be once given back (empty,
  without the pool's label and taint) form a snapshot, the workload is placed on it by the
  same gang placement admission uses, and the nodes it needs are counted; the nodes any of
  its pods fits (the fit rule and the static filters: GPU model, selector, taints) are the
  ones a reclaim may take for it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from gpuaas.engine.fit import fit_mask
from gpuaas.engine.framework import PodShape, static_mask
from gpuaas.engine.gang import place_workload
from gpuaas.engine.place import Unschedulable
from gpuaas.engine.policies import make_policy
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.autoscale import IdlePoolSpec
from gpuaas.model.node import Node
from gpuaas.model.workload import Workload

#: A group of nodes sharing jobs is solved exactly when its jobs or its nodes number at most
#: this many (2**12 subsets); larger groups are solved greedily.
EXACT_LIMIT = 12


@dataclass(frozen=True, slots=True)
class FreeNode:
    """A node in no cluster, unallocated since ``idle_since``; unhealthy, cordoned or
    partly allocated nodes are not offered (whole nodes only)."""

    name: str
    idle_since: float
    gpus: int
    left_pool: float | None = None  # when it was last reclaimed from the pool (None: never)


@dataclass(frozen=True, slots=True)
class PoolNode:
    """A node the pool holds and the pool jobs running on it (a job may span nodes)."""

    name: str
    gpus: int
    jobs: tuple[int, ...]


def settle(
    free: Sequence[FreeNode], spec: IdlePoolSpec, pool_size: int, now: float, hold: float = 0.0
) -> list[str]:
    """Nodes idle for at least ``spec.settle_seconds`` that move into the pool now, within
    ``spec.max_nodes``: the longest idle first. ``hold``: a node reclaimed from the pool less
    than this long ago does not go back yet (a pool flap: taken from the pool and given back
    within minutes; 0: no hold)."""
    room = len(free) if spec.max_nodes <= 0 else max(spec.max_nodes - pool_size, 0)
    ripe = [
        n
        for n in free
        if n.gpus > 0
        and now - n.idle_since >= spec.settle_seconds
        and (n.left_pool is None or now - n.left_pool > hold or hold <= 0)
    ]
    ripe.sort(key=lambda n: (n.idle_since, n.name))
    return [n.name for n in ripe[:room]]


def fitting(workload: Workload, nodes: Sequence[Node]) -> frozenset[str]:
    """The ``nodes`` where a pod of ``workload`` fits now (the fit rule and the static
    filters: GPU model, selector, taints)."""
    if not nodes or not workload.pod_sets:
        return frozenset()
    snap = Snapshot.from_nodes(nodes)
    return frozenset(nodes[i].name for i in np.flatnonzero(_fits(snap, workload)))


def _fits(snap: Snapshot, workload: Workload) -> np.ndarray:
    fits = np.zeros(snap.size, dtype=bool)
    for pod_set in workload.pod_sets:
        mask = fit_mask(snap, PodShape.of(pod_set.pod), slice(None), snap.size)
        mask = np.ones(snap.size, dtype=bool) if mask is None else mask.copy()
        static = static_mask(snap, pod_set.pod)
        if static is not None:
            mask &= static
        fits |= mask
    return fits


def nodes_for(workload: Workload, nodes: Sequence[Node]) -> tuple[frozenset[str], int] | None:
    """The ``nodes`` (pool nodes as they would be once given back) any pod of ``workload``
    fits, and how many of them a placement of the whole workload on them alone takes; None
    when they cannot hold it (the pool cannot help it)."""
    if not nodes or not workload.pod_sets:
        return None
    snap = Snapshot.from_nodes(nodes)
    fits = _fits(snap, workload)
    if not fits.any():
        return None
    placed = place_workload(snap, workload, make_policy("packing"))
    if isinstance(placed, Unschedulable):
        return None
    names = frozenset(nodes[i].name for i in np.flatnonzero(fits))
    return names, len(set(placed.nodes))


def jobs_disturbed(pool: Sequence[PoolNode], nodes: Collection[str]) -> set[int]:
    """The pool jobs a reclaim of ``nodes`` disturbs: every job on any of them."""
    taken = set(nodes)
    return {j for n in pool if n.name in taken for j in n.jobs}


def reclaim(
    pool: Sequence[PoolNode],
    count: int,
    matches: Callable[[str], bool],
    disturbed: Collection[int] = (),
) -> list[str]:
    """``count`` pool nodes that ``matches`` accepts, chosen so the fewest pool jobs are
    disturbed (empty nodes first; a job's other nodes before a new job's). Jobs in
    ``disturbed`` are already being evicted and cost nothing. The nodes come in the order to
    take them: those that disturb nothing new first."""
    if count <= 0:
        return []
    done = frozenset(disturbed)
    candidates = sorted((n for n in pool if matches(n.name)), key=lambda n: n.name)
    # what each node would disturb now, beyond what is already being disturbed
    cost_of = {n.name: frozenset(j for j in n.jobs if j not in done) for n in candidates}
    gpus = {n.name: n.gpus for n in candidates}
    free = [n.name for n in candidates if not cost_of[n.name]]
    if len(free) >= count:
        return free[:count]
    wanted = count - len(free)
    groups = _groups([n.name for n in candidates if cost_of[n.name]], cost_of)
    tables = [_group_table(g, cost_of, gpus) for g in groups]
    chosen = _combine(tables, wanted)
    return free + _in_order(chosen, cost_of)


# -- the groups ------------------------------------------------------------------------


def _groups(names: list[str], cost_of: dict[str, frozenset[int]]) -> list[list[str]]:
    """Nodes joined by a shared (not yet disturbed) job, each group sorted by name."""
    parent = {n: n for n in names}

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    first: dict[int, str] = {}
    for name in names:
        for job in cost_of[name]:
            if job in first:
                a, b = root(first[job]), root(name)
                if a != b:
                    parent[max(a, b)] = min(a, b)
            else:
                first[job] = name
    out: dict[str, list[str]] = {}
    for name in names:
        out.setdefault(root(name), []).append(name)
    return [sorted(g) for _, g in sorted(out.items())]


#: A choice within a group: (jobs disturbed, GPUs taken, the nodes).
Entry = tuple[int, int, tuple[str, ...]]
#: One group's table: for k nodes taken (index k), the best choice or None.
Table = list[Entry | None]


def _better(a: Entry | None, jobs: int, gpus: int, nodes: tuple[str, ...]) -> bool:
    return a is None or (jobs, gpus, nodes) < a


def _group_table(
    group: list[str], cost_of: dict[str, frozenset[int]], gpus: dict[str, int]
) -> Table:
    jobs = sorted({j for n in group for j in cost_of[n]})
    if min(len(jobs), len(group)) > EXACT_LIMIT:
        return _greedy(group, cost_of, gpus)
    table = (_by_jobs if len(jobs) <= len(group) else _by_nodes)(group, jobs, cost_of, gpus)
    # k nodes may be had more cheaply from a choice that frees more: its first k (in the
    # order of taking) disturb no more jobs than all of it
    best: Table = [None] * (len(group) + 1)
    best[0] = (0, 0, ())
    carry: Entry | None = None
    for k in range(len(group), 0, -1):
        entry = table[k]
        if entry is not None and (carry is None or entry[0] <= carry[0]):
            carry = entry
        if carry is not None:
            nodes = tuple(_in_order(list(carry[2]), cost_of)[:k])
            cost = len(frozenset().union(*(cost_of[n] for n in nodes)))
            best[k] = (cost, sum(gpus[n] for n in nodes), nodes)
    return best


def _by_jobs(group, jobs, cost_of, gpus) -> Table:
    """Every set of jobs to evict: the nodes it frees are those with all their jobs in it."""
    bit = {j: 1 << i for i, j in enumerate(jobs)}
    masks = [(n, sum(bit[j] for j in cost_of[n])) for n in group]
    table: Table = [None] * (len(group) + 1)
    for chosen in range(1 << len(jobs)):
        freed = tuple(n for n, m in masks if m & chosen == m)
        if not freed:
            continue
        cost = chosen.bit_count()
        size = sum(gpus[n] for n in freed)
        if _better(table[len(freed)], cost, size, freed):
            table[len(freed)] = (cost, size, freed)
    return table


def _by_nodes(group, jobs, cost_of, gpus) -> Table:
    """Every set of nodes: it disturbs the union of their jobs."""
    table: Table = [None] * (len(group) + 1)
    for chosen in range(1, 1 << len(group)):
        nodes = tuple(n for i, n in enumerate(group) if chosen >> i & 1)
        cost = len(frozenset().union(*(cost_of[n] for n in nodes)))
        size = sum(gpus[n] for n in nodes)
        if _better(table[len(nodes)], cost, size, nodes):
            table[len(nodes)] = (cost, size, nodes)
    return table


def _greedy(group, cost_of, gpus) -> Table:
    """A large group: repeatedly take the node whose new jobs free the most nodes per job
    (nodes left with nothing new to disturb follow at once)."""
    table: Table = [None] * (len(group) + 1)
    taken: list[str] = []
    evicted: set[int] = set()
    left = list(group)
    while left:
        best_key, best_node = None, None
        for node in left:
            new = cost_of[node] - evicted
            after = evicted | new
            freed = sum(1 for m in left if cost_of[m] <= after)
            key = (len(new) / freed, len(new), gpus[node], node)
            if best_key is None or key < best_key:
                best_key, best_node = key, node
        evicted |= cost_of[best_node]
        now_free = [m for m in left if cost_of[m] <= evicted]
        taken.extend(now_free)
        left = [m for m in left if m not in now_free]
        for k in range(len(taken) - len(now_free) + 1, len(taken) + 1):
            table[k] = (len(evicted), sum(gpus[n] for n in taken[:k]), tuple(taken[:k]))
    return table


def _combine(tables: list[Table], wanted: int) -> list[str]:
    """The groups' tables combined (a knapsack on nodes taken): the fewest jobs, then the
    fewest GPUs, for ``wanted`` nodes, or every node when fewer are there."""
    total = sum(len(t) - 1 for t in tables)
    wanted = min(wanted, total)
    inf = (float("inf"), float("inf"))
    best: list[tuple[float, float]] = [inf] * (wanted + 1)
    best[0] = (0, 0)
    picks: list[list[int]] = []
    for table in tables:
        nxt = list(best)
        pick = [0] * (wanted + 1)
        for have in range(wanted + 1):
            if best[have] == inf:
                continue
            for k in range(1, min(len(table) - 1, wanted - have) + 1):
                entry = table[k]
                if entry is None:
                    continue
                cand = (best[have][0] + entry[0], best[have][1] + entry[1])
                if cand < nxt[have + k]:
                    nxt[have + k] = cand
                    pick[have + k] = k
        picks.append(pick)
        best = nxt
    chosen: list[str] = []
    have = wanted
    for table, pick in zip(reversed(tables), reversed(picks), strict=True):
        k = pick[have]
        if k:
            chosen.extend(table[k][2])
            have -= k
    return chosen


def _in_order(chosen: list[str], cost_of: dict[str, frozenset[int]]) -> list[str]:
    """The chosen nodes in the order to take them: each next node the one adding fewest new
    jobs to those already disturbed (a multi-node job's nodes together), then by name."""
    out: list[str] = []
    evicted: set[int] = set()
    left = sorted(chosen)
    while left:
        node = min(left, key=lambda n: (len(cost_of[n] - evicted), n))
        out.append(node)
        evicted |= cost_of[node]
        left.remove(node)
    return out
