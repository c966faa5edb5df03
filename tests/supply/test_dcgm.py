"""dcgm-exporter text read into samples: the field chosen (the profiling field over
GPU_UTIL, DCGM 4.x names too), MIG instances named as the rest of the project names them,
never a 0 for a MIG instance without the profiling field, and rows that match nothing said."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpuaas.model.devices import GPU
from gpuaas.model.node import Node
from gpuaas.model.telemetry import UtilSource
from gpuaas.supply.dcgm import FIELDS, ExporterTextError, read_exporter
from gpuaas.supply.devices import publish_devices
from gpuaas.supply.partition import partition_gpu

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"
SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "dcgm"
MIB = 2**20
H_UUID = ["GPU-5a1c0e1e-7b2d-4c55-9a0e-1f6d2c3b4a01", "GPU-5a1c0e1e-7b2d-4c55-9a0e-1f6d2c3b4a02"]
A_UUID = ["GPU-9e3f7a10-2c4b-4d1e-8f0a-6b5c4d3e2f01", "GPU-9e3f7a10-2c4b-4d1e-8f0a-6b5c4d3e2f02"]
MIG_LAYOUT = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def h100_node(uuids: list[str] = H_UUID) -> Node:
    gpus = [GPU(i, uuids[i], "H100-80GB", 81559) for i in range(len(uuids))]
    return Node("gpu-node-1", 128000, 1 << 40, gpus=gpus)


def a100_node() -> Node:
    mig = partition_gpu("A100-80GB", {"mig": MIG_LAYOUT})
    gpus = [GPU(0, A_UUID[0], "A100-80GB", 81920, mig), GPU(1, A_UUID[1], "A100-80GB", 81920)]
    return Node("gpu-node-7", 128000, 1 << 40, gpus=gpus)


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def utils(reading) -> dict[str, tuple[float, UtilSource]]:  # type: ignore[no-untyped-def]
    return {s.device: (s.util, s.source) for s in reading.samples}


@pytest.mark.parametrize("fixture", ["h100-whole-dcgm3.prom", "h100-whole-dcgm4.prom"])
def test_whole_gpus_read_the_profiling_field_in_either_generation(fixture: str) -> None:
    reading = read_exporter(text(fixture), h100_node(), at=100.0)
    assert utils(reading) == {
        "gpu-0": (pytest.approx(0.826512), UtilSource.GR_ENGINE_ACTIVE),
        "gpu-1": (0.0, UtilSource.GR_ENGINE_ACTIVE),
    }
    first = next(s for s in reading.samples if s.device == "gpu-0")
    assert first.node == "gpu-node-1" and first.at == 100.0
    assert first.memory_used_bytes == 61252 * MIB
    assert first.memory_total_bytes == (19311 + 61252 + 522) * MIB
    assert reading.unmatched == [] and reading.unreported == []


def test_without_profiling_fields_gpu_util_is_read_as_a_fraction() -> None:
    reading = read_exporter(text("h100-whole-no-dcp.prom"), h100_node(), at=0.0)
    assert utils(reading) == {
        "gpu-0": (pytest.approx(0.64), UtilSource.GPU_UTIL),
        "gpu-1": (pytest.approx(0.12), UtilSource.GPU_UTIL),
    }


@pytest.mark.parametrize("fixture", ["a100-mig-dcgm3.prom", "a100-mig-dcgm4.prom"])
def test_mig_instances_take_the_projects_device_names(fixture: str) -> None:
    node = a100_node()
    reading = read_exporter(text(fixture), node, at=0.0)
    got = utils(reading)
    # one naming: exactly the devices the node publishes (the names pods are given)
    assert set(got) == {d.name for d in publish_devices(node)}
    # GPU-instance ids in ascending order pair with start slices in ascending order
    assert got == {
        "gpu-0-mig-2g20gb-0": (pytest.approx(0.45), UtilSource.GR_ENGINE_ACTIVE),
        "gpu-0-mig-1g10gb-2": (0.0, UtilSource.GR_ENGINE_ACTIVE),  # GI 9
        "gpu-0-mig-1g10gb-3": (pytest.approx(0.3), UtilSource.GR_ENGINE_ACTIVE),  # GI 10
        "gpu-0-mig-3g40gb-4": (pytest.approx(0.91), UtilSource.GR_ENGINE_ACTIVE),
        "gpu-1": (pytest.approx(0.52), UtilSource.GR_ENGINE_ACTIVE),
    }
    big = next(s for s in reading.samples if s.device == "gpu-0-mig-3g40gb-4")
    assert big.memory_used_bytes == 30112 * MIB and big.memory_total_bytes == 40192 * MIB
    assert reading.unmatched == [] and reading.unreported == []


def test_a_mig_instance_without_the_profiling_field_is_unknown_never_idle() -> None:
    reading = read_exporter(text("a100-mig-no-dcp.prom"), a100_node(), at=0.0)
    # DCGM_FI_DEV_GPU_UTIL reads 0 on every MIG row: taking it would call busy instances idle
    assert utils(reading) == {"gpu-1": (pytest.approx(0.55), UtilSource.GPU_UTIL)}
    assert sorted(reading.unreported) == [
        "gpu-0-mig-1g10gb-2", "gpu-0-mig-1g10gb-3", "gpu-0-mig-2g20gb-0", "gpu-0-mig-3g40gb-4",
    ]  # fmt: skip


def test_rows_of_gpus_the_node_does_not_have_are_listed_not_guessed() -> None:
    one_gpu = h100_node(H_UUID[:1])
    reading = read_exporter(text("h100-whole-dcgm3.prom"), one_gpu, at=0.0)
    assert set(utils(reading)) == {"gpu-0"}
    assert reading.unmatched == ["gpu 1"]


def test_the_gpu_is_found_by_index_when_uuids_differ() -> None:
    renamed = h100_node(["GPU-other-0", "GPU-other-1"])
    assert set(utils(read_exporter(text("h100-whole-dcgm3.prom"), renamed, at=0.0))) == {
        "gpu-0", "gpu-1",
    }  # fmt: skip


def test_a_node_whose_mig_layout_differs_from_the_exporters_is_not_paired() -> None:
    node = a100_node()
    one_small = partition_gpu("A100-80GB", {"mig": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}})
    node.gpus[0] = GPU(0, A_UUID[0], "A100-80GB", 81920, one_small)
    (small,) = [d.name for d in publish_devices(node) if "1g10gb" in d.name]
    reading = read_exporter(text("a100-mig-dcgm3.prom"), node, at=0.0)
    # two 1g.10gb rows, one 1g.10gb instance: which is which cannot be known
    assert small not in utils(reading)
    assert reading.unmatched == ["gpu 0 GI 9 1g.10gb", "gpu 0 GI 10 1g.10gb"]
    assert reading.unreported == [small]


def test_a_nan_reading_is_no_reading() -> None:
    lines = [
        (line.rsplit(" ", 1)[0] + " NaN")
        if line.startswith('DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0"')
        else line
        for line in text("h100-whole-dcgm3.prom").splitlines()
    ]
    got = utils(read_exporter("\n".join(lines) + "\n", h100_node(), at=0.0))
    # the profiling field said nothing for GPU 0: its GPU_UTIL is read instead
    assert got["gpu-0"] == (pytest.approx(0.87), UtilSource.GPU_UTIL)


def test_text_that_is_not_prometheus_is_refused() -> None:
    with pytest.raises(ExporterTextError):
        read_exporter("<html>502 Bad Gateway</html>\n{{{", h100_node(), at=0.0)


def test_the_fields_read_are_nvidias() -> None:
    if not SHARED.is_dir():
        pytest.skip(
            f"NVIDIA's dcgm-exporter field lists are not at {SHARED} (../shared/data/README.md)"
        )
    listed: set[str] = set()
    for path in SHARED.glob("*.csv"):
        for row in csv.reader(path.read_text().splitlines()):
            if row and not row[0].lstrip().startswith("#") and row[0].strip():
                listed.add(row[0].strip())
    renamed_in_4 = {"DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO"}  # named in ../shared/data/README.md
    assert set(FIELDS) - renamed_in_4 <= listed
    # and every field of the composed fixtures is one of NVIDIA's (or a 4.x rename)
    renames = {"DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "DCGM_FI_DEV_BOARD_POWER_WATTS",
               "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_XID_ERROR"}  # fmt: skip
    for fixture in FIXTURES.glob("*.prom"):
        for line in fixture.read_text().splitlines():
            if line.startswith("# TYPE "):
                assert line.split()[2] in listed | renames, (fixture.name, line)
