"""How many replicas an inference job should run, and where: the workload autoscaler's rule.

Pure: the service loop (:mod:`gpuaas.service.replica_scaler`) builds a :class:`ReplicaSetView`
from what is stored, what the engine says of the pending replicas and what telemetry measured,
calls :func:`decide` and carries the :class:`ReplicaDecision` out (new replica jobs go through
submission and admission like any job; removed ones are stopped on their backend).

Semantics (docs/workload-autoscaling.md says the same for users):

- **Replicas.** The job as submitted is the first replica (``primary``: never removed by
  scaling, so at least one runs while the job lives); every further replica is a job of its
  own, a copy of it in one cluster. A replica is *running* while it holds devices (admitted
  or running) and *pending* while it waits for admission, with the engine's structured reason.
- **The rule** is the Kubernetes HPA's: ``desired = ceil(replicas x mean / target)`` over the
  measured GPU utilisation of the replicas, unchanged while ``|mean / target - 1|`` is within
  :data:`TOLERANCE`. A replica without a measurement (pending, or running with its window
  unknown) counts, as the HPA counts a pod without metrics, as 0 % when the measured ones ask
  to scale up and as exactly the target when they ask to scale down; if that flips the
  direction or lands in the tolerance, nothing changes. So a replica already asked for and
  still waiting is not asked for again, and none is removed for lack of telemetry. No
  replica measured at all: nothing changes (unknown is never idle).
- **Bounds.** ``desired`` is clamped to ``[minReplicas, maxReplicas]``: a hard max (nothing is
  ever added beyond it), and below the min replicas are added at once, whatever the cooldown.
- **Cooldown.** Otherwise a change waits until ``cooldownSeconds`` have passed since the last
  one (a replica takes time to start and its utilisation to show: without it the rule reacts
  to its own last step and flaps).
- **Where.** The clusters a replica may run in are the job's own (``""``: the shared pool)
  then ``clusters`` in the order listed. A cluster is *full* while a replica waits there for
  capacity (:data:`CAPACITY_CODES`: quota used up, nodes without room) and for
  ``cooldownSeconds`` after a replica spilled from it. A new replica goes to the first cluster
  not full; a pending replica waiting for capacity is moved (*spilled*: withdrawn there,
  added anew) to the next cluster not full after its own. Every cluster full: no replica is
  added beyond those already waiting (``ReplicasClustersFull``).
- **Which go.** Scaling down removes pending replicas first (they hold nothing), then running
  ones, each time from the last cluster in the order first (spilled replicas come home first)
  and the newest first; never the primary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuaas.engine.reasons import PLACEMENT_CODES, Code, Reason, reason
from gpuaas.model.autoscale import ReplicaScaling

#: How far the utilisation may stray from the target before the count changes (the HPA's
#: default ``--horizontal-pod-autoscaler-tolerance``).
TOLERANCE = 0.1

#: A pending replica waiting for one of these waits for room in its cluster (its quota is
#: used up or its nodes have no room): the next cluster may place it.
CAPACITY_CODES = frozenset(
    {
        Code.UNUSED_QUOTA_SHORT,
        Code.NO_PREEMPTION_POSSIBLE,
        Code.PREEMPTION_WOULD_NOT_FIT,
        Code.WAITING_FOR_QUOTA,
        Code.FLAVOR_NODES_FULL,
    }
) | (
    # every placement failure but those that say the nodes are of the wrong kind (another
    # cluster's nodes are no more likely to be right)
    PLACEMENT_CODES
    - {
        Code.GPU_MODEL,
        Code.NODE_SELECTOR,
        Code.TAINT,
        Code.DEVICE_CLAIMS,
        Code.EXTENDED_RESOURCE,
        Code.NIC_ALIGNMENT,
        Code.DATASET_NOT_WARM,
    }
)


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica: its job, its cluster (``""``: the shared pool), whether it holds devices,
    its mean utilisation 0..1 over the window (None: unknown, or not running), and why a
    pending one waits."""

    job: int
    cluster: str
    running: bool
    util: float | None = None
    waiting: Reason | None = None
    primary: bool = False


@dataclass(frozen=True, slots=True)
class ReplicaSetView:
    """A job's replicas as the rule sees them. ``home``: the job's own cluster; ``scaled_at``:
    when the count last changed (None: never); ``full``: clusters a replica spilled from, when
    it did."""

    scaling: ReplicaScaling
    home: str
    replicas: tuple[Replica, ...]
    scaled_at: float | None = None
    full: Mapping[str, float] = field(default_factory=dict)

    @property
    def clusters(self) -> tuple[str, ...]:
        """Where replicas may run, in order: home, then the listed ones (each once)."""
        return tuple(dict.fromkeys((self.home, *self.scaling.clusters)))


@dataclass(frozen=True, slots=True)
class Spill:
    """Move pending replica ``job`` from ``from_cluster`` to ``to_cluster``."""

    job: int
    from_cluster: str
    to_cluster: str
    reason: Reason


@dataclass(frozen=True, slots=True)
class ReplicaDecision:
    """``desired``: the replicas the job should have; ``add``: the cluster of each new one;
    ``remove``: replica jobs to stop; ``spill``: pending replicas moved to another cluster;
    ``reason``: why (None: nothing changed and nothing worth saying); ``scaled``: whether the
    count changed (the cooldown starts again)."""

    desired: int
    add: tuple[str, ...] = ()
    remove: tuple[int, ...] = ()
    spill: tuple[Spill, ...] = ()
    reason: Reason | None = None
    scaled: bool = False


def desired_replicas(
    utils: Sequence[float | None], target: float, tolerance: float = TOLERANCE
) -> int:
    """The HPA rule over the running replicas' utilisation (0..1 each, None unknown) against
    ``target`` (0..1), unclamped; ``len(utils)`` when nothing is known or nothing should change
    (see the module docstring for unknown replicas)."""
    current = len(utils)
    known = [u for u in utils if u is not None]
    if not known or target <= 0:
        return current
    ratio = sum(known) / len(known) / target
    if abs(ratio - 1.0) <= tolerance:
        return current
    missing = current - len(known)
    if missing:
        fill = 0.0 if ratio > 1.0 else target  # the HPA's conservative assumption
        new_ratio = (sum(known) + fill * missing) / current / target
        if abs(new_ratio - 1.0) <= tolerance or (new_ratio > 1.0) != (ratio > 1.0):
            return current
        ratio = new_ratio
    # a float product a hair above an integer must not add a replica (ceil(3.0000000001) = 4)
    return max(0, math.ceil(round(current * ratio, 9)))


def mean_percent(replicas: Sequence[Replica]) -> float | None:
    """The running replicas' mean measured utilisation in percent (None: none measured)."""
    known = [r.util for r in replicas if r.running and r.util is not None]
    return round(100.0 * sum(known) / len(known), 1) if known else None


def _order(view: ReplicaSetView) -> dict[str, int]:
    order = {c: i for i, c in enumerate(view.clusters)}
    return {**order, **{r.cluster: len(order) for r in view.replicas if r.cluster not in order}}


def _full(view: ReplicaSetView, now: float) -> set[str]:
    """Clusters where a replica waits for capacity, or that a replica spilled from lately."""
    full = {
        r.cluster
        for r in view.replicas
        if not r.running and r.waiting is not None and r.waiting.code in CAPACITY_CODES
    }
    cooldown = view.scaling.cooldown_seconds
    full.update(c for c, at in view.full.items() if now - at < cooldown)
    return full


def decide(view: ReplicaSetView, now: float) -> ReplicaDecision:
    """What to do with ``view``'s replicas at ``now`` (see the module docstring)."""
    s = view.scaling
    has = len(view.replicas)
    # pending replicas count as replicas without telemetry: already asked for
    utils = [r.util if r.running else None for r in view.replicas]
    wanted = desired_replicas(utils, s.target_percent / 100.0)
    desired = min(max(wanted, s.min_replicas), s.max_replicas)
    util = mean_percent(view.replicas)
    facts: dict[str, float | None] = {"utilization": util, "target": s.target_percent}
    if has < s.min_replicas and wanted <= s.min_replicas:
        facts["utilization"] = None  # raised to the bound, not on a measurement
    order = _order(view)
    full = _full(view, now)
    spills = _spills(view, order, full)
    out_of_bounds = not s.min_replicas <= has <= s.max_replicas  # held at once
    cooling = view.scaled_at is not None and now - view.scaled_at < s.cooldown_seconds
    if not out_of_bounds and (cooling or desired == has):
        bound = None if cooling else _at_bound(s, wanted, has, facts)
        why = spills[0].reason if spills else bound
        return ReplicaDecision(has, spill=tuple(spills), reason=why)
    if desired > has:
        free = [c for c in view.clusters if c not in full]
        if not free:
            why = reason(Code.REPLICAS_CLUSTERS_FULL, desired=desired, current=has,
                         clusters=list(view.clusters))  # fmt: skip
            return ReplicaDecision(has, spill=tuple(spills), reason=why)
        why = reason(Code.REPLICAS_SCALED_UP, current=has, desired=desired, **facts)
        add = (free[0],) * (desired - has)
        return ReplicaDecision(desired, add=add, spill=tuple(spills), reason=why, scaled=True)

    def last_first(r: Replica) -> tuple[bool, int, int]:
        return (r.running, -order[r.cluster], -r.job)

    candidates = sorted((r for r in view.replicas if not r.primary), key=last_first)
    remove = tuple(r.job for r in candidates[: has - desired])
    kept = tuple(sp for sp in spills if sp.job not in remove)
    why = reason(Code.REPLICAS_SCALED_DOWN, current=has, desired=desired, **facts)
    return ReplicaDecision(desired, remove=remove, spill=kept, reason=why, scaled=True)


def _at_bound(
    s: ReplicaScaling, wanted: int, has: int, facts: dict[str, float | None]
) -> Reason | None:
    """Why the count stays where it is when utilisation asks to pass a bound (else None)."""
    if wanted > s.max_replicas and has == s.max_replicas:
        return reason(Code.REPLICAS_AT_MAX, limit=s.max_replicas, wanted=wanted, **facts)
    if wanted < s.min_replicas and has == s.min_replicas:
        return reason(Code.REPLICAS_AT_MIN, limit=s.min_replicas, **facts)
    return None


def _spills(view: ReplicaSetView, order: Mapping[str, int], full: set[str]) -> list[Spill]:
    """Pending replicas waiting for capacity, each moved to the next cluster not full after
    its own (the primary stays: the job itself belongs to its cluster)."""
    out: list[Spill] = []
    clusters = view.clusters
    for r in sorted(view.replicas, key=lambda r: r.job):
        if r.running or r.primary or r.waiting is None or r.waiting.code not in CAPACITY_CODES:
            continue
        later = [c for c in clusters if order[c] > order[r.cluster] and c not in full]
        if not later:
            continue
        why = reason(Code.REPLICA_SPILLED, job=r.job, from_cluster=r.cluster,
                     to_cluster=later[0], cause=r.waiting.code.value)  # fmt: skip
        out.append(Spill(r.job, r.cluster, later[0], why))
    return out
