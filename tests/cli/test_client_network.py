"""Nodes of an RDMA cluster imported through the CLI show their NICs (`gpuaas nodes get`), and
`gpuaas network manifest` renders the SR-IOV objects of a pool from the registered fleet
(platform roles only); bad input is refused naming the field."""

from __future__ import annotations

from pathlib import Path

import yaml
from fastapi.testclient import TestClient
from test_client_cli import ADMIN, URL, failed, gpuaas, http, ok_json, set_up_acme

RDMA_NODES = Path(__file__).resolve().parents[1] / "fixtures" / "kubectl-get-nodes-rdma.yaml"
__all__ = ["http"]  # the fixture, imported for pytest


def test_imported_rdma_nodes_show_their_nics_and_pools_render(
    http: TestClient, tmp_path: Path
) -> None:
    gpuaas("login", URL, ADMIN)
    done = ok_json("nodes", "import", "--from", "kubernetes", str(RDMA_NODES))
    assert isinstance(done, dict) and len(done["created"]) == 3
    node = ok_json("nodes", "get", "dgx-h100-01")
    assert isinstance(node, dict)
    nics = node["nics"]
    assert [n["name"] for n in nics] == [f"mlx5_{k}" for k in range(8)]
    assert nics[0]["pcieGpus"] == [0] and nics[0]["numaGpus"] == [1, 2, 3]
    assert node["gpus"][7]["pcieRoot"] == "pci0000:d9"
    assert node["allocatable"]["nvidia.com/rdma_ib"] == "31"
    table = gpuaas("nodes", "get", "dgx-h100-01")
    assert table.exit_code == 0 and "NICs" in table.stdout and "rail-7" in table.stdout

    set_up_acme(tmp_path)
    gpuaas("login", URL, ADMIN)
    shown = gpuaas("network", "manifest", "--pool", "nvidia.com/rdma_ib", "--tenant", "acme")
    assert shown.exit_code == 0, shown.output
    policy, network = yaml.safe_load_all(shown.stdout)
    assert policy["kind"] == "SriovNetworkNodePolicy" and network["kind"] == "SriovIBNetwork"
    assert network["spec"]["networkNamespace"] == "gpuaas-acme"
    # every pool: the RoCE and Ethernet VFs of the annotation-less nodes have no PF address
    assert "has no pciAddress" in failed("network", "manifest", "--tenant", "acme")
    assert "no node offers NIC pool openshift.io/nope" in failed(
        "network", "manifest", "--pool", "openshift.io/nope", "--tenant", "acme"
    )
    assert "tenant: no tenant 'globex'" in failed(
        "network", "manifest", "--pool", "nvidia.com/rdma_ib", "--tenant", "globex"
    )
    assert "ipam" in failed(
        "network", "manifest", "--pool", "nvidia.com/rdma_ib", "--tenant", "acme", "--ipam", "{"
    )
