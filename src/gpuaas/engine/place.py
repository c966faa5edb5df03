"""Place one pod: filter, score, choose devices. The stable API gang and topology build on.

``place_pod`` never changes the snapshot: it returns a :class:`Placement` (node and the exact
devices) or an :class:`Unschedulable` with a reason. The caller then calls :func:`reserve` (which
also tells the policy's reserve hooks) and, to roll back, :func:`unreserve`. Gang and topology
placement restrict the nodes with ``candidates`` (a bool mask over the snapshot's nodes, e.g. the
nodes of one rack) and reserve pod by pod, unreserving everything if one pod fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuaas.engine.framework import (
    DEFAULT_FILTERS,
    CycleState,
    FilterPlugin,
    PodShape,
    ReservePlugin,
    ScorePlugin,
    run_filters,
)
from gpuaas.engine.snapshot import Assignment, Snapshot
from gpuaas.model.errors import InvalidValue
from gpuaas.model.workload import PodRequest


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod goes: node index and name, the devices taken, and the policy's score."""

    node: int
    node_name: str
    assignment: Assignment
    score: float


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """No node fits; ``reason`` reads like kube-scheduler's ("0/1213 nodes fit: ...")."""

    reason: str
    rejected: tuple[tuple[str, int], ...] = ()


def _validate(pod: PodRequest) -> None:
    forms = sum(bool(x) for x in (pod.gpus, pod.mig, pod.replicas))
    if forms > 1:
        raise InvalidValue("pod", "ask for at most one GPU form: gpus, mig or replicas")
    if pod.gpu_milli and not (pod.gpus == 1 and 0 < pod.gpu_milli <= 1000):
        raise InvalidValue("pod.gpu_milli", "a GPU share needs gpus == 1 and 0 < gpu_milli <= 1000")
    if pod.claims:
        raise InvalidValue(
            "pod.claims",
            "place_pod does not resolve DRA claims; turn them into gpus, mig or replicas first",
        )


def place_pod(
    snapshot: Snapshot,
    pod: PodRequest,
    policy: ScorePlugin,
    candidates: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
    filters: tuple[FilterPlugin, ...] = DEFAULT_FILTERS,
) -> Placement | Unschedulable:
    """Choose a node and devices for ``pod`` without changing ``snapshot``.

    ``candidates``: optional bool mask (length = number of nodes) or int array of node indices
    to consider (topology domains, gang attempts). ``rng``: breaks ties between equal scores
    uniformly, as kube-scheduler does; without it the lowest node index wins (deterministic).
    Raises InvalidValue for a malformed request.
    """
    _validate(pod)
    state = CycleState(pod=pod, shape=PodShape.of(pod), rng=rng)
    return place_shape(snapshot, state, policy, candidates, filters)


def place_shape(
    snapshot: Snapshot,
    state: CycleState,
    policy: ScorePlugin,
    candidates: np.ndarray | None = None,
    filters: tuple[FilterPlugin, ...] = DEFAULT_FILTERS,
) -> Placement | Unschedulable:
    """:func:`place_pod` for a prepared :class:`CycleState` (the simulator's hot path)."""
    if candidates is None:
        nodes = np.arange(snapshot.size)
    elif candidates.dtype == bool:
        if len(candidates) != snapshot.size:
            raise InvalidValue(
                "candidates", f"mask has {len(candidates)} entries for {snapshot.size} nodes"
            )
        nodes = np.flatnonzero(candidates)
    else:
        nodes = np.asarray(candidates, dtype=np.int64)
        if len(nodes) and (nodes.min() < 0 or nodes.max() >= snapshot.size):
            raise InvalidValue("candidates", f"node indices must be in 0..{snapshot.size - 1}")
    considered = len(nodes)
    nodes, rejected = run_filters(state, snapshot, nodes, filters)
    if len(nodes) == 0:
        detail = ", ".join(f"{count} {why}" for why, count in rejected) or "no candidate nodes"
        return Unschedulable(f"0/{considered} nodes fit: {detail}", tuple(rejected))
    scores = policy.score(state, snapshot, nodes)
    best = scores.max()
    top = np.flatnonzero(scores == best)
    if len(top) > 1 and state.rng is not None:
        pick = int(top[int(state.rng.integers(len(top)))])
    else:
        pick = int(top[0])
    node = int(nodes[pick])
    state.data["pick"] = pick
    assignment = policy.assign(state, snapshot, node)
    return Placement(node, snapshot.names[node], assignment, float(best))


def reserve(snapshot: Snapshot, pod: PodRequest, placement: Placement, policy: object) -> None:
    """Take the placement's devices and tell the policy (if it has reserve hooks)."""
    snapshot.reserve(placement.node, placement.assignment)
    if isinstance(policy, ReservePlugin):
        policy.on_reserve(snapshot, pod, placement.assignment)


def unreserve(snapshot: Snapshot, pod: PodRequest, placement: Placement, policy: object) -> None:
    """Give back what :func:`reserve` took (restores the snapshot exactly)."""
    snapshot.unreserve(placement.assignment)
    if isinstance(policy, ReservePlugin):
        policy.on_unreserve(snapshot, pod, placement.assignment)
