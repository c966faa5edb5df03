"""``gpuaas bench placement``: placement speed at cloud scale on a synthetic fleet.

The fleet (:func:`gpuaas.sim.synthetic.synthetic_fleet`) and the workload mix
(:func:`gpuaas.sim.synthetic.synthetic_workloads`) are placed one workload at a time through the
engine's gang placement, which every workload goes through (a single pod is a gang of one).
Each decision is timed on its own (``time.perf_counter``, wall clock; ``time.process_time`` is
reported beside it, since on a shared machine other processes inflate wall time); single-pod and
gang decisions are reported separately. An unschedulable workload is a decision too (the engine
had to prove that nothing fits), and placed/unschedulable counts are reported beside the rates.

A real cloud is never empty nor full: with ``--churn`` (the default) the oldest running workloads
finish whenever whole-GPU allocation passes ``--high`` and until it falls under ``--low``, so
the benchmark measures decisions on a busy, fragmented fleet rather than on an empty one or on a
full one that rejects everything at once. Releases are timed apart and not counted as decisions.

With ``--node-churn N`` the fleet changes too, as an autoscaler replacing nodes would change it:
N times, evenly spread over the run, a random node leaves (its workloads are released first)
and a node with the same hardware under a new name joins, each through the snapshot's in-place
change (:meth:`~gpuaas.engine.snapshot.Snapshot.remove_node`,
:meth:`~gpuaas.engine.snapshot.Snapshot.add_nodes`). The cost of one removal and of one
addition is timed on its own; the placement rates of the same run are the throughput while
nodes come and go (the first decision after a change pays for the policy caches it rebuilds).

With ``--decision-hash`` the JSON carries ``decision_sha256``: a SHA-256 over every decision in
order (the workload, and either its scopes and each pod's pod set, index, node and exact
assignment, or its reason code and sentence), computed outside the timed part. Two engine
versions that give the same digest for a seed made every decision the same, which is how a
speed-up shows it changed nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import resource
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from gpuaas.cli.bench import bench_app
from gpuaas.engine.claims import DeviceClaims
from gpuaas.engine.framework import PodShape
from gpuaas.engine.gang import GangPlacement, place_workload, release
from gpuaas.engine.place import NodeSampling, Unschedulable
from gpuaas.engine.policies import DEFAULT_POLICY, POLICY_NAMES, TaskMix, make_policy
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.errors import GpuaasError
from gpuaas.model.node import Node
from gpuaas.model.topology import Level
from gpuaas.sim.synthetic import (
    FleetSpec,
    WorkloadMix,
    is_gang,
    synthetic_device_classes,
    synthetic_fleet,
    synthetic_workloads,
)


@dataclass(slots=True)
class _Series:
    """Per-decision latencies (seconds) and outcomes of one kind of decision."""

    seconds: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0
    placed: int = 0
    unschedulable: int = 0
    pods: int = 0

    def add(self, seconds: float, cpu: float, ok: bool, pods: int) -> None:
        self.seconds.append(seconds)
        self.cpu_seconds += cpu
        if ok:
            self.placed += 1
            self.pods += pods
        else:
            self.unschedulable += 1

    def summary(self) -> dict[str, float | int]:
        total = float(sum(self.seconds))
        count = len(self.seconds)
        values = np.array(self.seconds) if count else np.zeros(1)
        return {
            "decisions": count,
            "placed": self.placed,
            "unschedulable": self.unschedulable,
            "pods_placed": self.pods,
            "seconds": round(total, 3),
            "per_s": round(count / total, 1) if total > 0 else 0.0,
            "cpu_seconds": round(self.cpu_seconds, 3),
            "per_cpu_s": round(count / self.cpu_seconds, 1) if self.cpu_seconds > 0 else 0.0,
            "p50_ms": round(float(np.percentile(values, 50)) * 1000, 3),
            "p99_ms": round(float(np.percentile(values, 99)) * 1000, 3),
            "max_ms": round(float(values.max()) * 1000, 3),
        }


def peak_rss_mib() -> float:
    """Peak resident set size of this process (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_placement_bench(
    nodes: int,
    workloads: int,
    seed: int = 0,
    policy_name: str = DEFAULT_POLICY,
    churn: bool = True,
    high: float = 0.9,
    low: float = 0.8,
    pack_level: Level | None = Level.RACK,
    score_percentage: float | None = 0.0,
    node_churn: int = 0,
    nics_per_node: int = 0,
    network_share: float = 0.0,
    decision_hash: bool = False,
) -> dict[str, Any]:
    """Build the synthetic fleet and mix, place every workload, and return the figures.

    ``score_percentage``: kube-scheduler's ``percentageOfNodesToScore`` for every placement
    (0 = its adaptive default, see :class:`~gpuaas.engine.place.NodeSampling`); None scores
    every feasible node. ``nics_per_node``: the fleet's nodes carry RDMA NICs, and
    ``network_share`` of the 8-GPU pods ask one aligned VF per GPU (see
    :mod:`gpuaas.sim.synthetic`). ``decision_hash``: add ``decision_sha256`` (see the module
    docstring)."""
    if nodes < 1 or workloads < 1:
        raise GpuaasError("--nodes and --workloads must be at least 1")
    if node_churn < 0:
        raise GpuaasError(f"--node-churn {node_churn}: must be at least 0")
    if not 0 < low < high <= 1:
        raise GpuaasError(f"--low {low} and --high {high}: need 0 < low < high <= 1")
    started = time.perf_counter()
    fleet = synthetic_fleet(FleetSpec(nodes=nodes, nics_per_node=nics_per_node), seed=seed)
    mix = synthetic_workloads(workloads, seed=seed, mix=WorkloadMix(network_share=network_share))
    snap = Snapshot.from_nodes(fleet)
    claims = DeviceClaims.build(fleet, synthetic_device_classes())
    claims.prepare(snap, (c for w in mix for ps in w.pod_sets for c in ps.pod.claims))
    # The target mix (what FGD-style policies score fragmentation against): the pods' shapes.
    shapes = [PodShape.of(ps.pod) for w in mix for ps in w.pod_sets]
    policy = make_policy(policy_name, TaskMix.from_shapes(shapes), seed=seed)
    rng = np.random.default_rng(seed)
    sampling = None if score_percentage is None else NodeSampling(percentage=score_percentage)
    setup = time.perf_counter() - started

    capacity = int(snap.whole_gpus.sum()) * 1000
    single, gang = _Series(), _Series()
    running: deque[int] = deque()  # ids in placement order (finished ones are skipped)
    live: dict[int, GangPlacement] = {}
    changes = _NodeChurn(snap, fleet, node_churn, len(mix), seed)
    released = 0
    release_seconds = 0.0
    reasons: dict[str, str] = {}
    clock = time.perf_counter
    cpu_clock = time.process_time
    digest = hashlib.sha256() if decision_hash else None
    for serial, workload in enumerate(mix):
        if changes.due(serial):
            for done in changes.apply(live, policy):
                live.pop(done, None)
            release_seconds += changes.last_release
        c0 = cpu_clock()
        t0 = clock()
        result = place_workload(
            snap,
            workload,
            policy,
            claims=claims,
            rng=rng,
            pack_level=pack_level,
            sampling=sampling,
        )
        elapsed = clock() - t0
        cpu = cpu_clock() - c0
        ok = not isinstance(result, Unschedulable)
        (gang if is_gang(workload) else single).add(elapsed, cpu, ok, workload.pod_count)
        if digest is not None:
            digest.update(decision_line(workload.name, result, snap).encode())
        if isinstance(result, Unschedulable):
            reasons.setdefault(workload.labels.get("kind", "?"), result.reason)
            continue
        running.append(serial)
        live[serial] = result
        changes.placed(serial, result)
        if churn and snap.allocated_milli() > high * capacity:
            t1 = clock()
            while running and snap.allocated_milli() > low * capacity:
                oldest = running.popleft()
                placement = live.pop(oldest, None)
                if placement is not None:
                    release(snap, placement, policy)
                    changes.released(oldest, placement)
                    released += 1
            release_seconds += clock() - t1
    total = time.perf_counter() - started
    every = single.seconds + gang.seconds
    s, g = single.summary(), gang.summary()
    return {
        "single_pod_per_s": s["per_s"],
        "gang_per_s": g["per_s"],
        "p99_ms": round(float(np.percentile(every, 99)) * 1000, 3) if every else 0.0,
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "cpu_single_pod_per_s": s["per_cpu_s"],
        "cpu_gang_per_s": g["per_cpu_s"],
        "nodes": nodes,
        "gpus": int(snap.gpu_count.sum()),
        "workloads": workloads,
        "seed": seed,
        "policy": policy_name,
        "churn": churn,
        "pack_level": pack_level.short if pack_level is not None else "none",
        "nodes_to_score": _sampling_name(score_percentage),
        "sampled_placements": sampling.sampled if sampling is not None else 0,
        "unscored_feasible_nodes": sampling.skipped if sampling is not None else 0,
        "single_pod": s,
        "gang": g,
        "released": released,
        "release_seconds": round(release_seconds, 3),
        "allocated_gpu_pct_at_end": round(100 * snap.allocated_milli() / max(capacity, 1), 1),
        "setup_seconds": round(setup, 2),
        "total_seconds": round(total, 2),
        "example_reasons": reasons,
        "node_churn": changes.summary(),
        "nics_per_node": nics_per_node,
        "network_share": network_share,
        **({"decision_sha256": digest.hexdigest()} if digest is not None else {}),
    }


def decision_line(workload: str, result: GangPlacement | Unschedulable, snap: Snapshot) -> str:
    """One decision as a line of text for ``--decision-hash``: what was decided, exactly."""
    if isinstance(result, Unschedulable):
        return f"U|{workload}|{result.code}|{result.reason}\n"
    pods = [
        (p.pod_set, p.index, snap.names[p.placement.node], repr(p.assignment)) for p in result.pods
    ]
    return f"P|{workload}|{result.scopes}|{pods}\n"


class _NodeChurn:
    """``--node-churn``: replace ``count`` random nodes, evenly spread over ``total`` decisions,
    timing each removal and addition on the snapshot (see the module docstring)."""

    def __init__(self, snap: Snapshot, fleet: list[Node], count: int, total: int, seed: int):
        self.snap = snap
        self.fleet = list(fleet)  # by snapshot index: the node in that slot now
        self.count = count
        self.every = max(total // (count + 1), 1) if count else 0
        self.rng = np.random.default_rng(seed + 1)
        self.on_node: dict[int, set[int]] = {}
        self.add_seconds: list[float] = []
        self.remove_seconds: list[float] = []
        self.add_cpu: list[float] = []  # process CPU time: a busy machine inflates wall time
        self.remove_cpu: list[float] = []
        self.displaced = 0
        self.last_release = 0.0
        self.release_seconds = 0.0

    def due(self, serial: int) -> bool:
        return (
            bool(self.every)
            and serial > 0
            and serial % self.every == 0
            and (len(self.add_seconds) < self.count)
        )

    def placed(self, serial: int, placement: GangPlacement) -> None:
        if self.count:
            for node in set(placement.nodes):
                self.on_node.setdefault(node, set()).add(serial)

    def released(self, serial: int, placement: GangPlacement) -> None:
        if self.count:
            for node in set(placement.nodes):
                self.on_node.get(node, set()).discard(serial)

    def apply(self, live: dict[int, GangPlacement], policy: object) -> list[int]:
        """Replace one random node; returns the workloads it displaced (released here)."""
        snap = self.snap
        node = int(self.rng.integers(snap.size))
        gone = sorted(self.on_node.pop(node, set()))
        t0 = time.perf_counter()
        for serial in gone:
            placement = live[serial]
            release(snap, placement, policy)
            self.released(serial, placement)
        self.last_release = time.perf_counter() - t0
        self.displaced += len(gone)
        old = self.fleet[node]
        new = dataclasses.replace(old, name=f"{old.name}-r{len(self.add_seconds) + 1}")
        c0, t0 = time.process_time(), time.perf_counter()
        snap.remove_node(node)
        c1, t1 = time.process_time(), time.perf_counter()
        (slot,) = snap.add_nodes([new]).tolist()
        c2, t2 = time.process_time(), time.perf_counter()
        self.remove_seconds.append(t1 - t0)
        self.add_seconds.append(t2 - t1)
        self.remove_cpu.append(c1 - c0)
        self.add_cpu.append(c2 - c1)
        self.fleet[slot] = new
        return gone

    def summary(self) -> dict[str, Any]:
        def stats(values: list[float]) -> dict[str, float]:
            if not values:
                return {"mean_ms": 0.0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
            ms = np.array(values) * 1000
            return {
                "mean_ms": round(float(ms.mean()), 3),
                "p50_ms": round(float(np.percentile(ms, 50)), 3),
                "p99_ms": round(float(np.percentile(ms, 99)), 3),
                "max_ms": round(float(ms.max()), 3),
            }

        return {
            "changes": len(self.add_seconds),
            "add": stats(self.add_seconds),
            "remove": stats(self.remove_seconds),
            "add_cpu": stats(self.add_cpu),
            "remove_cpu": stats(self.remove_cpu),
            "displaced_workloads": self.displaced,
        }


def _sampling_name(score_percentage: float | None) -> str:
    if score_percentage is None:
        return "all"
    return "adaptive" if score_percentage == 0 else f"{score_percentage:g}%"


def _table(result: dict[str, Any]) -> Table:
    table = Table(
        title=(
            f"placement: {result['nodes']:,} nodes ({result['gpus']:,} GPUs), "
            f"{result['workloads']:,} workloads, policy {result['policy']}, "
            f"pack {result['pack_level']}, nodes to score {result['nodes_to_score']}, "
            f"seed {result['seed']}"
        )
    )
    table.add_column("decisions")
    for name in ("count", "placed", "unschedulable", "per s", "p50 ms", "p99 ms", "max ms"):
        table.add_column(name, justify="right")
    for label, key in (("single-pod", "single_pod"), ("gang", "gang")):
        row = result[key]
        table.add_row(
            label,
            f"{row['decisions']:,}",
            f"{row['placed']:,}",
            f"{row['unschedulable']:,}",
            f"{row['per_s']:,.0f}",
            f"{row['p50_ms']:.3f}",
            f"{row['p99_ms']:.3f}",
            f"{row['max_ms']:.3f}",
        )
    return table


def _churn_table(result: dict[str, Any]) -> Table:
    moved = result["node_churn"]
    table = Table(
        title=(
            f"node churn: {moved['changes']:,} nodes replaced on {result['nodes']:,}, "
            f"{moved['displaced_workloads']:,} workloads displaced"
        )
    )
    table.add_column("one node")
    for name in ("mean ms", "p50 ms", "p99 ms", "max ms"):
        table.add_column(name, justify="right")
    rows = (("add", "add"), ("remove", "remove"), ("add (cpu)", "add_cpu"))
    for label, key in (*rows, ("remove (cpu)", "remove_cpu")):
        row = moved[key]
        table.add_row(label, *(f"{row[k]:.3f}" for k in ("mean_ms", "p50_ms", "p99_ms", "max_ms")))
    return table


@bench_app.command("placement")
def bench_placement(
    nodes: int = typer.Option(10_000, "--nodes", help="synthetic fleet size (8-GPU nodes)"),
    workloads: int = typer.Option(100_000, "--workloads", help="workloads to place"),
    seed: int = typer.Option(0, "--seed", help="seed of the fleet, the mix and tie-breaking"),
    policy: str = typer.Option(DEFAULT_POLICY, "--policy", help=", ".join(POLICY_NAMES)),
    churn: bool = typer.Option(
        True, "--churn/--no-churn", help="finish the oldest workloads when the fleet is busy"
    ),
    high: float = typer.Option(0.9, "--high", help="churn starts above this GPU allocation"),
    low: float = typer.Option(0.8, "--low", help="churn stops below this GPU allocation"),
    pack: str = typer.Option(
        "rack",
        "--pack",
        help="single pods go to the best-fit domain of this level first (zone, block, rack, "
        "nvlink) or 'none' to let the policy score the whole fleet",
    ),
    score_percentage: float = typer.Option(
        0.0,
        "--percentage-of-nodes-to-score",
        help="kube-scheduler's percentageOfNodesToScore: score at most this percent of the "
        "feasible nodes (at least 100) per pod; 0 = adaptive (50% - nodes/125, at least 5%)",
    ),
    score_all: bool = typer.Option(
        False, "--score-all", help="score every feasible node (turn node sampling off)"
    ),
    node_churn: int = typer.Option(
        0,
        "--node-churn",
        help="replace this many random nodes during the run (remove, then add one with the "
        "same hardware), timing each node removal and addition",
    ),
    nics: int = typer.Option(
        0, "--nics-per-node", help="give every node this many RDMA NICs (SR-IOV, 8 VFs each)"
    ),
    network_share: float = typer.Option(
        0.0,
        "--network-share",
        help="share of 8-GPU pods that ask one VF per GPU, aligned (needs --nics-per-node)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    decision_hash: bool = typer.Option(
        False,
        "--decision-hash",
        help="add a SHA-256 over every decision (decision_sha256), to show a change keeps them",
    ),
) -> None:
    """Time placing a synthetic workload mix into a synthetic cloud-scale fleet."""
    pack_level: Level | None = None
    if pack.strip().lower() != "none":
        try:
            pack_level = Level.from_name(pack)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--pack") from None
        if pack_level is Level.HOSTNAME:
            raise typer.BadParameter("use a domain level or 'none'", param_hint="--pack")
    if policy not in POLICY_NAMES:
        choices = ", ".join(POLICY_NAMES)
        raise typer.BadParameter(f"{policy!r}: choose one of {choices}", param_hint="--policy")
    if not 0 <= score_percentage <= 100:
        raise typer.BadParameter(
            f"{score_percentage:g}: must be within 0..100",
            param_hint="--percentage-of-nodes-to-score",
        )
    try:
        result = run_placement_bench(
            nodes,
            workloads,
            seed,
            policy,
            churn,
            high,
            low,
            pack_level,
            None if score_all else score_percentage,
            node_churn,
            nics,
            network_share,
            decision_hash,
        )
    except GpuaasError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(result))
        return
    console = Console()
    console.print(_table(result))
    console.print(
        f"single-pod placements/s: [bold]{result['single_pod_per_s']:,.0f}[/]   "
        f"gang placements/s: [bold]{result['gang_per_s']:,.0f}[/]   "
        f"p99 per decision: [bold]{result['p99_ms']:.3f} ms[/]   "
        f"peak RSS: [bold]{result['peak_rss_mib']:,.0f} MiB[/]"
    )
    if result["sampled_placements"]:
        console.print(
            f"node sampling scored a sample in {result['sampled_placements']:,} placements, "
            f"leaving {result['unscored_feasible_nodes']:,} feasible nodes unscored in all"
        )
    console.print(
        f"setup {result['setup_seconds']} s, released {result['released']:,} workloads "
        f"({result['release_seconds']} s), GPU allocation at the end "
        f"{result['allocated_gpu_pct_at_end']}%"
    )
    moved = result["node_churn"]
    if moved["changes"]:
        console.print(_churn_table(result))
