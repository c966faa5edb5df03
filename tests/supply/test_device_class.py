"""DeviceClass CEL selectors, evaluated by cel-python in Kubernetes DRA's form."""

from __future__ import annotations

import pytest

from gpuaas.model.devices import GPU, Device
from gpuaas.model.node import Node
from gpuaas.model.quantity import Quantity
from gpuaas.model.topology import Topology
from gpuaas.supply.catalogue import lookup
from gpuaas.supply.device_class import DeviceClass, DeviceClassError, compile_selector
from gpuaas.supply.devices import publish_devices
from gpuaas.supply.partition import partition_gpu

NV = 'device.attributes["gpu.nvidia.com"]'
CAP = 'device.capacity["gpu.nvidia.com"]'


def _devices() -> list[Device]:
    def node(name: str, model: str, specs: list[str], domain: str) -> Node:
        info = lookup(model)
        return Node(
            name=name,
            cpu_milli=64_000,
            memory_bytes=2**39,
            gpus=[
                GPU(i, f"GPU-{name}-{i}", info.name, info.memory_mib, partition_gpu(model, s))
                for i, s in enumerate(specs)
            ],
            topology=Topology(nvlink_domain=domain),
        )

    nodes = [
        node("h100-a", "H100", ["whole", "whole"], "nvl-a"),
        node("a100-b", "A100-80GB", ["all-balanced"], ""),
        node("l40s-c", "L40S", ["time-slicing:2"], ""),
        node("t4-d", "T4", ["whole"], ""),
    ]
    return [d for n in nodes for d in publish_devices(n)]


DEVICES = _devices()


def _selected(*selectors: str) -> list[str]:
    return [d.name + "@" + d.node for d in DeviceClass("c", selectors).select(DEVICES)]


def test_driver_and_product_name() -> None:
    assert len(_selected('device.driver == "gpu.nvidia.com"')) == len(DEVICES)
    assert _selected('device.driver == "other.example.com"') == []
    assert _selected(f'{NV}.productName == "H100-80GB"') == ["gpu-0@h100-a", "gpu-1@h100-a"]
    assert _selected(f'{NV}.productName == "H100-80GB-SXM"') == []


def test_memory_quantity_comparisons() -> None:
    big = _selected(f'{CAP}.memory.compareTo(quantity("40Gi")) >= 0')
    assert big == ["gpu-0@h100-a", "gpu-1@h100-a", "gpu-0-ts-0@l40s-c", "gpu-0-ts-1@l40s-c"]
    assert _selected(f'{CAP}.memory.isGreaterThan(quantity("40Gi"))') == big
    small = _selected(f'{CAP}.memory.isLessThan(quantity("16Gi"))')
    assert "gpu-0@t4-d" in small and "gpu-0-mig-1g10gb-2@a100-b" in small
    assert "gpu-0@h100-a" not in small
    assert _selected(f'{CAP}.memory == quantity("15Gi")') == ["gpu-0@t4-d"]
    assert _selected(f'{CAP}.memory.isGreaterThan(quantity("1Ti"))') == []


def test_presence_and_kind_checks() -> None:
    mig = _selected(f'"profile" in {NV}')
    assert mig == [
        "gpu-0-mig-2g20gb-0@a100-b",
        "gpu-0-mig-1g10gb-2@a100-b",
        "gpu-0-mig-1g10gb-3@a100-b",
        "gpu-0-mig-3g40gb-4@a100-b",
    ]
    assert _selected(f'{NV}.type == "mig"') == mig
    assert _selected(f'!("profile" in {NV})') == [d for d in _selected("true") if d not in mig]
    # A device that lacks the attribute simply does not match.
    assert _selected(f'{NV}.profile == "3g.40gb"') == ["gpu-0-mig-3g40gb-4@a100-b"]
    assert _selected(f'{NV}.nvlinkDomain == "nvl-a"') == ["gpu-0@h100-a", "gpu-1@h100-a"]
    assert _selected(f'{NV}["type"] == "shared"', f"{NV}.replica == 1") == ["gpu-0-ts-1@l40s-c"]


def test_all_selectors_must_hold() -> None:
    assert _selected(f'{NV}.type == "gpu"', f'{CAP}.memory.compareTo(quantity("20Gi")) < 0') == [
        "gpu-0@t4-d"
    ]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('device.driver == "x" &&', "syntax error at line 1, column"),
        ("device.driver ==", "syntax error at line 1, column 15"),
        (f'{NV}.prodName == "H100"', "unknown attribute gpu.nvidia.com/prodName"),
        (f'{NV}["prodName"] == "H100"', "unknown attribute gpu.nvidia.com/prodName"),
        (
            f"{CAP}.memorySize.isGreaterThan(quantity('1'))",
            "unknown capacity gpu.nvidia.com/memorySize",
        ),
        ('device.attributes["amd.com"].family == "x"', "unknown attributes domain 'amd.com'"),
        (f"{NV}.index + 1", "must evaluate to a bool, got int"),
        (f"{CAP}.memory", "must evaluate to a bool, got quantity"),
        ('"gpu"', "must evaluate to a bool, got string"),
        (f'{NV}.index == "0"', "cannot apply == to int and string"),
        (f'{CAP}.memory.compareTo("40Gi") > 0', "expected a quantity, got"),
        ('quantity("lots").isLessThan(quantity("1"))', "'lots' is not a quantity"),
        ('node.name == "x"', "unknown name node"),
        ("", "non-empty CEL expression"),
    ],
)
def test_bad_expressions_say_why(expression: str, message: str) -> None:
    with pytest.raises(DeviceClassError) as caught:
        compile_selector(expression)
    assert message in str(caught.value)


def test_device_class_reports_its_name() -> None:
    with pytest.raises(DeviceClassError, match=r"^DeviceClass big-gpus: selector"):
        DeviceClass("big-gpus", (f"{NV}.memory > 1",))


def test_compiled_once() -> None:
    expression = f'{NV}.productName == "T4"'
    assert compile_selector(expression) is compile_selector(expression)
    before = compile_selector.cache_info().hits
    cls = DeviceClass("t4", (expression,))
    cls.select(DEVICES)
    assert compile_selector.cache_info().hits >= before + len(DEVICES)


def test_quantity_library() -> None:
    one = 'quantity("1")'
    cases = {
        f'quantity("500m").add({one}) == quantity("1500m")': True,
        f'quantity("2").sub({one}).asInteger() == 1': True,
        'quantity("1.5").isInteger()': False,
        'quantity("-3").sign() == -1': True,
        'isQuantity("64Gi") && !isQuantity("64 apples")': True,
        'quantity("1k").asApproximateFloat() == 1000.0': True,
    }
    sample = DEVICES[0]
    for expression, expected in cases.items():
        assert compile_selector(expression).matches(sample) is expected, expression


def test_manifest_round_trip() -> None:
    manifest = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "mig-small"},
        "spec": {
            "selectors": [
                {"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}},
                {"cel": {"expression": f'{NV}.type == "mig"'}},
                {"cel": {"expression": f'{CAP}.memory.isLessThan(quantity("16Gi"))'}},
            ]
        },
    }
    cls = DeviceClass.from_manifest(manifest)
    assert cls.name == "mig-small" and len(cls.selectors) == 3
    assert [d.name for d in cls.select(DEVICES)] == ["gpu-0-mig-1g10gb-2", "gpu-0-mig-1g10gb-3"]
    assert cls.manifest() == manifest
    with pytest.raises(DeviceClassError, match=r"metadata.name is required"):
        DeviceClass.from_manifest({"spec": {}})
    with pytest.raises(DeviceClassError, match=r"spec.selectors\[0\].cel.expression is required"):
        DeviceClass.from_manifest({"metadata": {"name": "x"}, "spec": {"selectors": [{}]}})


def test_qualified_attributes_land_in_their_domain() -> None:
    device = Device(
        name="d0",
        node="n",
        driver="gpu.nvidia.com",
        kind="gpu",
        gpu_index=0,
        attributes={"productName": "L4", "resource.kubernetes.io/pcieRoot": "pci0000:00"},
        capacity={"memory": Quantity.parse("24Gi")},
    )
    assert compile_selector(f'{NV}.productName == "L4"').matches(device)
    assert compile_selector('"pcieRoot" in device.attributes["resource.kubernetes.io"]').matches(
        device
    )


def test_reused_results_never_leak_between_devices() -> None:
    # Results are reused for devices that read the same values; a selector on a unique value
    # must still pick exactly its device, whatever was evaluated before.
    for device in DEVICES:
        uuid = device.attributes["uuid"]
        selected = _selected(f'{NV}.uuid == "{uuid}" && {NV}.index == {device.gpu_index}')
        assert selected == [
            d.name + "@" + d.node
            for d in DEVICES
            if d.attributes["uuid"] == uuid and d.gpu_index == device.gpu_index
        ]
    by_memory = f'{CAP}.memory.compareTo(quantity("20Gi")) > 0 || "replica" in {NV}'
    expected = [
        d.name + "@" + d.node
        for d in DEVICES
        if d.capacity["memory"] > Quantity.parse("20Gi") or "replica" in d.attributes
    ]
    assert _selected(by_memory) == expected
    assert _selected(by_memory) == expected  # second pass is served from the memo
