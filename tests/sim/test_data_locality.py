"""The locality simulation (gpuaas.sim.locality): the trace names datasets, the fleet has NICs,
warm sets evolve as jobs complete and preloads run, and both runs measure the same trace."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuaas.cli.main import app
from gpuaas.sim.locality import LocalitySpec, dataset_trace, locality_fleet, run_locality

SMALL = LocalitySpec(nodes=24, jobs=250, datasets=8, seed=1)


def test_the_fleet_has_nics_and_the_trace_names_datasets() -> None:
    nodes = locality_fleet(SMALL)
    assert all(len(n.nics) == 4 and all(nic.has_topology for nic in n.nics) for n in nodes)
    jobs, sizes = dataset_trace(SMALL, sum(len(n.gpus) for n in nodes))
    named = [j.workload.data.dataset for j in jobs if j.workload.data is not None]
    assert 0.6 * len(jobs) < len(named) < len(jobs) and set(named) <= set(sizes)
    assert [j.submit for j in jobs] == sorted(j.submit for j in jobs)


def test_with_locality_more_jobs_land_warm_on_the_same_trace() -> None:
    report = run_locality(SMALL)
    on, off = report.with_locality, report.without
    # the run stops at the last arrival, so the two runs start about (not exactly) as many
    assert on.jobs_with_data > 0 and off.jobs_with_data > 0
    assert on.preloads > 0 and on.warm_sets_pushed > 1
    assert 0 <= on.warm_when_possible <= on.warm_possible <= on.jobs_with_data
    assert on.warm_of_best_pct >= 90.0
    assert on.placed_warm / on.jobs_with_data > off.placed_warm / off.jobs_with_data
    assert 0.0 <= on.unallocated_pct <= 100.0 and 0.0 <= off.unallocated_pct <= 100.0


def test_bench_locality_prints_one_json_object() -> None:
    result = CliRunner().invoke(
        app, ["bench", "locality", "--nodes", "16", "--jobs", "120", "--datasets", "5", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert {"warm_of_best_pct", "unallocated_rise_points", "runs", "targets_met"} <= set(out)
    assert out["runs"][0]["with_locality"]["locality"] is True
