"""``gpuaas bench backend`` builds a backend by name and measures it (here the simulated one;
the Slurm figures in docs/benchmarks.md come from the same command on the test cluster)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuaas.cli.bench_backend import percentile
from gpuaas.cli.main import app

runner = CliRunner()


def test_bench_backend_on_the_simulated_fleet_prints_one_json_object(tmp_path: Path) -> None:
    result = runner.invoke(app, ["bench", "backend", "--backend", "sim", "--jobs", "6",
                                 "--duration", "0.2", "--interval", "0.05",
                                 "--data-dir", str(tmp_path), "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["backend"] == "sim" and figures["started"] == 6
    assert figures["succeeded"] == 6 and figures["unfinished"] == 0
    assert figures["submit_to_running_s"]["n"] == 6 and figures["polls"] >= 4


def test_unknown_backends_are_refused_by_name() -> None:
    result = runner.invoke(app, ["bench", "backend", "--backend", "nomad", "--jobs", "1"])
    assert result.exit_code != 0
    assert "unknown backend 'nomad'" in result.output


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50 and percentile(values, 0.99) == 99
    assert percentile([3.0], 0.95) == 3.0
