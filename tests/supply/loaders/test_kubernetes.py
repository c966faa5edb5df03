"""Kubernetes Node objects: allocatable, GPU-operator and topology labels, partitions rebuilt."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaas.model.devices import PartitionMode
from gpuaas.model.node import Fleet, Node, Taint, TaintEffect
from gpuaas.model.resources import CPU, MEMORY, MIG_PREFIX, NVIDIA_GPU, format_amount
from gpuaas.supply.loaders import SOURCE_MODEL_LABEL, FleetFileError, load_demo_fleet, load_fleet
from gpuaas.supply.loaders.kubernetes import load_kubernetes_nodes, nodes_from_document
from gpuaas.supply.mig import check_layout, layout_counts
from gpuaas.supply.partition import advertised_resources, node_labels

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "kubectl-get-nodes.yaml"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return yaml.safe_load(FIXTURE.read_text())


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return load_kubernetes_nodes(FIXTURE)


def by_name(fleet: Fleet) -> dict[str, Node]:
    return {node.name: node for node in fleet.nodes}


def gpu_resources(resources: dict[str, Any]) -> dict[str, int]:
    return {
        name: int(value)
        for name, value in resources.items()
        if (name == NVIDIA_GPU or name.startswith(MIG_PREFIX)) and int(value)
    }


def test_h100_node(fleet: Fleet) -> None:
    node = by_name(fleet)["gke-train-a3-pool-5d2f9c1e-h7kq"]
    assert node.cpu_milli == 207_350
    assert node.memory_bytes == 1842591588 * 1024
    assert [gpu.model for gpu in node.gpus] == ["H100-80GB"] * 8
    assert all(gpu.partition.mode is PartitionMode.WHOLE for gpu in node.gpus)
    assert node.taints == [Taint("nvidia.com/gpu", "present", TaintEffect.NO_SCHEDULE)]
    assert node.topology.zone == "us-central1-a"
    assert node.topology.block == "3f1c2b9e8d7a6c5b"  # GKE's compact-placement block
    assert node.topology.rack == "7e6d5c4b3a291807"  # ... and sub-block
    assert node.extra == {"ephemeral-storage": 6006206156289, "pods": 110}  # zero hugepages dropped
    assert node.labels["cloud.google.com/gke-nodepool"] == "a3-pool"
    assert node.labels[SOURCE_MODEL_LABEL] == "NVIDIA-H100-80GB-HBM3"


def test_mig_node(fleet: Fleet) -> None:
    node = by_name(fleet)["ip-10-20-37-114.ec2.internal"]
    assert len(node.gpus) == 8 and {gpu.model for gpu in node.gpus} == {"A100-80GB"}
    for gpu in node.gpus:
        assert gpu.partition.mode is PartitionMode.MIG
        assert layout_counts(gpu.partition.instances) == {
            "1g.10gb": 2,
            "2g.20gb": 1,
            "3g.40gb": 1,
        }
        assert gpu.partition.config == "all-balanced"
    assert node.topology.zone == "us-east-1a"
    assert (node.topology.block, node.topology.rack) == (
        "nn-8b9c0d1e2f3a4b5c6",
        "nn-1d2e3f4a5b6c7d8e9",
    )
    assert node.extra["vpc.amazonaws.com/efa"] == 4


def test_time_sliced_node(fleet: Fleet) -> None:
    node = by_name(fleet)["l40s-dev-03"]
    assert [gpu.model for gpu in node.gpus] == ["L40S"] * 4
    assert {(gpu.partition.mode, gpu.partition.replicas) for gpu in node.gpus} == {
        (PartitionMode.TIME_SLICED, 4)
    }
    assert (node.topology.zone, node.topology.block, node.topology.rack) == (
        "dc2",
        "dc2-b",
        "dc2-b-r07",
    )
    assert node.labels[SOURCE_MODEL_LABEL] == "NVIDIA-L40S-SHARED"


def test_advertised_resources_match_allocatable(fleet: Fleet, document: dict[str, Any]) -> None:
    """What gpuaas rebuilt advertises exactly what the kubelet reported."""
    nodes = by_name(fleet)
    for item in document["items"]:
        node = nodes[item["metadata"]["name"]]
        advertised = advertised_resources(node)
        assert gpu_resources(advertised) == gpu_resources(item["status"]["allocatable"])
        assert format_amount(CPU, advertised[CPU]) == item["status"]["allocatable"]["cpu"]


def test_json_list_and_single_node(tmp_path: Path, document: dict[str, Any]) -> None:
    as_json = tmp_path / "nodes.json"
    as_json.write_text(json.dumps({**document, "kind": "NodeList"}))
    assert load_fleet(as_json).gpu_count == 20
    single = tmp_path / "node.yaml"
    single.write_text(yaml.safe_dump(document["items"][2]))
    fleet = load_fleet(single)
    assert [node.name for node in fleet.nodes] == ["l40s-dev-03"]


def test_load_fleet_detects_kubectl_output(fleet: Fleet) -> None:
    loaded = load_fleet(FIXTURE)
    assert [node.name for node in loaded.nodes] == [node.name for node in fleet.nodes]


def test_custom_mig_layout_is_spread_validly(document: dict[str, Any]) -> None:
    item = copy.deepcopy(document["items"][1])
    labels = item["metadata"]["labels"]
    labels["nvidia.com/mig.config"] = "custom"
    labels["nvidia.com/gpu.count"] = "3"
    item["status"]["allocatable"] = {
        "cpu": "8",
        "memory": "64Gi",
        "nvidia.com/gpu": "1",  # one GPU left whole
        "nvidia.com/mig-7g.80gb": "1",
        "nvidia.com/mig-3g.40gb": "1",
        "nvidia.com/mig-2g.20gb": "1",
        "nvidia.com/mig-1g.10gb": "2",
    }
    node = nodes_from_document(item, "node.yaml").nodes[0]
    modes = Counter(gpu.partition.mode for gpu in node.gpus)
    assert modes == {PartitionMode.WHOLE: 1, PartitionMode.MIG: 2}
    total: Counter[str] = Counter()
    for gpu in node.gpus:
        check_layout("A100-80GB", gpu.partition.instances)
        total.update(layout_counts(gpu.partition.instances))
    assert total == {"7g.80gb": 1, "3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    assert gpu_resources(advertised_resources(node)) == gpu_resources(item["status"]["allocatable"])


def test_mig_counts_from_labels_when_allocatable_lacks_them(document: dict[str, Any]) -> None:
    item = copy.deepcopy(document["items"][1])
    item["status"]["allocatable"] = {"cpu": "8", "memory": "64Gi"}
    node = nodes_from_document(item, "node.yaml").nodes[0]
    total: Counter[str] = Counter()
    for gpu in node.gpus:
        total.update(layout_counts(gpu.partition.instances))
    assert total == {"1g.10gb": 16, "2g.20gb": 8, "3g.40gb": 8}


def test_single_strategy(document: dict[str, Any]) -> None:
    item = copy.deepcopy(document["items"][1])
    labels = item["metadata"]["labels"]
    labels.update(
        {
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
            "nvidia.com/gpu.count": "56",
            "nvidia.com/mig.config": "all-1g.10gb",
        }
    )
    item["status"]["allocatable"] = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "56"}
    node = nodes_from_document(item, "node.yaml").nodes[0]
    assert len(node.gpus) == 8
    assert all(layout_counts(g.partition.instances) == {"1g.10gb": 7} for g in node.gpus)


def kubectl_node(node: Node) -> dict[str, Any]:
    """The Node object a cluster running the GPU operator would show for ``node``."""
    resources = advertised_resources(node)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": node_labels(node)},
        "spec": {
            "taints": [
                {"key": t.key, "value": t.value, "effect": str(t.effect)} for t in node.taints
            ]
        },
        "status": {"allocatable": {name: format_amount(name, n) for name, n in resources.items()}},
    }


def test_round_trip_through_kubectl_form() -> None:
    """Inventory -> Node objects as the GPU operator labels them -> loader: same fleet."""
    original = load_demo_fleet()
    listed = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [kubectl_node(n) for n in original.nodes],
    }
    loaded = nodes_from_document(json.loads(json.dumps(listed)), "nodes.json")
    for before, after in zip(original.nodes, loaded.nodes, strict=True):
        assert after.name == before.name
        assert (after.cpu_milli, after.memory_bytes) == (before.cpu_milli, before.memory_bytes)
        assert after.topology == before.topology
        assert after.taints == before.taints
        assert after.extra == before.extra
        assert advertised_resources(after) == advertised_resources(before)

        def shape(node: Node) -> Counter[tuple[str, str, int, tuple[tuple[str, int], ...]]]:
            return Counter(
                (
                    gpu.model,
                    str(gpu.partition.mode),
                    gpu.partition.replicas,
                    tuple(sorted(layout_counts(gpu.partition.instances).items())),
                )
                for gpu in node.gpus
            )

        assert shape(after) == shape(before)


def test_cordoned_node_gets_the_unschedulable_taint(document: dict[str, Any]) -> None:
    item = copy.deepcopy(document["items"][0])
    item["spec"]["unschedulable"] = True
    node = nodes_from_document(item, "n.yaml").nodes[0]
    assert Taint("node.kubernetes.io/unschedulable", "", TaintEffect.NO_SCHEDULE) in node.taints


def broken(document: dict[str, Any], change: Any) -> str:
    listed = copy.deepcopy(document)
    change(listed["items"][1])
    with pytest.raises(FleetFileError) as error:
        nodes_from_document(listed, "nodes.yaml")
    return str(error.value)


ENTRY = "nodes.yaml: items[1] (ip-10-20-37-114.ec2.internal): "


def test_errors_name_the_node_and_field(document: dict[str, Any]) -> None:
    def no_cpu(item: dict[str, Any]) -> None:
        del item["status"]["allocatable"]["cpu"]

    assert broken(document, no_cpu) == ENTRY + "status.allocatable.cpu: is required"

    def bad_memory(item: dict[str, Any]) -> None:
        item["status"]["allocatable"]["memory"] = "lots"

    assert broken(document, bad_memory).startswith(
        ENTRY + "status.allocatable.memory: 'lots' is not a quantity"
    )

    def bad_count(item: dict[str, Any]) -> None:
        item["metadata"]["labels"]["nvidia.com/gpu.count"] = "eight"

    assert broken(document, bad_count) == (
        ENTRY
        + "metadata.labels.nvidia.com/gpu.count: must be an integer from 0 to 896, got 'eight'"
    )

    def mig_on_l40s(item: dict[str, Any]) -> None:
        item["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-L40S"

    assert broken(document, mig_on_l40s).startswith(
        ENTRY + "metadata.labels.nvidia.com/gpu.product: 'NVIDIA-L40S' does not support MIG"
    )

    def too_many(item: dict[str, Any]) -> None:
        item["metadata"]["labels"]["nvidia.com/gpu.count"] = "2"
        item["metadata"]["labels"]["nvidia.com/mig.config"] = "custom"

    assert "do not fit on the node's 2 GPU(s) in MIG mode" in broken(document, too_many)

    def bad_taint(item: dict[str, Any]) -> None:
        item["spec"]["taints"] = [{"key": "a", "effect": "Sometimes"}]

    assert broken(document, bad_taint).startswith(ENTRY + "spec.taints[0].effect: must be one of")

    def absurd(item: dict[str, Any]) -> None:
        item["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "4Gi"

    assert broken(document, absurd) == (
        ENTRY + "status.allocatable.nvidia.com/mig-1g.10gb: 4294967296 is implausible for one node "
        "(at most 896)"
    )

    def not_a_node(item: dict[str, Any]) -> None:
        item["kind"] = "Pod"

    assert broken(document, not_a_node) == ENTRY + "kind: expected Node, got 'Pod'"


def test_duplicate_nodes(document: dict[str, Any]) -> None:
    listed = copy.deepcopy(document)
    listed["items"].append(copy.deepcopy(listed["items"][0]))
    with pytest.raises(FleetFileError, match=r"items\[3\] .*: metadata.name: duplicate node name"):
        nodes_from_document(listed, "nodes.yaml")


def test_node_without_gpus() -> None:
    item = {
        "kind": "Node",
        "metadata": {"name": "cpu-1", "labels": {"kubernetes.io/hostname": "cpu-1"}},
        "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"}},
    }
    node = nodes_from_document(item, "n.yaml").nodes[0]
    assert node.gpus == [] and node.cpu_milli == 16_000 and node.memory_bytes == 64 * 2**30
    assert advertised_resources(node) == {CPU: 16_000, MEMORY: 64 * 2**30, "pods": 110}


_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 100),
    st.text(max_size=8),
    st.sampled_from(["8", "all-1g.10gb", "custom", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S", "4Gi"]),
)
_values = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_PLACES = [
    ("metadata", "labels"),
    ("metadata", "name"),
    ("metadata", "labels", "nvidia.com/gpu.count"),
    ("metadata", "labels", "nvidia.com/gpu.replicas"),
    ("metadata", "labels", "nvidia.com/gpu.product"),
    ("metadata", "labels", "nvidia.com/mig.config"),
    ("metadata", "labels", "nvidia.com/mig.strategy"),
    ("status", "allocatable"),
    ("status", "allocatable", "nvidia.com/gpu"),
    ("status", "allocatable", "nvidia.com/mig-1g.10gb"),
    ("spec", "taints"),
    ("spec",),
]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.integers(0, 2), st.sampled_from(_PLACES), _values)
def test_any_bad_value_gives_a_fleet_file_error(
    document: dict[str, Any], item: int, place: tuple[str, ...], value: object
) -> None:
    """Whatever the objects hold, the loader answers with a fleet or a FleetFileError."""
    listed = copy.deepcopy(document)
    target: Any = listed["items"][item]
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = value
    try:
        nodes_from_document(listed, "nodes.yaml")
    except FleetFileError as error:
        assert str(error).startswith("nodes.yaml: ")
