"""Trace variants derived from a pod list (``derive_variant``) and ``bench fgd --variant``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaas.cli.main import app
from gpuaas.sim.openb import TraceTask, derive_variant, load_openb_pods, parse_variant

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "openb"
NODES = DATA / "openb_node_list_gpu_node.csv"
PODS = DATA / "openb_pod_list_default.csv"


def shape(t: TraceTask) -> tuple[int, int, int, int, tuple[str, ...]]:
    return (t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli, t.gpu_spec)


def small_trace() -> list[TraceTask]:
    tasks = [TraceTask(f"c{i}", 4000 + i, 1024, 0, 0) for i in range(20)]
    tasks += [TraceTask(f"s{i}", 1000, 1024, 1, 100 + 50 * (i % 10)) for i in range(40)]
    tasks += [TraceTask(f"w{i}", 8000, 2048, 1, 1000) for i in range(30)]
    tasks += [TraceTask(f"m{i}", 32000, 8192, 2 + 2 * (i % 4), 1000) for i in range(10)]
    return tasks


def milli_share(tasks: list[TraceTask], member: object) -> float:
    gpu = [t for t in tasks if t.num_gpu]
    total = sum(t.requested_milli for t in gpu)
    return sum(t.requested_milli for t in gpu if member(t)) / total  # type: ignore[operator]


def is_share(t: TraceTask) -> bool:
    return t.num_gpu == 1 and t.gpu_milli < 1000


def test_variant_is_deterministic_for_a_seed_and_uses_only_real_shapes() -> None:
    tasks = small_trace()
    real = {shape(t) for t in tasks}
    for kind, percent in [("gpushare", 80), ("multigpu", 50), ("cpu", 200), ("cpu", 0)]:
        a = derive_variant(tasks, kind, percent, seed=7)
        assert a == derive_variant(tasks, kind, percent, seed=7)
        assert a != derive_variant(tasks, kind, percent, seed=8)
        assert {shape(t) for t in a} <= real
        assert len({t.name for t in a}) == len(a)


def test_gpushare_and_multigpu_hit_the_asked_milli_share_and_keep_counts() -> None:
    tasks = small_trace() * 20  # enough draws for the proportions to settle
    gpu = sum(1 for t in tasks if t.num_gpu)
    for kind, member in [("gpushare", is_share), ("multigpu", lambda t: t.num_gpu >= 2)]:
        for percent in (0, 20, 60, 100):
            out = derive_variant(tasks, kind, percent, seed=1)
            assert len(out) == len(tasks)
            assert sum(1 for t in out if t.num_gpu) == gpu
            assert sum(1 for t in out if not t.num_gpu) == len(tasks) - gpu
            assert milli_share(out, member) == pytest.approx(percent / 100, abs=0.03)


def test_gpuspec_draws_restricted_rows_from_the_pool() -> None:
    tasks = small_trace() * 10
    pool = [TraceTask("r0", 1000, 1024, 1, 300, ("T4",)), TraceTask("r1", 8000, 2048, 1, 1000)]
    pool.append(TraceTask("r2", 8000, 2048, 1, 1000, ("G2", "P100")))
    out = derive_variant(tasks, "gpuspec", 33, seed=3, spec_tasks=pool)
    gpu = [t for t in out if t.num_gpu]
    restricted = [t for t in gpu if t.gpu_spec]
    assert len(out) == len(tasks)
    assert len(restricted) == round(0.33 * len(gpu))
    assert {shape(t) for t in restricted} <= {shape(pool[0]), shape(pool[2])}
    with pytest.raises(ValueError, match="model-restricted"):
        derive_variant(tasks, "gpuspec", 10, seed=3)  # the source restricts nothing


def test_cpu_scales_the_cpu_only_tasks_and_keeps_the_gpu_tasks() -> None:
    tasks = small_trace()
    out = derive_variant(tasks, "cpu", 250, seed=0)
    assert sum(1 for t in out if not t.num_gpu) == 50
    assert sorted(shape(t) for t in out if t.num_gpu) == sorted(
        shape(t) for t in tasks if t.num_gpu
    )
    assert all(t.num_gpu for t in derive_variant(tasks, "cpu", 0, seed=0))


def test_parse_variant_rejects_bad_values() -> None:
    assert parse_variant(" GPUShare:80 ") == ("gpushare", 80.0)
    assert parse_variant("cpu:235") == ("cpu", 235.0)
    for bad in ("gpushare", "gpushare:x", "gpushare:101", "cpu:-1", "mig:20", ":20"):
        with pytest.raises(ValueError, match="PERCENT"):
            parse_variant(bad)


def test_derived_gpushare40_matches_the_published_variant() -> None:
    if not PODS.exists():
        pytest.skip(f"the Alibaba trace is not at {DATA} (see ../shared/data/README.md)")
    default = load_openb_pods(PODS)
    published = load_openb_pods(DATA / "openb_pod_list_gpushare40.csv")
    ours = derive_variant(default, "gpushare", 40, seed=0)

    def count_share(ts: list[TraceTask]) -> float:
        gpu = [t for t in ts if t.num_gpu]
        return sum(1 for t in gpu if is_share(t)) / len(gpu)

    assert milli_share(ours, is_share) == pytest.approx(milli_share(published, is_share), abs=0.01)
    assert count_share(ours) == pytest.approx(count_share(published), abs=0.01)
    assert len(ours) == len(published)


def test_cli_variant_errors_name_the_option(tmp_path: Path) -> None:
    for bad in ("gpushare:180", "nope:3", "gpushare"):
        result = CliRunner().invoke(
            app, ["bench", "fgd", "--nodes", "a", "--pods", "b", "--variant", bad]
        )
        assert result.exit_code == 2
        assert "--variant" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(
        app,
        ["bench", "fgd", "--nodes", "a", "--pods", "b", "--spec-pool", "c"],
    )
    assert result.exit_code == 2 and "--spec-pool" in result.output


def test_cli_runs_a_variant(tmp_path: Path) -> None:
    if not PODS.exists() or not NODES.exists():
        pytest.skip(f"the Alibaba trace is not at {DATA} (see ../shared/data/README.md)")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("\n".join(NODES.read_text().splitlines()[:61]) + "\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("\n".join(PODS.read_text().splitlines()[:301]) + "\n")
    args = ["bench", "fgd", "--nodes", str(nodes), "--pods", str(pods), "--policy", "gpuaas"]
    result = CliRunner().invoke(app, [*args, "--variant", "gpushare:80", "--seeds", "42", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["trace"] == "pods as gpushare:80"
    assert 0.0 <= out["policies"]["gpuaas"]["unallocated_pct_at_100"] <= 100.0
