"""``gpuaas bench placement``: runs on a small fleet, prints one JSON object or a table."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuaas.cli.bench_placement import run_placement_bench
from gpuaas.cli.main import app

runner = CliRunner()


def test_json_has_the_headline_keys() -> None:
    result = runner.invoke(
        app, ["bench", "placement", "--nodes", "160", "--workloads", "600", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("single_pod_per_s", "gang_per_s", "p99_ms", "peak_rss_mib"):
        assert isinstance(data[key], int | float) and data[key] > 0, key
    assert data["single_pod"]["decisions"] + data["gang"]["decisions"] == 600
    assert data["single_pod"]["placed"] > 0 and data["gang"]["placed"] > 0
    assert data["gpus"] == 160 * 8


def test_table_output() -> None:
    result = runner.invoke(
        app, ["bench", "placement", "--nodes", "80", "--workloads", "200", "--policy", "bestfit"]
    )
    assert result.exit_code == 0, result.output
    assert "single-pod" in result.stdout and "gang" in result.stdout
    assert "peak RSS" in result.stdout


def test_churn_keeps_the_fleet_busy_not_full() -> None:
    data = run_placement_bench(120, 1500, seed=3, policy_name="packing", high=0.7, low=0.6)
    assert data["released"] > 0
    assert data["allocated_gpu_pct_at_end"] <= 75
    quiet = run_placement_bench(120, 300, seed=3, policy_name="packing", churn=False)
    assert quiet["released"] == 0


def test_bad_options_are_reported_without_a_traceback() -> None:
    result = runner.invoke(app, ["bench", "placement", "--nodes", "0", "--workloads", "5"])
    assert result.exit_code == 2
    assert "must be at least 1" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(app, ["bench", "placement", "--policy", "nope", "--nodes", "5"])
    assert result.exit_code == 2
    assert "choose one of" in result.output
    result = runner.invoke(
        app, ["bench", "placement", "--nodes", "5", "--workloads", "5", "--low", "0.9"]
    )
    assert result.exit_code == 2
    assert "need 0 < low < high" in result.output


def test_pack_option() -> None:
    result = runner.invoke(
        app,
        ["bench", "placement", "--nodes", "64", "--workloads", "150", "--pack", "none", "--json"],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pack_level"] == "none"
    result = runner.invoke(app, ["bench", "placement", "--nodes", "5", "--pack", "shelf"])
    assert result.exit_code == 2
    assert "unknown topology level" in result.output


def test_node_sampling_options() -> None:
    sampled = run_placement_bench(300, 400, seed=1, pack_level=None)
    assert sampled["nodes_to_score"] == "adaptive"
    assert sampled["sampled_placements"] > 0  # --pack none: every single pod sees 300 nodes
    assert sampled["unscored_feasible_nodes"] > 0
    full = run_placement_bench(300, 400, seed=1, pack_level=None, score_percentage=None)
    assert full["nodes_to_score"] == "all" and full["sampled_placements"] == 0
    result = runner.invoke(
        app,
        ["bench", "placement", "--nodes", "40", "--workloads", "50", "--score-all", "--json"],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["nodes_to_score"] == "all"
    result = runner.invoke(
        app,
        ["bench", "placement", "--nodes", "5", "--percentage-of-nodes-to-score", "150"],
    )
    assert result.exit_code == 2 and "within 0..100" in result.output
    assert "Traceback" not in result.output


def test_node_churn_replaces_nodes_and_reports_their_cost() -> None:
    result = runner.invoke(
        app,
        ["bench", "placement", "--nodes", "120", "--workloads", "800", "--node-churn", "15",
         "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    moved = data["node_churn"]
    assert moved["changes"] == 15 and moved["displaced_workloads"] >= 0
    for key in ("add", "remove", "add_cpu", "remove_cpu"):
        assert moved[key]["max_ms"] >= moved[key]["mean_ms"] > 0, key
    assert data["nodes"] == 120 and data["gpus"] == 120 * 8  # replaced, not grown
    assert data["single_pod"]["decisions"] + data["gang"]["decisions"] == 800
    table = runner.invoke(
        app, ["bench", "placement", "--nodes", "60", "--workloads", "200", "--node-churn", "3"]
    )
    assert table.exit_code == 0, table.output
    assert "node churn: 3 nodes replaced" in table.stdout and "remove (cpu)" in table.stdout
    quiet = json.loads(
        runner.invoke(
            app, ["bench", "placement", "--nodes", "60", "--workloads", "100", "--json"]
        ).stdout
    )
    assert quiet["node_churn"]["changes"] == 0
    bad = runner.invoke(app, ["bench", "placement", "--nodes", "5", "--node-churn", "-1"])
    assert bad.exit_code == 2 and "must be at least 0" in bad.output


def test_decision_hash_is_the_same_for_the_same_decisions_only() -> None:
    """``--decision-hash``: a seed's decisions hash alike run after run (so old and new engines
    can be compared by digest); other decisions (another policy) hash differently."""
    result = runner.invoke(
        app,
        ["bench", "placement", "--nodes", "80", "--workloads", "300", "--json", "--decision-hash"],
    )
    assert result.exit_code == 0, result.output
    digest = json.loads(result.stdout)["decision_sha256"]
    assert len(digest) == 64
    again = run_placement_bench(80, 300, decision_hash=True)
    assert again["decision_sha256"] == digest
    other = run_placement_bench(80, 300, policy_name="packing", decision_hash=True)
    assert other["decision_sha256"] != digest
    assert "decision_sha256" not in run_placement_bench(80, 50)
