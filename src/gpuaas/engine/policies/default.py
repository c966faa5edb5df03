"""Our default policy (``gpuaas``): place where the expected unusable GPU grows least.

It keeps FGD's principle — a node's fragmentation is the expected milli-GPU that a task drawn
from the target mix could not use, and a task goes where (and on the GPU where) that grows
least — and adds what FGD leaves out. The score of a candidate is minus the growth of

1. **fragmentation** over the *whole* task mix (no popularity cut) with each type's CPU *and
   memory* (FGD ignores memory; a node out of memory strands its GPUs as surely as one out of
   CPU);
2. **stranding**: the node's free GPU that its free CPU (or memory) cannot feed at the mix's
   ratio of CPU (memory) per milli-GPU. FGD only sees CPU when a single task type does not fit;
   a CPU-only task that eats the CPU of an 8-GPU node strands GPUs long before that. This steers
   CPU-heavy work to CPU-rich nodes;
3. **scarcity**: consuming a milli-GPU of a model costs the fraction of that model's capacity
   which tasks restricted to it (``gpu_spec`` / ``gpu_models``) are expected to claim; an
   unrestricted task then avoids the models restricted tasks need. Zero when nothing is
   restricted.

All three are in milli-GPU, so they add without weights. The score is the exact value (FGD
rounds to 0..100 and lets chance decide among near-ties); exact ties go to the node left with the
least free GPU, then the fullest GPU (best fit), keeping emptier nodes whole for multi-GPU tasks.
Without a mix (online use) the policy learns one from the tasks it is asked to place.
"""

from __future__ import annotations

import numpy as np

from gpuaas.engine.framework import CycleState, PodShape
from gpuaas.engine.policies.base import FragModel, Policy, TaskMix, fullness, share_options
from gpuaas.engine.snapshot import Snapshot

DEFAULT_POLICY = "gpuaas"


class GpuaasPolicy(Policy):
    name = DEFAULT_POLICY

    def __init__(self, mix: TaskMix | None = None) -> None:
        self.frag = FragModel(mix, with_memory=True) if mix is not None else None
        self.cpu_per_milli = 0.0
        self.mem_per_milli = 0.0
        self.learning = mix is None
        self._pressure: np.ndarray | None = None
        self._pressure_key: tuple[int, int] = (0, 0)
        self._mix_version = 0
        self._seen: list[PodShape] = []
        self._rebuild_at = 1
        if mix is not None:
            self._ratios(mix)

    def _learn(self, shape: PodShape) -> None:
        """Online use: the mix is the tasks seen so far, rebuilt each time their number doubles
        (amortised O(1) per task)."""
        self._seen.append(shape)
        if len(self._seen) >= self._rebuild_at:
            mix = TaskMix.from_shapes(self._seen)
            self.frag = FragModel(mix, with_memory=True)
            self._ratios(mix)
            self._mix_version += 1
            self._rebuild_at *= 2

    def _ratios(self, mix: TaskMix) -> None:
        gpu = mix.per_gpu > 0
        milli = float((mix.prob[gpu] * mix.gpus[gpu] * mix.per_gpu[gpu]).sum())
        self.cpu_per_milli = float((mix.prob[gpu] * mix.cpu[gpu]).sum()) / max(milli, 1.0)
        self.mem_per_milli = float((mix.prob[gpu] * mix.mem[gpu]).sum()) / max(milli, 1.0)

    def pressure(self, snap: Snapshot) -> np.ndarray:
        """Per GPU model (index model id + 1): the share of its capacity that tasks restricted
        to a set of models containing it are expected to claim. Consuming a milli-GPU of a
        model costs, in expectation, that fraction of a milli-GPU of restricted demand that will
        find no room later; with no restricted tasks it is zero everywhere."""
        key = (snap.uid, self._mix_version)
        if self._pressure is not None and self._pressure_key == key:
            return self._pressure
        assert self.frag is not None
        mix = self.frag.mix
        has = snap.model_of_node >= 0
        capacity = np.zeros(len(snap.model_names), dtype=np.float64)
        np.add.at(capacity, snap.model_of_node[has], snap.whole_gpus[has] * 1000.0)
        demand = mix.prob * mix.gpus * mix.per_gpu
        share = demand / max(float(demand.sum()), 1e-12)
        out = np.zeros(len(capacity) + 1, dtype=np.float64)
        for i, models in enumerate(mix.models):
            if not models or share[i] == 0:
                continue
            ids = [snap.model_id(m) for m in models]
            ids = [j for j in ids if j >= 0]
            supply = float(capacity[ids].sum()) if ids else 0.0
            if supply > 0:
                out[np.array(ids) + 1] += share[i] * float(capacity.sum()) / supply
        self._pressure, self._pressure_key = out, key
        return out

    def stranded(self, free: np.ndarray, cpu: np.ndarray, mem: np.ndarray) -> np.ndarray:
        """Free milli-GPU that the node's free CPU or memory cannot feed, at the mix's ratio
        of CPU (memory) per milli-GPU."""
        out = np.zeros(len(free), dtype=np.float64)
        if self.cpu_per_milli > 0:
            out = np.maximum(out, free - cpu / self.cpu_per_milli)
        if self.mem_per_milli > 0:
            out = np.maximum(out, free - mem / self.mem_per_milli)
        return out

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        shape = state.shape
        if shape.mig or shape.replicas:
            # partitioned GPUs: pack, so whole partitioned GPUs stay free for big profiles
            return -(snap.mig_free[nodes].sum(axis=1) + snap.replica_free[nodes].sum(axis=1))
        if self.learning:
            self._learn(shape)
        frag = self.frag
        assert frag is not None
        frag.refresh(snap, nodes)
        reps, inverse = frag.unique(nodes)
        values = self._score(state, snap, reps)
        choice = state.data.get("share_gpu")
        if choice is not None:
            state.data["share_gpu"] = choice[inverse]  # type: ignore[index]
        return values[inverse]

    def _score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        shape = state.shape
        frag = self.frag
        assert frag is not None
        before = frag.F[nodes]
        free = fullness(snap, nodes).astype(np.float64)
        cpu = snap.cpu_free[nodes]
        mem = snap.mem_free[nodes]
        strand = self.stranded(free - shape.milli, cpu - shape.cpu, mem - shape.mem)
        strand -= self.stranded(free, cpu, mem)
        strand += self.pressure(snap)[snap.model_of_node[nodes] + 1] * shape.milli
        left = free - shape.milli
        if not shape.share:
            grown = frag.after(snap, shape, nodes) - before + strand
            return -grown - left * 1e-6
        rows, gpus = share_options(snap, nodes, shape.share)
        grown = frag.after(snap, shape, nodes[rows], gpus) - before[rows] + strand[rows]
        gleft = snap.gpu_free[nodes[rows], gpus] - shape.share
        value = -grown - left[rows] * 1e-6 - gleft * 1e-9
        table = np.full((len(nodes), snap.gmax), -np.inf)
        table[rows, gpus] = value
        best = table.argmax(axis=1)
        state.data["share_gpu"] = best
        return table[np.arange(len(nodes)), best]
