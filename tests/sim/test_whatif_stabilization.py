"""The what-if with the planner's scale-in stabilization window: the burst that flaps under a
10-minute unneeded time alone does not flap when the cluster keeps its recent peak, and the
nodes are still released once the window has passed; the idle inside the clusters is split
by where it sits."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gpuaas.model.autoscale import AutoscaleSpec
from gpuaas.sim.synthetic import H100, FleetSpec, synthetic_fleet
from gpuaas.sim.traces import SimJob, itp_workload
from gpuaas.sim.whatif import ClusterSetup, WhatIfConfig, run_whatif

SPEC = AutoscaleSpec(target_percent=95, unneeded_seconds=600, cooldown_seconds=300)


def job(name: str, at: float, gpus: int, run: float) -> SimJob:
    return SimJob(name, at, run, itp_workload(name, gpus), tenant="t0", checkpoint=60)


def run(spec: AutoscaleSpec, jobs: list[SimJob], flap_wait: float = math.inf):  # type: ignore[no-untyped-def]
    nodes = synthetic_fleet(
        FleetSpec(
            nodes=4, model_shares=((H100, 1.0),), mig_node_share=0.0, time_sliced_node_share=0.0
        )
    )
    cfg = WhatIfConfig(
        clusters=(ClusterSetup("t0", 0, 6, spec),),
        pool=None,
        audit=True,
        until=4 * 3600.0,
        flap_wait=flap_wait,
    )
    return run_whatif(nodes, jobs, cfg)


def test_a_burst_again_after_a_lull_flaps_without_the_window_and_not_with_it() -> None:
    burst = [job("a", 0, 16, 900), job("b", 10, 8, 600)]
    again = [*burst, job("c", 900 + 15 + 600 + 120, 24, 600)]  # soon after the release
    # a scale-out that takes a just-released node at once (flap_wait 0) flaps
    plain = run(SPEC, again, flap_wait=0.0)
    assert plain.cluster_flaps >= 1 and plain.node_flaps >= 1
    # by default it takes the one node the cluster did not release and waits for the others
    # to leave the flap window: no node flap (the cluster still adds nodes: cluster flaps),
    # and the third job waits, at most the window
    waits = run(SPEC, again)
    assert waits.node_flaps == 0 and waits.cluster_flaps >= 1
    assert waits.summary()["held_back_nodes"] > 0
    assert max(plain.delays) < max(waits.delays) <= 600 + 2 * 15 + 10
    held = run(dataclasses.replace(SPEC, stabilization_seconds=1800), again)
    assert held.node_flaps == 0 and held.cluster_flaps == 0
    assert held.max_exceeded == 0
    assert held.scale_ins >= 1  # released in the end, once the window had passed
    # the same tenant delays: the second burst found its nodes still there
    assert max(held.delays) <= max(plain.delays)


def test_the_idle_inside_clusters_is_split_by_where_it_sits() -> None:
    result = run(SPEC, [job("a", 0, 4, 1800), job("b", 0, 8, 900)])
    s = result.summary()
    split = s["idle_in_clusters_sampled"]
    assert set(split) == {"empty_nodes", "partly_used_nodes", "joining"}
    assert split["partly_used_nodes"] > 0  # the 4-GPU job's node
    assert split["empty_nodes"] > 0  # the 8-GPU job's node after it ends, waiting to go
    # sampled every tick: about the integrated idle inside clusters
    assert sum(split.values()) == pytest.approx(s["gpu_hours"]["idle_in_clusters"], rel=0.1)
    assert s["outside_clusters_share"] == pytest.approx(
        1 - s["gpu_hours"]["idle_in_clusters"] / s["gpu_hours"]["idle"]
    )
