"""``gpuaas bench abuse``: can one tenant-user slow admission for everyone within its own quota?

Issue 19 saw three jobs of 16 pod sets x 10,000 one-millicore pods make other tenants' 1-GPU jobs
wait 16 s instead of 0.6 s. This benchmark replays that on a real server (``gpuaas serve`` in
a subprocess, a fresh SQLite database, reconciler on, a simulated fleet): ``--victims`` tenants
submit a steady stream of 1-GPU jobs while an abusive tenant-user submits ``--abusive-jobs`` jobs of
``--pod-sets`` x ``--pods`` pods of ``cpu: 1m`` (by default the largest the API allows: 10,000
pods in all), all within its quota. Each scenario runs on a fresh server and database, back to
back: without the abusive tenant, then with it under each ``--budgets`` value of
``GPUAAS_ADMISSION_PODS_PER_CYCLE`` (0: no per-cycle budget, as before it existed).

Reported per scenario: the victims' admission latency (the server's ``admittedAt - createdAt``)
p50/p99/max, the abusive submissions' latency, how long the abusive jobs took to be admitted, the
database's growth (SQLite: the file and its WAL) and the server's CPU time. The target is the
victims' p99 with the abusive tenant within one reconcile cycle (``reconcile_interval``, 0.5 s)
of their p99 without it.
"""

from __future__ import annotations

import json
import math
import os
import resource
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from gpuaas.cli.bench import bench_app
from gpuaas.cli.bench_api import (
    FLAVOR,
    GPUS_PER_NODE,
    POOL_LABEL,
    BenchError,
    Server,
    database_kind,
    percentile,
    queue_spec,
    settled,
    write_fleet,
)
from gpuaas.client.sdk import ApiError, Client

ABUSER = "abuser"
BUDGET_ENV = "GPUAAS_ADMISSION_PODS_PER_CYCLE"
RECONCILE_INTERVAL = 0.5  # gpuaas serve's default (service/settings.py)
ADMISSION_TIMEOUT = 300.0  # a deadline for the victims' jobs, not a measurement


def set_up(admin: Client, tenant: str, cpu: int, gpus: int, memory: str) -> str:
    """A tenant with a grant, its ClusterQueue and LocalQueue ``main`` and a tenant-user;
    returns the user's token."""
    capacity = {FLAVOR: {"nvidia.com/gpu": str(gpus), "cpu": str(cpu), "memory": memory}}
    settled(lambda: admin.create_tenant(tenant, display_name=tenant, capacity=capacity))
    spec = queue_spec(cpu, gpus, memory)
    settled(lambda: admin.create_cluster_queue(f"{tenant}-cq", spec, owner=tenant))
    settled(lambda: admin.create_local_queue("main", f"{tenant}-cq", tenant=tenant))
    settled(lambda: admin.set_member(tenant, f"{tenant}-user", "tenant-user"))
    token = str(settled(lambda: admin.create_member_token(tenant, f"{tenant}-user", "b"))["token"])
    with Client(admin.url, token) as user:
        settled(lambda: user.get_local_queue("main", tenant=tenant))
    return token


def victim_job(index: int) -> dict[str, Any]:
    return {
        "name": f"small-{index}" if index >= 0 else "warm-up",
        "queue": "main",
        "command": ["sleep", "3600"],
        "duration": 3600,
        "podSets": [
            {"name": "main", "count": 1,
             "resources": {"nvidia.com/gpu": 1, "cpu": "1", "memory": "1Gi"}},
        ],
    }  # fmt: skip


def abusive_job(index: int, pod_sets: int, pods: int) -> dict[str, Any]:
    return {
        "name": f"huge-{index}",
        "queue": "main",
        "command": ["sleep", "3600"],
        "duration": 3600,
        "podSets": [
            {"name": f"s{i}", "count": pods, "resources": {"cpu": "1m"}} for i in range(pod_sets)
        ],
    }


STEP_WALL = "gpuaas_reconcile_cycle_seconds"
STEP_CPU = "gpuaas_reconcile_cycle_cpu_seconds"


def step_histograms(url: str) -> dict[str, dict[str, float]]:
    """The reconciler's pass histograms (wall and CPU) from the server's ``/metrics``:
    per histogram its cumulative bucket counts by bound, ``count`` and ``sum``."""
    text = httpx.get(f"{url}/metrics", timeout=60.0).text
    out: dict[str, dict[str, float]] = {STEP_WALL: {}, STEP_CPU: {}}
    for family in text_string_to_metric_families(text):
        if family.name not in out:
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                out[family.name][sample.labels["le"]] = sample.value
            elif sample.name.endswith(("_count", "_sum")):
                out[family.name][sample.name.rpartition("_")[2]] = sample.value
    return out


def step_summary(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Passes between two readings, their mean, and the bucket bound the longest stayed
    within (histograms keep no maximum: "at most" that bound, above the next lower one)."""
    steps = after.get("count", 0.0) - before.get("count", 0.0)
    total = after.get("sum", 0.0) - before.get("sum", 0.0)
    bounds = sorted((float(b), b) for b in after if b not in ("count", "sum"))
    longest = math.inf
    for value, key in bounds:
        if after[key] - before.get(key, 0.0) >= steps:
            longest = value
            break
    return {"steps": steps, "mean_ms": round(1000 * total / steps, 1) if steps else 0.0,
            "longest_at_most_s": longest}  # fmt: skip


def database_bytes(workdir: Path) -> int:
    """The SQLite file and its WAL."""
    return sum(p.stat().st_size for p in workdir.glob("bench.db*") if p.is_file())


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def budget_env(budget: int | None) -> Iterator[None]:
    """The server reads its budget from the environment it is started with."""
    old = os.environ.get(BUDGET_ENV)
    if budget is None:
        os.environ.pop(BUDGET_ENV, None)
    else:
        os.environ[BUDGET_ENV] = str(budget)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(BUDGET_ENV, None)
        else:
            os.environ[BUDGET_ENV] = old


def submit(http: httpx.Client, tenant: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    r = http.post(f"/v1/tenants/{tenant}/jobs", json=body)
    elapsed = time.perf_counter() - started
    if r.status_code != 201:
        raise BenchError(f"{tenant}: submission answered {r.status_code}: {r.text[:300]}")
    return elapsed


def wait_admitted(url: str, token: str, tenant: str, expected: int) -> list[dict[str, Any]]:
    """The tenant's jobs once ``expected`` of them have an ``admittedAt``."""
    deadline = time.monotonic() + ADMISSION_TIMEOUT
    with Client(url, token, timeout=120.0) as client:
        while True:
            jobs = list(client.iter_jobs(tenant))
            if sum(j.get("admittedAt") is not None for j in jobs) >= expected:
                return jobs
            if time.monotonic() > deadline:
                raise BenchError(f"{tenant}: jobs not admitted within {ADMISSION_TIMEOUT:.0f}s")
            time.sleep(0.25)


def run_scenario(
    *,
    abusive: bool,
    budget: int | None,
    victims: int,
    victim_jobs: int,
    interval: float,
    abusive_jobs: int,
    pod_sets: int,
    pods: int,
    nodes: int,
    err: Console,
) -> dict[str, Any]:
    label = "no abuser" if not abusive else f"abuser, budget {budget or 'off'}"
    with tempfile.TemporaryDirectory(prefix="gpuaas-bench-abuse-") as tmp:
        workdir = Path(tmp)
        db_url = f"sqlite:///{workdir / 'bench.db'}"
        cpu_before = children_cpu()
        with budget_env(budget):
            server = Server(db_url, workdir, write_fleet(workdir, nodes), reconcile=True)
            err.print(f"{label}: starting gpuaas serve on {server.url}", markup=False)
            server.start()
        try:
            gpus = nodes * GPUS_PER_NODE
            with Client(server.url, server.admin_token) as admin:
                labels = {"nodeLabels": {POOL_LABEL: "bench"}}
                settled(lambda: admin.create_flavor(FLAVOR, labels))
                tokens = {
                    f"victim-{v}": set_up(admin, f"victim-{v}", 64, gpus // (victims + 1), "1Ti")
                    for v in range(victims)
                }
                abuser_cpu = max(1, abusive_jobs * pod_sets * pods // 1000 + 1)
                abuser_token = set_up(admin, ABUSER, abuser_cpu, 0, "1Ti")
            # warm up: the server answers before its reconciler leads and has loaded the fleet;
            # measure from the moment it admits (one job per victim, not counted)
            for tenant, tok in tokens.items():
                headers = {"Authorization": f"Bearer {tok}"}
                with httpx.Client(base_url=server.url, headers=headers) as http:
                    submit(http, tenant, victim_job(-1))
            for tenant, tok in tokens.items():
                wait_admitted(server.url, tok, tenant, 1)
            size_before = database_bytes(workdir)
            steps_before = step_histograms(server.url)
            abusive_latencies: list[float] = []
            abusive_done = threading.Event()

            def abuse() -> None:
                headers = {"Authorization": f"Bearer {abuser_token}"}
                with httpx.Client(base_url=server.url, headers=headers, timeout=120.0) as http:
                    for i in range(abusive_jobs):
                        abusive_latencies.append(
                            submit(http, ABUSER, abusive_job(i, pod_sets, pods))
                        )
                abusive_done.set()

            began = time.perf_counter()
            abuser = threading.Thread(target=abuse, daemon=True) if abusive else None
            if abuser is not None:
                abuser.start()
            clients = {
                t: httpx.Client(
                    base_url=server.url, headers={"Authorization": f"Bearer {tok}"}, timeout=120.0
                )
                for t, tok in tokens.items()
            }
            try:
                for i in range(victim_jobs):
                    tick = time.perf_counter()
                    for tenant, http in clients.items():
                        submit(http, tenant, victim_job(i))
                    time.sleep(max(0.0, interval - (time.perf_counter() - tick)))
            finally:
                for http in clients.values():
                    http.close()
            if abuser is not None:
                abuser.join(timeout=ADMISSION_TIMEOUT)
                if not abusive_done.is_set():
                    raise BenchError("the abusive submissions did not finish")
            latencies: list[float] = []
            for tenant, tok in tokens.items():
                for job in wait_admitted(server.url, tok, tenant, victim_jobs + 1):
                    if job["name"] != victim_job(-1)["name"]:
                        latencies.append(float(job["admittedAt"]) - float(job["createdAt"]))
            abusive_admitted: list[float] = []
            steps = 0
            if abusive:
                jobs = wait_admitted(server.url, abuser_token, ABUSER, abusive_jobs)
                abusive_admitted = [float(j["admittedAt"]) - float(j["createdAt"]) for j in jobs]
                steps = len({j["admittedAt"] for j in jobs})
            elapsed = time.perf_counter() - began
            size_after = database_bytes(workdir)
            steps_after = step_histograms(server.url)
        finally:
            server.stop()
        cpu = children_cpu() - cpu_before
    lat = sorted(latencies)
    return {
        "scenario": label,
        "abusive": abusive,
        "budget": budget,
        "victim_jobs": len(lat),
        "victim_p50_ms": round(percentile(lat, 50) * 1000, 1),
        "victim_p99_ms": round(percentile(lat, 99) * 1000, 1),
        "victim_max_ms": round(lat[-1] * 1000, 1) if lat else 0.0,
        "abusive_submit_ms": [round(x * 1000, 1) for x in abusive_latencies],
        "abusive_admitted_s": [round(x, 2) for x in sorted(abusive_admitted)],
        # in how many reconcile steps the abusive jobs were admitted (the budget spreads them)
        "abusive_admission_steps": steps,
        "db_growth_mb": round((size_after - size_before) / 1e6, 1),
        # the reconciler's passes over the measured phase: wall and CPU (its thread's)
        "step_wall": step_summary(steps_before[STEP_WALL], steps_after[STEP_WALL]),
        "step_cpu": step_summary(steps_before[STEP_CPU], steps_after[STEP_CPU]),
        "elapsed_s": round(elapsed, 1),
        "server_cpu_s": round(cpu, 1),
        "database": database_kind(db_url),
    }


def shown_steps(summary: dict[str, float]) -> str:
    longest = summary["longest_at_most_s"]
    bound = f"<= {longest * 1000:,.0f}" if math.isfinite(longest) else "> 5,000"
    return f"{summary['mean_ms']:,.0f} / {bound}"


def show(result: dict[str, Any]) -> None:
    console = Console(width=max(Console().width, 150))
    table = Table(title=result["title"])
    for header in ("scenario", "victims p50 ms", "p99 ms", "max ms", "abusive submit ms",
                   "abusive admitted s", "steps", "step CPU mean / max ms",
                   "step wall mean / max ms", "db growth MB", "server CPU s",
                   "wall s"):  # fmt: skip
        table.add_column(header, justify="right")
    for row in result["scenarios"]:
        table.add_row(
            row["scenario"],
            f"{row['victim_p50_ms']:.0f}",
            f"{row['victim_p99_ms']:.0f}",
            f"{row['victim_max_ms']:.0f}",
            ", ".join(f"{x:.0f}" for x in row["abusive_submit_ms"]) or "-",
            ", ".join(f"{x:.1f}" for x in row["abusive_admitted_s"]) or "-",
            f"{row['step_cpu']['steps']:.0f}",
            shown_steps(row["step_cpu"]),
            shown_steps(row["step_wall"]),
            f"{row['db_growth_mb']:.1f}",
            f"{row['server_cpu_s']:.1f}",
            f"{row['elapsed_s']:.1f}",
        )
    console.print(table)
    verdict = "met" if result["within_one_cycle"] else "NOT met"
    console.print(
        f"victims' p99 with vs without the abuser (budget {result['budget']}): "
        f"{result['p99_difference_ms']:+.0f} ms; target within one reconcile cycle "
        f"({RECONCILE_INTERVAL * 1000:.0f} ms): {verdict}",
        markup=False,
    )


@bench_app.command("abuse")
def bench_abuse(
    victims: Annotated[int, typer.Option("--victims", min=1, max=20)] = 2,
    victim_jobs: Annotated[
        int, typer.Option("--victim-jobs", min=1, help="1-GPU jobs per victim tenant.")
    ] = 40,
    interval: Annotated[
        float, typer.Option("--interval", min=0.0, help="Seconds between a victim's jobs.")
    ] = 0.1,
    abusive_jobs: Annotated[int, typer.Option("--abusive-jobs", min=1)] = 3,
    pod_sets: Annotated[int, typer.Option("--pod-sets", min=1, max=16)] = 16,
    pods: Annotated[
        int,
        typer.Option("--pods", min=1, help="Pods per abusive pod set (API bound: 10,000 in all)."),
    ] = 625,
    budgets: Annotated[
        str,
        typer.Option("--budgets", help="GPUAAS_ADMISSION_PODS_PER_CYCLE values, comma-separated."),
    ] = "4000,0",
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=1000)] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Other tenants' admission latency with and without an abusive tenant (issue 19)."""
    err = Console(stderr=True)
    try:
        values = [int(b) for b in budgets.split(",") if b.strip()]
    except ValueError:
        err.print(f"error: --budgets: expected integers, got {budgets!r}", markup=False)
        raise typer.Exit(2) from None
    common = dict(victims=victims, victim_jobs=victim_jobs, interval=interval,
                  abusive_jobs=abusive_jobs, pod_sets=pod_sets, pods=pods, nodes=nodes,
                  err=err)  # fmt: skip
    try:
        rows = [run_scenario(abusive=False, budget=values[0] if values else None, **common)]  # type: ignore[arg-type]
        rows += [run_scenario(abusive=True, budget=b, **common) for b in values]  # type: ignore[arg-type]
    except ApiError as exc:
        err.print(f"error: setting up through the API failed: {exc.detail}", markup=False)
        raise typer.Exit(1) from None
    except (BenchError, httpx.HTTPError) as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    base = rows[0]["victim_p99_ms"]
    first = rows[1] if len(rows) > 1 else rows[0]
    difference = first["victim_p99_ms"] - base
    result = {
        "title": (
            f"bench abuse: {victims} victim tenants x {victim_jobs} 1-GPU jobs; abuser "
            f"{abusive_jobs} jobs x {pod_sets} pod sets x {pods} pods of cpu 1m; "
            f"{nodes} nodes x {GPUS_PER_NODE} GPUs, {rows[0]['database']}"
        ),
        "scenarios": rows,
        "budget": first["budget"],
        "p99_difference_ms": round(difference, 1),
        "reconcile_interval_ms": RECONCILE_INTERVAL * 1000,
        "within_one_cycle": difference <= RECONCILE_INTERVAL * 1000,
    }
    if as_json:
        typer.echo(json.dumps(result))
    else:
        show(result)
