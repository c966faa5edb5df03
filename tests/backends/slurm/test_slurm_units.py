"""The Slurm backend's pure parts on recorded Slurm 22.05 output: node import, versions, host
lists, exit codes, sacct and scontrol parsing, and the batch job a placement becomes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.backends.base import BackendJob
from gpuaas.backends.logs import LogLayout
from gpuaas.backends.slurm.cli import parse_gres_lines, parse_indexes, parse_sacct
from gpuaas.backends.slurm.hostlist import expand
from gpuaas.backends.slurm.inventory import (
    BACKEND_LABEL,
    PARTITION_LABEL,
    fleet_document,
    gpu_gres,
    inventory_entries,
    slurm_nodes,
)
from gpuaas.backends.slurm.script import SlurmNode, Unrunnable, submission
from gpuaas.backends.slurm.version import (
    Capabilities,
    SlurmVersion,
    exit_code,
    job_state,
    offered_apis,
    parse_release,
    pick_api,
)
from gpuaas.model.errors import InvalidValue
from gpuaas.model.placement import DeviceKind, DeviceRef, PodPlacement
from gpuaas.service import backends
from gpuaas.supply.loaders.inventory import inventory_from_document

RECORDED = Path(__file__).parent / "recorded"


def nodes_listing() -> dict:
    return json.loads((RECORDED / "nodes-22.05.json").read_text())


def test_recorded_nodes_become_inventory_entries_with_catalogue_models_and_labels() -> None:
    entries = inventory_entries(nodes_listing())
    assert [e["name"] for e in entries] == ["n1", "n2"]
    n1 = entries[0]
    assert n1["cpu"] == "8" and n1["memory"] == "16000Mi"
    assert n1["gpus"] == {"model": "H100-80GB", "count": 8}
    assert n1["labels"][BACKEND_LABEL] == "slurm"
    assert n1["labels"][PARTITION_LABEL] == "gpu"
    assert n1["labels"][f"{PARTITION_LABEL}-closed"] == "true"
    fleet = inventory_from_document(fleet_document(entries), "slurm")
    first, again = (inventory_from_document(fleet_document(entries), "slurm") for _ in range(2))
    assert [g.uuid for g in first.nodes[0].gpus] == [g.uuid for g in again.nodes[0].gpus]
    assert len({g.uuid for n in fleet.nodes for g in n.gpus}) == 16  # per node and index


def test_the_backend_label_is_the_services() -> None:
    assert BACKEND_LABEL == backends.BACKEND_LABEL


def test_raw_gres_types_map_to_the_catalogue() -> None:
    listing = {"nodes": [{"name": "a", "cpus": 96, "real_memory": 1000,
                          "gres": "gpu:nvidia_h100_80gb_hbm3:4(S:0-1),shard:8",
                          "partitions": ["batch"]}]}  # fmt: skip
    (entry,) = inventory_entries(listing)
    assert entry["gpus"] == {"model": "H100-80GB", "count": 4}
    assert entry["labels"]["slurm.schedmd.com/gres-type"] == "nvidia_h100_80gb_hbm3"
    assert slurm_nodes(listing)["a"].gres_type == "nvidia_h100_80gb_hbm3"


def test_mixed_or_untyped_gpus_are_refused_naming_the_node() -> None:
    mixed = {"nodes": [{"name": "m", "gres": "gpu:a100:2,gpu:h100:2", "partitions": []}]}
    with pytest.raises(InvalidValue, match=r"nodes\[m\]\.gres.*several types"):
        inventory_entries(mixed)
    untyped = {"nodes": [{"name": "u", "gres": "gpu:4", "partitions": []}]}
    with pytest.raises(InvalidValue, match="--gpu-model"):
        inventory_entries(untyped)
    assert inventory_entries(untyped, default_type="l4")[0]["gpus"] == {"model": "L4", "count": 4}
    assert gpu_gres("(null)") == [] and gpu_gres("gpu:h100:0") == []


def test_partitions_filter_nodes() -> None:
    assert inventory_entries(nodes_listing(), partitions=["other"]) == []
    assert len(inventory_entries(nodes_listing(), partitions=["closed"])) == 2


def test_versions_and_what_they_allow() -> None:
    assert parse_release("slurm 22.05.8") == SlurmVersion(22, 5, 8)
    old = Capabilities(SlurmVersion(22, 5, 8), "v0.0.38")
    new = Capabilities(SlurmVersion(23, 11, 1), "v0.0.40")
    assert not old.squeue_only_job_state and new.squeue_only_job_state
    assert not old.rest_submits_node_lists and new.rest_submits_node_lists
    assert old.rest_needs_environment and not new.rest_needs_environment
    paths = ["/slurm/v0.0.36/jobs", "/slurm/v0.0.38/ping", "/slurmdb/v0.0.38/jobs", "/openapi"]
    assert offered_apis(paths) == ["v0.0.38", "v0.0.36"]
    assert pick_api(offered_apis(paths)) == "v0.0.38"
    assert pick_api(["v0.0.41"]) is None
    with pytest.raises(ValueError, match="not a Slurm version"):
        parse_release("unknown")


def test_exit_codes_and_states_in_every_api_shape() -> None:
    assert exit_code(768) == 3 and exit_code(9) == 128 + 9 and exit_code(0) == 0
    assert exit_code({"return_code": 2, "signal": {"id": 0}}) == 2
    assert exit_code({"return_code": {"set": True, "number": 4}}) == 4
    assert exit_code(None) is None
    assert job_state("RUNNING") == "RUNNING" and job_state(["FAILED", "X"]) == "FAILED"
    jobs = {j["job_id"]: j for j in json.loads((RECORDED / "jobs-22.05.json").read_text())["jobs"]}
    assert exit_code(jobs[8]["exit_code"]) == 3  # `exit 3`
    assert jobs[11]["gres_detail"] == ["gpu:h100:3(IDX:0-2)", "gpu:h100:3(IDX:0-2)"]


def test_sacct_and_scontrol_output() -> None:
    recorded = parse_sacct((RECORDED / "sacct-22.05.txt").read_text())
    assert recorded == {8: ("FAILED", 3), 10: ("FAILED", 137), 9: ("CANCELLED", 0)}
    assert parse_sacct("12|CANCELLED by 0|0:15\n12.batch|CANCELLED|0:15\n") == {
        12: ("CANCELLED", 143)
    }
    text = "   Nodes=n[2-3] CPU_IDs=6-7 Mem=1000 GRES=gpu:h100:8(IDX:0-7)\n" \
           "   Nodes=n1 CPU_IDs=1 Mem=100 GRES=gpu:h100:2(IDX:3-4)\n"  # fmt: skip
    assert parse_gres_lines(text) == {"n2": list(range(8)), "n3": list(range(8)), "n1": [3, 4]}
    assert parse_indexes("gpu:h100:3(IDX:0-1,5)") == [0, 1, 5] and parse_indexes("gpu:2") == []


@given(st.lists(st.integers(0, 300), min_size=1, max_size=30, unique=True))
def test_host_ranges_expand_to_their_hosts(numbers: list[int]) -> None:
    ranges = ",".join(str(n) for n in sorted(numbers))
    assert expand(f"n[{ranges}]") == [f"n{n}" for n in sorted(numbers)]


def test_host_lists() -> None:
    assert expand("n[1-3,5],gpu-[08-10]x,solo") == [
        "n1", "n2", "n3", "n5", "gpu-08x", "gpu-09x", "gpu-10x", "solo",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="not a Slurm host range"):
        expand("n[a-b]")


NODES = {n: SlurmNode(n, f"10.0.0.{i}", ("gpu", "all"), "h100", 8)
         for i, n in enumerate(["n1", "n2", "n3"], 1)}  # fmt: skip


def pod(rank: int, node: str, gpus: list[int], kind: DeviceKind = DeviceKind.GPU) -> PodPlacement:
    devices = tuple(DeviceRef(f"gpu-{g}", f"GPU-{node}-{g}", g, kind) for g in gpus)
    return PodPlacement("main", rank, rank, node, 2500, 3 << 30, devices)


def test_a_gang_is_one_allocation_on_gpuaas_nodes_with_typed_gres(tmp_path: Path) -> None:
    job = BackendJob(12, "train", {"command": ["python", "train.py"], "maxRunTime": 90,
                                   "env": {"A": "b c"}},
                     (pod(0, "n2", [4, 5, 6, 7]), pod(1, "n1", [0, 1, 2, 3])), attempt=3,
                     tenant="acme")  # fmt: skip
    sub = submission(job, LogLayout(tmp_path), NODES)
    assert sub.name == "gpuaas-12-3"
    options = set(sub.options)
    assert {"--nodelist=n2,n1", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=3",
            "--mem=3072", "--gres=gpu:h100:4", "--time=2", "--partition=gpu",
            "--no-requeue", "--comment=gpuaas job 12 attempt 3 tenant acme"} <= options  # fmt: skip
    assert "srun" in sub.batch and "--kill-on-bad-exit=1" in sub.batch
    assert "n2:0) RANK=0 GPUS=4,5,6,7" in sub.task and "n1:0) RANK=1 GPUS=0,1,2,3" in sub.task
    assert "MASTER_ADDR=10.0.0.2" in sub.task and "WORLD_SIZE=2" in sub.task
    assert str(LogLayout(tmp_path).stdout(12, 3, 1)) in sub.task
    assert "export A='b c'" in sub.task and "exec python train.py" in sub.task


def test_what_slurm_cannot_run_as_placed_is_refused(tmp_path: Path) -> None:
    layout = LogLayout(tmp_path)
    uneven = BackendJob(1, "x", {"command": ["x"]},
                        (pod(0, "n1", [0]), pod(1, "n1", [1]), pod(2, "n2", [0])))  # fmt: skip
    with pytest.raises(Unrunnable, match="spread unevenly"):
        submission(uneven, layout, NODES)
    mig = BackendJob(2, "x", {"command": ["x"]}, (pod(0, "n1", [0], DeviceKind.MIG),))
    with pytest.raises(Unrunnable, match="whole GPUs only"):
        submission(mig, layout, NODES)
    boxed = BackendJob(3, "x", {"container": {"image": "x"}}, (pod(0, "n1", [0]),))
    with pytest.raises(Unrunnable, match="not containers"):
        submission(boxed, layout, NODES)
    elsewhere = BackendJob(4, "x", {"command": ["x"]}, (pod(0, "n1", [0]),))
    with pytest.raises(Unrunnable, match="partition 'debug' does not hold"):
        submission(elsewhere, layout, NODES, partition="debug")
    script = BackendJob(5, "x", {"script": "echo hi"}, (pod(0, "n3", []),))
    sub = submission(script, layout, NODES)
    assert sub.files == {"script.sh": "echo hi"} and not any("--gres" in o for o in sub.options)


def test_the_factory_builds_the_slurm_backend_from_gpuaas_slurm_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuaas.backends.slurm import SlurmBackend
    from gpuaas.service.settings import Settings

    monkeypatch.setenv("GPUAAS_SLURM_SOCKET", str(tmp_path / "rest.socket"))
    monkeypatch.setenv("GPUAAS_SLURM_CONF", "/etc/slurm/other.conf")
    monkeypatch.setenv("GPUAAS_SLURM_PARTITION", "gpu")
    built = backends.FACTORIES["slurm"](Settings(data_dir=tmp_path))
    assert isinstance(built, SlurmBackend) and built.name == "slurm"
    assert built.rest is not None and built.rest.where == f"unix:{tmp_path / 'rest.socket'}"
    assert built.cli.env["SLURM_CONF"] == "/etc/slurm/other.conf"
    assert built.partition == "gpu" and built.state_dir == tmp_path / "slurm"
    assert backends.check_backend_name("slurm") == "slurm"
    built.close()
