"""``gpuaas bench admission``: admission throughput at Kueue's published performance-test scale.

Kueue's own performance test admits 15,000 workloads in about 351 s and 50,000 workloads over
1,000 ClusterQueues in about 1,179 s. This builds a comparable configuration (ClusterQueues in
cohorts, two GPU flavors, borrowing, preemption policies, mixed priorities), submits every
workload at once and times the engine until it settles.
"""

from __future__ import annotations

import json
import resource
import sys
import time

import typer

from gpuaas.cli.bench import bench_app
from gpuaas.engine.admission import AdmissionConfig, AdmissionEngine
from gpuaas.engine.admission.synthetic import build_benchmark
from gpuaas.model.governance import ReclaimWithinCohort


def peak_rss_mib() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage / (1024 * 1024) if sys.platform == "darwin" else usage / 1024


@bench_app.command("admission")
def bench_admission(
    cluster_queues: int = typer.Option(1000, "--cluster-queues", min=1),
    cohorts: int = typer.Option(100, "--cohorts", min=0),
    workloads: int = typer.Option(50_000, "--workloads", min=1),
    nodes: int = typer.Option(0, "--nodes", min=0, help="also place pods on this many nodes"),
    fair_sharing: bool = typer.Option(True, "--fair-sharing/--no-fair-sharing"),
    seed: int = typer.Option(1, "--seed"),
    reclaim: str = typer.Option(
        "LowerPriority",
        "--reclaim-within-cohort",
        help="the ClusterQueues' reclaimWithinCohort policy: LowerPriority or Any",
    ),
    contested_only: bool = typer.Option(
        False,
        "--reclaim-only-contested-borrowers",
        help="fair sharing: take only from queues that borrow what the preemptor contests "
        "(breaks the preemption loops of reclaimWithinCohort Any; not Kueue's rule)",
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Admit WORKLOADS over CLUSTER_QUEUES in COHORTS; print admissions/s and peak RSS."""
    if reclaim not in ("LowerPriority", "Any"):
        typer.echo(
            f"error: --reclaim-within-cohort: {reclaim!r} is not LowerPriority or Any", err=True
        )
        raise typer.Exit(2)
    gov, wls, node_list = build_benchmark(
        cluster_queues, cohorts, workloads, nodes, seed, ReclaimWithinCohort(reclaim)
    )
    config = AdmissionConfig(
        fair_sharing=fair_sharing, reclaim_only_contested_borrowers=contested_only
    )
    engine = AdmissionEngine(gov, config, node_list)
    start = time.perf_counter()
    cpu_start = time.process_time()
    for wl in wls:
        engine.submit(wl)
    passes = engine.run(float(workloads))
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    admitted = len(engine.admitted)
    rate = admitted / elapsed if elapsed > 0 else float("inf")
    rss = peak_rss_mib()
    if as_json:
        typer.echo(json.dumps({"admissions_per_s": round(rate, 1), "peak_rss_mib": round(rss, 1)}))
        return
    typer.echo(
        f"admitted {admitted} of {workloads} workloads over {cluster_queues} ClusterQueues in "
        f"{cohorts} cohorts{f' on {nodes} nodes' if nodes else ''} "
        f"(fair sharing {'on' if fair_sharing else 'off'}, reclaimWithinCohort {reclaim}) "
        f"in {elapsed:.2f} s wall, {cpu:.2f} s CPU, {passes} passes, "
        f"{len(engine.evictions)} preemptions"
        + (" (stopped on a preemption loop)" if engine.oscillated else "")
    )
    typer.echo(f"admissions/s: {rate:,.0f}")
    typer.echo(f"peak RSS: {rss:,.0f} MiB")
