"""Memoised parts of the default policy's score, and a cheap refresh of one changed node.

Nodes in equal states score equally and a decision changes one node, so a rack's next decision
finds most of its node states already scored. Everything here reproduces the vectorised
computation of :mod:`gpuaas.engine.policies.default` bit for bit (the same float operations in
the same order), because a last-bit difference could break a tie the other way and change a
placement; ``tests/engine/test_score_memo.py`` checks it.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from gpuaas.engine.framework import PodShape
from gpuaas.engine.policies.base import FragModel, TaskMix
from gpuaas.engine.snapshot import Snapshot

#: Plain Python evaluates at most this many (row, task type) pairs per decision; beyond,
#: numpy's vectorised path is cheaper.
PY_WORK = 160
#: Entries kept before a memo starts over (bounds memory in a long-running service).
MEMO_MAX = 1 << 18
#: Node states whose refreshed rows are kept (~1 KB each) before that memo starts over.
ROWS_MAX = 1 << 16


class StateFragModel(FragModel):
    """:class:`FragModel` (with memory) whose refresh of one changed node is cheap.

    After a decision usually one candidate node has moved (the one just placed on). Its new
    state (GPU model, free and total CPU and memory, free milli per GPU slot) has most often
    been seen before, on this node or another: its rows ``S``, ``C``, ``T``, its fragmentation ``F``
    and its state id are then copied. Otherwise they are computed in plain Python as
    ``FragModel.refresh`` computes them for a single stale node: ``S``, ``C``, ``T`` are sums
    and counts of integers, and ``F`` is the same one-row product plus the same element-wise
    operations, so the values are bit for bit equal (with many task types numpy computes
    them faster, and they are only remembered). Several stale nodes, or a new binding, take
    the ordinary path (computing several in plain Python measured slower)."""

    def __init__(self, mix: TaskMix) -> None:
        super().__init__(mix, with_memory=True)
        self._rows: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, float, float, int]] = {}
        self._rows_of: np.ndarray | None = None
        self._consts: FragConsts | None = None

    def consts(self) -> FragConsts:
        """The per-type constants as lists (rebuilt with each binding: access depends on the
        snapshot's GPU models)."""
        found = self._consts
        if found is None or found.access is not self.access:
            found = self._consts = FragConsts(self)
        return found

    def refresh(self, snap: Snapshot, nodes: np.ndarray) -> None:
        if snap.uid != self._snap_id or len(self._version) != snap.size:
            super().refresh(snap, nodes)  # binds afresh: state ids start over
            return
        stale = nodes[self._version[nodes] != snap.version[nodes]]
        if len(stale) != 1:
            if len(stale):
                super().refresh(snap, stale)
            return
        if self._rows_of is not self.key or len(self._rows) >= ROWS_MAX:
            self._rows = {}
            self._rows_of = self.key
        i = int(stale[0])
        state = (
            int(snap.model_of_node[i]),
            int(snap.cpu_free[i]),
            int(snap.mem_free[i]),
            int(snap.cpu_total[i]),
            int(snap.mem_total[i]),
            *snap.gpu_free[i].tolist(),
        )
        row = self._rows.get(state)
        if row is None:
            if len(self.d) * 2 > PY_WORK:  # many task types: numpy computes it faster
                super().refresh(snap, stale)
                row = (
                    self.S[i].copy(),
                    self.C[i].copy(),
                    float(self.T[i]),
                    float(self.F[i]),
                    int(self.key[i]),
                )
                self._rows[state] = row
                return
            row = self._rows[state] = self._compute(state)
        self.S[i], self.C[i], self.T[i], self.F[i], self.key[i] = row
        self._version[i] = snap.version[i]

    def _compute(self, state: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, float, float, int]:
        """``S``, ``C``, ``T``, ``F`` and the state id of one node state (see the class)."""
        c = self.consts()
        model, cpu, mem = state[0], state[1], state[2]
        row = sorted(f for f in state[5:] if f >= 0)
        prefix = [0]
        for f in row:
            prefix.append(prefix[-1] + f)
        cuts = [bisect_left(row, d) for d in c.d]  # = searchsorted(side="left")
        S = [float(prefix[x]) for x in cuts]
        C = [len(row) - x for x in cuts]
        T = float(prefix[-1])
        F = c.product([c.lost(model, cpu, mem, T, S, C, 0)], [T])[0]
        key = self._ids.setdefault(state, len(self._ids))
        return np.array(S, dtype=np.float64), np.array(C, dtype=np.int64), T, F, key


class FragConsts:
    """The mix's per-type constants of a :class:`FragModel` as Python lists, for evaluating
    a few hypothetical node states without numpy (:meth:`GpuaasPolicy._fresh`)."""

    def __init__(self, frag: FragModel) -> None:
        self.frag = frag
        self.access = frag.access
        self.p = frag.p
        self.p_cpu = frag.p_cpu
        self.d = frag.d.tolist()
        # per GPU model (+1): (may use, cpu, gpus, memory) per type; memory 0 when not counted
        memory = frag.m.tolist() if frag.with_memory else [None] * len(self.d)
        types = list(zip(frag.c.tolist(), frag.k.tolist(), memory, strict=True))
        self.types = [
            [(bool(a), cc, k, m) for a, (cc, k, m) in zip(row, types, strict=True)]
            for row in frag.access.tolist()
        ]

    def lost(
        self,
        model: int,
        cpu: int,
        mem: int,
        free: float,
        S: list[float],
        C: list[int],
        whole: int,
    ) -> list[float]:
        """One row of :meth:`FragModel.evaluate`'s ``lost`` for :meth:`FragModel.after` of a
        pod of ``whole`` GPUs (or none): ``S`` where the type still fits, else all free."""
        return [
            s if a and cpu >= cc and k <= n - whole and (m is None or mem >= m) else free
            for (a, cc, k, m), s, n in zip(self.types[model + 1], S, C, strict=True)
        ]

    def lost_share(
        self,
        model: int,
        cpu: int,
        mem: int,
        free: float,
        S: list[float],
        C: list[int],
        f: int,
        share: int,
    ) -> list[float]:
        """The same after a share taken from a GPU with ``f`` free: a GPU already too small
        for a type loses ``share`` of fragment, one that becomes too small adds its new free
        milli and stops counting as big enough (as :meth:`FragModel.after`)."""
        f2 = f - share
        minus = -float(share)
        out = []
        for (a, cc, k, m), s, n, d in zip(self.types[model + 1], S, C, self.d, strict=True):
            if f < d:
                s = s + minus
            elif f2 < d:
                s = s + f2
                n = n - 1
            else:
                s = s + 0.0
            out.append(s if a and cpu >= cc and k <= n and (m is None or mem >= m) else free)
        return out

    def product(self, lost: list[list[float]], free: list[float]) -> list[float]:
        """``lost @ p + p_cpu * free`` as :meth:`FragModel.evaluate` computes it."""
        sums = (np.array(lost, dtype=np.float64).reshape(len(lost), len(self.d)) @ self.p).tolist()
        p_cpu = self.p_cpu
        return [x + p_cpu * f for x, f in zip(sums, free, strict=True)]


def kernel_class(n: int, i: int) -> int:
    """Which code path of the BLAS matrix-vector product computes row ``i`` of ``n``.

    The product behind :meth:`FragModel.evaluate` (``lost @ p``) sums a row in an order that
    depends on where the row sits, not on the other rows: a lone row goes through a dot
    product, rows in whole blocks of four through one kernel, the remaining one to three
    rows through others. Equal rows in the same class give bit-identical sums, in different
    classes they may differ in the last bit, so memoised values are keyed by this class (the
    exact tail shape: count, position, and whether blocks came before)."""
    if n == 1:
        return 0
    block = n & ~3
    if i < block:
        return 1
    t = n - block
    return 2 + (6 if block else 0) + t * (t - 1) // 2 + (i - block)


#: tail class offset -> (rows in the tail, position in it)
_TAIL = {0: (1, 0), 1: (2, 0), 2: (2, 1), 3: (3, 0), 4: (3, 1), 5: (3, 2)}


def kernel_rule_holds(p: np.ndarray) -> bool:
    """Check :func:`kernel_class` against this machine's BLAS for the mix's ``p``: every row
    of batches of 1 to 13 rows must sum exactly as the same row does alone in a batch of its
    class (other rows zero). If not (another BLAS build), the memo is off and every score is
    computed afresh."""
    rng = np.random.default_rng(0)
    k = len(p)
    for n in range(1, 14):
        lost = rng.integers(0, 8001, size=(n, k)).astype(np.float64)
        lost[:, rng.random(k) < 0.3] = 0.0
        full = lost @ p
        for i in range(n):
            c = kernel_class(n, i)
            if c == 0:
                size, at = 1, 0
            elif c == 1:
                size, at = 4, 0
            else:
                block = 4 if c >= 8 else 0
                t, j = _TAIL[(c - 2) % 6]
                size, at = block + t, block + j
            probe = np.zeros((size, k))
            probe[at] = lost[i]
            if (probe @ p)[at] != full[i]:
                return False
    return True


class ScoreMemo:
    """Memoised parts of the score, per request shape and node state.

    A node's score is a function of its state (GPU model, free and total CPU and memory, free
    milli per GPU slot: :class:`FragModel`'s state id), the request's shape, a few global quantities
    (the mix, the scarcity pressure, the hole charge) and its fragmentation before (``F``,
    read fresh per call). Nodes in equal states score equally and a decision changes one
    node, so a rack's next decision finds most of its states here. Stored per state (per
    candidate GPU for a share): the fragmentation after placing, the stranding growth
    including scarcity, and the tie-break terms, exactly the floats
    :meth:`GpuaasPolicy._fresh` computed; :meth:`lookup` then repeats its remaining float
    operations in the same order, so it returns the very values a fresh computation returns.
    The one value that depends on its neighbours, the BLAS row sum, is keyed by
    :func:`kernel_class`; the hole charge, rebuilt every few decisions, is read at lookup."""

    def __init__(self, frag: FragModel) -> None:
        self.frag = frag
        self.keys = frag.key
        self.snap_uid = -1
        self.version = -1
        self.usable = kernel_rule_holds(frag.p)
        self.plain: dict[tuple[int, int, int], dict[int, tuple[float, float, float]]] = {}
        self.share: dict[tuple[int, int, int], dict[int, tuple[float, ...]]] = {}
        self.options: dict[tuple[int, int], tuple[int, ...]] = {}
        self.size = 0
        self._cost: np.ndarray | None = None
        self._cost_list: list[float] = []

    def clear(self) -> None:
        self.plain.clear()
        self.share.clear()
        self.options.clear()
        self.size = 0

    def _grow(self, count: int) -> None:
        self.size += count
        if self.size > MEMO_MAX:
            self.clear()
            self.size = count

    def plain_table(self, shape: PodShape, count: int) -> dict[int, tuple[float, float, float]]:
        """Where to store ``count`` parts of a pod without a share."""
        self._grow(count)
        return self.plain.setdefault((shape.cpu, shape.mem, shape.whole), {})

    def share_table(self, shape: PodShape, count: int) -> dict[int, tuple[float, ...]]:
        """Where to store ``count`` parts (one per candidate GPU) of a share."""
        self._grow(count)
        return self.share.setdefault((shape.cpu, shape.mem, shape.share), {})

    def cost_list(self, cost: np.ndarray) -> list[float]:
        """The hole charge as a list, converted once per rebuild."""
        if cost is not self._cost:
            self._cost, self._cost_list = cost, cost.tolist()
        return self._cost_list

    def lookup(
        self,
        shape: PodShape,
        keys: list[int],
        before: list[float],
        cost: np.ndarray | None,
    ) -> tuple[list[float], list[int]] | None:
        """Scores (and, for a share, the chosen GPU slot) of the representatives ``keys``
        (ascending state ids) with fragmentation ``before``; None if a part is missing."""
        n = len(keys)
        if not shape.share:
            table = self.plain.get((shape.cpu, shape.mem, shape.whole))
            if table is None:
                return None
            values: list[float] = []
            for i, k in enumerate(keys):
                part = table.get((k << 4) | kernel_class(n, i))
                if part is None:
                    return None
                a, s, x = part
                values.append(-(a - before[i] + s) - x)
            return values, []
        share = shape.share
        table = self.share.get((shape.cpu, shape.mem, share))
        if table is None or cost is None:
            return None
        options = []
        total = 0
        for k in keys:
            mine = self.options.get((k, share))
            if mine is None:
                return None
            options.append(mine)
            total += len(mine)
        hole = self.cost_list(cost)
        values, gpus = [], []
        j = 0
        for i, k in enumerate(keys):
            best, pick = -np.inf, 0
            f0 = before[i]
            for g in options[i]:
                part = table.get((k << 12) | (g << 4) | kernel_class(total, j))
                if part is None:
                    return None
                a, s, x, y, f, left = part
                v = -(a - f0 + s + (hole[left] - hole[f])) - x - y
                if v > best:
                    best, pick = v, g
                j += 1
            values.append(best)
            gpus.append(pick)
        return values, gpus
