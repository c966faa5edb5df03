"""The clairvoyant bound on selling versus flapping (sim/flap_bound.py): the dynamic programme
is checked against brute force on every small case hypothesis draws, its count never flaps
and always covers the need; the need profile packs ideally and counts a step's peak; the
causal rules cover the need; bad input names its field."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.model.errors import InvalidValue
from gpuaas.sim.flap_bound import (
    cluster_flaps,
    fewest_node_steps,
    flap_bound,
    forecast_headroom_counts,
    need_per_step,
    past_peak_counts,
)
from gpuaas.sim.traces import SimJob, itp_workload


def brute_force(need: list[int], window: int) -> int:
    """The fewest node-steps over every count sequence: covers the need, no flap."""
    best = None
    for counts in itertools.product(range(max(need) + 1), repeat=len(need)):
        if any(c < n for c, n in zip(counts, need, strict=True)):
            continue
        if cluster_flaps(np.asarray(counts), window):
            continue
        best = sum(counts) if best is None else min(best, sum(counts))
    assert best is not None  # holding the peak throughout never flaps
    return best


@settings(max_examples=150, deadline=None)
@given(
    need=st.lists(st.integers(0, 3), min_size=1, max_size=7),
    window=st.integers(0, 4),
)
def test_the_programme_finds_the_brute_force_optimum_and_a_count_that_reaches_it(
    need: list[int], window: int
) -> None:
    best, counts = fewest_node_steps(np.asarray(need), window)
    assert best == brute_force(need, window)
    assert counts is not None
    assert int(counts.sum()) == best
    assert (counts >= np.asarray(need)).all()
    assert cluster_flaps(counts, window) == 0
    alone, none = fewest_node_steps(np.asarray(need), window, keep_counts=False)
    assert alone == best and none is None


def test_a_short_dip_is_held_and_a_long_one_released() -> None:
    # a dip of 2 steps inside the window: releasing would force an increase within it
    best, counts = fewest_node_steps(np.asarray([3, 1, 1, 3]), 2)
    assert best == 12 and list(counts) == [3, 3, 3, 3]
    # the same dip with no window: follow the need
    assert fewest_node_steps(np.asarray([3, 1, 1, 3]), 0)[0] == 8
    # a long dip: released once, and the rise comes after the window
    best, counts = fewest_node_steps(np.asarray([3, 1, 1, 1, 1, 3]), 2)
    assert best == 3 + 1 * 4 + 3


def job(name: str, at: float, gpus: int, run: float, tenant: str = "t0") -> SimJob:
    return SimJob(name, at, run, itp_workload(name, gpus), tenant=tenant)


def test_the_need_packs_ideally_and_counts_the_peak_of_each_step() -> None:
    jobs = [job("a", 0, 1, 100), job("b", 0, 1, 100), job("c", 20, 8, 5)]  # 10 GPUs at 20..25
    need = need_per_step(jobs, horizon=60, step=15, gpus_per_node=8)
    assert list(need) == [1, 2, 1, 1]
    assert list(need_per_step([], 60, 15, 8, min_nodes=1)) == [1, 1, 1, 1]
    # a job ending as another starts is not counted twice
    swap = [job("a", 0, 8, 30), job("b", 30, 8, 30)]
    assert list(need_per_step(swap, 60, 15, 8)) == [1, 1, 1, 1]
    # with a delay of d, a job counts only from arrival + d (and not at all if shorter)
    assert list(need_per_step([job("a", 0, 8, 20)], 60, 15, 8, delay=20)) == [0, 0, 0, 0]
    assert list(need_per_step([job("a", 0, 8, 40)], 60, 15, 8, delay=20)) == [0, 1, 1, 0]


def test_the_bound_is_between_the_pool_sells_nothing_and_all_idle() -> None:
    # each tenant: a job every 600 s running 500 s, 1 or 2 nodes
    jobs = [job(f"j{i}", 300.0 * i, 16 if i % 3 else 1, 500, f"t{i % 2}") for i in range(40)]
    bound = flap_bound(
        jobs, ["t0", "t1"], fleet_nodes=4, gpus_per_node=8, horizon=4 * 3600.0, min_nodes=0
    )
    out = bound.summary()
    plain = out["no_hysteresis"]["max_share_sold"]
    held = out["zero_cluster_flaps"]["max_share_sold"]
    assert 0 < held <= plain <= 1
    assert bound.no_flaps_node_s >= bound.no_hysteresis_node_s
    # the zero-flap count here must hold nodes through the 100 s gaps between jobs
    assert bound.no_flaps_node_s > bound.no_hysteresis_node_s


@settings(max_examples=40, deadline=None)
@given(need=st.lists(st.integers(0, 6), min_size=2, max_size=60))
def test_the_causal_rules_never_fall_below_the_need(need: list[int]) -> None:
    n = np.asarray(need)
    assert (past_peak_counts(n, 4) >= n).all()
    assert (forecast_headroom_counts(n, 3, 0.9, day_steps=20, band_steps=2) >= n).all()


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: fewest_node_steps(np.asarray([1]), -1), "window_steps"),
        (lambda: fewest_node_steps(np.asarray([-1]), 1), "need"),
        (lambda: flap_bound([], ["t0"], 1, 8, 60.0, step=0), "step"),
        (lambda: flap_bound([], ["t0"], 1, 8, 60.0, window=-1), "window"),
        (lambda: flap_bound([], ["t0"], 1, 8, 60.0, delay=-1), "delay"),
        (lambda: flap_bound([], ["t0"], 1, 8, 0.0), "horizon"),
        (lambda: past_peak_counts(np.asarray([1]), 0), "hold_steps"),
        (lambda: forecast_headroom_counts(np.asarray([1]), 1, 1.5, 4, 1), "quantile"),
    ],
)
def test_bad_input_names_its_field(call, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidValue) as err:
        call()
    assert field in str(err.value)


@pytest.mark.parametrize(("stabilization", "least"), [(0.0, 1), (7200.0, 1), (0.0, 12)])
def test_the_whatif_never_beats_the_bound(stabilization: float, least: int) -> None:
    """The what-if's clusters hold at least the bound's node-hours: with any flaps, the
    no-hysteresis bound; with none, the zero-flap bound. The bound lets each job start up to
    d late, d the run's own longest queueing delay, so it covers the what-if's schedule. The
    last case holds each cluster at its max (12 nodes): no scale-in, so no flap."""
    from gpuaas.model.autoscale import AutoscaleSpec
    from gpuaas.sim.diurnal import DiurnalSpec, diurnal_jobs
    from gpuaas.sim.synthetic import H100, FleetSpec, synthetic_fleet
    from gpuaas.sim.whatif import ClusterSetup, WhatIfConfig, run_whatif

    horizon = 6 * 3600.0
    jobs = diurnal_jobs(
        DiurnalSpec(
            gpus=96, days=0.25, tenants=2, peak_load=0.6, peak_hour=3.0, max_job_gpus=32, seed=3
        )
    )
    nodes = synthetic_fleet(
        FleetSpec(
            nodes=24, model_shares=((H100, 1.0),), mig_node_share=0.0, time_sliced_node_share=0.0
        )
    )
    spec = AutoscaleSpec(
        target_percent=95,
        unneeded_seconds=0,
        cooldown_seconds=0,
        stabilization_seconds=stabilization,
    )
    cfg = WhatIfConfig(
        clusters=(ClusterSetup("t0", least, 12, spec), ClusterSetup("t1", least, 12, spec)),
        pool=None,
        until=horizon,
    )
    result = run_whatif(nodes, jobs, cfg)
    assert result.start == 0.0 and result.end == pytest.approx(horizon)
    started = [j for j in jobs if j.submit < horizon]
    assert result.pending_end == 0 and len(result.delays) == len(started)
    late = max(result.delays)
    bound = flap_bound(jobs, ["t0", "t1"], 24, 8, horizon, min_nodes=1, delay=late)
    assert result.node_s_provisioned >= bound.no_hysteresis_node_s
    if result.cluster_flaps == 0:
        assert result.node_s_provisioned >= bound.no_flaps_node_s
    if least == 12:
        assert result.cluster_flaps == 0
        assert result.node_s_provisioned > bound.no_flaps_node_s


def test_told_the_future_the_planner_keeps_the_node_a_burst_will_need() -> None:
    """The burst that flaps under a 10-minute unneeded time alone (as in
    test_whatif_stabilization) does not flap when the planner is told the next window's
    need; without that, the same engine planner flaps."""
    from gpuaas.model.autoscale import AutoscaleSpec
    from gpuaas.sim.flap_bound import clairvoyant_planner
    from gpuaas.sim.synthetic import H100, FleetSpec, synthetic_fleet
    from gpuaas.sim.whatif import ClusterSetup, WhatIfConfig, run_whatif

    jobs = [
        job("a", 0, 16, 900),
        job("b", 10, 8, 600),
        job("c", 900 + 15 + 600 + 120, 24, 600),  # soon after the release
    ]
    nodes = synthetic_fleet(
        FleetSpec(
            nodes=4, model_shares=((H100, 1.0),), mig_node_share=0.0, time_sliced_node_share=0.0
        )
    )
    spec = AutoscaleSpec(target_percent=95, unneeded_seconds=600, cooldown_seconds=300)
    horizon = 4 * 3600.0
    cfg = WhatIfConfig(clusters=(ClusterSetup("t0", 0, 6, spec),), pool=None, until=horizon)
    plain = run_whatif(nodes, jobs, cfg)
    assert plain.cluster_flaps >= 1
    told = run_whatif(
        nodes, jobs, cfg, planner=clairvoyant_planner(jobs, {"t0": "t0.t0"}, horizon, 8)
    )
    assert told.cluster_flaps == 0 and told.node_flaps == 0
    assert told.scale_ins >= 1  # released in the end, once no need was ahead
    assert told.max_exceeded == 0
