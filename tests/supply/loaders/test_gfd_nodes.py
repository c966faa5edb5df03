"""Real node objects of GPUs new to the catalogue or not in it: model, count, memory, MIG and
sharing mode as GPU feature discovery and the device plugin label them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaas.model.devices import PartitionMode
from gpuaas.model.node import Fleet, Node
from gpuaas.model.resources import NVIDIA_GPU
from gpuaas.supply import catalogue
from gpuaas.supply.devices import gpu_devices
from gpuaas.supply.loaders import FleetFileError, entries_from_text, fleet_from_text, load_fleet
from gpuaas.supply.loaders.entries import inventory_entry
from gpuaas.supply.loaders.inventory import inventory_from_document
from gpuaas.supply.loaders.kubernetes import nodes_from_document
from gpuaas.supply.mig import layout_counts
from gpuaas.supply.partition import advertised_resources, node_labels

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NEW_GPUS = FIXTURES / "kubectl-get-nodes-new-gpus.yaml"
OLD_FIXTURE = FIXTURES / "kubectl-get-nodes.yaml"


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return load_fleet(NEW_GPUS)


@pytest.fixture
def document() -> dict[str, Any]:
    return yaml.safe_load(NEW_GPUS.read_text())


def node(fleet: Fleet, name: str) -> Node:
    return next(n for n in fleet.nodes if n.name == name)


def item(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next(i for i in document["items"] if i["metadata"]["name"] == name)


def modes(n: Node) -> set[PartitionMode]:
    return {gpu.partition.mode for gpu in n.gpus}


@pytest.mark.parametrize(
    ("name", "model", "count", "memory_mib", "mode", "replicas"),
    [
        ("rtx4090-07", "RTX-4090", 8, 24564, PartitionMode.WHOLE, 1),
        ("rtxpro-b-01", "RTX-PRO-6000-Blackwell-Server-Edition", 8, 97887, PartitionMode.WHOLE, 1),
        ("l40s-mps-03", "L40S", 4, 46068, PartitionMode.MPS, 4),
        ("gh200-node-11", "GH200-96GB", 1, 97871, PartitionMode.WHOLE, 1),
        ("a800-ts-05", "A800-SXM4-80GB", 8, 81920, PartitionMode.TIME_SLICED, 2),
        ("ip-10-0-12-201.ec2.internal", "A10G", 4, 23028, PartitionMode.WHOLE, 1),
        ("h20-infer-01", "H20", 8, 97871, PartitionMode.MIG, 1),
        ("a30-mig-02", "A30", 4, 24576, PartitionMode.MIG, 1),
    ],
)
def test_model_count_memory_and_mode(
    fleet: Fleet,
    name: str,
    model: str,
    count: int,
    memory_mib: int,
    mode: PartitionMode,
    replicas: int,
) -> None:
    n = node(fleet, name)
    assert [gpu.model for gpu in n.gpus] == [model] * count
    assert {gpu.memory_mib for gpu in n.gpus} == {memory_mib}
    assert modes(n) == {mode}
    assert {gpu.partition.replicas for gpu in n.gpus} == {replicas}


def test_h20_mig_mixed_all_1g_12gb(fleet: Fleet) -> None:
    n = node(fleet, "h20-infer-01")
    assert catalogue.lookup("H20").mig_capable
    for gpu in n.gpus:
        assert layout_counts(gpu.partition.instances) == {"1g.12gb": 7}
        assert gpu.partition.config == "all-1g.12gb"
    assert advertised_resources(n)["nvidia.com/mig-1g.12gb"] == 56
    assert advertised_resources(n)[NVIDIA_GPU] == 0


def test_a30_mig_single_strategy_uses_its_four_slices(fleet: Fleet) -> None:
    n = node(fleet, "a30-mig-02")
    for gpu in n.gpus:
        assert layout_counts(gpu.partition.instances) == {"1g.6gb": 4}
        assert sorted(i.start for i in gpu.partition.instances) == [0, 1, 2, 3]
    assert advertised_resources(n)["nvidia.com/mig-1g.6gb"] == 16


def test_mps_is_its_own_mode_not_time_slicing(fleet: Fleet) -> None:
    n = node(fleet, "l40s-mps-03")
    assert modes(n) == {PartitionMode.MPS}
    assert advertised_resources(n)[NVIDIA_GPU] == 16  # 4 GPUs x 4 clients, as the plugin shows
    labels = node_labels(n)
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert labels["nvidia.com/mps.capable"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S-SHARED"
    devices = gpu_devices(n, n.gpus[0])
    assert len(devices) == 4
    assert {d.attributes["sharingStrategy"] for d in devices} == {"mps"}
    # each MPS client is limited to its share of memory and SMs; a time-sliced replica is not
    assert {d.capacity["memory"].value() for d in devices} == {46068 // 4 * 2**20}
    assert {d.capacity["computePercent"].value() for d in devices} == {25}
    sliced = node(fleet, "a800-ts-05")
    shared = gpu_devices(sliced, sliced.gpus[0])
    assert {d.attributes["sharingStrategy"] for d in shared} == {"time-slicing"}
    assert {d.capacity["memory"].value() for d in shared} == {81920 * 2**20}


def test_time_slicing_with_rename_by_default_counts_gpu_shared(fleet: Fleet) -> None:
    n = node(fleet, "a800-ts-05")
    assert len(n.gpus) == 8
    assert advertised_resources(n)[NVIDIA_GPU] == 16


def test_uncatalogued_gpu_keeps_gfd_facts(fleet: Fleet) -> None:
    n = node(fleet, "rtxpro-b-01")
    labels = node_labels(n)
    assert labels["nvidia.com/gpu.family"] == "blackwell"
    assert labels["nvidia.com/gpu.compute.major"] == "12"
    assert labels["nvidia.com/gpu.memory"] == "97887"
    assert labels["gpuaas.io/source-gpu-model"] == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"


def test_memory_label_is_mib_not_a_gpu_count(document: dict[str, Any]) -> None:
    """The bug: an uncatalogued GPU's memory label was checked against the 128-GPU bound."""
    obj = item(document, "rtxpro-b-01")
    assert nodes_from_document(obj, "n.yaml").nodes[0].gpus[0].memory_mib == 97887
    obj["metadata"]["labels"]["nvidia.com/gpu.memory"] = "97887000000"  # bytes, not MiB
    with pytest.raises(FleetFileError) as error:
        nodes_from_document(obj, "n.yaml")
    assert str(error.value) == (
        "n.yaml: rtxpro-b-01: metadata.labels.nvidia.com/gpu.memory: must be an integer from 0 "
        "to 4194304, got '97887000000'"
    )


def test_uncatalogued_gpu_with_mig_devices_points_at_the_catalogue_file(
    document: dict[str, Any],
) -> None:
    obj = item(document, "rtxpro-b-01")
    obj["status"]["allocatable"]["nvidia.com/mig-1g.24gb"] = "32"
    obj["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    with pytest.raises(FleetFileError, match=r"not in the GPU catalogue.*--catalogue FILE"):
        nodes_from_document(obj, "n.yaml")


def test_sharing_mig_devices_is_refused(document: dict[str, Any]) -> None:
    obj = item(document, "h20-infer-01")
    obj["metadata"]["labels"]["nvidia.com/gpu.sharing-strategy"] = "mps"
    with pytest.raises(FleetFileError, match=r"sharing MIG devices .* is not supported"):
        nodes_from_document(obj, "n.yaml")


@pytest.mark.parametrize("path", [NEW_GPUS, OLD_FIXTURE], ids=["new-gpus", "old-fixture"])
def test_inventory_entries_describe_the_same_nodes(path: Path) -> None:
    """What the service stores for a kubectl node loads back as the same node."""
    fleet = load_fleet(path)
    entries = [inventory_entry(n) for n in fleet.nodes]
    stored = {"apiVersion": "gpuaas.io/v1", "kind": "Fleet", "nodes": entries}
    again = inventory_from_document(yaml.safe_load(yaml.safe_dump(stored)), "stored").nodes
    for before, after in zip(fleet.nodes, again, strict=True):
        assert after.gpus == before.gpus
        assert (after.cpu_milli, after.memory_bytes) == (before.cpu_milli, before.memory_bytes)
        assert after.taints == before.taints
        assert after.extra == before.extra
        assert after.topology == before.topology
        assert advertised_resources(after) == advertised_resources(before)
        # labels: the same, plus gpuaas' own topology labels for topology read from cloud labels
        assert {k: v for k, v in after.labels.items() if k in before.labels} == {
            k: v for k, v in before.labels.items() if k != "kubernetes.io/hostname"
        } | {"kubernetes.io/hostname": after.name}


def test_one_entry_point_reads_text_like_files() -> None:
    text = NEW_GPUS.read_text()
    assert fleet_from_text(text, "nodes.yaml").nodes == load_fleet(NEW_GPUS).nodes
    entries, defaults = entries_from_text(text, "nodes.yaml")
    assert defaults is None and [e["name"] for e in entries][:2] == ["h20-infer-01", "rtx4090-07"]
    as_json = yaml.safe_load(text)
    assert fleet_from_text(json.dumps(as_json), "nodes.json").nodes == load_fleet(NEW_GPUS).nodes


# --- a provider's catalogue file -------------------------------------------------------------

CATALOGUE_FILE = """\
apiVersion: gpuaas.io/v1
kind: GpuCatalogue
models:
  - name: RTX-PRO-6000
    product: NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition
    memory: 97887Mi
    family: blackwell
    computeCapability: "12.0"
    formFactor: PCIe
    aliases: [RTX-PRO-6000-96GB]
    mig:
      memorySlices: 4
      computeSlices: 4
      profiles:
        - {name: 1g.24gb, computeSlices: 1, memorySlices: 1, memory: 24Gi, maxInstances: 4,
           placements: [0, 1, 2, 3]}
        - {name: 2g.48gb, computeSlices: 2, memorySlices: 2, memory: 48Gi, maxInstances: 2,
           placements: [0, 2]}
        - {name: 4g.96gb, computeSlices: 4, memorySlices: 4, memory: 96Gi, maxInstances: 1,
           placements: [0]}
  - name: H100-96GB
    product: NVIDIA-H100-96GB-HBM3
    memory: 97871Mi
    family: hopper
    migLike: H20
"""


@pytest.fixture
def restore_catalogue() -> Iterator[None]:
    saved = (dict(catalogue.CATALOGUE), dict(catalogue._INDEX), dict(catalogue._GENERIC))
    yield
    for table, before in zip(
        (catalogue.CATALOGUE, catalogue._INDEX, catalogue._GENERIC), saved, strict=True
    ):
        table.clear()
        table.update(before)  # type: ignore[attr-defined]


def test_catalogue_file_adds_models_with_mig(
    tmp_path: Path, document: dict[str, Any], restore_catalogue: None
) -> None:
    from gpuaas.supply.catalogue_file import use_catalogue

    path = tmp_path / "gpus.yaml"
    path.write_text(CATALOGUE_FILE)
    assert catalogue.lookup("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition").generic
    models = use_catalogue(path)
    assert [m.name for m in models] == ["RTX-PRO-6000", "H100-96GB"]
    use_catalogue(path)  # the same file again changes nothing
    pro = catalogue.lookup("RTX-PRO-6000-96GB")
    assert (pro.name, pro.memory_mib, pro.compute_capability) == ("RTX-PRO-6000", 97887, (12, 0))
    assert (pro.mig_memory_slices, pro.mig_compute_slices) == (4, 4)
    assert catalogue.lookup("H100-96GB").mig_profiles == catalogue.lookup("H20").mig_profiles
    obj = item(document, "rtxpro-b-01")
    assert nodes_from_document(obj, "n.yaml").nodes[0].gpus[0].model == "RTX-PRO-6000"
    obj["status"]["allocatable"].update({"nvidia.com/gpu": "0", "nvidia.com/mig-1g.24gb": "32"})
    mig = nodes_from_document(obj, "n.yaml").nodes[0]
    assert [layout_counts(g.partition.instances) for g in mig.gpus] == [{"1g.24gb": 4}] * 8


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["models"][0].pop("memory"),
            "gpus.yaml: models[0] (RTX-PRO-6000): memory: is required",
        ),
        (
            lambda d: d["models"][0].update(colour="green"),
            "gpus.yaml: models[0] (RTX-PRO-6000): colour: unknown key",
        ),
        (
            lambda d: d["models"][0]["mig"]["profiles"][1].update(placements=[0, 3]),
            "gpus.yaml: models[0] (RTX-PRO-6000): mig.profiles[1].placements: start 3 with 2 "
            "memory slices leaves the GPU's 4",
        ),
        (
            lambda d: d["models"][0]["mig"]["profiles"][0].update(computeSlices=2),
            "gpus.yaml: models[0] (RTX-PRO-6000): mig.profiles[0].computeSlices: 1g.24gb names 1 "
            "compute slices, not 2",
        ),
        (
            lambda d: d["models"][1].update(migLike="L4"),
            "gpus.yaml: models[1] (H100-96GB): migLike: 'L4' is no MIG-capable model",
        ),
        (
            lambda d: d["models"][1].update(product="NVIDIA-H100-80GB-HBM3"),
            "gpus.yaml: 'NVIDIA-H100-80GB-HBM3' already names the catalogued model H100-80GB",
        ),
        (lambda d: d.update(kind="Fleet"), "gpus.yaml: must be apiVersion gpuaas.io/v1, kind "),
    ],
)
def test_bad_catalogue_files_name_the_model_and_field(
    tmp_path: Path, change: Any, message: str, restore_catalogue: None
) -> None:
    from gpuaas.supply.catalogue_file import CatalogueFileError, use_catalogue

    data = yaml.safe_load(CATALOGUE_FILE)
    change(data)
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CatalogueFileError) as error:
        use_catalogue(path)
    assert str(error.value).replace(str(tmp_path) + "/", "").startswith(message), error.value
    assert catalogue.lookup("RTX-PRO-6000").generic  # nothing was added
