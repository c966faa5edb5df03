"""``gpuaas simulate whatif``: tenants' autoscaling clusters and the idle pool, one JSON object
or a table, and bad input refused naming the option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaas.cli.main import app

runner = CliRunner()
SHORT = [
    "simulate",
    "whatif",
    "--gpus",
    "48",
    "--tenants",
    "2",
    "--days",
    "0.08",
    "--peak-hour",
    "1",
]
ITP = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "itp" / "cluster01.csv"


def test_json_is_one_object_with_every_run_and_its_targets() -> None:
    res = runner.invoke(app, [*SHORT, "--rule", "telemetry", "--spot", "saturated", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [r["label"] for r in out["runs"]] == [
        "telemetry / no pool",
        "telemetry / pool, saturated spot demand",
    ]
    base, pool = out["runs"]
    assert base["jobs"] == pool["jobs"] == out["inputs"]["jobs"] > 0
    assert 0 <= pool["monetised_share"] <= 1 and pool["max_exceeded"] == 0
    g = pool["gpu_hours"]
    assert g["pool_used"] + g["idle_unsold"] == pytest.approx(g["idle"])
    assert pool["targets"]["max_exceeded"]["met"]
    assert out["inputs"]["gpus"] == 48 and out["inputs"]["tenants"] == 2


def test_the_table_names_each_run_and_the_targets() -> None:
    res = runner.invoke(app, [*SHORT, "--rule", "requests", "--spot", "half"])
    assert res.exit_code == 0, res.output
    assert "what-if: diurnal, 48 GPUs" in res.stdout
    verdict = res.stdout.split("requests / pool, half spot demand: ")[1]
    assert verdict.startswith(("all targets met", "missed: "))


def test_the_itp_trace_replays_with_tenants() -> None:
    if not ITP.exists():
        pytest.skip(f"{ITP} is absent: the ITP traces live in ../shared/data/itp")
    res = runner.invoke(
        app,
        [
            *SHORT[:2],
            "--trace",
            f"itp:{ITP}",
            "--gpus",
            "128",
            "--tenants",
            "3",
            "--days",
            "0.5",
            "--rule",
            "telemetry",
            "--spot",
            "saturated",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["inputs"]["tenants"] == 3 and out["inputs"]["jobs"] > 0
    assert out["runs"][1]["max_exceeded"] == 0


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--grace", "10s"], "graceSeconds"),
        (["--gpus", "50"], "--gpus"),
        (["--spot", "lots"], "--spot"),
        (["--rule", "magic"], "--rule"),
        (["--target", "150"], "targetUtilization"),
        (["--cluster-min", "5", "--cluster-max", "2"], "max"),
        (["--trace", "nope:x"], "--trace"),
    ],
)
def test_bad_input_is_refused_naming_the_option(args: list[str], named: str) -> None:
    res = runner.invoke(app, [*SHORT, *args])
    assert res.exit_code == 2
    assert named in res.output
