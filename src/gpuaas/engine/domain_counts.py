"""Per-node fit counts kept in step with a snapshot, and their sums per topology domain.

Topology asks, for one pod kind at a time, "how many pods fit each node" (gang planning) or
"does one fit" (choosing the rack of a single pod), and then sums that per domain. Computed
from scratch it is a pass over every node (25,000 at 200,000 GPUs) per decision, although a
decision changes only the few nodes it reserves on. A :class:`TrackedCounts` therefore keeps,
per snapshot and pod kind, the per-node values and their per-domain sums of the last query,
and the snapshot version of every node then; a query re-evaluates only the nodes whose version
moved since (``Snapshot.version`` moves on every reserve, unreserve, taint change and fleet
change of that node, and the snapshot's journal lists the nodes that moved, so finding them
costs the changes, not the fleet), and moves their domains' sums by the difference.

Why this and not an index inside the snapshot (say, per rack the largest free share): the
per-node value is the full fit rule (CPU, memory, every GPU form, and whatever rule
:data:`gpuaas.engine.fit.RULES` gains later) and the static filters, so the counts are exactly
those of a full pass whatever the pod asks, with no per-resource bookkeeping in
``Snapshot.reserve``; the cost per query is the changed nodes (read from the journal; before
the journal, one vectorised compare of the version array, 10-20 us at 25,000 nodes). The
values are a function of each node's state alone, so re-evaluating a node gives what a full
pass would give for it.

Counts are keyed by ``Snapshot.uid``: a copy and a layout change (nodes added or removed,
taints changed) get a new uid, so they start afresh, and a snapshot never sees another's
counts. Tracking is per process and bounded (the least recently used counts go first).

**Watched counts.** A pod kind that fits only some nodes (a MIG profile, time-sliced replicas)
learns little from the journal: between two of its queries most changes are on nodes it can
never use, and sifting them (dedupe, a vectorised re-check with a dozen numpy calls) is most
of a query's cost. Given ``evaluate_one`` (the value of one node, with scalars), the counts
*watch* their nodes instead (:meth:`Snapshot.watch`): every reservation or release on one of
them pushes the node's index onto the counts' own change list, in O(1), and a query re-checks
just those nodes one by one (up to :data:`_ONE_BY_ONE` of them; more go through the vectorised
path). Watched counts live on the snapshot itself (:attr:`Snapshot.watchers`, bounded, least
recently used first out, each unwatched as it goes), so that a watch ends with its counts and
a layout change ends both.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Protocol, TypeVar, cast

import numpy as np

from gpuaas.engine.snapshot import Snapshot, drain
from gpuaas.model.topology import Level

#: Evaluates the tracked value at the given node indices of the snapshot (int64[k] -> int64[k]).
#: It takes the snapshot as an argument rather than holding it, so that tracking keeps no
#: snapshot alive.
Evaluate = Callable[[Snapshot, np.ndarray], np.ndarray]
#: Evaluates the tracked value at one node (the same value ``Evaluate`` gives, as an int).
EvaluateOne = Callable[[Snapshot, int], int]

#: Kinds tracked at once over all snapshots (two int64 arrays per node each: 400 KB at 25,000
#: nodes), least recently used first out.
_MAX_TRACKED = 128
#: Past this share of changed nodes a query recomputes every node in one pass.
_FULL_PASS_SHARE = 0.25
#: Up to this many moved nodes, per-domain sums are moved in plain Python.
_FEW = 16
#: Up to this many changed nodes, watched counts re-check them one by one in plain Python
#: (a few microseconds each) rather than through the vectorised path (~25 numpy calls).
_ONE_BY_ONE = 8
#: Watched counts kept per snapshot (each holds int64 arrays per node, and costs every
#: reservation on its nodes one list append).
_MAX_WATCHED = 32


class TrackedCounts:
    """The values of one pod kind's per-node count on one snapshot, and their per-domain sums.

    ``values`` is read-only to callers (int64[N]); :meth:`sync` brings it and every per-level
    sum asked for so far up to date. ``values`` and the sums are consistent with each other at
    any time, since both change only in :meth:`sync`."""

    __slots__ = (
        "candidates",
        "dirty",
        "evaluate",
        "evaluate_one",
        "seen",
        "sums",
        "tick",
        "total",
        "uid",
        "values",
        "watched",
    )

    def __init__(
        self,
        snap: Snapshot,
        evaluate: Evaluate,
        candidates: np.ndarray | None = None,
        evaluate_one: EvaluateOne | None = None,
        watched: Callable[[], np.ndarray] | None = None,
    ) -> None:
        self.uid = snap.uid
        self.evaluate = evaluate
        self.evaluate_one = evaluate_one
        self.candidates = candidates
        #: the nodes watched (those whose value may move), or None: read the journal
        self.watched = None if watched is None else watched()
        self.dirty = None if self.watched is None else snap.watch(self.watched)
        self.seen = snap.version.copy() if self.watched is None else snap.version[:0]
        self.tick = snap.tick()
        self.values = self._evaluate_all(snap)
        self.values.flags.writeable = False
        self.total = int(self.values.sum())  # over every node, with or without a domain
        self.sums: dict[Level, np.ndarray] = {}

    def sync(self, snap: Snapshot) -> None:
        """Re-evaluate the nodes whose version moved since the last sync: those on the
        counts' own change list when they watch their nodes; otherwise read from the
        snapshot's journal (compared over the whole version array when the journal no longer
        reaches back to the last sync or holds more changes than the compare costs)."""
        dirty = self.dirty
        if dirty is None:
            changed, self.tick = snap.moved_since(self.tick, self.seen)
        elif not dirty:
            return
        elif (nodes := drain(dirty)) is None:  # the list stopped at its cap: every node again
            changed = np.arange(len(self.values), dtype=np.int64)
        elif len(nodes) <= _ONE_BY_ONE and self.evaluate_one is not None:
            self._sync_one_by_one(snap, nodes, self.evaluate_one)
            return
        else:
            changed = np.array(nodes, dtype=np.int64)
        if not len(changed):
            return
        values = self.values
        values.flags.writeable = True
        try:
            if len(changed) > _FULL_PASS_SHARE * len(values):
                values[:] = self._evaluate_all(snap)
                self.total = int(values.sum())
                for level in self.sums:
                    self.sums[level] = self._sum(snap, level)
                return
            new = self.evaluate(snap, changed).astype(np.int64)
            delta = new - values[changed]
            values[changed] = new
        finally:
            values.flags.writeable = False
        moved = np.flatnonzero(delta)
        if not len(moved):
            return
        nodes, delta = changed[moved], delta[moved]
        self.total += int(delta.sum())
        few = len(nodes) <= _FEW
        for level, sums in self.sums.items():
            of_node = snap.domains[level].of_node[nodes]
            if few:  # a handful of nodes: Python ints beat np.add.at's set-up
                for d, by in zip(of_node.tolist(), delta.tolist(), strict=True):
                    if d >= 0:
                        sums[d] += by
                continue
            known = of_node >= 0
            np.add.at(sums, of_node[known], delta[known])

    def _sync_one_by_one(self, snap: Snapshot, nodes: list[int], evaluate_one: EvaluateOne) -> None:
        """:meth:`sync` for a few changed ``nodes`` (ascending, each once): each
        re-evaluated with scalars, its value and its domains' sums moved by the difference."""
        values = self.values
        moved: list[tuple[int, int]] = []
        for n in nodes:
            by = evaluate_one(snap, n) - int(values[n])
            if by:
                moved.append((n, by))
        if not moved:
            return
        values.flags.writeable = True
        try:
            for n, by in moved:
                values[n] += by
                self.total += by
        finally:
            values.flags.writeable = False
        for level, sums in self.sums.items():
            of_node = snap.domains[level].of_node
            for n, by in moved:
                d = int(of_node[n])
                if d >= 0:
                    sums[d] += by

    def close(self, snap: Snapshot) -> None:
        """Stop watching (the counts are dropped)."""
        if self.dirty is not None and self.watched is not None:
            snap.unwatch(self.dirty, self.watched)

    def _evaluate_all(self, snap: Snapshot) -> np.ndarray:
        """Every node's value: ``evaluate`` over the candidates only, when given (the value
        is 0 elsewhere), so a first query costs what a pass over them did before tracking."""
        if self.candidates is None:
            return self.evaluate(snap, np.arange(snap.size, dtype=np.int64)).astype(np.int64)
        values = np.zeros(snap.size, dtype=np.int64)
        values[self.candidates] = self.evaluate(snap, self.candidates)
        return values

    def per_domain(self, snap: Snapshot, level: Level) -> np.ndarray:
        """Sum of the values per domain of ``level`` (int64[D], read-only; nodes without a
        domain of the level are left out). Call after :meth:`sync`."""
        sums = self.sums.get(level)
        if sums is None:
            sums = self.sums[level] = self._sum(snap, level)
        return sums

    def _sum(self, snap: Snapshot, level: Level) -> np.ndarray:
        index = snap.domains[level]
        known = index.of_node >= 0
        return np.bincount(
            index.of_node[known], weights=self.values[known], minlength=len(index.names)
        ).astype(np.int64)


_TRACKED: OrderedDict[tuple[int, Hashable], TrackedCounts] = OrderedDict()
#: Per-node values handed out, by id, so that a sum per domain of such an array is O(domains).
_BY_VALUES: dict[int, TrackedCounts] = {}


class Watcher(Protocol):
    """Counts kept on a snapshot's :attr:`~gpuaas.engine.snapshot.Snapshot.watchers`."""

    def close(self, snap: Snapshot) -> None: ...


W = TypeVar("W", bound=Watcher)


def kept_on(snap: Snapshot, key: Hashable, build: Callable[[], W], limit: int) -> tuple[W, bool]:
    """The watcher kept on ``snap`` under ``key`` (built with ``build`` when missing; then
    True), most recently used last; past ``limit`` the least recently used is closed and
    dropped."""
    kept = snap.watchers
    found = kept.pop(key, None)
    if found is not None:
        kept[key] = found  # most recently used last
        return cast(W, found), False
    made = build()
    kept[key] = made
    while len(kept) > limit:
        cast(Watcher, kept.pop(next(iter(kept)))).close(snap)
    return made, True


def tracked(
    snap: Snapshot,
    kind: Hashable,
    evaluate: Evaluate,
    candidates: np.ndarray | None = None,
    evaluate_one: EvaluateOne | None = None,
    watched: Callable[[], np.ndarray] | None = None,
) -> TrackedCounts:
    """The counts of ``kind`` on ``snap``, synced (built with ``evaluate`` on first use).

    ``kind`` must determine ``evaluate``'s result for a node state (e.g. the pod's shape and
    static scheduling fields), since one kind's counts are reused across calls. ``candidates``
    (int node indices, static for the snapshot's layout): the only nodes whose value may be
    non-zero; ``evaluate`` must return 0 for any other node. With ``watched`` (giving int
    node indices, static for the layout: the only nodes whose value may ever move; asked once,
    when the counts are built) and
    ``evaluate_one`` the counts watch those nodes instead of reading the journal (see the
    module docstring); they are then kept on the snapshot, not in this module."""
    if watched is not None:
        counts, made = kept_on(
            snap,
            ("tracked", kind),
            lambda: TrackedCounts(snap, evaluate, candidates, evaluate_one, watched),
            _MAX_WATCHED,
        )
        if not made:
            counts.sync(snap)
        return counts
    key = (snap.uid, kind)
    counts = _TRACKED.get(key)
    if counts is None:
        counts = _TRACKED[key] = TrackedCounts(snap, evaluate, candidates)
        _BY_VALUES[id(counts.values)] = counts
        while len(_TRACKED) > _MAX_TRACKED:
            _BY_VALUES.pop(id(_TRACKED.popitem(last=False)[1].values), None)
    else:
        _TRACKED.move_to_end(key)
        counts.sync(snap)
    return counts


def counts_of(snap: Snapshot, values: np.ndarray) -> TrackedCounts | None:
    """The tracked counts of ``snap`` whose ``values`` array this is, if any."""
    counts = _BY_VALUES.get(id(values))
    if counts is None or counts.values is not values or counts.uid != snap.uid:
        return None
    return counts
