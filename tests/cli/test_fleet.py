"""``gpuaas fleet show|validate`` and ``gpuaas demo`` through the real command line app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaas.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
NODE_LIST = ROOT / ".." / "shared" / "data" / "openb" / "openb_node_list_gpu_node.csv"
KUBECTL = ROOT / "tests" / "fixtures" / "kubectl-get-nodes.yaml"
DEMO = ROOT / "src" / "gpuaas" / "supply" / "data" / "demo-fleet.yaml"

runner = CliRunner()


def test_show_json_on_the_trace() -> None:
    if not NODE_LIST.exists():
        pytest.skip(f"trace data not found at {NODE_LIST} (../shared/data is absent)")
    result = runner.invoke(app, ["fleet", "show", str(NODE_LIST), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)  # exactly one JSON object
    assert summary["nodes"] == 1213
    assert summary["gpus"] == 6212
    assert summary["gpus_by_model"] == {
        "G2": 4392,
        "T4": 842,
        "G3": 312,
        "P100": 265,
        "V100M32": 204,
        "V100M16": 195,
        "A10": 2,
    }
    assert summary["gpus_by_catalogue_model"]["V100-32GB"] == 204
    assert summary["partitions"]["whole"] == 6212
    assert summary["nodes_by_gpu_count"] == {"1": 24, "2": 518, "4": 54, "8": 617}
    assert summary["resources"]["nvidia.com/gpu"] == 6212
    assert {"nodes", "gpus", "gpus_by_model", "partitions", "topology", "resources"} <= set(summary)


def test_show_json_on_kubectl_output() -> None:
    result = runner.invoke(app, ["fleet", "show", str(KUBECTL), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["nodes"] == 3 and summary["gpus"] == 20
    assert summary["partitions"]["mig"]["instances"] == {"1g.10gb": 16, "2g.20gb": 8, "3g.40gb": 8}
    assert summary["partitions"]["time_sliced"] == {
        "gpus": 4,
        "replicas": 16,
        "gpus_by_replicas": {"4": 4},
    }
    assert summary["resources"]["nvidia.com/gpu"] == 8 + 16
    assert summary["topology"]["zones"]["us-east-1a"] == {"nodes": 1, "gpus": 8}
    assert summary["devices"]["total"] == 8 + 32 + 16  # whole + MIG instances + replicas
    assert {"kind": "mig", "product": "A100-80GB", "profile": "3g.40gb", "devices": 8} in (
        summary["devices"]["by_type"]
    )
    assert summary["gpus_by_model"] == {
        "NVIDIA-A100-SXM4-80GB": 8,
        "NVIDIA-H100-80GB-HBM3": 8,
        "NVIDIA-L40S-SHARED": 4,
    }
    assert summary["taints"] == {
        "nvidia.com/gpu.shared=true:NoSchedule": 1,
        "nvidia.com/gpu=present:NoSchedule": 1,
    }


def test_show_tables() -> None:
    result = runner.invoke(app, ["fleet", "show", str(DEMO)])
    assert result.exit_code == 0, result.output
    for text in (
        "GPUs by model",
        "H100-80GB",
        "Partitions",
        "time-sliced",
        "Topology",
        "NVLink domain",
        "nvidia.com/mig-1g.10gb",
        "Devices",
    ):
        assert text in result.output


def test_validate_ok() -> None:
    result = runner.invoke(app, ["fleet", "validate", str(DEMO)])
    assert result.exit_code == 0
    assert result.output.strip() == "ok: 26 nodes, 176 GPUs"


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        (
            "fleet.yaml",
            "apiVersion: gpuaas.io/v1\nkind: Fleet\nnodes:\n"
            "  - {name: a, cpu: 1, memory: 1Gi, gpus: {model: H100, count: -1}}\n",
            "fleet.yaml: nodes[0] (a): gpus.count: must be a positive integer, got -1",
        ),
        ("nodes.csv", "sn,cpu,gpu\n", "nodes.csv: line 1: header: missing"),
        ("broken.yaml", "kind: [\n", "broken.yaml: line 2, column 1: not valid YAML"),
    ],
)
@pytest.mark.parametrize("command", ["show", "validate"])
def test_bad_file_exits_1_without_traceback(
    tmp_path: Path, command: str, name: str, content: str, expected: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    result = runner.invoke(app, ["fleet", command, str(path)])
    assert result.exit_code == 1
    assert f"error: {tmp_path}/{expected}" in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)


def test_missing_file_exits_1(tmp_path: Path) -> None:
    result = runner.invoke(app, ["fleet", "validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 1
    assert "nope.yaml: no such file" in result.output


def test_demo_shows_the_fleet_and_devices() -> None:
    result = runner.invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    assert "The demo fleet" in result.output
    assert "H100-80GB" in result.output and "L40S" in result.output
    assert "344 devices on 26 nodes" in result.output
    assert "gpu-0-mig-1g10gb-0" in result.output  # a MIG device as DRA names it


def test_demo_steps_can_be_extended() -> None:
    from gpuaas.cli import demo

    seen: list[int] = []

    def step(context: demo.DemoContext) -> None:
        seen.append(len(context.fleet.nodes))
        assert "devices" in context.state  # earlier steps share what they computed

    demo.DEMO_STEPS.append(("extra", step))
    try:
        result = runner.invoke(app, ["demo"])
    finally:
        demo.DEMO_STEPS.pop()
    assert result.exit_code == 0, result.output
    assert seen == [26] and "extra" in result.output


def test_show_tells_mps_from_time_slicing_and_names_new_models() -> None:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "kubectl-get-nodes-new-gpus.yaml"
    result = runner.invoke(app, ["fleet", "show", str(fixture), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    partitions = summary["partitions"]
    assert partitions["mps"] == {"gpus": 4, "replicas": 16, "gpus_by_replicas": {"4": 4}}
    assert partitions["time_sliced"]["gpus"] == 8  # the A800 node only
    models = summary["gpus_by_catalogue_model"]
    assert models["H20"] == 8 and models["RTX-4090"] == 8 and models["A10G"] == 4
    assert models["RTX-PRO-6000-Blackwell-Server-Edition"] == 8
    table = runner.invoke(app, ["fleet", "show", str(fixture)])
    assert "MPS" in table.stdout and "4 clients" in table.stdout
