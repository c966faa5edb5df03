"""Node objects of an RDMA cluster (tests/fixtures/kubectl-get-nodes-rdma.yaml: SR-IOV VFs under
the network operator's and OpenShift's prefixes, the shared RDMA device plugin, NFD labels, the
gpuaas.io/nics and gpu-topology annotations) import with the right NICs; wrong ones are
refused naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaas.model.errors import InvalidValue
from gpuaas.model.network import LinkType
from gpuaas.supply.loaders.entries import inventory_entry
from gpuaas.supply.loaders.inventory import inventory_from_document
from gpuaas.supply.loaders.kubernetes import node_from_object, nodes_from_document
from gpuaas.supply.loaders.kubernetes_nics import is_nic_pool
from gpuaas.supply.nics import nic_affinity
from gpuaas.supply.partition import advertised_resources

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "kubectl-get-nodes-rdma.yaml"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return yaml.safe_load(FIXTURE.read_text())


def _nodes(document: dict[str, Any]) -> dict[str, Any]:
    return {node.name: node for node in nodes_from_document(document, FIXTURE).nodes}


def test_annotated_sriov_vfs_become_the_eight_hcas(document: dict[str, Any]) -> None:
    dgx = _nodes(document)["dgx-h100-01"]
    assert [n.name for n in dgx.nics] == [f"mlx5_{k}" for k in range(8)]
    assert {n.pool for n in dgx.nics} == {"nvidia.com/rdma_ib"}
    assert all(n.link is LinkType.INFINIBAND and n.rdma and n.speed_gbps == 400 for n in dgx.nics)
    # capacity 32, allocatable 31: the last HCA gives up its unhealthy VF
    assert [n.vfs for n in dgx.nics] == [4] * 7 + [3]
    assert advertised_resources(dgx)["nvidia.com/rdma_ib"] == 31
    assert "nvidia.com/rdma_ib" not in dgx.extra
    assert dgx.nics[5].pci_address == "0000:b8:00.0" and dgx.nics[5].rail == "rail-5"
    assert [g.pcie_root for g in dgx.gpus][:2] == ["pci0000:15", "pci0000:37"]
    assert [g.numa_node for g in dgx.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    affinity = nic_affinity(dgx)
    assert [a.pcie for a in affinity] == [(k,) for k in range(8)]
    assert affinity[0].numa == (1, 2, 3)


def test_pools_without_annotation_are_one_nic_each(document: dict[str, Any]) -> None:
    nodes = _nodes(document)
    h200 = {n.pool: n for n in nodes["hgx-h200-07"].nics}
    assert set(h200) == {"openshift.io/mlnx_roce", "rdma/rdma_shared_device_a"}
    roce = h200["openshift.io/mlnx_roce"]
    assert (roce.name, roce.link, roce.rdma, roce.vfs) == ("mlnx_roce", LinkType.ROCE, True, 16)
    assert not roce.has_topology
    shared = h200["rdma/rdma_shared_device_a"]
    # the shared RDMA device: 1k pods may hold it; NFD saw a 0200 (Ethernet) Mellanox NIC
    assert (shared.vfs, shared.link, shared.rdma) == (1000, LinkType.ROCE, True)
    (intel,) = nodes["l40s-edge-03"].nics
    assert (intel.pool, intel.link, intel.rdma, intel.vfs) == (
        "openshift.io/intel_sriov_netdevice",
        LinkType.ETHERNET,
        False,
        8,
    )


def test_imported_nodes_store_and_load_back_the_same(document: dict[str, Any]) -> None:
    for node in _nodes(document).values():
        entry = inventory_entry(node)
        stored = {"apiVersion": "gpuaas.io/v1", "kind": "Fleet", "nodes": [entry]}
        (again,) = inventory_from_document(stored, "stored").nodes
        assert again.nics == node.nics and again.gpus == node.gpus
        assert advertised_resources(again) == advertised_resources(node)


@pytest.mark.parametrize(
    ("resource", "pool"),
    [
        ("openshift.io/mlnx_ib", True),
        ("rdma/hca_shared_devices_a", True),
        ("nvidia.com/rdma_ib", True),
        ("nvidia.com/sriov_roce_rail0", True),
        ("nvidia.com/ib_rail3", True),
        ("nvidia.com/gpu", False),
        ("nvidia.com/mig-1g.10gb", False),
        ("nvidia.com/gpu.shared", False),
        ("nvidia.com/gpucores", False),
        ("nvidia.com/gpumem-percentage", False),
        ("hugepages-1Gi", False),
        ("example.com/fpga", False),
    ],
)
def test_which_resources_are_nic_pools(resource: str, pool: bool) -> None:
    assert is_nic_pool(resource) is pool


def _node(document: dict[str, Any], name: str) -> dict[str, Any]:
    return copy.deepcopy(next(i for i in document["items"] if i["metadata"]["name"] == name))


def test_an_annotation_naming_a_pool_the_node_lacks_is_refused(document: dict[str, Any]) -> None:
    obj = _node(document, "dgx-h100-01")
    nics = json.loads(obj["metadata"]["annotations"]["gpuaas.io/nics"])
    nics[2]["pool"] = "nvidia.com/rdma_roce"
    obj["metadata"]["annotations"]["gpuaas.io/nics"] = json.dumps(nics)
    with pytest.raises(InvalidValue, match=r"no such NIC pool: nvidia\.com/rdma_roce") as caught:
        node_from_object(obj)
    assert caught.value.field == "metadata.annotations.gpuaas.io/nics[2].pool"


@pytest.mark.parametrize(
    ("key", "value", "field", "problem"),
    [
        ("gpuaas.io/nics", "[{", "metadata.annotations.gpuaas.io/nics", "is not JSON"),
        ("gpuaas.io/nics", '[{"name": "mlx5_0", "pool": "nvidia.com/rdma_ib", "vfs": 8}]',
         "metadata.annotations.gpuaas.io/nics", "a NIC is missing"),
        ("gpuaas.io/nics", '[{"name": "mlx5_0", "pool": "nvidia.com/rdma_ib", "vfs": 31,'
         ' "link": "token-ring"}]', "metadata.annotations.gpuaas.io/nics[0].link", "must be one"),
        ("gpuaas.io/gpu-topology", '[{"pcieRoot": "a"}]', "metadata.annotations.gpuaas.io/"
         "gpu-topology", "describes 1 GPUs, the node has 8"),
        ("gpuaas.io/gpu-topology", json.dumps([{"numaNode": -1}] * 8),
         "metadata.annotations.gpuaas.io/gpu-topology[0].numaNode", "non-negative"),
    ],
)  # fmt: skip
def test_bad_annotations_are_refused_naming_the_field(
    document: dict[str, Any], key: str, value: str, field: str, problem: str
) -> None:
    obj = _node(document, "dgx-h100-01")
    obj["metadata"]["annotations"][key] = value
    with pytest.raises(InvalidValue, match=problem) as caught:
        node_from_object(obj)
    assert caught.value.field == field
