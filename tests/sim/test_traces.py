"""Trace loaders: ITP, openb in time, and the YAML generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaas.model.errors import InvalidValue
from gpuaas.model.topology import Level
from gpuaas.sim.fleet_auto import auto_fleet, auto_node_count, offered_load
from gpuaas.sim.traces import (
    TraceError,
    generate_jobs,
    itp_workload,
    load_generator,
    load_itp,
    load_openb_dynamic,
    parse_seconds,
)

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
ITP01 = DATA / "itp" / "cluster01.csv"
OPENB = DATA / "openb" / "openb_pod_list_default.csv"
OPENB_MULTI = DATA / "openb" / "openb_pod_list_multigpu20.csv"


def need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.name} is not at {path.parent} (see ../shared/data/README.md)")


def test_itp_cluster01_loads_sorted_with_gangs() -> None:
    need(ITP01)
    jobs = load_itp(ITP01)
    assert len(jobs) == 1595
    assert [j.submit for j in jobs] == sorted(j.submit for j in jobs)
    assert {j.milli_gpu // 1000 for j in jobs} == {1, 2, 4, 8, 16, 32, 64}
    big = next(j for j in jobs if j.milli_gpu == 64_000)
    (ps,) = big.workload.pod_sets
    assert ps.count == 8 and ps.pod.gpus == 8
    assert ps.topology is not None and ps.topology.level is Level.RACK
    assert len({j.name for j in jobs}) == len(jobs)
    gpu_hours = sum(j.milli_gpu / 1000 * j.duration for j in jobs) / 3600
    assert gpu_hours == pytest.approx(22740.13, abs=0.01)


def test_itp_workload_shapes() -> None:
    assert itp_workload("a", 3).pod_sets[0].pod.gpus == 3
    w = itp_workload("b", 20)
    assert [(ps.count, ps.pod.gpus) for ps in w.pod_sets] == [(2, 8), (1, 4)]
    assert w.pod_count == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("job_id,submission_time,duration\nx,1,2\n", "missing column"),
        ("job_id,submission_time,duration,num_gpu\nx,abc,2,1\n", "line 2: submission_time"),
        ("job_id,submission_time,duration,num_gpu\nx,1,2,1.5\n", "line 2: num_gpu"),
        ("job_id,submission_time,duration,num_gpu\nx,1,-2,1\n", "line 2: duration"),
        ("job_id,submission_time,duration,num_gpu\n", "no jobs"),
    ],
)
def test_itp_errors_name_file_line_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError, match=message) as info:
        load_itp(path)
    assert "bad.csv" in str(info.value)


def test_openb_dynamic_uses_creation_and_deletion() -> None:
    need(OPENB)
    jobs = load_openb_dynamic(OPENB)
    assert 8000 < len(jobs) <= 8152
    assert all(j.duration > 0 for j in jobs)
    assert {j.tenant for j in jobs} >= {"LS"}
    assert all(not ps.pod.gpu_models for j in jobs for ps in j.workload.pod_sets)


def test_openb_without_times_is_a_clear_error() -> None:
    need(OPENB_MULTI)
    with pytest.raises(TraceError, match="creation_time"):
        load_openb_dynamic(OPENB_MULTI)


GEN = {
    "seed": 3,
    "horizon": "6h",
    "tenants": [
        {
            "name": "research",
            "rate_per_hour": 10,
            "gpus": {"choices": [1, 8, 16], "weights": [5, 2, 1]},
            "duration": {"distribution": "lognormal", "median": "30m", "sigma": 0.5},
            "checkpoint": "10m",
            "limit_factor": 2,
        },
        {"name": "prod", "jobs": 5, "gpus": 4, "duration": "1h", "priority": 5, "weight": 3},
    ],
}


def test_generator_is_deterministic_and_follows_the_spec() -> None:
    a = generate_jobs(GEN)
    b = generate_jobs(GEN)
    assert [(j.name, j.submit, j.duration) for j in a] == [
        (j.name, j.submit, j.duration) for j in b
    ]
    prod = [j for j in a if j.tenant == "prod"]
    assert len(prod) == 5 and all(j.priority == 5 and j.milli_gpu == 4000 for j in prod)
    research = [j for j in a if j.tenant == "research"]
    assert 20 < len(research) < 120  # Poisson, 10/h over 6 h
    assert all(j.checkpoint == 600 and j.limit == pytest.approx(2 * j.duration) for j in research)
    assert all(0 <= j.submit < 6 * 3600 for j in a)
    assert {j.milli_gpu for j in research} <= {1000, 8000, 16000}


def test_generator_file_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "gen.yaml"
    path.write_text("seed: 1\ntenants:\n  - name: a\n    jobs: 3\n    weight: 2\n")
    jobs, weights = load_generator(path)
    assert len(jobs) == 3 and weights == {"a": 2.0}
    with pytest.raises(InvalidValue, match=r"tenants\[0\].colour"):
        generate_jobs({"tenants": [{"name": "a", "jobs": 1, "colour": "red"}]})
    with pytest.raises(InvalidValue, match="rate_per_hour"):
        generate_jobs({"tenants": [{"name": "a"}]})
    with pytest.raises(InvalidValue, match="distribution"):
        generate_jobs({"tenants": [{"jobs": 1, "duration": {"distribution": "zipf"}}]})
    path.write_text("tenants: [")
    with pytest.raises(TraceError, match="not valid YAML"):
        load_generator(path)


def test_parse_seconds() -> None:
    assert parse_seconds("90", "x") == 90
    assert parse_seconds("30m", "x") == 1800
    assert parse_seconds("1.5d", "x") == 1.5 * 86400
    assert parse_seconds(7, "x") == 7
    with pytest.raises(InvalidValue, match="x"):
        parse_seconds("soon", "x")


def test_auto_fleet_hits_the_offered_load() -> None:
    jobs = generate_jobs(GEN)
    nodes = auto_fleet(jobs, 0.5)
    assert len(nodes) == auto_node_count(jobs, 0.5)
    assert all(len(n.gpus) == 8 and n.topology.rack for n in nodes)
    # never smaller than the largest job, otherwise within one node of the target
    assert len(nodes) >= 2
    load = offered_load(jobs, nodes)
    assert load <= 0.5 + 1e-9
    with pytest.raises(InvalidValue, match="load"):
        auto_fleet(jobs, 0)
