"""GPU clustering (the published baseline ``03-GpuClustering``): put tasks of the same GPU kind
together. A kind is "share" for a fraction of one GPU, else the whole-GPU count (1, 2, 4, 8, ...,
each its own kind, as in the authors' plugin). Node buckets, best first: only this kind on it
(75..100], this kind among others (50..75], an idle node (25..50], other kinds only (0..25];
within a bucket the fuller node wins (integer scores, as theirs). Equal scores go to the smallest
node name, as in their simulator (see :func:`~gpuaas.engine.policies.base.name_order_ties`). It
remembers what runs where through the reserve hooks.

A node's score depends on that node alone and never falls as pods of one kind are added to it
(its bucket can only move up to this kind's, and it gets fuller), so a pod set of identical
pods is filled in bulk in score order (:mod:`gpuaas.engine.bulk`), hooks told of every pod."""

from __future__ import annotations

import numpy as np

from gpuaas.engine.bulk import ranked
from gpuaas.engine.framework import CycleState, PodShape
from gpuaas.engine.policies.base import Policy, fullness, name_order_ties
from gpuaas.engine.snapshot import Assignment, Snapshot
from gpuaas.model.workload import PodRequest

MAX_GPU = 8000
#: Column of the share kind; whole-GPU tasks of ``n`` GPUs use column ``n``.
SHARE = 0


def gpu_kind(shape: PodShape) -> int:
    """A task's affinity tag as a column index: 0 for a share, the GPU count for whole GPUs,
    -1 for a task without GPU."""
    if shape.share:
        return SHARE
    if not shape.whole:
        return -1
    return int(shape.whole)


class GpuClusteringPolicy(Policy):
    name = "clustering"

    def __init__(self) -> None:
        self._snap_id = -1
        self._counts = np.zeros((0, 9), dtype=np.int64)

    def _table(self, snap: Snapshot, kind: int = 0) -> np.ndarray:
        if self._snap_id != snap.uid or len(self._counts) != snap.size:
            self._snap_id = snap.uid
            self._counts = np.zeros((snap.size, max(9, kind + 1)), dtype=np.int64)
        elif kind >= self._counts.shape[1]:
            grown = np.zeros((snap.size, kind + 1), dtype=np.int64)
            grown[:, : self._counts.shape[1]] = self._counts
            self._counts = grown
        return self._counts

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        kind = gpu_kind(state.shape)
        if kind < 0:
            return name_order_ties(snap, nodes, np.zeros(len(nodes)))
        counts = self._table(snap, kind)[nodes]
        used = (MAX_GPU - fullness(snap, nodes)) * 25 // MAX_GPU
        kinds_on_node = (counts > 0).sum(axis=1)
        same = counts[:, kind] > 0
        base = np.where(
            same,
            np.where(kinds_on_node == 1, 75, 50),
            np.where(kinds_on_node == 0, 25, 0),
        )
        return name_order_ties(snap, nodes, (base + used).astype(np.float64))

    def fill_order(
        self, state: CycleState, snap: Snapshot, feasible: np.ndarray
    ) -> np.ndarray | None:
        """The bulk fill's ranking: the scores of the first pod (see the module docstring)."""
        return ranked(self.score(state, snap, feasible), feasible, state.rng)

    def on_reserve(self, snap: Snapshot, pod: PodRequest, assignment: Assignment) -> None:
        kind = gpu_kind(PodShape.of(pod))
        if kind >= 0:
            self._table(snap, kind)[assignment.node, kind] += 1

    def on_unreserve(self, snap: Snapshot, pod: PodRequest, assignment: Assignment) -> None:
        kind = gpu_kind(PodShape.of(pod))
        if kind >= 0:
            table = self._table(snap, kind)
            table[assignment.node, kind] = max(0, table[assignment.node, kind] - 1)
