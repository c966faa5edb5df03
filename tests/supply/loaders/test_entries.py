"""Loaded nodes written back as inventory entries: what the service stores means the same node."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.model.devices import GPU
from gpuaas.model.network import LinkType, Nic
from gpuaas.model.node import Node, Taint, TaintEffect
from gpuaas.model.topology import Topology
from gpuaas.supply.catalogue import CATALOGUE
from gpuaas.supply.loaders import FleetFileError, entries_from_text, gpu_uuid
from gpuaas.supply.loaders.entries import inventory_entry
from gpuaas.supply.loaders.inventory import inventory_from_document
from gpuaas.supply.mig import valid_full_layouts
from gpuaas.supply.partition import partition_gpu

MODELS = [*sorted(CATALOGUE), "G2", "RTX-PRO-6000-Blackwell-Server-Edition"]


def _specs(model: str) -> list[Any]:
    specs: list[Any] = [None, "time-slicing:2", "time-slicing:7", "mps:3", "mps:16"]
    catalogued = CATALOGUE.get(model)
    if catalogued is not None and catalogued.mig_capable:
        profiles = [p.name for p in catalogued.mig_profiles if not p.media_extensions]
        specs += [f"all-{p}" for p in profiles] + ["all-balanced"]
        specs += [{"mig": [i.profile for i in layout]} for layout in valid_full_layouts(model)[:6]]
    return specs


@st.composite
def nodes(draw: st.DrawFn) -> Node:
    model = draw(st.sampled_from(MODELS))
    count = draw(st.integers(0, 8))
    name = draw(st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True))
    memory = CATALOGUE[model].memory_mib if model in CATALOGUE else draw(st.integers(1, 200_000))
    gpus = []
    for index in range(count):
        spec = draw(st.sampled_from(_specs(model)))
        if isinstance(spec, dict):  # a full layout as profile counts
            counts: dict[str, int] = {}
            for profile in spec["mig"]:
                counts[profile] = counts.get(profile, 0) + 1
            spec = {"mig": counts}
        partition = partition_gpu(model, spec)
        root = draw(st.sampled_from(["", "pci0000:15", "pci0000:97"]))
        gpus.append(GPU(index, gpu_uuid(name, index), model, memory, partition, pcie_root=root))
    zone = draw(st.sampled_from(["", "us-east-1a"]))
    taints = draw(
        st.lists(
            st.builds(
                Taint,
                st.sampled_from(["nvidia.com/gpu", "dedicated"]),
                st.sampled_from(["", "present"]),
                st.sampled_from(list(TaintEffect)),
            ),
            max_size=2,
            unique_by=lambda t: (t.key, t.effect),
        )
    )
    labels = {"kubernetes.io/hostname": name, "team": draw(st.sampled_from(["a", "b-1"]))}
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    return Node(
        name=name,
        cpu_milli=draw(st.integers(1, 400_000)),
        memory_bytes=draw(st.integers(1, 2**42)),
        gpus=gpus,
        topology=Topology(zone=zone),
        labels=labels,
        taints=taints,
        extra=draw(st.dictionaries(st.sampled_from(["pods", "rdma/ib"]), st.integers(1, 500))),
        nics=draw(st.lists(nics(), max_size=3, unique_by=lambda n: n.name)),
    )


@st.composite
def nics(draw: st.DrawFn) -> Nic:
    link = draw(st.sampled_from(list(LinkType)))
    return Nic(
        name=draw(st.sampled_from(["mlx5_0", "mlx5_1", "ens1f0"])),
        pool={LinkType.INFINIBAND: "nvidia.com/rdma_ib", LinkType.ROCE: "openshift.io/roce",
              LinkType.ETHERNET: "openshift.io/eth"}[link],
        link=link,
        speed_gbps=draw(st.sampled_from([0, 200, 400])),
        rdma=draw(st.booleans()),
        vfs=draw(st.integers(1, 16)),
        pcie_root=draw(st.sampled_from(["", "pci0000:15"])),
        numa_node=draw(st.sampled_from([None, 0, 1])),
        rail=draw(st.sampled_from(["", "rail-3"])),
        fabric=draw(st.sampled_from(["", "ib-a"])),
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(nodes())
def test_an_entry_loads_back_as_the_same_node(node: Node) -> None:
    document = {"apiVersion": "gpuaas.io/v1", "kind": "Fleet", "nodes": [inventory_entry(node)]}
    (again,) = inventory_from_document(document, "stored").nodes
    assert again.gpus == node.gpus
    assert (again.cpu_milli, again.memory_bytes, again.extra) == (
        node.cpu_milli,
        node.memory_bytes,
        node.extra,
    )
    assert again.taints == node.taints and again.topology == node.topology
    assert again.nics == node.nics
    assert {k: again.labels[k] for k in node.labels} == node.labels


def test_a_node_with_two_gpu_models_cannot_be_one_entry() -> None:
    gpus = [GPU(0, "u0", "H100-80GB", 81559), GPU(1, "u1", "A100-80GB", 81920)]
    with pytest.raises(FleetFileError, match=r"GPUs of several models \(A100-80GB, H100-80GB\)"):
        inventory_entry(Node("mixed", 1000, 2**30, gpus))


def test_csv_rows_become_entries_with_the_catalogue_model() -> None:
    text = "sn,cpu_milli,memory_mib,gpu,model\nn-1,8000,1024,2,V100M32\nn-2,4000,512,0,\n"
    entries, defaults = entries_from_text(text, "nodes.csv")
    assert defaults is None
    assert entries[0]["gpus"] == {"model": "V100-32GB", "count": 2}
    assert entries[0]["labels"]["gpuaas.io/source-gpu-model"] == "V100M32"
    assert "gpus" not in entries[1] and entries[1]["cpu"] == "4000m"
