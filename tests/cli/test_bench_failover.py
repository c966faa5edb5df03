"""`gpuaas bench failover` at a small size: every run (restart and takeover, each backlog size)
admits and loads its whole backlog; --db takes PostgreSQL only."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuaas.cli.main import app


def test_bench_failover_json() -> None:
    result = CliRunner().invoke(app, ["bench", "failover", "--pending", "40", "--sizes", "20",
                                      "--nodes", "1", "--tenants", "2", "--freed", "2",
                                      "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [(r["pending"], r["mode"]) for r in out["runs"]] == [
        (20, "restart"), (20, "takeover"), (40, "restart"), (40, "takeover")
    ]  # fmt: skip
    for run in out["runs"]:
        assert run["admitted_by_first_admission"] >= 1
        assert run["first_admission_cpu_s"] > 0 and run["steps_to_full_load"] >= 1
    assert out["gpus"] == 8 and out["full_rebuild"] is False


def test_bench_failover_takes_only_postgresql_for_db(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    result = CliRunner().invoke(app, ["bench", "failover", "--pending", "5", "--db", url])
    assert result.exit_code == 2
    assert "PostgreSQL" in result.output


def test_bench_failover_kill_mode_times_a_real_takeover() -> None:
    """Two `gpuaas serve` on one SQLite file; the leader SIGKILLed; the standby admits."""
    result = CliRunner().invoke(app, ["bench", "failover", "--pending", "30", "--sizes", "",
                                      "--nodes", "1", "--tenants", "2", "--freed", "2",
                                      "--modes", "kill", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.stdout)["runs"]
    assert run["mode"] == "kill" and run["admitted_by_first_admission"] >= 1
    assert run["first_admission_s"] > 0 and run["full_load_s"] is None


def test_bench_failover_names_an_unknown_mode() -> None:
    result = CliRunner().invoke(app, ["bench", "failover", "--modes", "restart,reboot"])
    assert result.exit_code == 2
    assert "reboot" in result.output
