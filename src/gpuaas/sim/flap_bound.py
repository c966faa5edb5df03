"""The clairvoyant bound: the most idle GPU-hours a whole-node pool could sell with zero flaps.

The what-if (:mod:`gpuaas.sim.whatif`) measures what the planner reaches online; this module
computes, on the same arrivals, what *no* planner can beat, even one that knows every job's
arrival and run time in advance. The argument, so the figure can be checked:

- **Isolation.** The pool sells whole nodes only (issue 17: pool work never shares a node
  with tenant work), so the most it can sell is the fleet's GPU-time minus the GPU-time of the
  tenant clusters' nodes: ``sold <= fleet - gpus_per_node x sum_c N_c(t) dt``. Idle is
  ``fleet - used``, whatever the planner does (the same jobs run the same GPU-seconds), so
  ``share <= 1 - (gpus_per_node x sum N - used) / (fleet - used)``. Spot demand is taken as
  saturated and reclaims as free: both only raise the bound.
- **Need.** At every instant a cluster holds at least the nodes its running jobs need packed
  *ideally*: ``ceil(GPUs running / gpus_per_node)``, as if any job could be moved to any node
  at no cost (no real packing does better), and at least its min. Jobs start at arrival
  (``delay`` 0); with ``delay`` d > 0 the need counts a job only over ``[arrival + d, arrival
  + run)``, the part every start within d of arrival covers, so the bound holds for every
  schedule in which no job waits more than d (a relaxation: it lets the planner delay jobs).
- **Zero flaps.** A *cluster flap* is a cluster adding any node within ``window`` seconds after
  it released one (the what-if's count, inclusive). The planner acts on a grid of ``step``
  seconds (the what-if's control loop; its node count is constant between ticks), so a
  cluster's count is a sequence ``N_t >= need_t`` (the need's maximum over the step) in which
  no increase comes within ``window`` of a decrease. The fewest node-steps such a sequence
  can hold is found exactly by dynamic programming over (nodes, steps since the last
  decrease): :func:`fewest_node_steps`.
- **Zero node flaps only** (a released node never returns to the same cluster within the
  window, but another node may come): a cluster can then follow its need, since some other
  node can take the place of the one it released whenever one is free; the bound to compare
  with is then the ideal-packing one with no hysteresis at all (``no_hysteresis``), which
  holds for every planner.

The bound is per cluster; it ignores the fleet's size (a planner short of nodes must delay
jobs, which the bound already allows for through ``delay``) and reports how far the
clusters' sum of needs ever rises (``peak_nodes``).

Beside the bound: :func:`causal_frontier` runs rules that see only the past in the same
ideal-packing model (what not knowing the future costs), and :func:`clairvoyant_planner`
gives the engine's own planner the next window's need as its scale-in floor, so the what-if
measures what knowing the future buys with its real packing (``--told``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuaas.engine import autoscale
from gpuaas.engine.autoscale import ClusterView, Decision
from gpuaas.model.errors import InvalidValue
from gpuaas.sim.traces import SimJob

__all__ = [
    "FlapBound",
    "clairvoyant_planner",
    "fewest_node_steps",
    "flap_bound",
    "need_per_step",
]

MILLI = 1000


@dataclass(frozen=True, slots=True)
class FlapBound:
    """The bound of one set of arrivals; :meth:`summary` is the report."""

    gpus_per_node: int
    fleet_nodes: int
    horizon: float
    step: float
    window: float
    delay: float
    used_gpu_s: float
    no_hysteresis_node_s: float  # sum over clusters of the ideal need, node-seconds
    no_flaps_node_s: float  # the same under zero cluster flaps (the DP's optimum)
    peak_nodes: int  # the clusters' needs summed, at their highest

    def summary(self) -> dict[str, Any]:
        g = self.gpus_per_node
        fleet = self.fleet_nodes * g * self.horizon
        idle = fleet - self.used_gpu_s

        def share(node_s: float) -> float:
            return 1.0 - (g * node_s - self.used_gpu_s) / idle if idle > 0 else 0.0

        return {
            "step_seconds": self.step,
            "window_seconds": self.window,
            "delay_seconds": self.delay,
            "idle_gpu_hours": idle / 3600.0,
            "no_hysteresis": {
                "cluster_node_hours": self.no_hysteresis_node_s / 3600.0,
                "idle_in_clusters_gpu_hours": (g * self.no_hysteresis_node_s - self.used_gpu_s)
                / 3600.0,
                "max_share_sold": min(1.0, share(self.no_hysteresis_node_s)),
            },
            "zero_cluster_flaps": {
                "cluster_node_hours": self.no_flaps_node_s / 3600.0,
                "idle_in_clusters_gpu_hours": (g * self.no_flaps_node_s - self.used_gpu_s) / 3600.0,
                "max_share_sold": min(1.0, share(self.no_flaps_node_s)),
            },
            "peak_nodes_needed": self.peak_nodes,
            "fleet_nodes": self.fleet_nodes,
        }


def need_per_step(
    jobs: Sequence[SimJob],
    horizon: float,
    step: float,
    gpus_per_node: int,
    min_nodes: int = 0,
    delay: float = 0.0,
) -> np.ndarray:
    """Nodes the jobs need, ideally packed, at their most within each step of ``[0, horizon)``.

    A job holds its GPUs over ``[submit + delay, submit + duration)`` (nothing when the delay
    is at least its run time); the need is ``ceil(GPUs held / gpus_per_node)``, at least
    ``min_nodes``, and the step's value is its maximum over the step, the instant after every
    change at one time counted once (a job ending as another starts does not count both).
    """
    steps = math.ceil(horizon / step)
    starts, ends, milli = [], [], []
    for j in jobs:
        a, b = j.submit + delay, j.submit + j.duration
        if b <= a or a >= horizon:
            continue
        starts.append(a)
        ends.append(min(b, horizon))
        milli.append(j.milli_gpu)
    held = np.zeros(steps, dtype=np.int64)  # milli-GPU held at each step's start
    top = np.zeros(steps, dtype=np.int64)  # the most held at any change inside the step
    if starts:
        times = np.concatenate([np.asarray(starts), np.asarray(ends)])
        deltas = np.concatenate([np.asarray(milli), -np.asarray(milli)]).astype(np.int64)
        at, inverse = np.unique(times, return_inverse=True)
        per_time = np.zeros(len(at), dtype=np.int64)
        np.add.at(per_time, inverse, deltas)
        level = np.cumsum(per_time)  # held just after each distinct time
        bins = np.minimum((at // step).astype(np.int64), steps - 1)
        np.maximum.at(top, bins, level)
        # the level at each step's start: the last change strictly before it
        bounds = np.arange(steps) * step
        last = np.searchsorted(at, bounds, side="left") - 1
        held = np.where(last >= 0, level[np.maximum(last, 0)], 0)
    most = np.maximum(held, top)
    per_node = gpus_per_node * MILLI
    need = -(-most // per_node)
    return np.maximum(need, min_nodes).astype(np.int64)


def fewest_node_steps(
    need: np.ndarray, window_steps: int, keep_counts: bool = True
) -> tuple[int, np.ndarray | None]:
    """The fewest node-steps of a count ``N_t >= need_t`` with no increase within
    ``window_steps`` steps after a decrease (inclusive: an increase ``window_steps`` steps after
    a decrease is still a flap), and one such count.

    Dynamic programming over (count n, steps since the last decrease k, capped at
    ``window_steps``: an increase at step t needs k >= window_steps at step t - 1, i.e. more
    than ``window_steps`` steps after the decrease). The start is free (any count, no
    decrease before it). Per step: stay (k grows), decrease to any lower count (k = 0), or,
    when k is at the cap, increase to any higher count. ``keep_counts=False`` returns the
    optimum only (no count), in constant memory.
    """
    if window_steps < 0:
        raise InvalidValue("window_steps", f"must be >= 0, got {window_steps}")
    need = np.asarray(need, dtype=np.int64)
    if need.size == 0:
        return 0, need.copy()
    if need.min() < 0:
        raise InvalidValue("need", "must not be negative")
    top = int(need.max())
    counts = np.arange(top + 1)
    free = window_steps  # k at the cap: an increase is allowed
    inf = np.iinfo(np.int64).max // 4
    cost = np.full((top + 1, free + 1), inf, dtype=np.int64)
    ok = counts >= need[0]
    cost[ok, free] = counts[ok]
    steps = len(need)
    # choice[t][n, k]: how the state was reached, to walk the optimum back
    kept = steps if keep_counts else 1
    came_n = np.zeros((kept, top + 1, free + 1), dtype=np.int16)
    came_k = np.zeros((kept, top + 1, free + 1), dtype=np.int16)
    grid_n = np.broadcast_to(counts[:, None], (top + 1, free + 1))
    grid_k = np.broadcast_to(np.arange(free + 1)[None, :], (top + 1, free + 1))
    came_n[0], came_k[0] = grid_n, grid_k  # the start: reached from itself
    for t in range(1, steps):
        new = np.full_like(cost, inf)
        cn = np.zeros((top + 1, free + 1), dtype=np.int16)
        ck = np.zeros((top + 1, free + 1), dtype=np.int16)
        # stay: k -> min(k + 1, free)
        if free >= 1:
            new[:, 1:free] = cost[:, 0 : free - 1]
            cn[:, 1:free] = grid_n[:, 1:free]
            ck[:, 1:free] = grid_k[:, 0 : free - 1]
            new[:, free] = np.minimum(cost[:, free - 1], cost[:, free])
            ck[:, free] = np.where(cost[:, free - 1] <= cost[:, free], free - 1, free)
        else:
            new[:, 0] = cost[:, 0]
            ck[:, 0] = 0
        cn[:, free] = counts
        # decrease to n' from any n > n', any k: the best over higher counts
        row_best = cost.min(axis=1)
        row_arg = cost.argmin(axis=1)
        suffix = np.minimum.accumulate(row_best[::-1])[::-1]  # best over n >= index
        suffix_at = _arg_accumulate(row_best[::-1])[::-1]
        suffix_at = top - suffix_at  # index into counts
        if top >= 1:
            better = suffix[1:]  # best over n > n'
            at = suffix_at[1:]
            take = better < new[:-1, 0]
            new[:-1, 0] = np.where(take, better, new[:-1, 0])
            cn[:-1, 0] = np.where(take, at, cn[:-1, 0])
            ck[:-1, 0] = np.where(take, row_arg[at], ck[:-1, 0])
            # increase to n' from n < n', with k at the cap
            prefix = np.minimum.accumulate(cost[:, free])
            prefix_at = _arg_accumulate(cost[:, free])
            up = prefix[:-1]
            take = up < new[1:, free]
            new[1:, free] = np.where(take, up, new[1:, free])
            cn[1:, free] = np.where(take, prefix_at[:-1], cn[1:, free])
            ck[1:, free] = np.where(take, free, ck[1:, free])
        new[counts < need[t], :] = inf
        reached = new < inf
        new[reached] += grid_n[reached]
        cost = new
        if keep_counts:
            came_n[t], came_k[t] = cn, ck
    best = int(cost.min())
    if not keep_counts:
        return best, None
    n, k = np.unravel_index(int(cost.argmin()), cost.shape)
    path = np.zeros(steps, dtype=np.int64)
    for t in range(steps - 1, -1, -1):
        path[t] = n
        n, k = int(came_n[t, n, k]), int(came_k[t, n, k])
    return best, path


def _arg_accumulate(values: np.ndarray) -> np.ndarray:
    """For each index, the index of the first minimum of ``values[: index + 1]``."""
    best = np.minimum.accumulate(values)
    idx = np.arange(len(values))
    hit = np.where(values == best, idx, 0)
    return np.maximum.accumulate(hit)


def flap_bound(
    jobs: Sequence[SimJob],
    tenants: Sequence[str],
    fleet_nodes: int,
    gpus_per_node: int,
    horizon: float,
    min_nodes: int = 1,
    step: float = 15.0,
    window: float = 600.0,
    delay: float = 0.0,
) -> FlapBound:
    """The bound for ``jobs`` dealt to one cluster per tenant (see the module docstring)."""
    if step <= 0:
        raise InvalidValue("step", f"must be above 0, got {step}")
    if window < 0:
        raise InvalidValue("window", f"must be >= 0, got {window}")
    if delay < 0:
        raise InvalidValue("delay", f"must be >= 0, got {delay}")
    if horizon <= 0:
        raise InvalidValue("horizon", f"must be above 0, got {horizon}")
    used = sum(
        j.milli_gpu / MILLI * max(0.0, min(j.submit + j.duration, horizon) - j.submit)
        for j in jobs
        if j.submit < horizon
    )
    # an increase at the step `window // step` after a decrease is within the window
    window_steps = int(window // step)
    plain = flaps = 0
    total = None
    for tenant in tenants:
        mine = [j for j in jobs if j.tenant == tenant]
        need = need_per_step(mine, horizon, step, gpus_per_node, min_nodes, delay)
        plain += int(need.sum())
        best, _ = fewest_node_steps(need, window_steps, keep_counts=False)
        flaps += best
        total = need if total is None else total + need
    return FlapBound(
        gpus_per_node=gpus_per_node,
        fleet_nodes=fleet_nodes,
        horizon=horizon,
        step=step,
        window=window,
        delay=delay,
        used_gpu_s=used,
        no_hysteresis_node_s=plain * step,
        no_flaps_node_s=flaps * step,
        peak_nodes=0 if total is None else int(total.max()),
    )


# ---------------------------------------------------------------- causal rules, same model
#
# The clairvoyant optimum knows the future; a planner does not. The rules below see only the
# past and run in the same ideal-packing model (their counts only ever meet the need, never
# pack worse), so they show what information costs, apart from packing: each count is checked
# against the need, and its cluster flaps counted exactly as the DP forbids them.


def cluster_flaps(counts: np.ndarray, window_steps: int) -> int:
    """Increases of ``counts`` within ``window_steps`` steps (inclusive) after a decrease."""
    flaps, last = 0, None
    for t in range(1, len(counts)):
        if counts[t] < counts[t - 1]:
            last = t
        elif counts[t] > counts[t - 1] and last is not None and t - last <= window_steps:
            flaps += 1
    return flaps


def past_peak_counts(need: np.ndarray, hold_steps: int) -> np.ndarray:
    """The stabilization window's rule: the most nodes needed over the last ``hold_steps``
    steps (this one included)."""
    if hold_steps < 1:
        raise InvalidValue("hold_steps", f"must be >= 1, got {hold_steps}")
    need = np.asarray(need, dtype=np.int64)
    padded = np.concatenate([np.full(hold_steps - 1, need[0]), need])
    return np.lib.stride_tricks.sliding_window_view(padded, hold_steps).max(axis=1)


def forecast_headroom_counts(
    need: np.ndarray, window_steps: int, quantile: float, day_steps: int, band_steps: int
) -> np.ndarray:
    """A forecast rule: keep ``need + headroom``, where headroom is the ``quantile`` of how far
    the need rose within ``window_steps`` after the same time of day (within ``band_steps``)
    on earlier days, as far as already seen (before a day of history: all rises seen so far;
    before any, one node). Scale out only when the need exceeds the count (to the target);
    scale in to the target when the count is above it."""
    if not 0.0 <= quantile <= 1.0:
        raise InvalidValue("quantile", f"must be within 0..1, got {quantile}")
    need = np.asarray(need, dtype=np.int64)
    steps = len(need)
    padded = np.concatenate([need, np.full(window_steps, need[-1])])
    window_max = np.lib.stride_tricks.sliding_window_view(padded, window_steps + 1)[:steps]
    rise = window_max.max(axis=1) - need  # known only window_steps later
    counts = np.empty_like(need)
    counts[0] = need[0] + 1
    for t in range(1, steps):
        seen = t - window_steps  # rises complete before t
        parts = []
        back = day_steps
        while t - back - band_steps >= 0:
            c = t - back
            parts.append(rise[c - band_steps : min(c + band_steps, seen)])
            back += day_steps
        history = np.concatenate(parts) if parts else rise[: max(0, seen)]
        headroom = int(np.ceil(np.quantile(history, quantile))) if history.size else 1
        target = need[t] + headroom
        if need[t] > counts[t - 1] or counts[t - 1] > target:
            counts[t] = target
        else:
            counts[t] = counts[t - 1]
    return counts


def causal_frontier(
    needs: Sequence[np.ndarray],
    used_gpu_s: float,
    idle_gpu_s: float,
    gpus_per_node: int,
    step: float,
    window_steps: int,
    holds_steps: Sequence[int] = (),
    quantiles: Sequence[float] = (),
    day_steps: int = 5760,
    band_steps: int = 240,
) -> list[dict[str, Any]]:
    """Share sold at most and cluster flaps of each causal rule over the clusters' needs."""
    out = []
    rules: list[tuple[str, Any]] = [
        (f"past peak over {h * step / 60:g} min", lambda n, h=h: past_peak_counts(n, h))
        for h in holds_steps
    ]
    rules += [
        (
            f"forecast headroom, quantile {q:g}",
            lambda n, q=q: forecast_headroom_counts(n, window_steps, q, day_steps, band_steps),
        )
        for q in quantiles
    ]
    for name, rule in rules:
        node_steps = flaps = 0
        for need in needs:
            counts = rule(need)
            if (counts < need).any():
                raise AssertionError(f"{name}: a count below the need")
            node_steps += int(counts.sum())
            flaps += cluster_flaps(counts, window_steps)
        idle_in = gpus_per_node * node_steps * step - used_gpu_s
        out.append(
            {"rule": name, "max_share_sold": 1.0 - idle_in / idle_gpu_s, "cluster_flaps": flaps}
        )
    return out


# ------------------------------------------------------- the clairvoyant floor in the what-if


def clairvoyant_planner(
    jobs: Sequence[SimJob],
    keys: dict[str, str],
    horizon: float,
    gpus_per_node: int,
    step: float = 15.0,
    window: float = 600.0,
    margin: int = 0,
) -> Callable[[Sequence[ClusterView], float], list[Decision]]:
    """The engine's planner (:func:`gpuaas.engine.autoscale.plan`) told the future: each
    cluster (``keys``: tenant -> cluster key) is never scaled in below the most nodes its
    jobs will need, ideally packed, over the next ``window`` plus a step (``+ margin``),
    passed as the pool's ``recent_peak`` floor. Everything else (scale-out on pending work,
    which nodes go, cooldowns) is the planner's own. For the what-if only: it shows what the
    same loop with real packing reaches when the flap window's demand is known ahead."""
    ahead = int(window // step) + 1
    floors: dict[str, np.ndarray] = {}
    for tenant, key in keys.items():
        need = need_per_step([j for j in jobs if j.tenant == tenant], horizon, step, gpus_per_node)
        padded = np.concatenate([need, np.zeros(ahead, dtype=np.int64)])
        view = np.lib.stride_tricks.sliding_window_view(padded, ahead + 1)[: len(need)]
        floors[key] = view.max(axis=1) + margin

    def planner(views: Sequence[ClusterView], now: float) -> list[Decision]:
        told = []
        for v in views:
            floor = floors.get(v.key)
            if floor is None or not v.pools:
                told.append(v)
                continue
            at = int(floor[min(len(floor) - 1, max(0, int(now // step)))])
            pools = tuple(
                dataclasses.replace(p, recent_peak=max(p.recent_peak, at)) for p in v.pools
            )
            told.append(dataclasses.replace(v, pools=pools))
        return autoscale.plan(told, now)

    return planner


def whatif_default_bound(
    days: float = 7.0, seed: int = 0, delays: Sequence[float] = (0.0, 60.0)
) -> dict[str, Any]:
    """The bound and the causal frontier on ``gpuaas simulate whatif``'s default run (512 GPUs
    of 8-GPU nodes, 4 tenants, 10:1, peak load 0.7, clusters 1..32 nodes, the same seed)."""
    from gpuaas.sim.diurnal import DiurnalSpec, diurnal_jobs

    nodes, per_node, tenants = 64, 8, ("t0", "t1", "t2", "t3")
    spec = DiurnalSpec(
        gpus=nodes * per_node,
        days=days,
        peak_to_trough=10.0,
        peak_load=0.7,
        peak_hour=14.0,
        tenants=len(tenants),
        max_job_gpus=nodes // 2 * per_node,
        duration_median=1200.0,
        seed=seed,
    )
    jobs = diurnal_jobs(spec)
    horizon = days * 86400.0
    bounds = [
        flap_bound(jobs, tenants, nodes, per_node, horizon, delay=d).summary() for d in delays
    ]
    step, window_steps = 15.0, 40
    needs = [
        need_per_step([j for j in jobs if j.tenant == t], horizon, step, per_node, 1)
        for t in tenants
    ]
    first = bounds[0]
    used = nodes * per_node * horizon - first["idle_gpu_hours"] * 3600.0
    frontier = causal_frontier(
        needs,
        used,
        first["idle_gpu_hours"] * 3600.0,
        per_node,
        step,
        window_steps,
        holds_steps=(40, 240, 480, 960),
        quantiles=(0.9, 0.99, 1.0),
    )
    return {"jobs": len(jobs), "days": days, "seed": seed, "bounds": bounds, "causal": frontier}


def whatif_told(margin: int, days: float = 7.0, seed: int = 0) -> dict[str, Any]:
    """The what-if's default run (as ``gpuaas simulate whatif --rule telemetry --spot
    saturated --unneeded 0s --settle 1m``) with :func:`clairvoyant_planner` at ``margin``
    (``margin < 0``: the engine's planner, untold); its summary."""
    from gpuaas.model.autoscale import AutoscaleSpec, IdlePoolSpec
    from gpuaas.sim.diurnal import DiurnalSpec, diurnal_jobs
    from gpuaas.sim.synthetic import H100, FleetSpec, synthetic_fleet
    from gpuaas.sim.whatif import ClusterSetup, WhatIfConfig, run_whatif

    nodes, per_node, tenants = 64, 8, ("t0", "t1", "t2", "t3")
    jobs = diurnal_jobs(
        DiurnalSpec(
            gpus=nodes * per_node,
            days=days,
            tenants=len(tenants),
            max_job_gpus=nodes // 2 * per_node,
            seed=seed,
        )
    )
    fleet = synthetic_fleet(
        FleetSpec(
            nodes=nodes,
            model_shares=((H100, 1.0),),
            mig_node_share=0.0,
            time_sliced_node_share=0.0,
        )
    )
    spec = AutoscaleSpec(
        target_percent=95, scale_in_below_percent=20, unneeded_seconds=0, cooldown_seconds=300
    )
    horizon = days * 86400.0
    cfg = WhatIfConfig(
        clusters=tuple(ClusterSetup(t, 1, nodes // 2, spec) for t in tenants),
        pool=IdlePoolSpec(marketplace="whatif", settle_seconds=60, grace_seconds=30),
        until=horizon,
        seed=seed,
        policy="packing",
    )
    engine: dict[str, Any] = {}
    if margin >= 0:
        keys = {t: f"{t}.{t}" for t in tenants}
        engine["planner"] = clairvoyant_planner(jobs, keys, horizon, per_node, margin=margin)
    out = run_whatif(fleet, jobs, cfg, **engine).summary()
    out["told_margin"] = margin
    return out


if __name__ == "__main__":
    # python -m gpuaas.sim.flap_bound [days]: the bound and the causal rules, one JSON object
    # python -m gpuaas.sim.flap_bound --told M [days]: the what-if told the future (M < 0: not)
    import json
    import sys

    args = sys.argv[1:]
    if args[:1] == ["--told"]:
        days = float(args[2]) if len(args) > 2 else 7.0
        print(json.dumps(whatif_told(int(args[1]), days)))
    else:
        print(json.dumps(whatif_default_bound(float(args[0]) if args else 7.0)))
