"""Partitioning a GPU, and what the node then advertises and is labelled with."""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.model.devices import GPU, MigInstance, Partition, PartitionMode
from gpuaas.model.node import Node
from gpuaas.model.topology import Topology
from gpuaas.supply.catalogue import lookup
from gpuaas.supply.devices import device_names
from gpuaas.supply.mig import PartitionError, check_layout
from gpuaas.supply.partition import (
    advertised_resources,
    node_labels,
    parse_mig_config_label,
    partition_gpu,
    repartition,
    validate_partition,
)

OPENB = (
    Path(__file__).resolve().parents[2]
    / ".."
    / "shared"
    / "data"
    / "openb"
    / "openb_node_list_gpu_node.csv"
)
GIB = 2**30
# Kubernetes label: optional prefix "/" name, name <= 63 chars; value <= 63 chars.
LABEL_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
RESOURCE_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def _node(model: str, partitions: list[Partition], name: str = "n1") -> Node:
    info = lookup(model)
    gpus = [
        GPU(i, f"GPU-{name}-{i}", info.name, info.memory_mib, partition=p)
        for i, p in enumerate(partitions)
    ]
    return Node(
        name=name,
        cpu_milli=96_000,
        memory_bytes=1024 * GIB,
        gpus=gpus,
        topology=Topology(zone="eu-1a", block="b1", rack="r7", nvlink_domain="nvl-7"),
        labels={"team": "ml"},
        extra={"pods": 110},
    )


def test_whole_and_named_specs() -> None:
    assert partition_gpu("H100", None) == Partition.whole()
    assert partition_gpu("H100", "whole") == Partition.whole()
    assert partition_gpu("H100", {"mig": "all-disabled"}) == Partition.whole()
    enabled = partition_gpu("H100", {"mig": "all-enabled"})
    assert enabled.mode is PartitionMode.MIG and enabled.instances == ()
    assert enabled.config == "all-enabled"
    balanced = partition_gpu("A100-80GB", {"mig": "all-balanced"})
    assert balanced.config == "all-balanced"
    assert sorted(i.profile for i in balanced.instances) == [
        "1g.10gb",
        "1g.10gb",
        "2g.20gb",
        "3g.40gb",
    ]
    custom = partition_gpu("A100-80GB", {"mig": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}})
    assert custom.config == "custom"
    check_layout("A100-80GB", custom.instances)
    assert partition_gpu("A100-80GB", "mig:3g.40gb,2x2g.20gb").config == "custom"


def test_time_slicing_specs() -> None:
    expected = Partition.time_sliced(4)
    assert partition_gpu("L40S", {"time-slicing": {"replicas": 4}}) == expected
    assert partition_gpu("L40S", {"time-slicing": 4}) == expected
    assert partition_gpu("L40S", "time-slicing:4") == expected
    operator = {
        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
    }
    assert partition_gpu("L40S", operator) == expected
    assert partition_gpu("L40S", {"mode": "time-sliced", "replicas": 4}) == expected


@pytest.mark.parametrize(
    ("model", "spec", "message"),
    [
        ("T4", {"mig": "all-1g.10gb"}, "T4 does not support MIG"),
        ("A100-80GB", {"mig": "all-1g.5gb"}, "unknown profile 1g.5gb for A100-80GB"),
        ("L4", {"time-slicing": 0}, "replicas must be a whole number >= 1, got 0"),
        ("L4", {"time-slicing": {"replicas": "many"}}, "replicas must be a whole number"),
        ("L4", {"time-slicing": {}}, "time-slicing needs 'replicas'"),
        ("L4", "sliced", "unknown partition 'sliced'"),
        ("L4", {"migg": "x"}, "unknown partition key\\(s\\) migg"),
        (
            "A100",
            {"mig": "all-1g.5gb", "time-slicing": 2},
            "MIG-partitioned, time-sliced or shared by MPS: one of them",
        ),
        ("H100", {"mig": "4g.40gb,2x2g.20gb"}, "compute slices: layout needs 8 of 7"),
        ("H100", 42, "partition must be text or a mapping"),
    ],
)
def test_bad_specs_name_the_field(model: str, spec: object, message: str) -> None:
    with pytest.raises(PartitionError, match=f"^nodes\\[0\\]\\.gpus\\[2\\]: .*{message}"):
        partition_gpu(model, spec, field="nodes[0].gpus[2]")


def test_validate_partition_rejects_bad_placements() -> None:
    overlapping = Partition(
        mode=PartitionMode.MIG,
        instances=(MigInstance(0, 4, "3g.40gb", 3), MigInstance(2, 2, "2g.20gb", 2)),
    )
    with pytest.raises(PartitionError, match=r"2g.20gb needs memory slices 2-3 but 3g.40gb"):
        validate_partition("H100", overlapping)
    with pytest.raises(PartitionError, match=r"T4 does not support MIG"):
        validate_partition("T4", overlapping)


def test_advertised_resources_like_the_gpu_operator() -> None:
    node = _node(
        "A100-80GB",
        [
            partition_gpu("A100-80GB", {"mig": "all-balanced"}),
            partition_gpu("A100-80GB", {"mig": "all-1g.10gb"}),
            partition_gpu("A100-80GB", {"mig": "all-enabled"}),
            Partition.time_sliced(4),
            Partition.whole(),
        ],
    )
    assert advertised_resources(node) == {
        "cpu": 96_000,
        "memory": 1024 * GIB,
        "pods": 110,
        "nvidia.com/gpu": 4 + 1,  # time-slicing multiplies; MIG-mode GPUs do not count
        "nvidia.com/mig-1g.10gb": 2 + 7,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-3g.40gb": 1,
    }
    me = _node("H100", [partition_gpu("H100", "3g.40gb,1g.10gb+me")])
    assert advertised_resources(me)["nvidia.com/mig-1g.10gb.me"] == 1
    assert advertised_resources(me)["nvidia.com/gpu"] == 0
    for name in advertised_resources(me):
        assert RESOURCE_NAME.match(name), name
    cpu_only = Node("cpu", 8000, 32 * GIB)
    assert advertised_resources(cpu_only) == {"cpu": 8000, "memory": 32 * GIB}


def test_node_labels_like_gfd_and_mig_manager() -> None:
    node = _node("A100-80GB", [partition_gpu("A100-80GB", "all-balanced")] * 2)
    labels = node_labels(node)
    assert labels["team"] == "ml"
    assert labels["topology.kubernetes.io/zone"] == "eu-1a"
    assert labels["nvidia.com/gpu.clique"] == "nvl-7"
    assert labels["kubernetes.io/hostname"] == "n1"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.memory"] == "81920"
    assert labels["nvidia.com/gpu.family"] == "ampere"
    assert labels["nvidia.com/mig.config"] == "all-balanced"
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "4"
    assert labels["nvidia.com/mig-3g.40gb.count"] == "2"
    assert labels["nvidia.com/mig-3g.40gb.slices.gi"] == "3"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    for key, value in labels.items():
        assert LABEL_NAME.match(key), key
        assert LABEL_VALUE.match(value) and len(value) <= 63, (key, value)

    mixed = _node("A100-80GB", [partition_gpu("A100-80GB", "all-balanced"), Partition.whole()])
    assert node_labels(mixed)["nvidia.com/mig.config"] == "custom"
    whole = _node("H100", [Partition.whole()] * 8)
    assert node_labels(whole)["nvidia.com/mig.config"] == "all-disabled"
    assert node_labels(whole)["nvidia.com/gpu.count"] == "8"

    shared = _node("L40S", [Partition.time_sliced(4)] * 2)
    labels = node_labels(shared)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert "nvidia.com/mig.config" not in labels
    assert labels["nvidia.com/mig.capable"] == "false"
    # The product label still resolves to the model.
    assert lookup(labels["nvidia.com/gpu.product"]).name == "L40S"


def test_mig_config_label_round_trip() -> None:
    for config in ("all-balanced", "all-1g.10gb", "all-3g.40gb", "all-disabled"):
        partition = parse_mig_config_label("H100", config)
        node = _node("H100", [partition] * 2)
        assert node_labels(node)["nvidia.com/mig.config"] == config
    with pytest.raises(PartitionError, match=r"custom"):
        parse_mig_config_label("H100", "custom")


def test_repartition_refuses_a_gpu_in_use() -> None:
    node = _node("A100-80GB", [partition_gpu("A100-80GB", "all-1g.10gb"), Partition.whole()])
    busy = {"gpu-0-mig-1g10gb-3"}
    assert "gpu-0-mig-1g10gb-3" in device_names(node.gpus[0])
    with pytest.raises(PartitionError) as caught:
        repartition(node, 0, "all-3g.40gb", in_use=busy)
    message = str(caught.value)
    assert "GPU 0 of node n1" in message and "gpu-0-mig-1g10gb-3 in use" in message
    # The original node is untouched; another GPU of it can still change.
    assert node.gpus[0].partition.config == "all-1g.10gb"
    changed = repartition(node, 1, {"mig": "all-balanced"}, in_use=busy)
    assert changed is not node
    assert changed.gpus[1].partition.config == "all-balanced"
    assert node.gpus[1].partition == Partition.whole()
    assert advertised_resources(changed)["nvidia.com/mig-3g.40gb"] == 1
    # Once the device is free, GPU 0 can change too.
    freed = repartition(changed, 0, "whole", in_use=set())
    assert freed.gpus[0].partition == Partition.whole()
    with pytest.raises(PartitionError, match=r"gpu-1 in use"):
        repartition(node, 1, "all-balanced", in_use={"n1/gpu-1"})
    with pytest.raises(PartitionError, match=r"has no GPU 9"):
        repartition(node, 9, "whole")
    with pytest.raises(PartitionError, match=r"node n1 GPU 1: unknown profile"):
        repartition(node, 1, {"mig": "all-5g.20gb"})


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["whole", "all-balanced", "all-1g.10gb", "all-3g.40gb", "time-slicing:3", "all-enabled"]
        ),
        min_size=1,
        max_size=8,
    )
)
def test_advertised_gpu_count_matches_partitions(specs: list[str]) -> None:
    partitions = [partition_gpu("H100", s) for s in specs]
    resources = advertised_resources(_node("H100", partitions))
    whole = sum(1 for s in specs if s == "whole")
    replicas = sum(3 for s in specs if s.startswith("time-slicing"))
    assert resources["nvidia.com/gpu"] == whole + replicas
    mig_devices = sum(v for k, v in resources.items() if k.startswith("nvidia.com/mig-"))
    assert mig_devices == sum(len(p.instances) for p in partitions)


def test_openb_fleet_advertises_its_gpus() -> None:
    if not OPENB.exists():
        pytest.skip(f"Alibaba openb node list not found at {OPENB} (../shared/data is absent)")
    total = 0
    products: Counter[str] = Counter()
    with OPENB.open(newline="") as handle:
        for row in csv.DictReader(handle):
            count = int(row["gpu"])
            node = Node(
                name=row["sn"],
                cpu_milli=int(row["cpu_milli"]),
                memory_bytes=int(row["memory_mib"]) * 2**20,
                gpus=[
                    GPU(i, f"GPU-{row['sn']}-{i}", lookup(row["model"]).name, 0)
                    for i in range(count)
                ],
            )
            total += advertised_resources(node)["nvidia.com/gpu"]
            labels = node_labels(node)
            products[labels["nvidia.com/gpu.product"]] += int(labels["nvidia.com/gpu.count"])
    assert total == 6212
    assert products == {
        "G2": 4392,
        "Tesla-T4": 842,
        "G3": 312,
        "Tesla-P100-PCIE-16GB": 265,
        "Tesla-V100-SXM2-32GB": 204,
        "Tesla-V100-SXM2-16GB": 195,
        "NVIDIA-A10": 2,
    }
