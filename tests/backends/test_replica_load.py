"""The simulated fleet spreads an autoscaled job's declared total load over its running
replicas (backends/replica_load.py): each reads total / running, capped at a full device."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuaas.backends.replica_load import spread_over_replicas


def run(job_id: int, total: float | None, of: int | None = None) -> tuple:
    spec: dict = {"name": f"j{job_id}"}
    if total is not None:
        spec["utilization"] = {"total": total, "amplitude": 30.0}
    if of is not None:
        spec["replicaOf"] = of
    return (job_id, spec, 0.0, ())


def test_each_replica_reads_its_share_and_other_jobs_are_untouched() -> None:
    runs = [run(1, 150), run(2, 150, of=1), run(3, 150, of=1), run(4, None), run(5, 40)]
    out = {j: spec for j, spec, _, _ in spread_over_replicas(runs)}
    assert [out[j]["utilization"]["gpu"] for j in (1, 2, 3)] == [50.0, 50.0, 50.0]
    assert out[1]["utilization"]["amplitude"] == 10.0
    assert out[4] == {"name": "j4"}
    assert out[5]["utilization"]["gpu"] == 40.0  # a set of one
    assert runs[0][1]["utilization"] == {"total": 150, "amplitude": 30.0}  # not changed in place


@given(st.floats(min_value=0, max_value=10_000), st.integers(1, 30))
def test_fewer_replicas_never_read_less_and_none_reads_above_a_full_device(
    total: float, n: int
) -> None:
    def share(count: int) -> float:
        runs = [run(1, total)] + [run(1 + i, total, of=1) for i in range(1, count)]
        return spread_over_replicas(runs)[0][1]["utilization"]["gpu"]

    assert 0.0 <= share(n) <= 100.0
    assert share(n) >= share(n + 1)
