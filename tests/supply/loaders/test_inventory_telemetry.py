"""A node's dcgm-exporter URL in the inventory (``telemetry.dcgmExporter``): patterns for
counted nodes, checked as a URL naming the field, and written back by the entry writer."""

from __future__ import annotations

from typing import Any

import pytest

from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Fleet
from gpuaas.supply.loaders import FleetFileError
from gpuaas.supply.loaders.entries import inventory_entry
from gpuaas.supply.loaders.inventory import inventory_from_document


def fleet(*nodes: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"apiVersion": "gpuaas.io/v1", "kind": "Fleet", **top, "nodes": list(nodes)}


def load(doc: dict[str, Any]) -> Fleet:
    return inventory_from_document(doc, "fleet.yaml")


def group(**extra: Any) -> dict[str, Any]:
    return {"name": "h100-{i:02}", "count": 3, "cpu": "64", "memory": "512Gi",
            "gpus": {"model": "H100", "count": 8}, **extra}  # fmt: skip


def test_each_node_of_a_group_gets_its_own_exporter_url() -> None:
    doc = fleet(group(telemetry={"dcgmExporter": "http://h100-{i:02}.dc1:9400/metrics"}))
    nodes = load(doc).nodes
    assert [n.dcgm_exporter for n in nodes] == [
        f"http://h100-{i:02}.dc1:9400/metrics"
        for i in (1, 2, 3)  # groups count from 1
    ]
    # written back as an entry, it loads as the same node
    again = load(fleet(inventory_entry(nodes[1]))).nodes[0]
    assert again == nodes[1]


def test_defaults_give_every_node_the_exporter_and_a_node_may_say_its_own() -> None:
    own = group(name="other-{i}", count=1,
                telemetry={"dcgmExporter": "https://10.0.0.9:9400/metrics"})  # fmt: skip
    defaults = {"telemetry": {"dcgmExporter": "http://{i}.exp:9400/metrics"}}
    doc = fleet(group(), own, defaults=defaults)
    nodes = load(doc).nodes
    assert nodes[0].dcgm_exporter == "http://1.exp:9400/metrics"
    assert nodes[-1].dcgm_exporter == "https://10.0.0.9:9400/metrics"


def test_no_telemetry_means_no_exporter() -> None:
    assert load(fleet(group())).nodes[0].dcgm_exporter == ""
    assert "telemetry" not in inventory_entry(load(fleet(group())).nodes[0])


@pytest.mark.parametrize(
    ("telemetry", "problem"),
    [
        ({"dcgmExporter": "h100:9400/metrics"}, "http:// or https://"),
        ({"dcgmExporter": "ftp://h100/metrics"}, "http:// or https://"),
        ({"dcgmExporter": "http://h100:99999/metrics"}, "bad port"),
        ({"dcgmExporter": "http://{j}/metrics"}, "unknown placeholder"),
        ({"exporter": "http://h100/metrics"}, "unknown key 'exporter'"),
        ("http://h100/metrics", "expected a mapping"),
    ],
)
def test_a_bad_exporter_is_refused_naming_the_field(telemetry: Any, problem: str) -> None:
    with pytest.raises((InvalidValue, FleetFileError)) as caught:
        load(fleet(group(telemetry=telemetry)))
    text = str(caught.value)
    assert "telemetry" in text and problem in text, text
