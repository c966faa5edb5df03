"""``gpuaas simulate`` and ``gpuaas simulate compare``: JSON, report, CSV, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaas.cli.main import app

GEN = """\
seed: 4
horizon: 12h
tenants:
  - name: research
    rate_per_hour: 5
    gpus: {choices: [1, 2, 8, 16], weights: [4, 2, 2, 1]}
    duration: {distribution: lognormal, median: 1h, sigma: 0.8}
    weight: 2
  - name: prod
    jobs: 10
    gpus: 8
    duration: 2h
    priority: 5
"""

runner = CliRunner()


@pytest.fixture
def gen(tmp_path: Path) -> Path:
    path = tmp_path / "gen.yaml"
    path.write_text(GEN)
    return path


def test_json_report_and_csv(gen: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    csv_dir = tmp_path / "csv"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--fleet",
            "auto",
            "--trace",
            f"gen:{gen}",
            "--load",
            "0.8",
            "--json",
            "--report",
            str(report),
            "--csv",
            str(csv_dir),
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    jobs = out["jobs"]
    assert jobs["total"] == jobs["finished"] + jobs["pending"] + jobs["running"]
    assert jobs["finished"] == jobs["total"] > 10
    assert 0 < out["gpu_utilization"] <= 1
    assert set(out["queueing_delay_s"]) >= {"mean", "p50", "p95", "p99"}
    assert out["wall_seconds"] > 0
    assert out["tenants"]["research"]["fair_share"] == pytest.approx(2 / 3)
    assert "<svg" in report.read_text()
    series = (csv_dir / "timeseries.csv").read_text().splitlines()
    assert series[0].startswith("time_s,gpus_allocated") and len(series) > 10
    assert len((csv_dir / "jobs.csv").read_text().splitlines()) == jobs["total"] + 1


def test_table_output_and_fifo(gen: Path) -> None:
    result = runner.invoke(
        app, ["simulate", "--trace", f"gen:{gen}", "--queue-policy", "fifo", "--policy", "packing"]
    )
    assert result.exit_code == 0, result.output
    assert "packing/fifo" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "csv:foo"], "--trace"),
        (["--trace", "itp:/nonexistent/cluster.csv"], "cannot read"),
        (["--trace", "gen:GEN", "--policy", "best"], "unknown policy"),
        (["--trace", "gen:GEN", "--queue-policy", "lifo"], "--queue-policy"),
        (["--trace", "gen:GEN", "--queues", "/nonexistent/q.yaml"], "q.yaml"),
        (["--trace", "gen:GEN", "--scale", "2h:zero"], "--scale"),
        (["--trace", "gen:GEN", "--fail", "node-1"], "--fail"),
        (["--trace", "gen:GEN", "--fleet", "/nonexistent/fleet.yaml"], "fleet.yaml"),
        ([], "--trace"),
    ],
)
def test_bad_input_is_a_clear_error(gen: Path, args: list[str], message: str) -> None:
    args = [a.replace("GEN", str(gen)) for a in args]
    result = runner.invoke(app, ["simulate", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_failures_and_scale_from_the_cli(gen: Path) -> None:
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            f"gen:{gen}",
            "--fail",
            "node-00000@1h+2h",
            "--scale",
            "2h:+2",
            "--mtbf",
            "3d",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["node_failures"] >= 1
    gh = out["gpu_hours"]
    assert gh["served"] + gh["lost_to_restarts"] == pytest.approx(gh["allocated"])
    assert gh["allocated"] == pytest.approx(gh["allocated_by_snapshot"])


def test_compare(gen: Path, tmp_path: Path) -> None:
    report = tmp_path / "c.html"
    result = runner.invoke(
        app, ["simulate", "compare", "--trace", f"gen:{gen}", "--json", "--report", str(report)]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [r["queue_policy"] for r in out["runs"]] == ["default", "fifo", "backfill"]
    assert report.read_text().count('class="series"') == 6  # 3 runs x (utilisation + CDF)
    md = runner.invoke(app, ["simulate", "compare", "--trace", f"gen:{gen}", "--markdown"])
    assert md.exit_code == 0, md.output
    assert md.stdout.count("| gen |") == 3


KUEUE = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
spec: {}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: research}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors:
        - name: gpu
          resources: [{name: nvidia.com/gpu, nominalQuota: 16}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: prod}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors:
        - name: gpu
          resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: research, namespace: ml}
spec: {clusterQueue: research}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: prod, namespace: ml}
spec: {clusterQueue: prod}
"""


def test_queues_replay_kueue_quotas(gen: Path, tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(KUEUE)
    result = runner.invoke(
        app, ["simulate", "--trace", f"gen:{gen}", "--queues", str(queues), "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    jobs = out["jobs"]
    assert jobs["finished"] + jobs["pending"] + jobs["running"] == jobs["total"]
    gh = out["gpu_hours"]
    assert gh["allocated"] == pytest.approx(gh["allocated_by_snapshot"])
    # research may never hold more than its 16 GPUs of quota, so it waits longer than without
    free = runner.invoke(app, ["simulate", "--trace", f"gen:{gen}", "--json"])
    assert json.loads(free.stdout)["queueing_delay_s"]["mean"] <= out["queueing_delay_s"]["mean"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(KUEUE.replace("name: prod, namespace", "name: other, namespace"))
    result = runner.invoke(app, ["simulate", "--trace", f"gen:{gen}", "--queues", str(bad)])
    assert result.exit_code == 2
    assert "tenant prod" in result.output and "Traceback" not in result.output


def test_a_fleet_file_with_tainted_gpu_nodes(gen: Path) -> None:
    """The demo inventory taints its GPU nodes with nvidia.com/gpu; GPU pods tolerate that taint
    (as Kubernetes' ExtendedResourceToleration adds), so every job runs."""
    import gpuaas.supply

    demo = Path(gpuaas.supply.__file__).parent / "data" / "demo-fleet.yaml"
    result = runner.invoke(
        app, ["simulate", "--fleet", str(demo), "--trace", f"gen:{gen}", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["jobs"]["finished"] == out["jobs"]["total"]
    assert out["fleet"] == str(demo)
