"""Shared helpers of the simulator tests: tiny fleets, jobs, and the conservation check."""

from __future__ import annotations

import pytest

from gpuaas.model.node import Node
from gpuaas.sim.metrics import summarize
from gpuaas.sim.simulate import FINISHED, QUEUED, RUNNING, SimResult
from gpuaas.sim.synthetic import H100, FleetSpec, synthetic_fleet
from gpuaas.sim.traces import SimJob, itp_workload


def fleet(nodes: int) -> list[Node]:
    spec = FleetSpec(
        nodes=nodes, model_shares=((H100, 1.0),), mig_node_share=0, time_sliced_node_share=0
    )
    return synthetic_fleet(spec)


def job(name: str, submit: float, gpus: int, duration: float, **kw: object) -> SimJob:
    prio = int(kw.pop("priority", 0))  # type: ignore[call-overload]
    return SimJob(name, submit, duration, itp_workload(name, gpus, prio), priority=prio, **kw)  # type: ignore[arg-type]


def starts(result: SimResult) -> dict[str, float]:
    return {j.name: s for j, s in zip(result.jobs, result.first_start, strict=True)}


def check_conservation(result: SimResult) -> None:
    """Every job accounted for; served + lost == allocated, per job and against the snapshot."""
    for i, j in enumerate(result.jobs):
        assert result.status[i] in (FINISHED, QUEUED, RUNNING)
        if result.status[i] != FINISHED:
            assert result.reasons.get(i), f"{j.name} is {result.status[i]} without a reason"
        else:
            assert result.served_gpu_s[i] == pytest.approx(j.milli_gpu / 1000 * j.duration)
        assert result.served_gpu_s[i] + result.lost_gpu_s[i] == pytest.approx(result.alloc_gpu_s[i])
    assert sum(result.alloc_gpu_s) == pytest.approx(result.alloc_integral, rel=1e-9)
    s = summarize(result)
    assert s["jobs"]["finished"] + s["jobs"]["pending"] + s["jobs"]["running"] == len(result.jobs)
