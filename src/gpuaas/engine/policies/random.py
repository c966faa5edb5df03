"""Random: any feasible node, uniformly (the published baseline ``01-Random``).

As in the authors' runs (GPU selection ``random``), a share also goes to a GPU chosen uniformly
among those of the node that can hold it.
"""

from __future__ import annotations

import numpy as np

from gpuaas.engine.framework import CycleState, default_assignment
from gpuaas.engine.policies.base import Policy
from gpuaas.engine.snapshot import Assignment, Snapshot


class RandomPolicy(Policy):
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def _generator(self, state: CycleState) -> np.random.Generator:
        return state.rng if state.rng is not None else self._rng

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return self._generator(state).random(len(nodes))

    def assign(self, state: CycleState, snap: Snapshot, node: int) -> Assignment:
        share_gpu = None
        if state.shape.share:
            fits = np.flatnonzero(snap.gpu_free[node] >= state.shape.share)
            share_gpu = int(fits[int(self._generator(state).integers(len(fits)))])
        return default_assignment(state, snap, node, share_gpu)
