"""Nodes of a GPU-operator cluster for `gpuaas nodes import --from kubernetes`: from a file and
live through the official `kubernetes` client (its request, model and serialisation code, with a
fake transport in place of the network: not tested against a live API server here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from gpuaas.model.devices import PartitionMode
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Fleet, Node
from gpuaas.supply.loaders.kubernetes import nodes_from_document, topology_labels
from gpuaas.supply.loaders.kubernetes_api import (
    GPU_NODE_SELECTOR,
    ClusterError,
    api_client,
    list_gpu_nodes,
)
from gpuaas.supply.mig import layout_counts
from gpuaas.supply.partition import advertised_resources
from kube_fakes import FakeTransport, fake_client, node_list

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "kubectl-get-nodes-gpu-operator.yaml"
RACK = {"rack": "example.com/rack"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return yaml.safe_load(FIXTURE.read_text())


@pytest.fixture(scope="module")
def fleet(document: dict[str, Any]) -> Fleet:
    return nodes_from_document(document, FIXTURE, topology_labels(RACK))


def node(fleet: Fleet, name: str) -> Node:
    return next(n for n in fleet.nodes if n.name == name)


def test_whole_gpus_with_their_nvlink_clique_and_rack(fleet: Fleet) -> None:
    n = node(fleet, "hgx-h100-a01")
    assert [g.model for g in n.gpus] == ["H100-80GB"] * 8
    assert {g.partition.mode for g in n.gpus} == {PartitionMode.WHOLE}
    assert n.topology.nvlink_domain == "7f2c9a4e-51d3-4b0e-9a55-3f1e2d0c8b71.1"
    assert n.topology.zone == "eu-west-1a" and n.topology.rack == "r12"
    assert n.topology.nvlink_domain == node(fleet, "hgx-h100-a02").topology.nvlink_domain


def test_mig_mixed_strategy(fleet: Fleet) -> None:
    n = node(fleet, "a100-mig-b01")
    modes = [g.partition.mode for g in n.gpus]
    assert modes.count(PartitionMode.WHOLE) == 1 and modes.count(PartitionMode.MIG) == 3
    counts: dict[str, int] = {}
    for gpu in n.gpus:
        for profile, count in layout_counts(gpu.partition.instances).items():
            counts[profile] = counts.get(profile, 0) + count
    assert counts == {"1g.10gb": 14, "3g.40gb": 2}


def test_time_slicing_and_mps(fleet: Fleet) -> None:
    shared = node(fleet, "l40s-ts-c01")
    assert [(g.partition.mode, g.partition.replicas) for g in shared.gpus] == [
        (PartitionMode.TIME_SLICED, 4)
    ] * 4
    mps = node(fleet, "l40s-mps-c02")
    assert [(g.partition.mode, g.partition.replicas) for g in mps.gpus] == [
        (PartitionMode.MPS, 2)
    ] * 2


def test_devices_advertise_what_the_cluster_allocates(
    fleet: Fleet, document: dict[str, Any]
) -> None:
    """Every node's GPU resources, rebuilt from its devices, are the kubelet's allocatable."""
    for item in document["items"]:
        wanted = {
            r: int(v)
            for r, v in item["status"]["allocatable"].items()
            if r.startswith("nvidia.com/")
        }
        advertised = advertised_resources(node(fleet, item["metadata"]["name"]))
        got = {r: a for r, a in advertised.items() if r.startswith("nvidia.com/") and a}
        assert got == {r: a for r, a in wanted.items() if a}, item["metadata"]["name"]


def test_without_the_configured_rack_label_there_is_no_rack(document: dict[str, Any]) -> None:
    plain = nodes_from_document(document, FIXTURE)
    assert node(plain, "hgx-h100-a01").topology.rack == ""


def test_unknown_topology_level_is_refused() -> None:
    with pytest.raises(InvalidValue, match="unknown level 'row'"):
        topology_labels({"row": "example.com/row"})


# --- live, through the official client ------------------------------------------------------


def test_live_listing_pages_and_reads_as_the_file_does(
    document: dict[str, Any], fleet: Fleet
) -> None:
    items = [dict(i) for i in document["items"]]
    transport = FakeTransport([(200, node_list(items[:2], "page-2")), (200, node_list(items[2:]))])
    listed = list_gpu_nodes(fake_client(transport))
    assert [m for m, _ in transport.requests] == ["GET", "GET"]
    first, second = (parse_qs(urlparse(url).query) for _, url in transport.requests)
    assert urlparse(transport.requests[0][1]).path == "/api/v1/nodes"
    assert first["labelSelector"] == [GPU_NODE_SELECTOR] and "continue" not in first
    assert second["continue"] == ["page-2"]
    # the client's typed models, serialised back, are the Node objects kubectl prints
    live = nodes_from_document(listed, "live", topology_labels(RACK))
    assert live.nodes == fleet.nodes


def test_an_api_server_refusal_is_named() -> None:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": 'nodes is forbidden: User "dev" cannot list resource "nodes"',
        "reason": "Forbidden",
        "code": 403,
    }
    with pytest.raises(ClusterError, match=r"403 Forbidden: nodes is forbidden"):
        list_gpu_nodes(fake_client(FakeTransport([(403, status)])))


def test_kubeconfig_problems_are_named(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="kubeconfig"):
        api_client(str(tmp_path / "missing"))
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://k8s.invalid"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "gpu", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "gpu",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    assert api_client(str(path)).configuration.host == "https://k8s.invalid"
    with pytest.raises(ClusterError, match="context other"):
        api_client(str(path), "other")
