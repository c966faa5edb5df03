"""The cluster autoscaler's planner: from what each cluster holds, runs, measures and waits
for, which node pools to grow and which nodes to let go. Pure: the service loop and the
simulator build the views, call :func:`plan` and carry out its decisions.

CONTRACT (written by the lead, implemented by the ``autoscale`` helper): the dataclasses below
are the interface the service (``service/autoscaler.py``), the idle pool and the simulator
(``sim/whatif.py``) build against; keep their fields, add what you need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpuaas.engine.reasons import Reason
from gpuaas.model.autoscale import AutoscaleSpec
from gpuaas.model.node import Node
from gpuaas.model.telemetry import UtilSummary
from gpuaas.model.workload import Workload


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """One node a cluster holds. ``allocated``: the fraction of its GPUs admitted work holds
    (0..1); ``util``: measured over the window (None or not ``known``: no telemetry, which
    never counts as idle); ``unneeded_since``: since when it has been both unallocated and
    below the scale-in threshold (None: needed now); ``drain_cost``: what draining it would
    disturb (0 when empty; the service weighs jobs by priority and time run); ``ready``:
    its GPUs are allocatable (a node still provisioning is not capacity)."""

    name: str
    pool: str
    allocated: float
    util: UtilSummary | None
    unneeded_since: float | None
    drain_cost: float = 0.0
    ready: bool = True


@dataclass(frozen=True, slots=True)
class PoolView:
    """A node pool of the cluster: its bounds (``max_count`` is the hard limit), a template
    node (what a new node of this pool looks like; the planner fits pending work on it) and
    the nodes it holds, ready or not."""

    name: str
    min_count: int
    max_count: int
    template: Node
    nodes: tuple[NodeFacts, ...]


@dataclass(frozen=True, slots=True)
class Pending:
    """A workload waiting on the cluster, with the structured reason it waits for (only
    capacity reasons ask for a node: a quota or budget hold does not)."""

    job: int
    workload: Workload
    reason: Reason
    since: float


@dataclass(frozen=True, slots=True)
class ClusterView:
    key: str  # "<tenant>.<cluster>", the CLUSTER_LABEL value
    spec: AutoscaleSpec
    pools: tuple[PoolView, ...]
    pending: tuple[Pending, ...]
    last_scale_out: float | None = None
    last_scale_in: float | None = None
    draining: int = 0  # nodes being drained now (they count against the disruption budget)


class Action(StrEnum):
    SCALE_OUT = "ScaleOut"
    SCALE_IN = "ScaleIn"


@dataclass(frozen=True, slots=True)
class Decision:
    """Grow ``pool`` by ``count`` nodes, or release ``nodes`` (cheapest to drain first);
    ``reason`` is the event the service records."""

    cluster: str
    pool: str
    action: Action
    count: int
    nodes: tuple[str, ...]
    reason: Reason


def plan(clusters: Sequence[ClusterView], now: float) -> list[Decision]:
    """Decisions for every cluster, at most one per pool per cycle."""
    raise NotImplementedError("implemented by the autoscale helper")
