"""A generated fleet sized for a trace: the offered load is a chosen fraction of capacity.

Offered load = GPU-seconds the trace asks for / (fleet GPUs x arrival span). A fleet at 0.85
is busy but can keep up on average, which is where queue policies differ most. The fleet is a
:func:`~gpuaas.sim.synthetic.synthetic_fleet` of one whole-GPU SKU (8-GPU nodes in racks of 16,
blocks and zones), so gangs meet real topology; it is never smaller than the largest job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuaas.model.devices import PartitionMode
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Node
from gpuaas.sim.synthetic import H100, NODE_SHAPES, FleetSpec, synthetic_fleet
from gpuaas.sim.traces import SimJob

GPUS_PER_NODE = 8


def offered_gpu_seconds(jobs: Sequence[SimJob]) -> float:
    """GPU-seconds of work in the trace."""
    return sum(job.milli_gpu * job.duration for job in jobs) / 1000.0


def arrival_span(jobs: Sequence[SimJob]) -> float:
    """Seconds from the first to the last arrival (at least one second)."""
    if not jobs:
        return 1.0
    times = [job.submit for job in jobs]
    return max(max(times) - min(times), 1.0)


def _pod_seconds(jobs: Sequence[SimJob], attr: str) -> float:
    return sum(
        ps.count * getattr(ps.pod, attr) * job.duration
        for job in jobs
        for ps in job.workload.pod_sets
    )


def auto_node_count(jobs: Sequence[SimJob], load: float) -> int:
    """Nodes of 8 GPUs so that the offered load is ``load`` of capacity.

    GPUs decide, but a trace with heavy CPU or memory requests (openb has CPU-only pods) also
    gets enough nodes for those at the same load; never fewer than the largest job needs.
    """
    if not 0 < load <= 10:
        raise InvalidValue("load", f"must be in (0, 10], got {load}")
    if not jobs:
        raise InvalidValue("trace", "has no jobs to size a fleet for")
    span = arrival_span(jobs) * load
    cpu_milli, memory = NODE_SHAPES[H100]
    gpus = offered_gpu_seconds(jobs) / span
    cpus = _pod_seconds(jobs, "cpu_milli") / span / cpu_milli
    mems = _pod_seconds(jobs, "memory_bytes") / span / memory
    largest = max(job.milli_gpu for job in jobs) / 1000.0
    return max(
        1,
        math.ceil(gpus / GPUS_PER_NODE),
        math.ceil(cpus),
        math.ceil(mems),
        math.ceil(largest / GPUS_PER_NODE),
    )


def auto_fleet(jobs: Sequence[SimJob], load: float = 0.85, seed: int = 0) -> list[Node]:
    """The fleet for ``jobs`` at offered ``load`` (see the module docstring)."""
    spec = FleetSpec(
        nodes=auto_node_count(jobs, load),
        gpus_per_node=GPUS_PER_NODE,
        model_shares=((H100, 1.0),),
        mig_node_share=0.0,
        time_sliced_node_share=0.0,
    )
    return synthetic_fleet(spec, seed)


def offered_load(jobs: Sequence[SimJob], nodes: Sequence[Node]) -> float:
    """Offered GPU load of ``jobs`` on ``nodes`` (whole-mode GPUs: the ones a job of whole GPUs
    can take; MIG and time-sliced GPUs are left out)."""
    gpus = sum(
        1 for node in nodes for gpu in node.gpus if gpu.partition.mode is PartitionMode.WHOLE
    )
    if gpus == 0:
        return math.inf
    return offered_gpu_seconds(jobs) / (arrival_span(jobs) * gpus)
