"""``gpuaas clusters``: the real CLI against the real API in process (the fixtures of
test_client_cli.py): the provider's terms, create, list, get, scale, manifest, events,
delete, and clear errors naming the field."""

from __future__ import annotations

from pathlib import Path

import yaml
from fastapi.testclient import TestClient
from test_client_cli import ADMIN, URL, failed, gpuaas, http, ok_json, set_up_acme

__all__ = ["http"]  # the fixture, used by name

CLUSTER = {
    "name": "bm",
    "kind": "baremetal",
    "pools": [{"name": "gpu", "flavor": "h100", "count": 1, "min": 1, "max": 2}],
    "sshKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIcliTestKey bob@example"],
}


def test_clusters_commands(http: TestClient, tmp_path: Path) -> None:
    gpuaas("login", URL, ADMIN)
    set_up_acme(tmp_path)
    terms = ok_json("clusters", "allow", "acme", "--node-limit", "2", "--flavor", "h100")
    assert terms == {"tenant": "acme", "flavors": ["h100"], "gpuModels": [], "nodeLimit": 2,
                     "nodesHeld": 0}  # fmt: skip
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(CLUSTER))
    created = ok_json("clusters", "create", "-f", str(spec), "--tenant", "acme")
    assert created["state"] == "Provisioning" and created["nodes"] == ["n-1"]  # type: ignore[index]
    table = gpuaas("clusters", "list", "--tenant", "acme")
    assert table.exit_code == 0 and "bm" in table.stdout and "baremetal" in table.stdout
    assert ok_json("clusters", "get", "bm", "--tenant", "acme")["gpus"] == 8  # type: ignore[index]
    scaled = ok_json("clusters", "scale", "bm", "gpu=2", "--tenant", "acme")
    assert scaled["nodes"] == ["n-1", "n-2"]  # type: ignore[index]
    manifest = gpuaas("clusters", "manifest", "bm", "--tenant", "acme")
    assert manifest.exit_code == 0, manifest.output
    (doc,) = list(yaml.safe_load_all(manifest.stdout))
    assert doc["kind"] == "BareMetalAllocation"
    assert [h["name"] for h in doc["spec"]["pools"]["gpu"]] == ["n-1", "n-2"]
    events = ok_json("clusters", "events", "bm", "--tenant", "acme")
    assert [e["code"] for e in events] == ["ClusterCarved", "ClusterCarved"]  # type: ignore[union-attr]
    assert "pools[0].count" in failed("clusters", "scale", "bm", "gpu=3", "--tenant", "acme")
    assert "POOL=COUNT" in failed("clusters", "scale", "bm", "gpu", "--tenant", "acme")
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**CLUSTER, "name": "more"}))
    assert "node limit" in failed("clusters", "create", "-f", str(other), "--tenant", "acme")
    deleted = ok_json("clusters", "delete", "bm", "--tenant", "acme")
    assert deleted["state"] == "Deleting"  # type: ignore[index]
    assert ok_json("clusters", "allowance", "--tenant", "acme")["nodesHeld"] == 2  # type: ignore[index]
