"""Per-domain counts of the nodes where one more GPU share fits, for every share size at once.

Choosing the rack of a single pod that asks a share of one GPU (``gpu_milli`` < 1000) counts,
per rack, the nodes where it fits now (:func:`gpuaas.engine.topology.pack_scopes`). A share
fits a node when everything else the pod asks fits (CPU, memory, NICs, the static filters) and
one GPU has at least the share free: the fit rule's ``GPU share`` entry compares the node's
largest free share (``Snapshot.max_free``) with the share, and no other rule reads the share's
size. So pods that differ only in the size of their share have one per-node value in common,
the node's *room*: its largest free share where everything else fits, -1 where it does not.
The pod fits where ``room >= share``.

:mod:`gpuaas.engine.domain_counts` keeps counts per pod kind, and each share size is a kind of
its own: with a mix of many sizes (the synthetic mix draws 18), each kind is queried rarely
and then re-evaluates every node that moved since its last query (a few hundred at 25,000
nodes). A :class:`ShareCounts` instead keeps the room once per *family* (the pod's shape but
the share's size, node selector and tolerations) and, per share size asked so far, the count
per domain of nodes with ``room >= share``. A query re-evaluates only the nodes that moved since
the last query of any size of the family (from the family's watch, below), and for
each node whose room changed moves its domain's count of each size it crossed. The counts are
therefore exactly those of a full pass; ``tests/engine/test_domain_counts.py`` checks them
against one after any sequence of reservations, releases and fleet changes.

Families are kept on the snapshot they count (a copy or a layout change starts afresh) and
bounded, least recently used first out; so are the sizes kept per family. A family *watches*
its nodes (:meth:`Snapshot.watch`, as watched counts in :mod:`gpuaas.engine.domain_counts`
do): a reservation or release there pushes the node onto the family's change list, and a
query re-checks those nodes, one by one with scalars when they are few; no other change in
the fleet costs it anything.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from gpuaas.engine.domain_counts import kept_on
from gpuaas.engine.snapshot import Snapshot, drain
from gpuaas.model.topology import Level

#: The room of the given node indices (int64[k] -> int64[k]): the largest free share where the
#: rest of the pod fits, -1 elsewhere (and -1 for any node outside the family's candidates).
Room = Callable[[Snapshot, np.ndarray], np.ndarray]
#: The room of one watched node (one that passes the family's static filters), as an int.
RoomOne = Callable[[Snapshot, int], int]

#: Families kept at once over all snapshots (two int64 arrays per node each).
_MAX_FAMILIES = 32
#: Share sizes kept per family (one int64 array per domain each).
_MAX_SIZES = 64
#: Past this share of changed nodes a query recomputes every node's room in one pass.
_FULL_PASS_SHARE = 0.25
#: Up to this many (moved node x share size) updates, counts are moved in plain Python.
_FEW = 512
#: Up to this many changed nodes, a query re-checks them one by one with scalars.
_ONE_BY_ONE = 8


class ShareCounts:
    """One family's room per node on one snapshot and, per share size asked, the nodes per
    domain of ``level`` where that share fits. ``room`` and every count are consistent with
    each other at any time, since all change only in :meth:`sync` and :meth:`per_domain`."""

    __slots__ = (
        "by_size",
        "candidates",
        "dirty",
        "level",
        "room",
        "room_of",
        "room_one",
        "sizes",
        "uid",
        "watched",
    )

    def __init__(
        self,
        snap: Snapshot,
        level: Level,
        room_of: Room,
        candidates: np.ndarray,
        room_one: RoomOne,
        watched: Callable[[], np.ndarray],
    ):
        self.uid = snap.uid
        self.level = level
        self.room_of = room_of
        self.room_one = room_one
        self.candidates = candidates
        self.watched = watched()  # the candidates that pass the static filters
        self.dirty = snap.watch(self.watched)
        self.room = self._room_all(snap)
        self.sizes: OrderedDict[int, np.ndarray] = OrderedDict()
        self.by_size: list[int] = []  # the keys of ``sizes``, ascending

    def _room_all(self, snap: Snapshot) -> np.ndarray:
        room = np.full(snap.size, -1, dtype=np.int64)
        room[self.candidates] = self.room_of(snap, self.candidates)
        return room

    def _count(self, snap: Snapshot, share: int) -> np.ndarray:
        """Nodes per domain with ``room >= share``, from scratch (O(nodes))."""
        index = snap.domains[self.level]
        fits = self.room >= share
        fits &= index.of_node >= 0
        return np.bincount(index.of_node[fits], minlength=len(index.names)).astype(np.int64)

    def close(self, snap: Snapshot) -> None:
        """Stop watching (the family is dropped)."""
        snap.unwatch(self.dirty, self.watched)

    def sync(self, snap: Snapshot) -> None:
        """Re-evaluate the watched nodes that changed since the last sync, and move the
        counts of every kept size by the nodes whose room crossed it."""
        if not self.dirty:
            return
        nodes = drain(self.dirty)
        if nodes is None:  # the list stopped at its cap: every node again
            changed = self.candidates
        elif len(nodes) <= _ONE_BY_ONE:
            self._sync_one_by_one(snap, nodes)
            return
        else:
            changed = np.array(nodes, dtype=np.int64)
        if len(changed) > _FULL_PASS_SHARE * len(self.room):
            self.room = self._room_all(snap)
            for share in self.sizes:
                self.sizes[share] = self._count(snap, share)
            return
        new = self.room_of(snap, changed)
        old = self.room[changed]
        moved = np.flatnonzero(new != old)
        if not len(moved) or not self.sizes:
            self.room[changed] = new
            return
        nodes = changed[moved]
        new, old = new[moved], old[moved]
        self.room[nodes] = new
        of_node = snap.domains[self.level].of_node[nodes]
        if len(nodes) * len(self.sizes) <= _FEW:
            sizes, by_size = self.sizes, self.by_size
            for d, was, now in zip(of_node.tolist(), old.tolist(), new.tolist(), strict=True):
                if d < 0:
                    continue
                lo, hi, by = (was, now, 1) if was < now else (now, was, -1)
                # the sizes the room crossed, lo < share <= hi: a run of the ascending list
                for share in by_size[bisect_right(by_size, lo) : bisect_right(by_size, hi)]:
                    sizes[share][d] += by
            return
        known = of_node >= 0
        of_node, new, old = of_node[known], new[known], old[known]
        for share, counts in self.sizes.items():
            np.add.at(counts, of_node, (new >= share).astype(np.int64) - (old >= share))

    def _sync_one_by_one(self, snap: Snapshot, nodes: list[int]) -> None:
        """:meth:`sync` for a few changed ``nodes``, with scalars: the same rooms and counts."""
        room, room_one = self.room, self.room_one
        by_size, sizes = self.by_size, self.sizes
        of_node = snap.domains[self.level].of_node
        for n in nodes:
            now = room_one(snap, n)
            was = int(room[n])
            if now == was:
                continue
            room[n] = now
            d = int(of_node[n])
            if d < 0 or not by_size:
                continue
            lo, hi, by = (was, now, 1) if was < now else (now, was, -1)
            for share in by_size[bisect_right(by_size, lo) : bisect_right(by_size, hi)]:
                sizes[share][d] += by

    def per_domain(self, snap: Snapshot, share: int) -> np.ndarray:
        """Nodes per domain where a share of ``share`` milli fits (int64[D]; do not write to
        it). Call after :meth:`sync`."""
        counts = self.sizes.get(share)
        if counts is None:
            counts = self.sizes[share] = self._count(snap, share)
            insort(self.by_size, share)
            while len(self.sizes) > _MAX_SIZES:
                self.by_size.remove(self.sizes.popitem(last=False)[0])
        else:
            self.sizes.move_to_end(share)
        return counts


def share_counts(
    snap: Snapshot,
    family: Hashable,
    level: Level,
    room_of: Room,
    candidates: np.ndarray,
    room_one: RoomOne,
    watched: Callable[[], np.ndarray],
) -> ShareCounts:
    """The counts of ``family`` on ``snap`` for domains of ``level``, synced (built on first
    use). ``family`` must determine ``room_of``'s (and ``room_one``'s) result for a node
    state, and ``candidates`` (int node indices, static for the layout, each in a domain of
    ``level``) are the only nodes whose room may be other than -1; ``watched`` gives those of
    them that pass the family's static filters, the only ones whose room may move (asked once,
    when the family is built)."""
    counts, made = kept_on(
        snap,
        ("share", family),
        lambda: ShareCounts(snap, level, room_of, candidates, room_one, watched),
        _MAX_FAMILIES,
    )
    if not made:
        counts.sync(snap)
    return counts
