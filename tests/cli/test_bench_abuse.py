"""``gpuaas bench abuse`` on a small run: one JSON object, a row per scenario, and the per-cycle
budget visibly spreading the abusive jobs over reconcile steps."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuaas.cli.main import app

runner = CliRunner()


def test_small_run_reports_every_scenario_and_the_budget_spreads_the_abuser() -> None:
    args = ["bench", "abuse", "--victims", "1", "--victim-jobs", "3", "--interval", "0",
            "--abusive-jobs", "2", "--pod-sets", "2", "--pods", "5", "--budgets", "1,0",
            "--nodes", "2", "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # exactly one JSON object on stdout
    rows = summary["scenarios"]
    assert [r["scenario"] for r in rows] == ["no abuser", "abuser, budget 1", "abuser, budget off"]
    for row in rows:
        assert row["victim_jobs"] == 3
        assert 0 <= row["victim_p50_ms"] <= row["victim_p99_ms"] <= row["victim_max_ms"]
        assert row["db_growth_mb"] >= 0 and row["server_cpu_s"] > 0
        # the reconciler's passes over the measured phase, wall and CPU, from /metrics
        assert row["step_cpu"]["steps"] == row["step_wall"]["steps"] > 0
        assert 0 < row["step_cpu"]["mean_ms"] <= row["step_wall"]["mean_ms"] + 1
    assert rows[0]["abusive_submit_ms"] == [] and rows[0]["abusive_admission_steps"] == 0
    assert len(rows[1]["abusive_submit_ms"]) == 2 == len(rows[1]["abusive_admitted_s"])
    # a budget of 1 pod: one abusive job per reconcile step, whenever they arrived
    assert rows[1]["abusive_admission_steps"] == 2
    assert summary["budget"] == 1 and isinstance(summary["within_one_cycle"], bool)
