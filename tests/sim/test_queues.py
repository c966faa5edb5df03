"""Replaying a trace under Kueue governance: quotas hold, cohorts lend, evictions are accounted."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import check_conservation, fleet

from gpuaas.engine.scheduling.admission import AdmissionScheduler
from gpuaas.model.errors import InvalidValue
from gpuaas.sim.queues import queue_for, simulate_with_queues
from gpuaas.sim.simulate import FINISHED, NodeFailure, ScaleEvent, SimConfig, Simulator
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


def _at(result, name: str) -> int:  # type: ignore[no-untyped-def]
    return next(i for i, j in enumerate(result.jobs) if j.name == name)


def test_a_failed_nodes_job_is_requeued_through_the_engine_and_waits_for_the_repair() -> None:
    jobs = [job("a0", "team-a", 0, 8, 100)]
    config = SimConfig(failures=(NodeFailure(50, "node-00000", 30),))
    r = simulate_with_queues(fleet(1), jobs, governance(cohort=False), config)  # type: ignore[arg-type]
    check_conservation(r)
    i = _at(r, "a0")
    assert r.restarts[i] == 1 and r.node_failures == 1
    assert r.finish[i] == 180  # back at 80 (repair), then its 100 s again (no checkpoint)
    assert r.lost_gpu_s[i] == pytest.approx(8 * 50)


def test_a_failed_nodes_job_restarts_at_once_where_quota_and_nodes_allow() -> None:
    jobs = [job("a0", "team-a", 0, 4, 100), job("a1", "team-a", 0, 4, 100)]
    config = SimConfig(failures=(NodeFailure(50, "node-00000", 1000),))
    r = simulate_with_queues(fleet(2), jobs, governance(cohort=False), config)  # type: ignore[arg-type]
    check_conservation(r)
    # both were packed on node-00000; after its failure both run on node-00001 at once
    assert sorted(r.restarts) == [1, 1]
    assert sorted(r.finish) == [150, 150]


def test_scale_up_admits_what_waited_for_nodes_and_scale_down_requeues() -> None:
    jobs = [job("a0", "team-a", 0, 8, 100), job("a1", "team-a", 0, 8, 100)]
    config = SimConfig(scale=(ScaleEvent(10, 1), ScaleEvent(40, -1)))
    gov = governance(cohort=True)  # team-a may borrow team-b's 8 GPUs: quota is not the limit
    r = simulate_with_queues(fleet(1), jobs, gov, config)  # type: ignore[arg-type]
    check_conservation(r)
    a0, a1 = _at(r, "a0"), _at(r, "a1")
    assert r.first_start[a0] == 0
    assert r.first_start[a1] == 10  # the added node
    # the added node leaves at 40: a1 goes back to the queue and restarts when a0 ends
    assert r.restarts[a1] == 1 and r.restarts[a0] == 0
    assert r.finish[a0] == 100 and r.finish[a1] == 200


@settings(max_examples=40, deadline=None)
@given(
    specs=st.lists(
        st.tuples(
            st.sampled_from(["team-a", "team-b"]),
            st.integers(0, 200),
            st.sampled_from([1, 2, 4, 8]),
            st.integers(1, 150),
        ),
        min_size=1,
        max_size=12,
    ),
    failures=st.lists(
        st.tuples(st.integers(0, 300), st.integers(0, 2), st.integers(1, 100)), max_size=3
    ),
    # at most two scale-downs of the three nodes: one node is always there in the end
    scale=st.lists(st.tuples(st.integers(0, 300), st.sampled_from([-1, 1, 2])), max_size=2),
    cohort=st.booleans(),
)
def test_failures_and_scale_events_under_queues_lose_no_job(
    specs: list[tuple[str, int, int, int]],
    failures: list[tuple[int, int, int]],
    scale: list[tuple[int, int]],
    cohort: bool,
) -> None:
    jobs = [job(f"j{k}", t, s, g, d) for k, (t, s, g, d) in enumerate(specs)]
    config = SimConfig(
        failures=tuple(NodeFailure(at, f"node-{n:05d}", down) for at, n, down in failures),
        scale=tuple(ScaleEvent(at, delta) for at, delta in scale),
    )
    sim = Simulator(fleet(3), jobs, config, gov=governance(cohort=cohort))  # type: ignore[arg-type]
    r = sim.run()
    check_conservation(r)
    # with no horizon every job ends: a failed node comes back, and a node is left
    assert all(s == FINISHED for s in r.status), r.reasons
    assert isinstance(sim.scheduler, AdmissionScheduler)
    engine = sim.scheduler.engine
    assert engine.admitted == {} and not any(engine.pending.values())
    assert sim.scheduler.holds is not None
    held = sim.scheduler.holds.milli
    assert sim.snap.allocated_milli() == held  # only the failed nodes' holds remain
    sim.snap.check_indexes()
