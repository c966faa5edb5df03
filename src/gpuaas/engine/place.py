"""Place one pod: filter, score, choose devices. The stable API gang and topology build on.

``place_pod`` never changes the snapshot: it returns a :class:`Placement` (node and the exact
devices) or an :class:`Unschedulable` with a reason. The caller then calls :func:`reserve` (which
also tells the policy's reserve hooks) and, to roll back, :func:`unreserve`. Gang and topology
placement restrict the nodes with ``candidates`` (a bool mask over the snapshot's nodes, e.g. the
nodes of one rack) and reserve pod by pod, unreserving everything if one pod fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from gpuaas.engine.framework import (
    DEFAULT_FILTERS,
    CycleState,
    FilterPlugin,
    PodShape,
    ScorePlugin,
    feasible_nodes,
    reserve_hooks,
    run_filters,
)
from gpuaas.engine.nic_placement import attach, narrow
from gpuaas.engine.reasons import Code, Reason, placement_failed
from gpuaas.engine.snapshot import Assignment, Snapshot
from gpuaas.model.errors import InvalidValue
from gpuaas.model.workload import PodRequest

_NO_FIELDS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod goes: node index and name, the devices taken, and the policy's score."""

    node: int
    node_name: str
    assignment: Assignment
    score: float


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """No node fits; ``reason`` reads like kube-scheduler's ("0/1213 nodes fit: ...").

    ``rejected``: each filter's verdict and how many nodes it removed; ``code`` the cause (the
    filter that removed the most nodes, or what a gang or topology lacked), see
    :mod:`gpuaas.engine.reasons`; ``fields`` the code's own fields (e.g. ``DatasetNotWarm``'s
    ``dataset`` and ``warm``), carried into :meth:`cause`.
    """

    reason: str
    rejected: tuple[tuple[Reason, int], ...] = ()
    code: Code = Code.NO_CANDIDATE_NODES
    fields: Mapping[str, Any] = field(default_factory=lambda: _NO_FIELDS)

    def cause(self, **fields: object) -> Reason:
        """This failure as a structured reason (its sentence in ``detail``), with ``fields``."""
        fields = {**self.fields, **fields}
        counts = {why.code.value: n for why, n in self.rejected}
        if counts:
            fields["rejected"] = counts
        return placement_failed(self.code, self.reason, **fields)


def _dominant(rejected: list[tuple[Reason, int]]) -> Code:
    """The code of the filter that removed the most nodes (the first one on a tie)."""
    if not rejected:
        return Code.NO_CANDIDATE_NODES
    return max(rejected, key=lambda r: r[1])[0].code


def validate_pod(pod: PodRequest, allow_claims: bool = False) -> None:
    """Raise InvalidValue for a malformed request (two GPU forms, a bad share, or DRA claims
    where they are not resolved, unless ``allow_claims``)."""
    forms = sum(bool(x) for x in (pod.gpus, pod.mig, pod.replicas))
    if forms > 1:
        raise InvalidValue("pod", "ask for at most one GPU form: gpus, mig or replicas")
    if pod.gpu_milli and not (pod.gpus == 1 and 0 < pod.gpu_milli <= 1000):
        raise InvalidValue("pod.gpu_milli", "a GPU share needs gpus == 1 and 0 < gpu_milli <= 1000")
    if pod.claims and not allow_claims:
        raise InvalidValue(
            "pod.claims",
            "place_pod does not resolve DRA claims; turn them into gpus, mig or replicas first",
        )


@dataclass(slots=True)
class NodeSampling:
    """Score a bounded number of feasible nodes, as kube-scheduler does at scale
    (``percentageOfNodesToScore``): the filters still run over every candidate (vectorised, so
    they are cheap and an Unschedulable stays exact), but only ``count(candidates)`` feasible
    nodes, taken round-robin from where the previous decision stopped, are scored by the
    policy. Scoring (the fragmentation model) is what grows with the nodes, so a fleet-wide
    decision then costs about what a 500-node one does.

    ``percentage`` 0 means kube-scheduler's adaptive default: ``50 - candidates / 125`` percent,
    at least 5 %; and never fewer than ``minimum`` nodes (kube-scheduler's 100), so a rack or a
    small fleet is always scored whole. It trades placement quality for speed (the policy no
    longer sees the global best node), which is why :func:`place_pod` leaves it off unless
    asked. The object carries the round-robin position, so use one per snapshot.
    """

    percentage: float = 0.0
    minimum: int = 100
    next_start: int = 0
    #: Decisions where the sample was smaller than the feasible set, and feasible nodes left
    #: unscored in them (so reports can say how often sampling mattered).
    sampled: int = 0
    skipped: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.percentage <= 100:
            raise InvalidValue("percentage", f"must be within 0..100, got {self.percentage}")
        if self.minimum < 1:
            raise InvalidValue("minimum", f"must be at least 1, got {self.minimum}")

    def count(self, candidates: int) -> int:
        """How many feasible nodes to score out of ``candidates`` (kube-scheduler's
        ``numFeasibleNodesToFind``)."""
        if candidates < self.minimum or self.percentage >= 100:
            return candidates
        percentage = self.percentage or max(50.0 - candidates / 125.0, 5.0)
        return max(int(candidates * percentage / 100), self.minimum)

    def pick(self, feasible: np.ndarray, candidates: int) -> np.ndarray:
        """The feasible nodes (ascending indices) to score: ``count(candidates)`` of them from
        the round-robin position on, wrapping around, in ascending order."""
        k = self.count(candidates)
        if len(feasible) <= k:
            return feasible
        self.sampled += 1
        self.skipped += len(feasible) - k
        i = int(np.searchsorted(feasible, self.next_start))
        chosen = feasible[i : i + k]
        if len(chosen) < k:  # wrap around: the lowest indices complete the sample
            head = feasible[: k - len(chosen)]
            self.next_start = int(head[-1]) + 1
            return np.concatenate((head, chosen))
        self.next_start = int(chosen[-1]) + 1
        return chosen


def place_pod(
    snapshot: Snapshot,
    pod: PodRequest,
    policy: ScorePlugin,
    candidates: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
    filters: tuple[FilterPlugin, ...] = DEFAULT_FILTERS,
    sampling: NodeSampling | None = None,
) -> Placement | Unschedulable:
    """Choose a node and devices for ``pod`` without changing ``snapshot``.

    ``candidates``: optional bool mask (length = number of nodes) or int array of node indices
    to consider (topology domains, gang attempts). ``rng``: breaks ties between equal scores
    uniformly, as kube-scheduler does; without it the lowest node index wins (deterministic).
    ``sampling``: score only a bounded number of the feasible nodes (see
    :class:`NodeSampling`); None (the default) scores every feasible node.
    Raises InvalidValue for a malformed request.
    """
    validate_pod(pod)
    state = CycleState(pod=pod, shape=PodShape.of(pod), rng=rng)
    return place_shape(snapshot, state, policy, candidates, filters, sampling)


def _candidate_nodes(snapshot: Snapshot, candidates: np.ndarray | None) -> np.ndarray | None:
    if candidates is None:
        return None
    if candidates.dtype == bool:
        if len(candidates) != snapshot.size:
            raise InvalidValue(
                "candidates", f"mask has {len(candidates)} entries for {snapshot.size} nodes"
            )
        return np.flatnonzero(candidates)
    nodes = np.asarray(candidates, dtype=np.int64)
    if len(nodes) and (nodes.min() < 0 or nodes.max() >= snapshot.size):
        raise InvalidValue("candidates", f"node indices must be in 0..{snapshot.size - 1}")
    return nodes


def place_shape(
    snapshot: Snapshot,
    state: CycleState,
    policy: ScorePlugin,
    candidates: np.ndarray | None = None,
    filters: tuple[FilterPlugin, ...] = DEFAULT_FILTERS,
    sampling: NodeSampling | None = None,
) -> Placement | Unschedulable:
    """:func:`place_pod` for a prepared :class:`CycleState` (the simulator's hot path)."""
    return place_nodes(
        snapshot, state, policy, _candidate_nodes(snapshot, candidates), filters, sampling
    )


def place_nodes(
    snapshot: Snapshot,
    state: CycleState,
    policy: ScorePlugin,
    nodes: np.ndarray | None,
    filters: tuple[FilterPlugin, ...] = DEFAULT_FILTERS,
    sampling: NodeSampling | None = None,
    explain: bool = True,
) -> Placement | Unschedulable:
    """:func:`place_shape` for trusted ``nodes`` (int indices within the fleet, e.g. a
    topology domain's members; None for the whole fleet), without re-validating them.

    With the default filters the fused :func:`~gpuaas.engine.framework.feasible_nodes` runs
    first; the per-filter chain (which names why nodes were removed) only runs to explain an
    empty result, so a successful decision pays for a few vector compares, not six plugins.
    ``explain=False`` skips that too (the caller will try elsewhere and drop the reason).
    """
    total = snapshot.size if nodes is None else len(nodes)
    if filters is DEFAULT_FILTERS:
        feasible = feasible_nodes(state, snapshot, nodes)
        if len(feasible) == 0 and not explain:
            return Unschedulable(f"0/{total} nodes fit")
    else:
        feasible = np.empty(0, dtype=np.int64)
    if len(feasible) == 0:
        considered = np.arange(snapshot.size) if nodes is None else nodes
        feasible, rejected = run_filters(state, snapshot, considered, filters)
        if len(feasible) == 0:
            detail = ", ".join(f"{count} {why}" for why, count in rejected) or "no candidate nodes"
            return Unschedulable(
                f"0/{len(considered)} nodes fit: {detail}", tuple(rejected), _dominant(rejected)
            )
    if state.shape.nics:
        return _place_with_nics(snapshot, state, policy, feasible, total, sampling)
    return choose_node(snapshot, state, policy, feasible, total, sampling)


def choose_node(
    snapshot: Snapshot,
    state: CycleState,
    policy: ScorePlugin,
    feasible: np.ndarray,
    total: int,
    sampling: NodeSampling | None = None,
) -> Placement:
    """:func:`place_nodes` after its filters: the policy's pick among ``feasible`` (non-empty
    node indices where the pod fits, out of ``total`` candidates), for a pod without NICs.
    A gang's pod set calls it directly with the feasible nodes it keeps up to date itself
    (:func:`gpuaas.engine.gang._place_in_scope`)."""
    nodes = feasible
    if sampling is not None:
        nodes = sampling.pick(nodes, total)
    scores = policy.score(state, snapshot, nodes)
    pick, best = best_score(scores, state.rng)
    node = int(nodes[pick])
    state.data["pick"] = pick
    assignment = policy.assign(state, snapshot, node)
    return Placement(node, snapshot.names[node], assignment, float(best))


def _place_with_nics(
    snapshot: Snapshot,
    state: CycleState,
    policy: ScorePlugin,
    feasible: np.ndarray,
    total: int,
    sampling: NodeSampling | None,
) -> Placement | Unschedulable:
    """:func:`place_nodes` for a pod that asks NICs: the feasible nodes narrowed by its
    alignment policy, then the policy's pick with the VFs attached; a node where attaching
    fails after all (the policy chose devices alignment cannot follow) is dropped and the
    next best tried (see :mod:`gpuaas.engine.nic_placement`)."""
    nodes = narrow(state, snapshot, feasible)
    if len(nodes) == 0:
        pool = state.shape.nic_pool
        why = Reason(Code.NIC_ALIGNMENT, {"pool": pool} if pool else {})
        return Unschedulable(
            f"0/{total} nodes fit: {len(feasible)} {why}", ((why, len(feasible)),), why.code
        )
    if sampling is not None:
        nodes = sampling.pick(nodes, total)
    while len(nodes):
        pick, best = best_score(policy.score(state, snapshot, nodes), state.rng)
        node = int(nodes[pick])
        state.data["pick"] = pick
        assignment = attach(state, snapshot, policy.assign(state, snapshot, node))
        if assignment is not None:
            return Placement(node, snapshot.names[node], assignment, float(best))
        nodes = np.delete(nodes, pick)
    why = Reason(Code.NIC_ALIGNMENT, {"pool": state.shape.nic_pool} if state.shape.nic_pool else {})
    return Unschedulable(f"0/{total} nodes fit: {why}", ((why, len(feasible)),), why.code)


def best_score(scores: np.ndarray, rng: np.random.Generator | None) -> tuple[int, float]:
    """The position and value of the highest score; ties broken by ``rng`` uniformly, else
    the lowest position (deterministic)."""
    if len(scores) == 1:
        return 0, scores[0]
    if len(scores) <= _FEW_SCORES:
        # a rack's few candidates: plain Python beats numpy's per-call overhead; the same
        # maximum and the same tied positions in the same order, so the same draw
        values = scores.tolist()
        high = max(values)
        if high == high:  # no NaN (numpy's max would return NaN, and nothing equals it)
            tied = [i for i, v in enumerate(values) if v == high]
            if len(tied) > 1 and rng is not None:
                return tied[int(rng.integers(len(tied)))], scores[tied[0]]
            return tied[0], scores[tied[0]]
    best = scores.max()
    top = np.flatnonzero(scores == best)
    if len(top) > 1 and rng is not None:
        return int(top[int(rng.integers(len(top)))]), best
    return int(top[0]), best


#: Up to this many scores :func:`best_score` picks in plain Python.
_FEW_SCORES = 64


def reserve(snapshot: Snapshot, pod: PodRequest, placement: Placement, policy: object) -> None:
    """Take the placement's devices and tell the policy (if it has reserve hooks)."""
    snapshot.reserve(placement.node, placement.assignment)
    hooks = reserve_hooks(policy)
    if hooks is not None:
        hooks.on_reserve(snapshot, pod, placement.assignment)


def unreserve(snapshot: Snapshot, pod: PodRequest, placement: Placement, policy: object) -> None:
    """Give back what :func:`reserve` took (restores the snapshot exactly)."""
    snapshot.unreserve(placement.assignment)
    hooks = reserve_hooks(policy)
    if hooks is not None:
        hooks.on_unreserve(snapshot, pod, placement.assignment)
