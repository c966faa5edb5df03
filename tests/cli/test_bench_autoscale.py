"""``gpuaas bench autoscale``: a small run prints one JSON object with the timing and the
decisions the synthetic load asks for."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuaas.cli.main import app


def test_bench_autoscale_json() -> None:
    result = CliRunner().invoke(
        app, ["bench", "autoscale", "--nodes", "300", "--clusters", "30", "--repeat", "2", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["nodes"] == 300 and out["clusters"] == 30 and out["repeat"] == 2
    assert out["ms_min"] > 0 and out["pending_jobs"] > 0
    codes = out["by_code"]
    assert codes["ScaledOutPending"] > 0 and codes["ScaledInUnneeded"] > 0
    assert codes["ScaledOutUtilization"] > 0


def test_bench_autoscale_table_and_bad_input() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["bench", "autoscale", "--nodes", "50", "--clusters", "5"])
    assert result.exit_code == 0 and "autoscaler cycle" in result.output
    assert runner.invoke(app, ["bench", "autoscale", "--clusters", "0"]).exit_code != 0
