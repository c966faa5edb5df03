"""Metrics of a simulation run: what an operator compares between policies and fleets.

Everything is computed from :class:`~gpuaas.sim.simulate.SimResult` after the run, so the loop
stays lean. Queueing delay is first start minus arrival (jobs that never started are counted as
pending, not in the delay statistics); completion time is finish minus arrival; slowdown is
completion time over run time, bounded below by 10 s of run time as is customary.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from gpuaas.sim.simulate import FINISHED, QUEUED, RUNNING, SimResult

_SLOWDOWN_FLOOR = 10.0


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0, "count": 0}
    arr = np.asarray(values, dtype=float)
    p50, p95, p99 = np.percentile(arr, [50, 95, 99])
    return {
        "mean": float(arr.mean()),
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "max": float(arr.max()),
        "count": len(arr),
    }


def queueing_delays(result: SimResult) -> list[float]:
    """First start minus arrival, for every job that started."""
    return [
        start - job.submit
        for job, start in zip(result.jobs, result.first_start, strict=True)
        if not math.isnan(start)
    ]


def _time_mean(result: SimResult, values: Sequence[float]) -> float:
    """Time-weighted mean of a step-function series over the run."""
    t = np.asarray(result.series_t)
    if len(t) == 0:
        return 0.0
    dt = np.append(t[1:], result.end_time) - t
    total = float(dt.sum())
    v = np.asarray(values, dtype=float)
    return float((v * dt).sum() / total) if total > 0 else float(v.mean())


def _window_utilization(result: SimResult, lo: float, hi: float) -> float:
    """Time-weighted allocated / up GPUs over [lo, hi] from the step-function series."""
    t = np.asarray(result.series_t)
    if len(t) == 0 or hi <= lo:
        return 0.0
    alloc = np.asarray(result.series_alloc)
    cap = np.asarray(result.series_cap)
    ends = np.append(t[1:], result.end_time)
    start = np.clip(t, lo, hi)
    stop = np.clip(ends, lo, hi)
    dt = stop - start
    capacity = float((cap * dt).sum())
    return float((alloc * dt).sum()) / capacity if capacity > 0 else 0.0


def summarize(result: SimResult) -> dict[str, Any]:
    """The run as one JSON-ready object (the CLI's ``--json``)."""
    status = result.status
    jobs = result.jobs
    delays = queueing_delays(result)
    jct = [f - j.submit for j, f in zip(jobs, result.finish, strict=True) if not math.isnan(f)]
    slowdown = [
        (f - j.submit) / max(j.duration, _SLOWDOWN_FLOOR)
        for j, f in zip(jobs, result.finish, strict=True)
        if not math.isnan(f)
    ]
    alloc = sum(result.alloc_gpu_s)
    served = sum(result.served_gpu_s)
    lost = sum(result.lost_gpu_s)
    tenants: dict[str, dict[str, float]] = {}
    weights = result.config.tenant_weights
    for job, a in zip(jobs, result.alloc_gpu_s, strict=True):
        entry = tenants.setdefault(job.tenant, {"gpu_hours": 0.0, "jobs": 0})
        entry["gpu_hours"] += a / 3600.0
        entry["jobs"] += 1
    total_hours = sum(e["gpu_hours"] for e in tenants.values()) or 1.0
    total_weight = sum(weights.get(t, 1.0) for t in tenants) or 1.0
    for name, entry in tenants.items():
        entry["share"] = entry["gpu_hours"] / total_hours
        entry["fair_share"] = weights.get(name, 1.0) / total_weight
    last_arrival = max((j.submit for j in jobs), default=result.start_time)
    pending_reasons: dict[str, int] = {}
    for i, s in enumerate(status):
        if s == QUEUED:
            reason = result.reasons.get(i, "queued")
            key = reason.split(":")[0] if reason.startswith(("gang ", "workload ")) else reason
            pending_reasons[key] = pending_reasons.get(key, 0) + 1
    return {
        "policy": result.config.policy,
        "queue_policy": str(result.config.queue_policy),
        "seed": result.config.seed,
        "fleet_gpus": result.fleet_gpus,
        "jobs": {
            "total": len(jobs),
            "finished": status.count(FINISHED),
            "pending": status.count(QUEUED),
            "running": status.count(RUNNING),
        },
        "gpu_utilization": result.alloc_integral / result.cap_integral
        if result.cap_integral > 0
        else 0.0,
        "gpu_utilization_while_arriving": _window_utilization(
            result, result.start_time, last_arrival
        ),
        "mean_fragmentation": _time_mean(result, result.series_frag),
        "queueing_delay_s": _stats(delays),
        "gang_queueing_delay_s": _stats(
            [
                start - job.submit
                for job, start in zip(jobs, result.first_start, strict=True)
                if job.workload.pod_count > 1 and not math.isnan(start)
            ]
        ),
        "completion_time_s": _stats(jct),
        "slowdown": _stats(slowdown),
        "makespan_s": result.end_time - result.start_time,
        "gpu_hours": {
            "allocated": alloc / 3600.0,
            "served": served / 3600.0,
            "lost_to_restarts": lost / 3600.0,
            "allocated_by_snapshot": result.alloc_integral / 3600.0,
        },
        "preemptions": result.preemptions,
        "restarts": sum(result.restarts),
        "node_failures": result.node_failures,
        "tenants": tenants,
        "pending_reasons": pending_reasons,
        "wall_seconds": result.wall_seconds,
    }


def write_csv(result: SimResult, directory: str | PathLike[str]) -> list[Path]:
    """``timeseries.csv`` (one row per event instant) and ``jobs.csv`` (one row per job)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    series = out / "timeseries.csv"
    with series.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["time_s", "gpus_allocated", "gpus_up", "running", "queued", "fragmentation"])
        for row in zip(
            result.series_t,
            result.series_alloc,
            result.series_cap,
            result.series_running,
            result.series_queued,
            result.series_frag,
            strict=True,
        ):
            w.writerow(
                [f"{row[0]:g}", f"{row[1]:g}", f"{row[2]:g}", row[3], row[4], f"{row[5]:.4f}"]
            )
    per_job = out / "jobs.csv"
    names = ("future", "queued", "running", "finished")
    with per_job.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "job",
                "tenant",
                "gpus",
                "submit_s",
                "duration_s",
                "first_start_s",
                "finish_s",
                "status",
                "restarts",
                "gpu_s_allocated",
                "gpu_s_lost",
                "reason",
            ]
        )
        for i, job in enumerate(result.jobs):
            w.writerow(
                [
                    job.name,
                    job.tenant,
                    f"{job.milli_gpu / 1000:g}",
                    f"{job.submit:g}",
                    f"{job.duration:g}",
                    "" if math.isnan(result.first_start[i]) else f"{result.first_start[i]:g}",
                    "" if math.isnan(result.finish[i]) else f"{result.finish[i]:g}",
                    names[result.status[i]],
                    result.restarts[i],
                    f"{result.alloc_gpu_s[i]:g}",
                    f"{result.lost_gpu_s[i]:g}",
                    result.reasons.get(i, ""),
                ]
            )
    return [series, per_job]
