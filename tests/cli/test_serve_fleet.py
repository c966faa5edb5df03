"""``gpuaas serve --fleet``: a bad fleet file is one line, before anything is created."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuaas.cli.main import app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
runner = CliRunner()


@pytest.mark.parametrize(
    ("content", "suffix", "expected"),
    [
        (
            "apiVersion: gpuaas.io/v1\nkind: Fleet\nnodes:\n"
            "  - {name: h100-1, cpu: '64', memory: 512Gi, gpus: {model: H100, count: -1}}\n",
            ".yaml",
            "fleet.yaml: nodes[0] (h100-1): gpus.count: must be a positive integer, got -1",
        ),
        ("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,1024,two,T4\n", ".csv",
         "fleet.csv: line 2 (n1): gpu: must be a non-negative integer, got 'two'"),
        ("kind: Pod\n", ".yaml", "fleet.yaml: not a fleet"),
        ("nodes: [", ".yaml", "fleet.yaml: line 2, column 1: not valid YAML"),
    ],
)  # fmt: skip
def test_bad_fleet_file_is_one_line_and_creates_nothing(
    tmp_path: Path, content: str, suffix: str, expected: str
) -> None:
    fleet = tmp_path / f"fleet{suffix}"
    fleet.write_text(content)
    result = runner.invoke(
        app, ["serve", "--fleet", str(fleet), "--data-dir", str(tmp_path / "data")]
    )
    code, out, err = result.exit_code, result.stdout, result.stderr
    assert code == 2, result.output
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert err.removeprefix("error: ").replace(str(tmp_path) + "/", "").startswith(expected), err
    assert "token" not in out + err and "Traceback" not in out + err
    assert not (tmp_path / "data").exists()  # no data directory, no database, no admin


def test_kubectl_output_with_a_bad_node_names_it(tmp_path: Path) -> None:
    document = yaml.safe_load((FIXTURES / "kubectl-get-nodes-new-gpus.yaml").read_text())
    document["items"][1]["status"]["allocatable"]["cpu"] = "lots"
    fleet = tmp_path / "nodes.yaml"
    fleet.write_text(yaml.safe_dump(document))
    db = tmp_path / "gpuaas.db"
    result = runner.invoke(app, ["serve", "--fleet", str(fleet), "--db", f"sqlite:///{db}"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "items[1] (rtx4090-07): status.allocatable.cpu" in result.stderr
    assert not db.exists()


def test_bad_catalogue_file_is_one_line(tmp_path: Path) -> None:
    catalogue = tmp_path / "gpus.yaml"
    catalogue.write_text("apiVersion: gpuaas.io/v1\nkind: GpuCatalogue\nmodels:\n  - {name: X}\n")
    result = runner.invoke(app, ["--catalogue", str(catalogue), "fleet", "--help"])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {catalogue}: models[0] (X): memory: is required (e.g. 97887Mi, as nvidia-smi "
        "reports it)\n"
    )
