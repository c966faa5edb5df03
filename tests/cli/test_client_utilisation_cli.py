"""``gpuaas utilization node|job|cluster`` and the SDK's calls behind them: the real CLI
against the real API in process (test_client_cli.py's fixtures), the windows fed by hand as
the reconciler would feed them."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from fastapi.testclient import TestClient
from test_client_cli import ADMIN, JOB, URL, failed, gpuaas, http, ok_json, set_up_acme

from gpuaas.model.telemetry import DeviceSample, UtilSource
from gpuaas.service.utilisation import Holding, Utilisation

__all__ = ["http"]  # the fixture, used by name


def test_utilization_commands(http: TestClient, tmp_path: Path) -> None:
    gpuaas("login", URL, ADMIN)
    alice = set_up_acme(tmp_path)
    gpuaas("login", URL, alice)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(JOB))
    job = ok_json("jobs", "submit", "-f", str(spec))
    job_id = int(job["id"])  # type: ignore[index]

    # as the reconciler would: the fleet, who holds what, readings
    u: Utilisation = http.app.state.utilisation  # type: ignore[attr-defined]
    now = time.time()
    u.set_fleet({"n-1": ([f"gpu-{i}" for i in range(8)], ""), "n-2": (["gpu-0"], "")})
    u.set_holdings({job_id: Holding("acme", (("n-1", "gpu-0"), ("n-1", "gpu-1")))})
    u.record(DeviceSample("n-1", f"gpu-{i}", now - t, 0.9 if i < 2 else 0.0, 40 << 30,
                          80 << 30, UtilSource.GR_ENGINE_ACTIVE)
             for i in range(8) for t in (0, 10, 20))  # fmt: skip

    mine = ok_json("utilization", "job", str(job_id))
    assert mine["window"]["utilization"] == 90.0  # type: ignore[index]
    assert [d["device"] for d in mine["devices"]] == ["gpu-0", "gpu-1"]  # type: ignore[index]
    table = gpuaas("utilization", "job", str(job_id))
    assert table.exit_code == 0, table.output
    assert f"job {job_id}: 90.0%" in table.stdout and "gpu-1" in table.stdout
    assert "not found" in failed("utilization", "job", "999999")
    failed("utilization", "node", "n-1")  # nodes are the provider's

    gpuaas("login", URL, ADMIN)
    node = gpuaas("utilization", "node", "n-1")
    assert node.exit_code == 0, node.output
    assert "node n-1: 22.5%" in node.stdout  # 2 of 8 GPUs at 90 %
    assert "GR_ENGINE_ACTIVE" in node.stdout
    idle = gpuaas("utilization", "node", "n-2")
    assert idle.exit_code == 0 and "node n-2: -" in idle.stdout  # no telemetry at all
    assert "not found" in failed("utilization", "node", "nope")
    assert "not found" in failed("utilization", "cluster", "nope", "--tenant", "acme")
