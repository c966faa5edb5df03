"""GPU clustering (the published baseline ``03-GpuClustering``): put tasks of the same GPU kind
(share, 1, 2, 4, 8 GPUs) together. Node buckets, best first: only this kind on it (75..100],
this kind among others (50..75], an idle node (25..50], other kinds only (0..25]; within a bucket
the fuller node wins. It remembers what runs where through the reserve hooks."""

from __future__ import annotations

import numpy as np

from gpuaas.engine.framework import CycleState, PodShape
from gpuaas.engine.policies.base import Policy, fullness
from gpuaas.engine.snapshot import Assignment, Snapshot
from gpuaas.model.workload import PodRequest

MAX_GPU = 8000
#: Affinity tags; any other GPU count shares the last one.
KINDS: tuple[str, ...] = ("share", "1", "2", "4", "8", "other")


def gpu_kind(shape: PodShape) -> int:
    """Index into :data:`KINDS` of a task's affinity tag, -1 for a task without GPU."""
    if shape.share:
        return 0
    if not shape.whole:
        return -1
    key = str(shape.whole)
    return KINDS.index(key) if key in KINDS else len(KINDS) - 1


class GpuClusteringPolicy(Policy):
    name = "clustering"

    def __init__(self) -> None:
        self._snap_id = -1
        self._counts = np.zeros((0, len(KINDS)), dtype=np.int64)

    def _table(self, snap: Snapshot) -> np.ndarray:
        if self._snap_id != snap.uid or len(self._counts) != snap.size:
            self._snap_id = snap.uid
            self._counts = np.zeros((snap.size, len(KINDS)), dtype=np.int64)
        return self._counts

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        kind = gpu_kind(state.shape)
        if kind < 0:
            return np.zeros(len(nodes))
        counts = self._table(snap)[nodes]
        used = (MAX_GPU - fullness(snap, nodes)) * 25 // MAX_GPU
        kinds_on_node = (counts > 0).sum(axis=1)
        same = counts[:, kind] > 0
        base = np.where(
            same,
            np.where(kinds_on_node == 1, 75, 50),
            np.where(kinds_on_node == 0, 25, 0),
        )
        return (base + used).astype(np.float64)

    def on_reserve(self, snap: Snapshot, pod: PodRequest, assignment: Assignment) -> None:
        kind = gpu_kind(PodShape.of(pod))
        if kind >= 0:
            self._table(snap)[assignment.node, kind] += 1

    def on_unreserve(self, snap: Snapshot, pod: PodRequest, assignment: Assignment) -> None:
        kind = gpu_kind(PodShape.of(pod))
        if kind >= 0:
            table = self._table(snap)
            table[assignment.node, kind] = max(0, table[assignment.node, kind] - 1)
