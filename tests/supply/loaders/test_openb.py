"""The Alibaba trace's node list: the real file's counts, stable UUIDs, and errors that point."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaas.supply.loaders import SOURCE_MODEL_LABEL, FleetFileError, load_fleet
from gpuaas.supply.loaders.openb import load_openb_nodes, parse_openb_nodes

NODE_LIST = (
    Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "openb"
) / "openb_node_list_gpu_node.csv"

# ../shared/data/README.md
EXPECTED_GPUS_BY_MODEL = {
    "G2": 4392,
    "T4": 842,
    "G3": 312,
    "P100": 265,
    "V100M32": 204,
    "V100M16": 195,
    "A10": 2,
}


@pytest.fixture(scope="module")
def node_list() -> Path:
    if not NODE_LIST.exists():
        pytest.skip(f"trace data not found at {NODE_LIST} (../shared/data is absent)")
    return NODE_LIST


def test_real_node_list_counts(node_list: Path) -> None:
    fleet = load_openb_nodes(node_list)
    assert len(fleet.nodes) == 1213
    assert fleet.gpu_count == 6212
    by_model = Counter(node.labels[SOURCE_MODEL_LABEL] for node in fleet.nodes for _ in node.gpus)
    assert dict(by_model) == EXPECTED_GPUS_BY_MODEL
    assert {len(node.gpus) for node in fleet.nodes} == {1, 2, 4, 8}


def test_real_node_list_uses_catalogue_models(node_list: Path) -> None:
    fleet = load_openb_nodes(node_list)
    models = {node.labels[SOURCE_MODEL_LABEL]: node.gpus[0].model for node in fleet.nodes}
    assert models["V100M32"] == "V100-32GB"
    assert models["V100M16"] == "V100-16GB"
    assert models["P100"] == "P100-16GB"
    assert models["T4"] == "T4"
    assert models["G2"] == "G2"  # undisclosed: a generic model under its own name
    t4 = next(node for node in fleet.nodes if node.labels[SOURCE_MODEL_LABEL] == "T4")
    assert t4.gpus[0].memory_mib == 15360


def test_uuids_are_stable_and_unique(node_list: Path) -> None:
    first = load_openb_nodes(node_list)
    second = load_openb_nodes(node_list)
    uuids = [gpu.uuid for node in first.nodes for gpu in node.gpus]
    assert uuids == [gpu.uuid for node in second.nodes for gpu in node.gpus]
    assert len(set(uuids)) == len(uuids)
    assert all(u.startswith("GPU-") and len(u) == 40 for u in uuids)


def test_units_and_labels() -> None:
    text = "sn,cpu_milli,memory_mib,gpu,model\nn-1,64000,262144,2,V100M32\nn-2,32000,1024,0,\n"
    fleet = parse_openb_nodes(text, "nodes.csv")
    first, cpu_only = fleet.nodes
    assert (first.cpu_milli, first.memory_bytes) == (64000, 262144 * 2**20)
    assert [gpu.index for gpu in first.gpus] == [0, 1]
    assert first.labels == {"kubernetes.io/hostname": "n-1", SOURCE_MODEL_LABEL: "V100M32"}
    assert cpu_only.gpus == [] and SOURCE_MODEL_LABEL not in cpu_only.labels
    assert fleet.source == "nodes.csv"


def test_columns_in_any_order() -> None:
    fleet = parse_openb_nodes("model,gpu,sn,memory_mib,cpu_milli\nT4,1,a,100,2000\n", "x.csv")
    node = fleet.nodes[0]
    assert (node.name, node.cpu_milli, len(node.gpus), node.gpus[0].model) == ("a", 2000, 1, "T4")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "nodes.csv: empty file"),
        (
            "sn,cpu,memory_mib,gpu,model\n",
            "nodes.csv: line 1: header: missing cpu_milli; unknown 'cpu'",
        ),
        (
            "sn,cpu_milli,memory_mib,gpu,model\nn-1,64000,1024,2,T4\nn-2,64000,1024,-1,T4\n",
            "nodes.csv: line 3 (n-2): gpu: must be a non-negative integer, got '-1'",
        ),
        (
            "sn,cpu_milli,memory_mib,gpu,model\nn-1,6.5,1024,2,T4\n",
            "nodes.csv: line 2 (n-1): cpu_milli: must be a non-negative integer, got '6.5'",
        ),
        (
            "sn,cpu_milli,memory_mib,gpu,model\nn-1,1,1024,2,\n",
            "nodes.csv: line 2 (n-1): model: must name the GPU model",
        ),
        (
            "sn,cpu_milli,memory_mib,gpu,model\nn-1,1,1024,2,T4\nn-1,1,1024,2,T4\n",
            "nodes.csv: line 3 (n-1): sn: duplicate node name, first on line 2",
        ),
        (
            "sn,cpu_milli,memory_mib,gpu,model\nn-1,1,1024\n",
            "nodes.csv: line 2: expected 5 columns, got 3",
        ),
        (
            "sn,cpu_milli,memory_mib,gpu,model\n,1,1024,0,\n",
            "nodes.csv: line 2: sn: must not be empty",
        ),
    ],
)
def test_bad_rows_name_line_node_and_column(text: str, expected: str) -> None:
    with pytest.raises(FleetFileError) as error:
        parse_openb_nodes(text, "nodes.csv")
    assert str(error.value).startswith(expected)


def test_load_fleet_reads_csv_and_reports_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn-1,1000,1024,8,A10\n")
    assert load_fleet(path).gpu_count == 8
    with pytest.raises(FleetFileError, match=r"missing\.csv: no such file"):
        load_fleet(tmp_path / "missing.csv")


_rows = st.lists(
    st.tuples(
        st.integers(0, 256_000),
        st.integers(0, 2**21),
        st.sampled_from([0, 1, 2, 4, 8]),
        st.sampled_from(["G1", "G2", "T4", "P100", "V100M16", "A10"]),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(_rows)
def test_every_row_becomes_one_node(rows: list[tuple[int, int, int, str]]) -> None:
    lines = ["sn,cpu_milli,memory_mib,gpu,model"]
    lines += [
        f"node-{n},{cpu},{mem},{gpus},{model}" for n, (cpu, mem, gpus, model) in enumerate(rows)
    ]
    fleet = parse_openb_nodes("\n".join(lines) + "\n", "gen.csv")
    assert [node.name for node in fleet.nodes] == [f"node-{n}" for n in range(len(rows))]
    assert [len(node.gpus) for node in fleet.nodes] == [row[2] for row in rows]
    assert sum(node.cpu_milli for node in fleet.nodes) == sum(row[0] for row in rows)
    uuids = [gpu.uuid for node in fleet.nodes for gpu in node.gpus]
    assert len(set(uuids)) == len(uuids)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from('sn,cpu_milligmodelyr0123456789-.\n" '), max_size=80))
def test_any_text_gives_a_fleet_or_a_fleet_file_error(text: str) -> None:
    try:
        parse_openb_nodes("sn,cpu_milli,memory_mib,gpu,model\n" + text, "nodes.csv")
    except FleetFileError as error:
        assert str(error).startswith("nodes.csv: ")
