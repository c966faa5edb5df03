"""Shared parts of the placement policies: the base score plugin and the target task mix.

A policy is a :class:`~gpuaas.engine.framework.ScorePlugin`: ``score`` ranks feasible nodes
(vectorised), ``assign`` picks the devices on the chosen node. Policies that choose a specific
GPU per node while scoring (FGD picks the GPU that least fragments the node) leave that choice
in ``state.data["share_gpu"]`` (one GPU slot per scored node); ``assign`` then uses it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuaas.engine.framework import CycleState, PodShape, default_assignment
from gpuaas.engine.snapshot import MILLI, Assignment, Snapshot
from gpuaas.model.workload import PodRequest

#: The FGD simulator's normalisation for the resource-ratio baselines: a 128-core, 8-GPU node.
MAX_CPU = 128_000.0
MAX_GPU = 8_000.0


class Policy:
    """Base score plugin: subclasses implement :meth:`score`; device choice is shared."""

    name = "base"

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def assign(self, state: CycleState, snap: Snapshot, node: int) -> Assignment:
        share_gpu = None
        choice = state.data.get("share_gpu")
        if state.shape.share and choice is not None:
            g = int(choice[state.data["pick"]])  # type: ignore[index]
            if g >= 0:
                share_gpu = g
        return default_assignment(state, snap, node, share_gpu)


@dataclass(frozen=True, slots=True)
class TaskMix:
    """The target workload: task types and their popularity (probabilities summing to 1).

    ``per_gpu`` is the milli-GPU each GPU of the task needs (the trace's ``gpu_milli``; 1000 for
    whole GPUs, 0 for CPU-only tasks); ``gpus`` the GPU count; ``models`` the allowed GPU models
    (empty = any).
    """

    cpu: np.ndarray
    mem: np.ndarray
    gpus: np.ndarray
    per_gpu: np.ndarray
    models: tuple[frozenset[str], ...]
    prob: np.ndarray

    @property
    def size(self) -> int:
        return len(self.prob)

    @classmethod
    def from_shapes(
        cls,
        shapes: Iterable[PodShape],
        popularity: float = 1.0,
        step: int = 10,
        with_memory: bool = True,
    ) -> TaskMix:
        """Count task types; keep the most popular ones, ``step`` at a time, until they cover
        ``popularity`` of all tasks (FGD's typical pods use 0.6 and step 10), renormalised.
        ``with_memory=False`` merges types differing only by memory (FGD ignores memory)."""
        counts: Counter[tuple[int, int, int, int, frozenset[str]]] = Counter()
        for s in shapes:
            if s.mig or s.replicas:
                continue
            counts[(s.cpu, s.mem if with_memory else 0, s.gpu_count, s.per_gpu, s.models)] += 1
        if not counts:
            raise ValueError("a task mix needs at least one task")
        ordered = counts.most_common()
        total = sum(counts.values())
        cut = popularity * total if popularity < 1.0 else None
        return cls._of_types(ordered, cut, step)

    def reduce(self, popularity: float = 1.0, step: int = 10, with_memory: bool = True) -> TaskMix:
        """Merge types that differ only by memory (unless ``with_memory``) and keep the most
        popular ones, ``step`` at a time, until they cover ``popularity``; renormalised."""
        weights: dict[tuple[int, int, int, int, frozenset[str]], float] = {}
        for i in range(self.size):
            key = (
                int(self.cpu[i]),
                int(self.mem[i]) if with_memory else 0,
                int(self.gpus[i]),
                int(self.per_gpu[i]),
                self.models[i],
            )
            weights[key] = weights.get(key, 0.0) + float(self.prob[i])
        ordered = sorted(weights.items(), key=lambda kv: -kv[1])
        cut = popularity - 1e-12 if popularity < 1.0 else None
        return TaskMix._of_types(ordered, cut, step)

    @classmethod
    def _of_types(
        cls,
        ordered: list[tuple[tuple[int, int, int, int, frozenset[str]], Any]],
        cut: float | None,
        step: int,
    ) -> TaskMix:
        """The mix of ``ordered`` (type, weight) pairs, most popular first, keeping ``step``
        types at a time until their weight reaches ``cut`` (None keeps all); renormalised."""
        keep = len(ordered)
        if cut is not None:
            covered, keep = 0, 0
            while covered < cut and keep < len(ordered):
                nxt = min(keep + step, len(ordered))
                covered += sum(w for _, w in ordered[keep:nxt])
                keep = nxt
        chosen = ordered[:keep]
        weight = np.array([w for _, w in chosen], dtype=np.float64)
        return cls(
            cpu=np.array([k[0] for k, _ in chosen], dtype=np.int64),
            mem=np.array([k[1] for k, _ in chosen], dtype=np.int64),
            gpus=np.array([k[2] for k, _ in chosen], dtype=np.int64),
            per_gpu=np.array([k[3] for k, _ in chosen], dtype=np.int64),
            models=tuple(k[4] for k, _ in chosen),
            prob=weight / weight.sum(),
        )

    @classmethod
    def from_pods(cls, pods: Iterable[PodRequest], **kwargs: object) -> TaskMix:
        return cls.from_shapes((PodShape.of(p) for p in pods), **kwargs)  # type: ignore[arg-type]


class FragModel:
    """Fragmentation of nodes w.r.t. a :class:`TaskMix` (the FGD measure), kept per node.

    For a task type m a node's fragment is its free milli-GPU that m cannot use: all of it when m
    cannot run on the node at all (wrong model, too little CPU (and memory, when
    ``with_memory``), too few GPUs with ``per_gpu`` free), else the free milli of the GPUs with
    less than ``per_gpu`` free. CPU-only types count the whole free GPU (as FGD does; this adds
    the same amount to every candidate and so never changes a decision). The node's
    fragmentation is the popularity-weighted sum.

    Per node it caches ``S[n, m]`` (free milli on GPUs too small for m), ``C[n, m]`` (GPUs big
    enough for m) and ``T[n]`` (free milli), refreshed only for nodes whose snapshot version
    changed, so a hypothetical placement is evaluated in O(types) without touching other GPUs.
    """

    def __init__(self, mix: TaskMix, with_memory: bool = False) -> None:
        self.mix = mix
        self.with_memory = with_memory
        gpu_types = mix.per_gpu > 0
        self.g_idx = np.flatnonzero(gpu_types)
        self.d = mix.per_gpu[self.g_idx]
        self.k = mix.gpus[self.g_idx]
        self.c = mix.cpu[self.g_idx]
        self.m = mix.mem[self.g_idx]
        self.p = mix.prob[self.g_idx]
        self.p_cpu = float(mix.prob[~gpu_types].sum())
        self._snap_id = -1
        self._version = np.zeros(0, dtype=np.int64)

    def _bind(self, snap: Snapshot) -> None:
        n = snap.size
        self._snap_id = snap.uid
        self._version = np.full(n, -1, dtype=np.int64)
        kk = len(self.d)
        self.S = np.zeros((n, kk), dtype=np.float64)
        self.C = np.zeros((n, kk), dtype=np.int64)
        self.T = np.zeros(n, dtype=np.float64)
        self.F = np.zeros(n, dtype=np.float64)
        self.key = np.zeros(n, dtype=np.int64)
        self._ids: dict[tuple[int, ...], int] = {}
        # access[model + 1, m]: may type m use a node of that model (row 0: nodes without GPUs)
        access = np.zeros((len(snap.model_names) + 1, kk), dtype=bool)
        for j, i in enumerate(self.g_idx.tolist()):
            allowed = self.mix.models[i]
            for mid, name in enumerate(snap.model_names):
                access[mid + 1, j] = (not allowed) or name in allowed
        self.access = access

    def refresh(self, snap: Snapshot, nodes: np.ndarray) -> None:
        """Recompute the cached rows of ``nodes`` whose snapshot version moved."""
        if snap.uid != self._snap_id or len(self._version) != snap.size:
            self._bind(snap)
        stale = nodes[self._version[nodes] != snap.version[nodes]]
        if len(stale) == 0:
            return
        ids = self._ids
        if len(stale) == 1:
            # the usual case (only the node just placed on moved): sort the row's free milli
            # once; per type, the GPUs too small are a prefix (one searchsorted). S, C and T
            # are sums of integers, so they equal the vectorised path's exactly
            i = int(stale[0])
            row = sorted(f for f in snap.gpu_free[i].tolist() if f >= 0)
            prefix = [0]
            for f in row:
                prefix.append(prefix[-1] + f)
            cut = np.searchsorted(np.array(row, dtype=np.int64), self.d, side="left")
            self.S[i] = np.array(prefix, dtype=np.float64)[cut]
            self.C[i] = len(row) - cut
            self.T[i] = float(prefix[-1])
            self._version[i] = snap.version[i]
            state = (
                int(snap.model_of_node[i]),
                int(snap.cpu_free[i]),
                int(snap.mem_free[i]),
                int(snap.cpu_total[i]),
                int(snap.mem_total[i]),
                *snap.gpu_free[i].tolist(),
            )
            self.key[i] = ids.setdefault(state, len(ids))
        else:
            gf = snap.gpu_free[stale]
            present = gf >= 0
            free = np.where(present, gf, 0).astype(np.float64)
            d = self.d.astype(np.float64)
            small = (free[:, :, None] < d[None, None, :]) & present[:, :, None]
            self.S[stale] = (free[:, :, None] * small).sum(axis=1)
            self.C[stale] = ((gf[:, :, None] >= d[None, None, :]) & present[:, :, None]).sum(axis=1)
            self.T[stale] = free.sum(axis=1)
            self._version[stale] = snap.version[stale]
            # one id per distinct state (model, free CPU, free memory, total CPU and memory,
            # free milli per slot): one numpy call for all stale rows, then plain tuples
            # (cheaper than bytes per node). The totals are there because a policy may weigh a
            # node by what it could ever hold (GpuaasPolicy.pressure)
            rows = np.column_stack(
                (
                    snap.model_of_node[stale],
                    snap.cpu_free[stale],
                    snap.mem_free[stale],
                    snap.cpu_total[stale],
                    snap.mem_total[stale],
                    gf,
                )
            ).tolist()
            self.key[stale] = [ids.setdefault(tuple(row), len(ids)) for row in rows]
        self.F[stale] = self.evaluate(
            snap,
            stale,
            self.S[stale],
            self.C[stale],
            self.T[stale],
            snap.cpu_free[stale],
            snap.mem_free[stale],
        )

    def unique(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Representatives of ``nodes`` with pairwise different states (model, free CPU, free
        memory, total CPU and memory, free milli per GPU slot) and, per node, the index of its
        representative: equal states score equally, so only representatives are evaluated.
        Call after refresh."""
        keys = self.key[nodes].tolist()
        if len(keys) > 64:
            _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            return nodes[first], inverse
        # few candidates: a dict beats np.unique's sorts; same result (representatives are
        # first occurrences, ordered by key, as np.unique gives them)
        firsts: dict[int, int] = {}
        for i, k in enumerate(keys):
            firsts.setdefault(k, i)
        order = sorted(firsts)
        slot = {k: j for j, k in enumerate(order)}
        return (
            nodes[[firsts[k] for k in order]],
            np.array([slot[k] for k in keys], dtype=np.intp),
        )

    def evaluate(
        self,
        snap: Snapshot,
        base: np.ndarray,
        S: np.ndarray,
        C: np.ndarray,
        T: np.ndarray,
        cpu: np.ndarray,
        mem: np.ndarray,
    ) -> np.ndarray:
        """Fragmentation of (hypothetical) node states: rows of ``S``/``C`` with free ``T``."""
        fits = self.access[snap.model_of_node[base] + 1]
        fits = fits & (cpu[:, None] >= self.c[None, :]) & (self.k[None, :] <= C)
        if self.with_memory:
            fits &= mem[:, None] >= self.m[None, :]
        lost = np.where(fits, S, T[:, None])
        return lost @ self.p + self.p_cpu * T

    def after(
        self, snap: Snapshot, shape: PodShape, nodes: np.ndarray, gpu: np.ndarray | None = None
    ) -> np.ndarray:
        """Fragmentation of each node of ``nodes`` after placing ``shape`` on it (on GPU slot
        ``gpu[i]`` of node ``nodes[i]`` for a share)."""
        cpu = snap.cpu_free[nodes] - shape.cpu
        mem = snap.mem_free[nodes] - shape.mem
        T = self.T[nodes] - shape.milli
        S = self.S[nodes]
        C = self.C[nodes]
        if shape.share:
            assert gpu is not None
            f = snap.gpu_free[nodes, gpu][:, None]
            f2 = f - shape.share
            d = self.d[None, :]
            was_small = f < d
            now_small = f2 < d  # implied by was_small, since f2 < f
            # a GPU already too small for m loses ``share`` of fragment; one that becomes too
            # small adds its new free milli; one that stays big enough changes nothing
            S = S + np.where(was_small, -float(shape.share), np.where(now_small, f2, 0.0))
            C = C - (now_small & ~was_small)
        elif shape.whole:
            C = C - shape.whole
        return self.evaluate(snap, nodes, S, C, T, cpu, mem)


#: strictly-lower-triangular masks by GPU slot count (slot g stands for equal slots after it)
_BELOW: dict[int, np.ndarray] = {}


def share_options(snap: Snapshot, nodes: np.ndarray, share: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, gpu) pairs of GPUs that can take a share, one per distinct free value per node
    (GPUs with equal free give equal outcomes; the lowest slot stands for them)."""
    gf = snap.gpu_free[nodes]
    ok = gf >= share
    g = gf.shape[1]
    if g > 1:
        below = _BELOW.get(g)
        if below is None:  # built once per slot count: np.tril costs more than the test itself
            below = _BELOW[g] = np.tril(np.ones((g, g), dtype=bool), -1)
        same = (gf[:, :, None] == gf[:, None, :]) & below
        ok &= ~same.any(axis=2)
    rows, gpus = np.nonzero(ok)
    return rows, gpus


_NAME_RANKS: dict[int, np.ndarray] = {}


def name_order_ties(snap: Snapshot, nodes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``scores`` with equal values separated in favour of the lexicographically smallest node
    name. The FGD authors' simulator patches kube-scheduler's ``selectHost`` to pick the
    smallest name among the best scores "for reproducibility" instead of a uniform random one;
    integer scores leave most candidates tied (every node scores 0 for a CPU-only task), so the
    published baselines depend on this rule. Their simulator also renames every node with a
    seeded random prefix before a run, which the FGD protocol here repeats
    (:func:`gpuaas.sim.openb.protocol_nodes`): there, name order is a random node order fixed
    for the run. The offset is below 0.5, so it never reorders integer scores that differ."""
    ranks = _NAME_RANKS.get(snap.uid)
    if ranks is None or len(ranks) != snap.size:
        order = np.argsort(np.array(snap.names, dtype=object), kind="stable")
        ranks = np.empty(snap.size, dtype=np.float64)
        ranks[order] = np.arange(snap.size, dtype=np.float64)
        if len(_NAME_RANKS) >= 8:  # a few live snapshots at a time; keep memory flat
            _NAME_RANKS.clear()
        _NAME_RANKS[snap.uid] = ranks
    return scores - ranks[nodes] / (2.0 * max(snap.size, 1))


def fullness(snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
    """Free milli-GPU on each node's whole-mode GPUs."""
    gf = snap.gpu_free[nodes]
    return np.where(gf > 0, gf, 0).sum(axis=1)


__all__ = [
    "MILLI",
    "FragModel",
    "Policy",
    "TaskMix",
    "fullness",
    "name_order_ties",
    "share_options",
]
