"""An autoscaled job's declared load spread over its running replicas, for the simulated
fleet's telemetry (docs/workload-autoscaling.md).

A job may declare its load in all (``utilization.total``, percent of one replica's devices:
250 is two and a half replicas fully busy) rather than per device. Its replicas are jobs of
their own whose stored spec names the job they replicate (``replicaOf``; the job itself is the
first); each running one reads ``min(100, total / running)`` percent (its ``gpu``) and
``amplitude / running``, so adding a replica lowers every replica's utilisation and removing
one raises it, as a load balancer in front of them would. This is what makes the workload
autoscaler observable end to end on the simulated fleet; real fleets measure it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from gpuaas.backends.sim_telemetry import Run


def _total(spec: Mapping[str, Any]) -> float | None:
    profile = spec.get("utilization")
    if not isinstance(profile, Mapping) or profile.get("total") is None:
        return None
    return float(profile["total"])


def replica_set_of(job_id: int, spec: Mapping[str, Any]) -> int:
    """The job a replica belongs to (a job that replicates none is its own)."""
    return int(spec.get("replicaOf", job_id))


def spread_over_replicas(runs: Iterable[Run]) -> list[Run]:
    """``runs`` with each declared ``total`` turned into its running replicas' share."""
    runs = list(runs)
    running = Counter(replica_set_of(j, spec) for j, spec, _, _ in runs if _total(spec) is not None)
    out: list[Run] = []
    for job_id, spec, started, pods in runs:
        total = _total(spec)
        if total is None:
            out.append((job_id, spec, started, pods))
            continue
        n = running[replica_set_of(job_id, spec)]
        profile = dict(spec["utilization"])
        profile["gpu"] = min(100.0, total / n)
        profile["amplitude"] = float(profile.get("amplitude", 0.0)) / n
        out.append((job_id, {**spec, "utilization": profile}, started, pods))
    return out
