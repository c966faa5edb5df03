"""The FGD protocol on the Alibaba trace: order, inflation, recording, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpuaas.cli.main import app
from gpuaas.engine.framework import CycleState, PodShape
from gpuaas.engine.place import Placement, place_shape
from gpuaas.engine.policies import make_policy
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.devices import GPU, Partition
from gpuaas.model.node import Node
from gpuaas.sim import openb
from gpuaas.sim.openb import (
    TraceFileError,
    TraceTask,
    load_openb_pods,
    protocol_nodes,
    protocol_order,
    run_protocol,
    to_request,
    unallocated_lower_bound,
)

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "openb"
NODES = DATA / "openb_node_list_gpu_node.csv"
PODS = DATA / "openb_pod_list_default.csv"


def need_data() -> None:
    if not PODS.exists() or not NODES.exists():
        pytest.skip(f"the Alibaba trace is not at {DATA} (see ../shared/data/README.md)")


TASKS = [
    TraceTask("t0", 1000, 1024, 1, 500),
    TraceTask("t1", 1000, 1024, 1, 1000),
    TraceTask("t2", 1000, 1024, 0, 0),
    TraceTask("t3", 1000, 1024, 2, 1000),
]


def test_order_is_a_seeded_shuffle_then_inflation_up_to_the_limit() -> None:
    capacity = 10_000
    a = protocol_order(TASKS, capacity, seed=42)
    assert a == protocol_order(TASKS, capacity, seed=42)
    assert a != protocol_order(TASKS, capacity, seed=43)
    assert sorted(a[:4]) == [0, 1, 2, 3]  # the whole trace first, shuffled
    asked = sum(TASKS[i].requested_milli for i in a)
    assert asked <= 1.3 * capacity
    # the draw that stopped inflation would have crossed the limit: at most one more task
    assert asked + 2000 > 1.3 * capacity


def test_recording_every_percent_and_no_overcommit() -> None:
    nodes = [
        Node(
            f"n{i}",
            32000,
            2**36,
            [GPU(g, f"n{i}-{g}", "T4", 16384, Partition.whole()) for g in range(2)],
        )
        for i in range(5)
    ]
    result = run_protocol(nodes, TASKS, "bestfit", seed=1)
    assert len(result.allocation_pct) == 131
    assert all(0.0 <= x <= 100.0 for x in result.allocation_pct)
    assert list(result.allocation_pct) == sorted(result.allocation_pct)  # tasks never leave
    assert result.placed + result.failed == len(protocol_order(TASKS, 10_000, 1))


def t4_nodes(count: int) -> list[Node]:
    return [
        Node(
            f"n{i:02d}",
            32000,
            2**36,
            [GPU(g, f"n{i}-{g}", "T4", 16384, Partition.whole()) for g in range(2)],
        )
        for i in range(count)
    ]


def test_protocol_renames_nodes_with_a_seeded_random_prefix() -> None:
    # As the authors' simulator does before a run: "<k>-<name>", k a seeded permutation, so
    # name order (which wins equal scores) is a random node order, the same for a seed.
    nodes = t4_nodes(12)
    a = protocol_nodes(nodes, seed=42)
    assert [n.name for n in a] == [n.name for n in protocol_nodes(nodes, seed=42)]
    assert [n.name for n in a] != [n.name for n in protocol_nodes(nodes, seed=43)]
    prefixes = sorted(int(n.name.split("-", 1)[0]) for n in a)
    assert prefixes == list(range(12))
    assert all(len(n.name.split("-", 1)[0]) == 2 for n in a)  # zero-padded: sorts as numbers
    assert [n.name.split("-", 1)[1] for n in a] == [n.name for n in nodes]
    assert [(n.cpu_milli, n.gpus, n.labels) for n in a] == [
        (n.cpu_milli, n.gpus, n.labels) for n in nodes
    ]
    assert sorted(a, key=lambda n: n.name) != a  # not file order
    assert [n.name for n in nodes] == [f"n{i:02d}" for i in range(12)]  # caller's untouched


def test_protocol_ties_follow_the_renamed_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # Packing scores every node 0 for a CPU-only task: it goes to the node whose renamed name
    # is smallest, which for most seeds is not the first node of the list.
    nodes = t4_nodes(12)
    pod = to_request(TraceTask("c", 1000, 1, 0, 0), {})
    chosen = set()
    for seed in range(1, 6):
        renamed = protocol_nodes(nodes, seed)
        snap = Snapshot.from_nodes(renamed)
        state = CycleState(pod=pod, shape=PodShape.of(pod), rng=np.random.default_rng(0))
        res = place_shape(snap, state, make_policy("packing"))
        assert isinstance(res, Placement)
        assert res.node_name == min(n.name for n in renamed)
        chosen.add(res.node)
    assert len(chosen) > 1
    # run_protocol renames with the run's seed
    seen: list[int] = []
    real = openb.protocol_nodes

    def spy(nodes: list[Node], seed: int) -> list[Node]:
        seen.append(seed)
        return real(nodes, seed)

    monkeypatch.setattr(openb, "protocol_nodes", spy)
    run_protocol(nodes, TASKS, "packing", seed=7)
    assert seen == [7]


def test_lower_bound_counts_holes_only_small_tasks_can_fill() -> None:
    tasks = [TraceTask(f"b{i}", 0, 0, 1, 800) for i in range(3)]  # three holes of 200
    tasks += [TraceTask("s", 0, 0, 1, 150), TraceTask("m", 0, 0, 1, 300)]
    # capacity 2,500: the mark is passed by the 4th task (2,550 arrived, overshoot 50).
    # Placing all big tasks leaves 600 - 150 = 450 free; failing some trades 200 of hole for
    # 800 of failure; the fractional optimum (fail half of one) gives 350.
    floor = unallocated_lower_bound(tasks, range(len(tasks)), 2500)
    assert floor == pytest.approx(350 * 100 / 2500)
    assert unallocated_lower_bound(tasks, range(len(tasks)), 10_000) == 0.0  # mark not reached


def test_no_policy_beats_the_lower_bound() -> None:
    nodes = [
        Node(
            f"n{i}",
            64000,
            2**36,
            [GPU(g, f"n{i}-{g}", "T4", 16384, Partition.whole()) for g in range(2)],
        )
        for i in range(4)
    ]
    tasks = [
        TraceTask(f"t{i}", 1000, 1024, 1, (700, 800, 150, 450, 1000)[i % 5]) for i in range(20)
    ]
    capacity = 8000
    for policy in ("bestfit", "fgd", "gpuaas"):
        for seed in (1, 2, 3):
            run = run_protocol(nodes, tasks, policy, seed)
            floor = unallocated_lower_bound(tasks, protocol_order(tasks, capacity, seed), capacity)
            assert run.unallocated_at(100) >= floor - 1e-9


def test_bad_pod_file_names_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,10,1,abc\n")
    with pytest.raises(TraceFileError, match=r"line 2: gpu_milli: expected a whole number"):
        load_openb_pods(bad)
    bad.write_text("name,cpu_milli,memory_mib\n")
    with pytest.raises(TraceFileError, match="missing column"):
        load_openb_pods(bad)


def test_cli_bench_fgd_json_on_a_subset(tmp_path: Path) -> None:
    need_data()
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("\n".join(NODES.read_text().splitlines()[:61]) + "\n")
    pods = tmp_path / "openb_pod_list_default.csv"
    pods.write_text("\n".join(PODS.read_text().splitlines()[:301]) + "\n")
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "fgd",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--policy",
            "all",
            "--seeds",
            "42-43",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["lower_bound_pct_at_100"] >= 0.0
    assert set(out["policies"]) == {
        "random",
        "dotprod",
        "clustering",
        "packing",
        "bestfit",
        "fgd",
        "gpuaas",
    }
    for row in out["policies"].values():
        assert 0.0 <= row["unallocated_pct_at_100"] <= 100.0
        assert 0.0 <= row["unallocated_pct_at_130"] <= 100.0
        assert row["seconds_per_run"] > 0


def test_cli_reports_bad_input_without_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["bench", "fgd", "--nodes", str(tmp_path / "none.csv"), "--pods", "x.csv"]
    )
    assert result.exit_code == 2
    assert "error" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(
        app, ["bench", "fgd", "--nodes", "a", "--pods", "b", "--policy", "nope"]
    )
    assert result.exit_code == 2 and "unknown policy 'nope'" in result.output
    for policy, message in ((",", "give a policy name"), ("fgd,nope", "unknown policy 'nope'")):
        result = CliRunner().invoke(
            app, ["bench", "fgd", "--nodes", "a", "--pods", "b", "--policy", policy]
        )
        assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.slow
def test_default_policy_beats_published_fgd_on_the_default_trace() -> None:
    need_data()
    from gpuaas.supply.loaders.openb import load_openb_nodes

    result = run_protocol(load_openb_nodes(NODES).nodes, load_openb_pods(PODS), "gpuaas", seed=42)
    assert result.unallocated_at(100) < 4.77  # FGD's published median
