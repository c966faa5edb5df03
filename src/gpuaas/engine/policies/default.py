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
   restricted. A CPU-only task pays for the GPUs of confined demand that its CPU and memory
   would have fed (:meth:`GpuaasPolicy.confined_cost`);
4. **finite hole supply** (for a share, see :class:`HoleModel`): the GPU-local part of FGD's
   measure charges a hole as if only the next task could fill it; we charge its eventual waste
   given how many tasks that fit it are still to come and how many open holes compete for them.
   A 320 then leaves a 470's 530 free (which a later 470 closes to 60) and opens a fresh GPU
   (which a later 650 closes to 30) instead of turning the 530 into an unfillable 210.

All four are in milli-GPU, so they add without weights. The score is the exact value (FGD
rounds to 0..100 and lets chance decide among near-ties); exact ties go to the node left with the
least free GPU, then the fullest GPU (best fit), keeping emptier nodes whole for multi-GPU tasks.
Without a mix (online use) the policy learns one from the tasks it is asked to place.
"""

from __future__ import annotations

import numpy as np

from gpuaas.engine.framework import CycleState, PodShape
from gpuaas.engine.policies.base import Policy, TaskMix, share_options
from gpuaas.engine.policies.score_memo import PY_WORK, ScoreMemo, StateFragModel, kernel_class
from gpuaas.engine.snapshot import MILLI, Snapshot

DEFAULT_POLICY = "gpuaas"
#: Up to this many distinct candidate states a decision is scored in plain Python (and
#: memoised); numpy's per-call overhead dominates there. More go through numpy.
_FEW = 32


class HoleModel:
    """What a GPU's free milli-GPU will finally waste, given that small tasks are finite.

        FGD charges a hole of ``h`` free milli as if only the next task mattered: ``h`` times the
        chance that the next GPU task asks more than ``h``. But a hole stays open for every later
        arrival, and what closes it is limited: only so many tasks of each size are still to come,
        and every open hole competes for them. So per share size ``d`` the model takes the expected
        number of such tasks still to arrive (free milli-GPU / mean milli-GPU per task, times the
        mix's share of ``d``) over the number of open holes they fit, capped at 1: the chance that a
        hole gets one. A hole's eventual waste ``W[h]`` then follows: with the chance that no task
        comes it is wasted whole; otherwise the next task that fits (by popularity) takes part of it
        and what remains is valued the same way. A fully free GPU always fills (whole-GPU tasks
        never run short). Only the mix and the snapshot's open holes enter; no tuned constants.

        :meth:`correction` returns ``W[h]`` minus FGD's charge for ``h``: added to FGD's growth it
        turns the GPU-local part of the measure into the eventual waste. Rebuilt every ``every``
        uses (the holes change slowly; a speed knob, results on the openb traces are the same with
    16), which keeps the cost well under a millisecond per decision.
    """

    def __init__(self, mix: TaskMix, every: int = 64) -> None:
        gpu = mix.per_gpu > 0
        shares = gpu & (mix.gpus == 1) & (mix.per_gpu < MILLI)
        sizes: dict[int, float] = {}
        for d, p in zip(mix.per_gpu[shares].tolist(), mix.prob[shares].tolist(), strict=True):
            sizes[int(d)] = sizes.get(int(d), 0.0) + float(p)
        self.d = np.array(sorted(sizes), dtype=np.int64)
        self.p = np.array([sizes[int(x)] for x in self.d], dtype=np.float64)
        self.p_whole = float(mix.prob[gpu & ~shares].sum())
        self.mean_milli = float((mix.prob * mix.gpus * mix.per_gpu).sum())
        d = mix.per_gpu[gpu].astype(np.int64)
        h = np.arange(MILLI + 1)
        #: FGD's charge for a GPU with h free: h x P(the next GPU task asks more than h)
        self.fgd = h * ((d[None, :] > h[:, None]) @ mix.prob[gpu])
        self.every = every
        self._uses = 0
        self._snap_id = -1
        self._table = np.zeros(MILLI + 1)

    def fill_chance(self, snap: Snapshot) -> np.ndarray:
        """Per share size: the chance that an open hole it fits receives one more such task."""
        gf = snap.gpu_free
        to_come = float(np.where(gf > 0, gf, 0).sum()) / max(self.mean_milli, 1e-9)
        holes = np.sort(gf[(gf > 0) & (gf < MILLI)])
        fits = len(holes) - np.searchsorted(holes, self.d, side="left")
        return np.minimum(1.0, to_come * self.p / np.maximum(fits, 1e-9))

    def waste(self, snap: Snapshot) -> np.ndarray:
        """``W[h]`` for h = 0..1000 milli free on one GPU (see the class docstring)."""
        got_p = (self.p * self.fill_chance(snap)).tolist()
        sizes = self.d.tolist()
        popularity = self.p.tolist()
        # The sizes that fit a hole of h are a prefix (sizes ascend); per prefix length, the
        # running sums of popularity and arrivals, summed in the same order as term by term
        totals, arrivals = [0.0], [0.0]
        total = arrive = 0.0
        for p, g in zip(popularity, got_p, strict=True):
            total += p
            arrive += g
            totals.append(total)
            arrivals.append(arrive)
        prefixes = [list(zip(got_p[:m], sizes[:m], strict=True)) for m in range(len(sizes) + 1)]
        w = [0.0] * (MILLI + 1)
        m = 0
        for h in range(1, MILLI + 1):
            while m < len(sizes) and sizes[m] <= h:
                m += 1
            closed = 0.0
            for g, x in prefixes[m]:
                closed += g * w[h - x]
            total, arrive = totals[m], arrivals[m]
            if h == MILLI:
                arrive += self.p_whole  # a whole-GPU task leaves nothing
                w[h] = closed / arrive if arrive > 0 else float(h)
            elif arrive <= 0:
                w[h] = float(h)
            else:
                w[h] = (1.0 - arrive / total) * h + closed / total
        return np.array(w)

    def correction(self, snap: Snapshot) -> np.ndarray:
        """``W[h]`` minus FGD's charge, indexed by free milli; refreshed every ``every`` uses."""
        if self._snap_id != snap.uid or self._uses % self.every == 0:
            self._snap_id = snap.uid
            self._uses = 0
            self._table = self.waste(snap) - self.fgd
        self._uses += 1
        return self._table


class GpuaasPolicy(Policy):
    name = DEFAULT_POLICY

    def __init__(self, mix: TaskMix | None = None) -> None:
        self.frag = StateFragModel(mix) if mix is not None else None
        self.cpu_per_milli = 0.0
        self.mem_per_milli = 0.0
        self.learning = mix is None
        self._pressure: np.ndarray | None = None
        self._pressure_key: tuple[int, int] = (0, 0)
        #: confined types (columns): weight per node (0 where the type cannot run), and the
        #: type's milli-GPU per CPU and per memory unit (0 when it asks none)
        self._weights = np.zeros((0, 0), dtype=np.float64)
        self._per_cpu = np.zeros(0, dtype=np.float64)
        self._per_mem = np.zeros(0, dtype=np.float64)
        self._mix_version = 0
        self._seen: list[PodShape] = []
        self._rebuild_at = 1
        self._memo: ScoreMemo | None = None
        if mix is not None:
            self._ratios(mix)

    def _learn(self, shape: PodShape) -> None:
        """Online use: the mix is the tasks seen so far, rebuilt each time their number doubles
        (amortised O(1) per task)."""
        self._seen.append(shape)
        if len(self._seen) >= self._rebuild_at:
            mix = TaskMix.from_shapes(self._seen)
            self.frag = StateFragModel(mix)
            self._ratios(mix)
            self._mix_version += 1
            self._rebuild_at *= 2

    def _ratios(self, mix: TaskMix) -> None:
        self.holes = HoleModel(mix)
        gpu = mix.per_gpu > 0
        milli = float((mix.prob[gpu] * mix.gpus[gpu] * mix.per_gpu[gpu]).sum())
        self.cpu_per_milli = float((mix.prob[gpu] * mix.cpu[gpu]).sum()) / max(milli, 1.0)
        self.mem_per_milli = float((mix.prob[gpu] * mix.mem[gpu]).sum()) / max(milli, 1.0)

    def pressure(self, snap: Snapshot) -> np.ndarray:
        """Per node: the share of its GPU capacity that task types which can run only on a
        subset of the fleet are expected to claim. A type's nodes are those that could ever
        hold it: a model it allows (``gpu_spec`` / ``gpu_models``) and at least its CPU,
        memory and GPU count in total. Demand confined to few nodes (a model-restricted task, an
        8-GPU task asking 120 cores that only the 128-core nodes can host) presses on them:
        consuming a milli-GPU there costs, in expectation, that fraction of a milli-GPU of
        confined demand that will find no room later. Types that fit every GPU node press
        nowhere, so with none confined the pressure is zero everywhere. Static (it depends on
        the mix and on the nodes' totals), computed once per snapshot and mix."""
        key = (snap.uid, self._mix_version)
        if self._pressure is not None and self._pressure_key == key:
            return self._pressure
        assert self.frag is not None
        frag = self.frag
        mix = frag.mix
        capacity = snap.whole_gpus * 1000.0
        has = (snap.model_of_node >= 0) & (capacity > 0)
        total = float(capacity[has].sum())
        demand = mix.prob * mix.gpus * mix.per_gpu
        share = demand / max(float(demand.sum()), 1e-12)
        out = np.zeros(snap.size, dtype=np.float64)
        weights: list[np.ndarray] = []
        per_cpu: list[float] = []
        per_mem: list[float] = []
        access = frag.access[snap.model_of_node + 1]  # (nodes, GPU types)
        for j, i in enumerate(frag.g_idx.tolist()):
            if share[i] == 0:
                continue
            can = (
                has
                & access[:, j]
                & (snap.cpu_total >= mix.cpu[i])
                & (snap.mem_total >= mix.mem[i])
                & (snap.whole_gpus >= mix.gpus[i])
            )
            supply = float(capacity[can].sum())
            if 0 < supply < total:
                weight = share[i] * total / supply
                out[can] += weight
                weights.append(np.where(can, weight, 0.0))
                milli = float(mix.gpus[i] * mix.per_gpu[i])
                per_cpu.append(milli / float(mix.cpu[i]) if mix.cpu[i] > 0 else 0.0)
                per_mem.append(milli / float(mix.mem[i]) if mix.mem[i] > 0 else 0.0)
        self._pressure, self._pressure_key = out, key
        self._weights = (
            np.column_stack(weights) if weights else np.zeros((snap.size, 0), dtype=np.float64)
        )
        self._per_cpu = np.array(per_cpu, dtype=np.float64)
        self._per_mem = np.array(per_mem, dtype=np.float64)
        return out

    def _room(self, free: np.ndarray, cpu: np.ndarray, mem: np.ndarray) -> np.ndarray:
        """Per node (row) and confined type (column): the milli-GPU of that type the node
        could still feed, the least of its free milli-GPU and its free CPU (memory) in the
        type's milli-GPU per CPU (memory)."""
        room = np.broadcast_to(free[:, None], (len(free), len(self._per_cpu)))
        asks = self._per_cpu > 0
        room = np.minimum(room, np.where(asks, cpu[:, None] * self._per_cpu, np.inf))
        asks = self._per_mem > 0
        return np.minimum(room, np.where(asks, mem[:, None] * self._per_mem, np.inf))

    def confined_cost(
        self, snap: Snapshot, shape: PodShape, nodes: np.ndarray, free: np.ndarray
    ) -> np.ndarray:
        """Per node of ``nodes`` (with free milli-GPU ``free``): the confined demand that
        placing ``shape`` there starves, in milli-GPU. A GPU task costs :meth:`pressure` x its
        milli-GPU. A CPU-only task costs, per confined type, the room it takes from that type
        (:meth:`_room` before minus after: the GPUs its CPU and memory would have fed) times
        the type's pressure: nothing while the node has CPU and memory to spare for the
        type's GPUs, a GPU's worth once they bind (on the only nodes that can host a 120-core
        8-GPU type, a task of 15 cores beyond the spare ones takes one GPU's room). Zero where
        nothing is confined."""
        pressure = self.pressure(snap)
        if shape.milli:
            return pressure[nodes] * shape.milli
        weights = self._weights[nodes]
        if weights.shape[1] == 0:
            return np.zeros(len(nodes), dtype=np.float64)
        cpu = snap.cpu_free[nodes]
        mem = snap.mem_free[nodes]
        before = self._room(free, cpu, mem)
        after = self._room(free, cpu - shape.cpu, mem - shape.mem)
        return (weights * (before - after)).sum(axis=1)

    def stranded(self, free: np.ndarray, cpu: np.ndarray, mem: np.ndarray) -> np.ndarray:
        """Free milli-GPU that the node's free CPU or memory cannot feed, at the mix's ratio
        of CPU (memory) per milli-GPU."""
        out = np.zeros(len(free), dtype=np.float64)
        if self.cpu_per_milli > 0:
            out = np.maximum(out, free - cpu / self.cpu_per_milli)
        if self.mem_per_milli > 0:
            out = np.maximum(out, free - mem / self.mem_per_milli)
        return out

    def _strand_growth(
        self, free: list[float], cpu: list[int], mem: list[int], shape: PodShape
    ) -> list[float]:
        """:meth:`stranded` after placing ``shape`` minus before, element by element."""
        cpm, mpm = self.cpu_per_milli, self.mem_per_milli
        milli, c, m = shape.milli, shape.cpu, shape.mem
        out: list[float] = []
        for f, u, v in zip(free, cpu, mem, strict=True):
            a = b = 0.0
            f2 = f - milli
            if cpm > 0:
                a = max(a, f2 - (u - c) / cpm)
                b = max(b, f - u / cpm)
            if mpm > 0:
                a = max(a, f2 - (v - m) / mpm)
                b = max(b, f - v / mpm)
            out.append(a - b)
        return out

    def score(self, state: CycleState, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        shape = state.shape
        if shape.mig or shape.replicas:
            # partitioned GPUs: pack, so whole partitioned GPUs stay free for big profiles
            # (the snapshot keeps both per-node sums of free instances and replicas)
            return -(snap.mig_sum[nodes] + snap.replica_sum[nodes])
        if self.learning:
            self._learn(shape)
        frag = self.frag
        assert frag is not None
        frag.refresh(snap, nodes)
        # read once per decision, whichever path scores: its periodic rebuild counts the uses
        cost = self.holes.correction(snap) if shape.share else None
        reps: np.ndarray | None = None
        if len(nodes) <= 64:
            # few candidates (a rack): dedupe with a dict; representatives are the first
            # occurrences ordered by state id, exactly as FragModel.unique gives them
            keys = frag.key[nodes].tolist()
            firsts: dict[int, int] = {}
            for i, k in enumerate(keys):
                if k not in firsts:
                    firsts[k] = i
            order = sorted(firsts)
            slot = {k: j for j, k in enumerate(order)}
            inverse = [slot[k] for k in keys]
            if len(order) <= _FEW:
                listed = nodes.tolist()
                before = frag.F[nodes].tolist()
                found = self._score_few(
                    shape,
                    snap,
                    [listed[firsts[k]] for k in order],
                    order,
                    [before[firsts[k]] for k in order],
                    cost,
                )
                if found is not None:
                    values, gpus = found
                    if shape.share:
                        state.data["share_gpu"] = np.array([gpus[j] for j in inverse])
                    return np.array([values[j] for j in inverse], dtype=np.float64)
            reps = nodes[[firsts[k] for k in order]]
            where = np.array(inverse, dtype=np.intp)
        else:
            reps, where = frag.unique(nodes)
            if len(reps) <= _FEW:
                found = self._score_few(
                    shape, snap, reps.tolist(), frag.key[reps].tolist(), frag.F[reps].tolist(), cost
                )
                if found is not None:
                    values, gpus = found
                    if shape.share:
                        state.data["share_gpu"] = np.array(gpus)[where]
                    return np.array(values, dtype=np.float64)[where]
        scored = self._score(state, snap, reps, cost)
        choice = state.data.get("share_gpu")
        if choice is not None:
            state.data["share_gpu"] = choice[where]  # type: ignore[index]
        return scored[where]

    def _score_few(
        self,
        shape: PodShape,
        snap: Snapshot,
        reps: list[int],
        keys: list[int],
        before: list[float],
        cost: np.ndarray | None,
    ) -> tuple[list[float], list[int]] | None:
        """:meth:`_score` of a few representatives (ascending state ids ``keys``, nodes
        ``reps``, fragmentation ``before``): their values and, for a share, the chosen GPU
        slots. From the memo when it holds every part, else computed afresh in plain Python
        around one matrix-vector product (and remembered); None when that would be more
        work than numpy's vectorised path (many rows times many task types)."""
        memo = self._memo_for(snap)
        if memo is not None:
            found = memo.lookup(shape, keys, before, cost)
            if found is not None:
                return found
        return self._fresh(shape, snap, reps, keys, before, cost, memo)

    def _fresh(
        self,
        shape: PodShape,
        snap: Snapshot,
        reps: list[int],
        keys: list[int],
        before: list[float],
        cost: np.ndarray | None,
        memo: ScoreMemo | None,
    ) -> tuple[list[float], list[int]] | None:
        """:meth:`_score` for at most :data:`_FEW` representatives without numpy's per-call
        overhead: the same float operations, in the same order, on Python floats (IEEE
        doubles, as numpy's element-wise operations), and the fragmentation's one
        order-sensitive step, the row sums ``lost @ p``, as the very same matrix-vector
        product over a matrix of the same rows in the same order. So the values are bit for
        bit those of :meth:`_score`. None when the rows times the task types exceed
        :data:`PY_WORK` (numpy is then cheaper)."""
        frag = self.frag
        assert frag is not None
        c = frag.consts()
        n = len(reps)
        share = shape.share
        if n * len(c.d) > PY_WORK:
            return None
        options: list[list[int]] = []
        frees: list[int] = []
        at: list[int] = []
        if share:
            # share_options: per node one GPU per distinct free value (its lowest slot)
            for i, row in enumerate(snap.gpu_free[reps].tolist()):
                mine: list[int] = []
                seen: set[int] = set()
                for g, f in enumerate(row):
                    if f in seen:
                        continue
                    seen.add(f)
                    if f >= share:
                        mine.append(g)
                        frees.append(f)
                        at.append(i)
                options.append(mine)
            if len(at) * len(c.d) > PY_WORK:
                return None
        milli = shape.milli
        free = frag.T[reps].tolist()
        cpu = snap.cpu_free[reps].tolist()
        mem = snap.mem_free[reps].tolist()
        model = snap.model_of_node[reps].tolist()
        # confined_cost, without its numpy calls where it is a product or zero
        pressure = self.pressure(snap)
        if milli:
            confined = [x * milli for x in pressure[reps].tolist()]
        elif len(self._per_cpu):
            confined = self.confined_cost(snap, shape, np.array(reps), frag.T[reps]).tolist()
        else:
            confined = [0.0] * n
        strand = self._strand_growth(free, cpu, mem, shape)
        for i, x in enumerate(confined):
            strand[i] += x
        small = [(f - milli) * 1e-6 for f in free]
        cpu_after = [u - shape.cpu for u in cpu]
        mem_after = [v - shape.mem for v in mem]
        free_after = [f - milli for f in free]
        S = frag.S[reps].tolist()
        C = frag.C[reps].tolist()
        if not share:
            whole = shape.whole
            lost = [
                c.lost(model[i], cpu_after[i], mem_after[i], free_after[i], S[i], C[i], whole)
                for i in range(n)
            ]
            after = c.product(lost, free_after)
            values = [-(after[i] - before[i] + strand[i]) - small[i] for i in range(n)]
            if memo is not None:
                table = memo.plain_table(shape, n)
                for i, k in enumerate(keys):
                    table[(k << 4) | kernel_class(n, i)] = (after[i], strand[i], small[i])
            return values, []
        lost = [
            c.lost_share(model[i], cpu_after[i], mem_after[i], free_after[i], S[i], C[i], f, share)
            for i, f in zip(at, frees, strict=True)
        ]
        after = c.product(lost, [free_after[i] for i in at]) if lost else []
        total = len(at)
        assert cost is not None
        hole = memo.cost_list(cost) if memo is not None else cost.tolist()
        table = memo.share_table(shape, total) if memo is not None else None
        values, gpus = [], []
        j = 0
        for i, k in enumerate(keys):
            best, pick = -np.inf, 0
            f0, s0, x0 = before[i], strand[i], small[i]
            for g in options[i]:
                a, f = after[j], frees[j]
                left = f - share
                y = left * 1e-9
                v = -(a - f0 + s0 + (hole[left] - hole[f])) - x0 - y
                if v > best:
                    best, pick = v, g
                if table is not None:
                    table[(k << 12) | (g << 4) | kernel_class(total, j)] = (a, s0, x0, y, f, left)
                j += 1
            values.append(best)
            gpus.append(pick)
        if memo is not None:
            for k, mine in zip(keys, options, strict=True):
                memo.options[(k, share)] = tuple(mine)
        return values, gpus

    def _memo_for(self, snap: Snapshot) -> ScoreMemo | None:
        """The score memo, emptied whenever what it assumes changes: another snapshot or
        binding of the fragmentation model (state ids restart), or another mix (fragmentation,
        stranding ratios and scarcity change). None when this machine's matrix-vector product
        does not follow the rule the memo keys on (see :class:`ScoreMemo`)."""
        frag = self.frag
        assert frag is not None
        memo = self._memo
        if memo is None or memo.frag is not frag or memo.keys is not frag.key:
            memo = self._memo = ScoreMemo(frag)
        elif memo.snap_uid != snap.uid or memo.version != self._mix_version:
            memo.clear()
        memo.snap_uid, memo.version = snap.uid, self._mix_version
        # a share's entries pack the GPU slot into 8 bits of the key
        return memo if memo.usable and snap.gmax <= 256 else None

    def _score(
        self, state: CycleState, snap: Snapshot, nodes: np.ndarray, cost: np.ndarray | None = None
    ) -> np.ndarray:
        shape = state.shape
        frag = self.frag
        assert frag is not None
        before = frag.F[nodes]
        # = fullness(snap, nodes): FragModel.T holds it, fresh for every candidate
        free = frag.T[nodes]
        if len(nodes) <= 32:
            # few candidates: the stranding growth in plain Python (per-call numpy overhead
            # dominates here); the same float operations in the same order, so equal values
            strand = np.array(
                self._strand_growth(
                    free.tolist(),
                    snap.cpu_free[nodes].tolist(),
                    snap.mem_free[nodes].tolist(),
                    shape,
                )
            )
        else:
            cpu = snap.cpu_free[nodes]
            mem = snap.mem_free[nodes]
            strand = self.stranded(free - shape.milli, cpu - shape.cpu, mem - shape.mem)
            strand -= self.stranded(free, cpu, mem)
        strand += self.confined_cost(snap, shape, nodes, free)
        left = free - shape.milli
        if not shape.share:
            grown = frag.after(snap, shape, nodes) - before + strand
            return -grown - left * 1e-6
        rows, gpus = share_options(snap, nodes, shape.share)
        grown = frag.after(snap, shape, nodes[rows], gpus) - before[rows] + strand[rows]
        gfree = snap.gpu_free[nodes[rows], gpus]
        gleft = gfree - shape.share
        if cost is None:
            cost = self.holes.correction(snap)  # finite supply of the tasks that close holes
        grown += cost[gleft] - cost[gfree]
        value = -grown - left[rows] * 1e-6 - gleft * 1e-9
        table = np.full((len(nodes), snap.gmax), -np.inf)
        table[rows, gpus] = value
        best = table.argmax(axis=1)
        state.data["share_gpu"] = best
        return table[np.arange(len(nodes)), best]
