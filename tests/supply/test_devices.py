"""Devices published like NVIDIA's DRA driver does, and the ResourceSlice that carries them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuaas.model.devices import GPU
from gpuaas.model.node import Node
from gpuaas.model.quantity import Quantity
from gpuaas.model.topology import Topology
from gpuaas.supply.catalogue import lookup
from gpuaas.supply.devices import (
    ATTRIBUTE_NAMES,
    CAPACITY_NAMES,
    MAX_DEVICES_PER_SLICE,
    device_names,
    publish_devices,
    resource_slice,
    resource_slices,
)
from gpuaas.supply.partition import partition_gpu

SCHEMA = (
    Path(__file__).resolve().parents[2]
    / ".."
    / "shared"
    / "schemas"
    / "kubernetes"
    / "derived_definitions_resource.v1.json"
)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _node(model: str, specs: list[object], name: str = "gpu-node-1") -> Node:
    info = lookup(model)
    return Node(
        name=name,
        cpu_milli=64_000,
        memory_bytes=512 * 2**30,
        gpus=[
            GPU(
                i,
                f"GPU-{name}-{i}",
                info.name,
                info.memory_mib,
                partition_gpu(model, s),
                numa_node=i // 4,
            )
            for i, s in enumerate(specs)
        ],
        topology=Topology(rack="r1", nvlink_domain="nvl-3"),
    )


def test_one_device_per_gpu_instance_and_replica() -> None:
    node = _node("H100", ["whole", "all-balanced", "time-slicing:3", "all-enabled", "whole"])
    devices = publish_devices(node)
    names = [d.name for d in devices]
    assert names == [
        "gpu-0",
        "gpu-1-mig-2g20gb-0",
        "gpu-1-mig-1g10gb-2",
        "gpu-1-mig-1g10gb-3",
        "gpu-1-mig-3g40gb-4",
        "gpu-2-ts-0",
        "gpu-2-ts-1",
        "gpu-2-ts-2",
        "gpu-4",
    ]
    assert len(set(names)) == len(names)
    assert all(DNS_LABEL.match(n) for n in names)
    assert [d.kind for d in devices] == ["gpu"] + ["mig"] * 4 + ["shared"] * 3 + ["gpu"]
    assert all(d.driver == "gpu.nvidia.com" and d.node == "gpu-node-1" for d in devices)
    # Same input, same names and UUIDs: claims keep pointing at the same device.
    again = publish_devices(node)
    assert [(d.name, d.attributes["uuid"]) for d in again] == [
        (d.name, d.attributes["uuid"]) for d in devices
    ]
    for gpu in node.gpus:
        assert device_names(gpu) == [d.name for d in devices if d.gpu_index == gpu.index]


def test_attributes_and_capacity() -> None:
    node = _node("H100", ["whole", "3g.40gb,1g.10gb+me", "time-slicing:2"])
    by_name = {d.name: d for d in publish_devices(node)}
    whole = by_name["gpu-0"]
    assert whole.attributes["type"] == "gpu"
    assert whole.attributes["productName"] == "H100-80GB"
    assert whole.attributes["uuid"] == "GPU-gpu-node-1-0"
    assert whole.attributes["index"] == 0 and whole.attributes["minor"] == 0
    assert whole.attributes["nvlinkDomain"] == "nvl-3"
    assert whole.attributes["architecture"] == "Hopper"
    assert whole.capacity["memory"] == Quantity.parse("81559Mi")

    mig = by_name["gpu-1-mig-3g40gb-0"]
    assert mig.attributes["type"] == "mig"
    assert mig.attributes["profile"] == "3g.40gb"
    assert mig.attributes["parentUUID"] == "GPU-gpu-node-1-1"
    assert str(mig.attributes["uuid"]).startswith("MIG-")
    assert mig.capacity["memory"] == Quantity.parse("40960Mi")
    assert mig.capacity["computeSlices"] == Quantity.parse("3")
    assert mig.capacity["memorySlices"] == Quantity.parse("4")
    me = by_name["gpu-1-mig-1g10gbme-4"]
    assert me.attributes["mediaExtensions"] is True

    shared = by_name["gpu-2-ts-1"]
    assert shared.attributes["type"] == "shared"
    assert shared.attributes["replica"] == 1 and shared.attributes["replicas"] == 2
    assert shared.attributes["parentUUID"] == "GPU-gpu-node-1-2"
    assert shared.capacity["memory"] == whole.capacity["memory"]
    for device in by_name.values():
        assert set(device.attributes) <= ATTRIBUTE_NAMES
        assert set(device.capacity) <= CAPACITY_NAMES
        assert len(device.attributes) + len(device.capacity) <= 32  # DRA's limit per device


def test_generic_gpu_devices() -> None:
    node = Node("trace-node", 8000, 2**34, gpus=[GPU(0, "GPU-x", "G2", 0)])
    (device,) = publish_devices(node)
    assert device.attributes["productName"] == "G2"
    assert "architecture" not in device.attributes
    assert device.capacity["memory"] == Quantity.parse(0)


@pytest.fixture(scope="module")
def slice_schema() -> dict:
    if not SCHEMA.exists():
        pytest.skip(f"Kubernetes resource.k8s.io/v1 schema not found at {SCHEMA}")
    definitions = json.loads(SCHEMA.read_text())["definitions"]
    return {
        "$ref": "#/definitions/io.k8s.api.resource.v1.ResourceSlice",
        "definitions": definitions,
    }


def _strict(schema: dict) -> dict:
    """Forbid properties the schema does not declare (swagger leaves that open)."""
    definitions = {}
    for name, definition in schema["definitions"].items():
        definition = dict(definition)
        if definition.get("type") == "object" and "properties" in definition:
            definition["additionalProperties"] = False
        definitions[name] = definition
    return {**schema, "definitions": definitions}


def test_resource_slice_validates_against_kubernetes_schema(slice_schema: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    node = _node("A100-80GB", ["whole", "all-balanced", "time-slicing:4", "all-1g.10gb.me"])
    manifest = resource_slice(node)
    jsonschema.validate(manifest, _strict(slice_schema))
    spec = manifest["spec"]
    assert manifest["apiVersion"] == "resource.k8s.io/v1"
    assert manifest["kind"] == "ResourceSlice"
    assert spec["driver"] == "gpu.nvidia.com" and spec["nodeName"] == "gpu-node-1"
    assert spec["pool"] == {"name": "gpu-node-1", "generation": 1, "resourceSliceCount": 1}
    assert len(spec["devices"]) == 1 + 4 + 4 + 1
    first = spec["devices"][0]
    assert first["attributes"]["productName"] == {"string": "A100-80GB"}
    assert first["attributes"]["index"] == {"int": 0}
    assert first["capacity"]["memory"] == {"value": "80Gi"}
    # A broken manifest is caught by the same check (the test can fail).
    broken = json.loads(json.dumps(manifest))
    broken["spec"]["devices"][0]["attributes"]["index"] = {"integer": 0}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, _strict(slice_schema))


def test_large_nodes_split_into_several_slices(slice_schema: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    node = _node("L40S", ["time-slicing:40"] * 8, name="Big_Node")
    slices = resource_slices(node)
    assert len(slices) == 3
    assert sum(len(s["spec"]["devices"]) for s in slices) == 320
    assert all(len(s["spec"]["devices"]) <= MAX_DEVICES_PER_SLICE for s in slices)
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    assert len({s["metadata"]["name"] for s in slices}) == 3
    for manifest in slices:
        jsonschema.validate(manifest, _strict(slice_schema))
        assert re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", manifest["metadata"]["name"])
    with pytest.raises(Exception, match=r"more than 128 devices"):
        resource_slice(node)
