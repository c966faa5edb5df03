"""``gpuaas nodes import --from slurm``: the real CLI, the real API in process, the real Slurm
cluster of conftest.py; and its errors as one line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from slurm_cluster import Cluster
from typer.testing import CliRunner

import gpuaas.cli.client as cli_client
from gpuaas.cli.main import app
from gpuaas.client import Client
from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings

ADMIN = "gpa_slurm-admin-token-0123456789abcdef"
URL = "http://testserver"
runner = CliRunner()


@pytest.fixture
def http(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    settings = Settings(db_url=sqlite_url, data_dir=tmp_path, reconcile=False, admin_token=ADMIN)
    monkeypatch.setenv("GPUAAS_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("GPUAAS_URL", URL)
    monkeypatch.setenv("GPUAAS_TOKEN", ADMIN)
    with TestClient(create_app(settings), base_url=URL) as client:
        monkeypatch.setattr(
            cli_client, "make_client", lambda url, token: Client.from_httpx(client, token)
        )
        yield


def test_nodes_import_registers_slurms_nodes(slurm_cluster: Cluster, http: None) -> None:
    socket = str(slurm_cluster.socket)
    command = ["nodes", "import", "--from", "slurm", "--socket", socket, "--partition", "gpu"]
    result = runner.invoke(app, [*command, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["created"] == ["n1", "n2", "n3"]
    nodes = [json.loads(runner.invoke(app, ["nodes", "get", n, "--json"]).stdout)
             for n in ("n1", "n2", "n3")]  # fmt: skip
    assert [n["name"] for n in nodes] == ["n1", "n2", "n3"]
    assert {n["gpuModel"] for n in nodes} == {"H100-80GB"} and nodes[0]["gpuCount"] == 8
    labels = nodes[0]["labels"]
    assert labels["gpuaas.io/backend"] == "slurm"
    assert labels["slurm.schedmd.com/partition"] == "gpu"
    again = runner.invoke(app, [*command, "--json"])  # a repeated import changes nothing
    assert again.exit_code == 0, again.output
    unchanged = {"created": [], "updated": [], "unchanged": ["n1", "n2", "n3"]}
    assert json.loads(again.stdout) == unchanged


def test_nodes_import_errors_are_one_line(http: None, tmp_path: Path) -> None:
    result = runner.invoke(app, ["nodes", "import", "--from", "slurm", "--socket",
                                 str(tmp_path / "none.socket")])  # fmt: skip
    assert result.exit_code == 1 and result.stderr.startswith("error: cannot read Slurm's nodes")
    other = runner.invoke(app, ["nodes", "import", "--from", "lsf"])
    assert other.exit_code == 1 and "unknown source" in other.stderr
