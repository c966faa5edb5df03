"""The YAML inventory: groups and patterns, partitioning, defaults, and errors that point."""

from __future__ import annotations

import copy
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.model.devices import PartitionMode
from gpuaas.model.node import TaintEffect
from gpuaas.supply.loaders import FleetFileError, load_demo_fleet, load_fleet
from gpuaas.supply.loaders.inventory import inventory_from_document, load_inventory
from gpuaas.supply.mig import check_layout, layout_counts
from gpuaas.supply.partition import advertised_resources, node_labels

DOCS = Path(__file__).resolve().parents[3] / "docs" / "inventory.md"


def fleet_doc(*nodes: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"apiVersion": "gpuaas.io/v1", "kind": "Fleet", **top, "nodes": list(nodes)}


def h100_group(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": "h100-{i:03}",
        "count": 64,
        "cpu": "192",
        "memory": "2Ti",
        "gpus": {"model": "H100", "count": 8},
        "topology": {"zone": "z1", "rack": "rack-{i/8}", "nvlinkDomain": "nvl-{i/8:02}"},
    }
    entry.update(changes)
    return entry


def load(doc: dict[str, Any]) -> Any:
    return inventory_from_document(doc, "fleet.yaml")


def test_a_group_of_64_identical_nodes() -> None:
    fleet = load(fleet_doc(h100_group()))
    assert len(fleet.nodes) == 64 and fleet.gpu_count == 512
    names = [node.name for node in fleet.nodes]
    assert names[0] == "h100-001" and names[-1] == "h100-064"
    racks = Counter(node.topology.rack for node in fleet.nodes)
    assert racks == {f"rack-{r}": 8 for r in range(1, 9)}
    assert fleet.nodes[8].topology.nvlink_domain == "nvl-02"
    node = fleet.nodes[0]
    assert (node.cpu_milli, node.memory_bytes) == (192_000, 2 * 2**40)
    assert {gpu.model for gpu in node.gpus} == {"H100-80GB"}
    assert node.labels["topology.gpuaas.io/rack"] == "rack-1"
    assert node.labels["kubernetes.io/hostname"] == "h100-001"
    uuids = [gpu.uuid for node in fleet.nodes for gpu in node.gpus]
    assert len(set(uuids)) == 512


def test_start_and_single_nodes() -> None:
    fleet = load(
        fleet_doc(
            {"name": "gpu-{i}", "count": 2, "start": 0, "cpu": 8, "memory": "64Gi"},
            {"name": "login", "cpu": "500m", "memory": "1Gi"},
        )
    )
    assert [node.name for node in fleet.nodes] == ["gpu-0", "gpu-1", "login"]
    assert fleet.nodes[2].cpu_milli == 500
    assert fleet.gpu_count == 0


def test_defaults_merge_and_override() -> None:
    doc = fleet_doc(
        {"name": "a", "labels": {"team": "x"}, "topology": {"rack": "r1"}},
        {"name": "b", "cpu": 4, "taints": [], "gpus": {"count": 2}},
        defaults={
            "cpu": 64,
            "memory": "256Gi",
            "labels": {"pool": "p"},
            "topology": {"zone": "z"},
            "taints": ["dedicated=ml:NoExecute"],
            "gpus": {"model": "L4", "count": 1},
        },
    )
    doc["nodes"].append({"name": "login", "gpus": "none"})
    a, b, login = load(doc).nodes
    assert login.gpus == [] and login.cpu_milli == 64_000
    assert a.labels["pool"] == "p" and a.labels["team"] == "x"
    assert (a.topology.zone, a.topology.rack) == ("z", "r1")
    assert a.taints[0].key == "dedicated" and a.taints[0].effect is TaintEffect.NO_EXECUTE
    assert len(a.gpus) == 1 and a.gpus[0].model == "L4"
    assert b.cpu_milli == 4000 and b.taints == [] and len(b.gpus) == 2


def test_partitioning_forms() -> None:
    doc = fleet_doc(
        {
            "name": "a100",
            "cpu": 64,
            "memory": "1Ti",
            "gpus": {
                "model": "A100-80GB",
                "count": 8,
                "partitioning": "all-1g.10gb",
                "perGpu": [
                    {"indices": "0-1", "partitioning": {"mig": {"3g.40gb": 2}}},
                    {"indices": [2], "partitioning": {"mig": "all-balanced"}},
                    {"indices": 3, "partitioning": "whole"},
                    {"indices": "4,5", "partitioning": {"timeSlicing": {"replicas": 3}}},
                    {"indices": 6, "partitioning": "mig:3g.40gb,2g.20gb,2x1g.10gb"},
                ],
            },
        }
    )
    gpus = load(doc).nodes[0].gpus
    assert layout_counts(gpus[0].partition.instances) == {"3g.40gb": 2}
    assert layout_counts(gpus[2].partition.instances) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert gpus[3].partition.mode is PartitionMode.WHOLE
    assert gpus[4].partition.mode is PartitionMode.TIME_SLICED and gpus[5].partition.replicas == 3
    assert layout_counts(gpus[6].partition.instances) == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    assert layout_counts(gpus[7].partition.instances) == {"1g.10gb": 7}
    for gpu in gpus:
        if gpu.partition.mode is PartitionMode.MIG:
            check_layout("A100-80GB", gpu.partition.instances)  # valid by NVIDIA's table


def test_numa_nodes_and_memory_for_unknown_models() -> None:
    doc = fleet_doc(
        {
            "name": "x",
            "cpu": 8,
            "memory": "8Gi",
            "gpus": {"model": "MI300X", "count": 8, "numaNodes": 2, "memory": "192Gi"},
            "resources": {"ephemeral-storage": "1Ti", "rdma/ib": 8},
        }
    )
    node = load(doc).nodes[0]
    assert [gpu.numa_node for gpu in node.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert node.gpus[0].memory_mib == 192 * 1024
    assert node.extra == {"ephemeral-storage": 2**40, "rdma/ib": 8}


def bad(entry_changes: dict[str, Any] | None = None, **top: Any) -> str:
    entry = {"name": "n1", "cpu": 8, "memory": "8Gi", "gpus": {"model": "A100-80GB", "count": 2}}
    entry.update(entry_changes or {})
    with pytest.raises(FleetFileError) as error:
        load(fleet_doc({"name": "n0", "cpu": 1, "memory": "1Gi"}, entry, **top))
    return str(error.value)


def test_error_names_file_entry_and_field() -> None:
    doc = fleet_doc(
        {"name": "h100-rack1-001", "cpu": 1, "memory": "1Gi"},
        {"name": "h100-rack1-002", "cpu": 1, "memory": "1Gi"},
        {
            "name": "h100-rack1-003",
            "cpu": 1,
            "memory": "1Gi",
            "gpus": {"model": "H100", "count": -1},
        },
    )
    with pytest.raises(FleetFileError) as error:
        inventory_from_document(doc, "fleet.yaml")
    assert str(error.value) == (
        "fleet.yaml: nodes[2] (h100-rack1-003): gpus.count: must be a positive integer, got -1"
    )
    assert (error.value.entry, error.value.field) == ("nodes[2] (h100-rack1-003)", "gpus.count")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"gpu": {"count": 1}}, "nodes[1] (n1): gpu: unknown key 'gpu' (allowed: name, count,"),
        ({"gpus": {"model": "L4", "cnt": 1}}, "nodes[1] (n1): gpus.cnt: unknown key 'cnt'"),
        ({"cpu": "lots"}, "nodes[1] (n1): cpu: 'lots' is not a quantity"),
        ({"memory": "-1Gi"}, "nodes[1] (n1): memory: must not be negative"),
        ({"cpu": 0}, "nodes[1] (n1): cpu: must be greater than zero"),
        (
            {"count": 2.5, "name": "g-{i}"},
            "nodes[1] (g-{i}): count: must be a positive integer, got 2.5",
        ),
        ({"count": 2}, "nodes[1] (n1): name: a group of 2 nodes needs an index placeholder"),
        ({"name": "n-{i}"}, "nodes[1] (n-{i}): name: 'n-{i}' has an index placeholder; add count"),
        ({"name": "n-{x}", "count": 2}, "nodes[1] (n-{x}): name: unknown placeholder '{x}'"),
        ({"name": "N_1"}, "nodes[1] (N_1): name: 'N_1' is not a valid node name"),
        ({"name": "n0"}, "nodes[1] (n0): name: duplicate node name, already defined by nodes[0]"),
        (
            {"gpus": {"model": "A100-80GB", "count": 2, "partitioning": {"mig": {"4g.40gb": 2}}}},
            "nodes[1] (n1): gpus.partitioning: 4g.40gb",  # the partitioner says why
        ),
        (
            {"gpus": {"model": "L40S", "count": 2, "partitioning": "all-1g.10gb"}},
            "nodes[1] (n1): gpus.partitioning: L40S",
        ),
        (
            {
                "gpus": {
                    "model": "L40S",
                    "count": 2,
                    "partitioning": {"timeSlicing": {"replica": 2}},
                }
            },
            "nodes[1] (n1): gpus.partitioning.timeSlicing.replica: unknown key 'replica'",
        ),
        (
            {
                "gpus": {
                    "model": "L40S",
                    "count": 2,
                    "partitioning": {"mig": "all-1g.10gb", "timeSlicing": {}},
                }
            },
            "nodes[1] (n1): gpus.partitioning: give exactly one of mig, timeSlicing or mps",
        ),
        (
            {
                "gpus": {
                    "model": "A100-80GB",
                    "count": 2,
                    "perGpu": [{"indices": "1-2", "partitioning": "whole"}],
                }
            },
            "nodes[1] (n1): gpus.perGpu[0].indices: GPU index 2 is out of range",
        ),
        (
            {
                "gpus": {
                    "model": "A100-80GB",
                    "count": 2,
                    "perGpu": [
                        {"indices": 0, "partitioning": "whole"},
                        {"indices": [0], "partitioning": "all-1g.10gb"},
                    ],
                }
            },
            "nodes[1] (n1): gpus.perGpu[1].indices: GPU 0 is already partitioned by gpus.perGpu[0]",
        ),
        ({"gpus": {"count": 2}}, "nodes[1] (n1): gpus.model: is required"),
        (
            {"gpus": {"model": "T4", "count": 8000}},
            "nodes[1] (n1): gpus.count: must be at most 128",
        ),
        ({"gpus": {"model": "T4"}}, "nodes[1] (n1): gpus.count: is required"),
        (
            {"taints": [{"key": "a", "effect": "Never"}]},
            "nodes[1] (n1): taints[0].effect: must be one of",
        ),
        ({"taints": ["novalue"]}, "nodes[1] (n1): taints[0]: expected 'key=value:Effect'"),
        (
            {"labels": {"bad key": "v"}},
            "nodes[1] (n1): labels.bad key: label key 'bad key' is invalid",
        ),
        ({"labels": {"k": "v v"}}, "nodes[1] (n1): labels.k: label value 'v v' is invalid"),
        ({"labels": {"k": ["x"]}}, "nodes[1] (n1): labels.k: expected a string, got a list"),
        (
            {"labels": {"topology.gpuaas.io/rack": "r2"}, "topology": {"rack": "r1"}},
            "nodes[1] (n1): labels.topology.gpuaas.io/rack: 'r2' contradicts topology.rack 'r1'",
        ),
        ({"topology": {"row": "x"}}, "nodes[1] (n1): topology.row: unknown key 'row'"),
        (
            {"resources": {"nvidia.com/gpu": 8}},
            "nodes[1] (n1): resources.nvidia.com/gpu: nvidia.com/gpu comes from",
        ),
        ({"cpu": None}, "nodes[1] (n1): cpu: expected a quantity"),
    ],
)
def test_bad_entries(changes: dict[str, Any], expected: str) -> None:
    message = bad(changes)
    assert message.startswith("fleet.yaml: " + expected), message


def test_missing_cpu_names_defaults() -> None:
    doc = fleet_doc({"name": "a", "memory": "1Gi"})
    with pytest.raises(
        FleetFileError, match=r"nodes\[0\] \(a\): cpu: is required \(here or in defaults\)"
    ):
        load(doc)


def test_bad_defaults_are_reported_as_defaults() -> None:
    message = bad(defaults={"gpus": {"count": 0}})
    assert message == "fleet.yaml: defaults: gpus.count: must be a positive integer, got 0"


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            {"kind": "Fleet", "nodes": []},
            "fleet.yaml: apiVersion: must be 'gpuaas.io/v1', got None",
        ),
        (
            {"apiVersion": "gpuaas.io/v1", "kind": "Flet", "nodes": []},
            "fleet.yaml: kind: must be 'Fleet'",
        ),
        (
            {"apiVersion": "gpuaas.io/v1", "kind": "Fleet", "nodes": []},
            "fleet.yaml: nodes: expected a non-empty",
        ),
        (
            {"apiVersion": "gpuaas.io/v1", "kind": "Fleet", "node": []},
            "fleet.yaml: node: unknown key 'node'",
        ),
        ([1, 2], "fleet.yaml: expected a mapping, got a list"),
    ],
)
def test_bad_top_level(doc: object, expected: str) -> None:
    with pytest.raises(FleetFileError) as error:
        inventory_from_document(doc, "fleet.yaml")
    assert str(error.value).startswith(expected)


def test_file_level_errors(tmp_path: Path) -> None:
    broken = tmp_path / "fleet.yaml"
    broken.write_text("apiVersion: gpuaas.io/v1\nkind: Fleet\nnodes:\n  - name: [a\n")
    with pytest.raises(FleetFileError, match=r"fleet\.yaml: line \d+, column \d+: not valid YAML"):
        load_fleet(broken)
    twice = tmp_path / "twice.yaml"
    twice.write_text("apiVersion: gpuaas.io/v1\nkind: Fleet\nkind: Fleet\nnodes: []\n")
    with pytest.raises(
        FleetFileError, match=r"line 3, column 1: not valid YAML: found duplicate key 'kind'"
    ):
        load_fleet(twice)
    other = tmp_path / "pod.yaml"
    other.write_text("apiVersion: v1\nkind: Pod\n")
    with pytest.raises(FleetFileError, match=r"pod\.yaml: not a fleet file: .*got kind 'Pod'"):
        load_fleet(other)
    with pytest.raises(FleetFileError, match="is a directory"):
        load_fleet(tmp_path)


def test_json_inventory(tmp_path: Path) -> None:
    import json

    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(fleet_doc(h100_group(count=3))))
    assert load_fleet(path).gpu_count == 24
    assert load_inventory(path).gpu_count == 24


def test_docs_example_loads() -> None:
    """The example in docs/inventory.md is a valid inventory and says what its comments say."""
    block = re.search(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)
    assert block is not None
    fleet = load(yaml.safe_load(block.group(1)))
    h100 = [node for node in fleet.nodes if node.name.startswith("h100-")]
    assert len(h100) == 64 and h100[-1].name == "h100-064"
    assert Counter(node.topology.rack for node in h100) == {f"rack-{r:02}": 8 for r in range(1, 9)}
    assert Counter(node.topology.block for node in h100) == {"block-1": 32, "block-2": 32}
    a100 = next(node for node in fleet.nodes if node.name == "a100-01")
    modes = [gpu.partition.describe() for gpu in a100.gpus]
    assert modes[:6] == ["mig 7x1g.10gb"] * 6 and modes[7] == "whole"


def test_demo_fleet_is_what_it_claims() -> None:
    fleet = load_demo_fleet()
    by_model: dict[str, list[Any]] = {}
    for node in fleet.nodes:
        by_model.setdefault(node.gpu_model, []).append(node)
    h100 = by_model["H100-80GB"]
    assert len(h100) >= 8 and all(len(node.gpus) == 8 for node in h100)
    assert all(gpu.partition.mode is PartitionMode.WHOLE for n in h100 for gpu in n.gpus)
    racks = Counter(node.topology.rack for node in h100)
    domains = Counter(node.topology.nvlink_domain for node in h100)
    assert len(racks) > 1 and len(domains) > 1 and "" not in racks and "" not in domains
    a100 = by_model["A100-80GB"]
    assert all(any(gpu.partition.mode is PartitionMode.MIG for gpu in n.gpus) for n in a100)
    l40s = by_model["L40S"]
    assert all(gpu.partition.mode is PartitionMode.TIME_SLICED for n in l40s for gpu in n.gpus)
    # and it advertises and labels itself the GPU operator's way
    assert advertised_resources(l40s[0])["nvidia.com/gpu"] == 4 * len(l40s[0].gpus)
    assert advertised_resources(a100[0])["nvidia.com/mig-1g.10gb"] > 0
    assert node_labels(h100[0])["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_loading_does_not_mutate_the_document() -> None:
    doc = fleet_doc(h100_group(count=2), defaults={"labels": {"a": "b"}})
    before = copy.deepcopy(doc)
    load(doc)
    assert doc == before


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(1, 200),
    start=st.integers(0, 5),
    per_rack=st.integers(1, 16),
    width=st.integers(0, 4),
)
def test_group_patterns(count: int, start: int, per_rack: int, width: int) -> None:
    pad = f":0{width}" if width else ""
    entry = {
        "name": f"n-{{i{pad}}}",
        "count": count,
        "start": start,
        "cpu": 1,
        "memory": "1Gi",
        "topology": {"rack": f"r{{i/{per_rack}}}"},
    }
    fleet = load(fleet_doc(entry))
    names = [node.name for node in fleet.nodes]
    assert len(names) == count == len(set(names))
    assert names[0] == f"n-{str(start).zfill(width)}"
    racks = Counter(node.topology.rack for node in fleet.nodes)
    assert len(racks) == -(-count // per_rack)  # ceil
    assert max(racks.values()) <= per_rack
    assert min(int(rack[1:]) for rack in racks) == start


_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 100),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.sampled_from(["whole", "all-1g.10gb", "H100", "0-3", "2Gi", "{i}", "x-{i/2}", "NoSchedule"]),
)
_keys = st.sampled_from(
    [
        *("name", "count", "cpu", "memory", "gpus", "model", "partitioning", "perGpu", "indices"),
        *("mig", "timeSlicing", "replicas", "topology", "rack", "labels", "taints", "key", "bogus"),
    ]
)
_values = st.recursive(
    _leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=10,
)
_PLACES = [
    ("nodes", 0),
    ("nodes", 0, "name"),
    ("nodes", 0, "count"),
    ("nodes", 0, "gpus"),
    ("nodes", 0, "gpus", "partitioning"),
    ("nodes", 0, "gpus", "perGpu"),
    ("nodes", 0, "topology"),
    ("nodes", 0, "labels"),
    ("nodes", 0, "taints"),
    ("nodes", 0, "resources"),
    ("defaults",),
]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(_PLACES), _values)
def test_any_bad_value_gives_a_fleet_file_error(place: tuple[Any, ...], value: object) -> None:
    """Whatever a file holds, the loader answers with a fleet or a FleetFileError, nothing else."""
    doc = fleet_doc(h100_group(count=2, gpus={"model": "A100-80GB", "count": 2}))
    target: Any = doc
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = value
    try:
        load(doc)
    except FleetFileError as error:
        assert str(error).startswith("fleet.yaml: ")
