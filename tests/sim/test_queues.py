"""Replaying a trace under Kueue governance: quotas hold, cohorts lend, evictions are accounted."""

from __future__ import annotations

import math

import pytest
import yaml
from sim_helpers import check_conservation, fleet

from gpuaas.model.errors import InvalidValue
from gpuaas.sim.queues import queue_for, simulate_with_queues
from gpuaas.sim.simulate import SimConfig
from gpuaas.sim.traces import SimJob, itp_workload
from gpuaas.supply.kueue import load_objects


def governance(cohort: bool, reclaim: str = "Never") -> object:
    objects = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpu"},
            "spec": {},
        }
    ]
    for team in ("team-a", "team-b"):
        spec = {
            "namespaceSelector": {},
            "preemption": {"reclaimWithinCohort": reclaim, "withinClusterQueue": "Never"},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "gpu",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}],
                        }
                    ],
                }
            ],
        }
        if cohort:
            spec["cohortName"] = "lab"
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": team},
                "spec": spec,
            }
        )
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": team, "namespace": "ml"},
                "spec": {"clusterQueue": team},
            }
        )
    return load_objects(yaml.safe_load(yaml.safe_dump(objects)), "test")


def job(name: str, tenant: str, submit: float, gpus: int, duration: float) -> SimJob:
    return SimJob(name, submit, duration, itp_workload(name, gpus), tenant=tenant)


def peak_gpus(result, tenant: str) -> int:  # type: ignore[no-untyped-def]
    events = []
    for i, j in enumerate(result.jobs):
        if j.tenant == tenant and not math.isnan(result.first_start[i]):
            events += [(result.first_start[i], j.milli_gpu), (result.finish[i], -j.milli_gpu)]
    level = peak = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):
        level += d
        peak = max(peak, level)
    return peak // 1000


JOBS = [job(f"a{k}", "team-a", k, 4, 100) for k in range(6)] + [job("b0", "team-b", 10, 4, 100)]


def test_quota_caps_a_tenant_even_on_an_idle_fleet() -> None:
    r = simulate_with_queues(fleet(4), JOBS, governance(cohort=False), SimConfig())  # type: ignore[arg-type]
    check_conservation(r)
    assert peak_gpus(r, "team-a") == 8  # nominal quota, although 32 GPUs are there
    assert not any(math.isnan(s) for s in r.first_start)  # everything ran eventually
    b = next(i for i, j in enumerate(r.jobs) if j.name == "b0")
    assert r.first_start[b] == 10  # its own quota is free
    assert max(r.finish) == 301  # a's six 4-GPU jobs run two at a time: 0..100..200..301


def test_a_cohort_lends_unused_quota() -> None:
    r = simulate_with_queues(fleet(4), JOBS, governance(cohort=True), SimConfig())  # type: ignore[arg-type]
    check_conservation(r)
    assert peak_gpus(r, "team-a") == 16  # borrowed team-b's idle quota
    b = next(i for i, j in enumerate(r.jobs) if j.name == "b0")
    assert r.first_start[b] == 100  # team-b waits for its lent quota to come back


def test_reclaim_evicts_a_borrower_and_the_restart_is_accounted() -> None:
    r = simulate_with_queues(
        fleet(4),
        JOBS,
        governance(cohort=True, reclaim="Any"),  # type: ignore[arg-type]
        SimConfig(),
    )
    check_conservation(r)
    b = next(i for i, j in enumerate(r.jobs) if j.name == "b0")
    assert r.first_start[b] == 10  # reclaimed its quota at once
    assert r.preemptions >= 1 and sum(r.lost_gpu_s) > 0


def test_queue_for() -> None:
    gov = governance(cohort=False)
    assert queue_for("team-a", gov) == "ml/team-a"  # type: ignore[arg-type]
    assert queue_for("ml/team-b", gov) == "ml/team-b"  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="known LocalQueues: ml/team-a, ml/team-b"):
        queue_for("team-c", gov)  # type: ignore[arg-type]
