"""The store ``gpuaas bench console`` times the provider console on: the openb fleet and
20,000 jobs (docs/benchmarks.md).

The fleet is registered through the service (:func:`gpuaas.service.fleet.register_nodes`, the
path ``POST /v1/nodes`` takes), with a rack of 16 nodes and an NVLink domain of 8 assigned in
file order (the trace publishes no topology; the console groups by both). Tenants, their
grants, three tenant clusters and the idle pool are rows of the tables' own form, and the
jobs too: 20,000 jobs through the reconciler would time the reconciler, not the console, so
they are generated directly, as ``bench usage`` does, but consistently: an active job's
placement is the engine's record form (``[slot, milli]`` pairs) on GPUs nobody else holds,
and every job that held a GPU in the last two days has its hourly usage records (with a
utilisation), the pool's priced at the ``idle-pool`` SKU."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from gpuaas.model.cluster import CLUSTER_LABEL
from gpuaas.model.resources import GPU_MILLI, NVIDIA_GPU
from gpuaas.service.fleet import fleet_file_entries, register_nodes
from gpuaas.service.governance import document, put_objects
from gpuaas.service.headless import CHROMIUM_ARGS
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import ClusterNodeRow, ClusterRow, Job, Tenant, UsageRow, User

RACK = 16
NVLINK = 8
TENANTS = 24
#: (tenant index, cluster name, nodes) of the tenant clusters carved
CLUSTERS = ((0, "train", 40), (1, "infer", 24), (2, "research", 16))
POOL_NODES = 60
POOL_TENANT = "idle-pool"
FLAVOR = "default"
CHUNK = 5000
PRICE_NANO = 2_000_000_000  # per GPU-hour on demand
POOL_PRICE_NANO = 900_000_000  # per GPU-hour in the idle pool


@dataclass(frozen=True, slots=True)
class BenchStore:
    nodes: int
    gpus: int
    jobs: int
    active: int
    usage_records: int
    tenants: int
    seconds: float


def _openb_entries(path: Path) -> list[dict[str, Any]]:
    entries = fleet_file_entries(path)
    for i, entry in enumerate(entries):
        entry["topology"] = {
            "rack": f"rack-{i // RACK:03d}",
            "nvlinkDomain": f"nvl-{i // NVLINK:04d}",
        }
    return entries


def build(db: Database, nodes_csv: Path, jobs: int = 20_000, seed: int = 1) -> BenchStore:
    """Fill the (empty, migrated) store ``db``; see the module docstring."""
    began = time.perf_counter()
    rng = random.Random(seed)
    now = time.time()
    entries = _openb_entries(nodes_csv)
    with db.session() as session:
        tenants = [
            Tenant(
                name="idle-pool",
                display_name="Idle-capacity marketplace",
                capacity={},
                created_at=now,
            )
        ]
        # grants in proportion to how much each tenant runs (the jobs' weights below), a few
        # tenants beyond theirs (borrowing), about the shared fleet's size in all
        fleet_gpus = sum(_gpu_count(e) for e in entries)
        weights = [1.0 / (i + 1) for i in range(TENANTS)]
        for i in range(TENANTS):
            share = weights[i] / sum(weights) * fleet_gpus * rng.uniform(0.35, 0.75)
            gpus = max(8, int(share) // 8 * 8)
            tenants.append(
                Tenant(
                    name=f"tenant-{i:02d}",
                    display_name=f"Tenant {i:02d}",
                    capacity={
                        FLAVOR: {
                            "cpu": str(gpus * 16),
                            "memory": f"{gpus * 64}Gi",
                            NVIDIA_GPU: str(gpus),
                            GPU_MILLI: str(gpus * 1000),
                        }
                    },
                    borrowing={
                        FLAVOR: {NVIDIA_GPU: str(gpus // 2), GPU_MILLI: str(gpus // 2 * 1000)}
                    },
                    created_at=now,
                )
            )
        session.add_all(tenants)
        users = [User(name=f"user-{t.name}", created_at=now) for t in tenants]
        session.add_all(users)
        session.flush()
        pool_tenant, shared = tenants[0], tenants[1:]
        # carve: the first nodes go to the clusters, the next to the pool (labels first)
        carved: dict[str, tuple[Tenant, str]] = {}
        at = 0
        plan = [(shared[t], name, n) for t, name, n in CLUSTERS]
        plan.append((pool_tenant, "pool", POOL_NODES))
        for tenant, name, n in plan:
            for entry in entries[at : at + n]:
                label = f"{tenant.name}.{name}"
                entry.setdefault("labels", {})[CLUSTER_LABEL] = label
                entry["taints"] = [{"key": CLUSTER_LABEL, "value": label, "effect": "NoSchedule"}]
                carved[entry["name"]] = (tenant, name)
            at += n
        register_nodes(session, entries, now)
        put_objects(session, _governance(shared, carved), now, by_provider=True)
        clusters: dict[tuple[int, str], ClusterRow] = {}
        for tenant, name, n in plan:
            spec: dict[str, Any] = {"pools": [{"name": "gpu", "count": n, "flavor": "default"}]}
            if tenant is pool_tenant:
                spec = {
                    "pools": [{"name": "idle", "count": n}],
                    "idlePool": {
                        "marketplace": "spot.example",
                        "settleSeconds": 600,
                        "graceSeconds": 120,
                        "maxNodes": 200,
                    },
                }
            row = ClusterRow(
                tenant_id=tenant.id,
                name=name,
                kind="baremetal",
                spec=spec,
                state="Ready",
                created_at=now - 86400,
                updated_at=now,
            )
            session.add(row)
            clusters[(tenant.id, name)] = row
        session.flush()
        session.add_all(
            ClusterNodeRow(
                node=node,
                cluster_id=clusters[(t.id, name)].id,
                pool="idle" if t is pool_tenant else "gpu",
                created_at=now - 86400,
            )
            for node, (t, name) in carved.items()
        )
        user_of = {t.id: u.id for t, u in zip(tenants, users, strict=True)}
        rows, usage, active = _jobs(rng, entries, carved, shared, pool_tenant, jobs, now)
        for chunk in _chunks(rows):
            session.execute(insert(Job), [{**r, "user_id": user_of[r["tenant_id"]]} for r in chunk])
        names = {t.id: t.name for t in tenants}
        for chunk in _chunks(usage):
            session.execute(insert(UsageRow), [{**u, "tenant": names[u["tenant"]]} for u in chunk])
        gpus = sum(int(e["gpus"]["count"]) for e in entries if isinstance(e.get("gpus"), dict))
    return BenchStore(
        len(entries), gpus, len(rows), active, len(usage), len(tenants), time.perf_counter() - began
    )


def _governance(shared: list[Tenant], carved: dict[str, tuple[Tenant, str]]) -> list[Any]:
    """The flavor ``default``, and per tenant a ClusterQueue ``<tenant>-default`` holding its
    grant (GPUs whole and by size, so shares are charged too) in its root cohort, fed by
    its LocalQueue ``default`` and one LocalQueue per cluster (``cluster-<name>``)."""
    out: list[Any] = [
        (document("ResourceFlavor", FLAVOR, {"spec": {}}), None, None),
    ]
    clusters: dict[int, set[str]] = {}
    for tenant, name in carved.values():
        clusters.setdefault(tenant.id, set()).add(name)
    for t in shared:
        grant = t.capacity[FLAVOR]
        gpus = int(grant[NVIDIA_GPU])
        borrow = int(t.borrowing[FLAVOR][NVIDIA_GPU])
        resources = [
            {"name": "cpu", "nominalQuota": grant["cpu"]},
            {"name": "memory", "nominalQuota": grant["memory"]},
            {"name": NVIDIA_GPU, "nominalQuota": gpus, "borrowingLimit": borrow},
            {"name": GPU_MILLI, "nominalQuota": gpus * 1000, "borrowingLimit": borrow * 1000},
        ]
        spec = {
            "cohortName": t.name,  # the tenant's root cohort (its grant)
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", NVIDIA_GPU, GPU_MILLI],
                    "flavors": [{"name": FLAVOR, "resources": resources}],
                }
            ],
        }
        cq = f"{t.name}-default"
        out.append((document("ClusterQueue", cq, {"spec": spec}), t.id, None))
        for lq in ["default", *(f"cluster-{c}" for c in sorted(clusters.get(t.id, ())))]:
            body = {"spec": {"clusterQueue": cq}}
            out.append((document("LocalQueue", lq, body, t.name), t.id, None))
    return out


def _chunks(rows: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    for start in range(0, len(rows), CHUNK):
        yield rows[start : start + CHUNK]


def _gpu_count(entry: dict[str, Any]) -> int:
    gpus = entry.get("gpus")
    return int(gpus["count"]) if isinstance(gpus, dict) else 0


def _jobs(
    rng: random.Random,
    entries: list[dict[str, Any]],
    carved: dict[str, tuple[Tenant, str]],
    shared: list[Tenant],
    pool_tenant: Tenant,
    count: int,
    now: float,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """Active jobs filling about two thirds of the GPUs (whole GPUs and shares, nobody's GPU
    twice), then finished jobs over the last two days and a few pending ones."""
    rows: list[dict[str, Any]] = []
    usage: list[dict[str, Any]] = []
    weights = [1.0 / (i + 1) for i in range(len(shared))]  # a few big tenants, a long tail
    for entry in entries:
        n = _gpu_count(entry)
        owner = carved.get(entry["name"])
        slot = 0
        while slot < n and len(rows) < count:
            if rng.random() > 0.68:
                slot += 1
                continue
            tenant = owner[0] if owner else rng.choices(shared, weights)[0]
            cluster = owner[1] if owner else ""
            if rng.random() < 0.25 and not owner:  # shares of one GPU
                taken = 0
                pairs = []
                while taken < 700:
                    milli = rng.choice([m for m in (100, 200, 250, 500) if taken + m <= 1000])
                    pairs.append(milli)
                    taken += milli
                for milli in pairs[: count - len(rows)]:
                    rows.append(
                        _job(
                            rng, len(rows), tenant, cluster, entry, [[slot, milli]], now, "Running"
                        )
                    )
                slot += 1
                continue
            width = min(rng.choice((1, 1, 2, 4, 8)), n - slot)
            pairs = [[s, 1000] for s in range(slot, slot + width)]
            rows.append(_job(rng, len(rows), tenant, cluster, entry, pairs, now, "Running"))
            slot += width
    active = len(rows)
    while len(rows) < count:
        tenant = rng.choices(shared, weights)[0]
        entry = rng.choice(entries)
        if _gpu_count(entry) == 0 or entry["name"] in carved:
            continue
        state = "Pending" if rng.random() < 0.05 else rng.choice(("Succeeded",) * 8 + ("Failed",))
        pairs = [[0, 1000]] if state != "Pending" else []
        rows.append(_job(rng, len(rows), tenant, "", entry, pairs, now, state))
    for job in rows:
        where = (job.pop("node"), job.pop("model"), job.pop("cluster"))
        if job["admitted_at"] is not None:
            usage.extend(_usage(rng, job, where, pool_tenant, now))
    return rows, usage, active


def _job(
    rng: random.Random,
    index: int,
    tenant: Tenant,
    cluster: str,
    entry: dict[str, Any],
    pairs: list[list[int]],
    now: float,
    state: str,
) -> dict[str, Any]:
    milli = sum(m for _, m in pairs)
    created = now - rng.uniform(600, 2 * 86400)
    admitted = None if state == "Pending" else created + rng.uniform(0, 900)
    finished = None
    if state in ("Succeeded", "Failed") and admitted is not None:
        finished = min(admitted + rng.uniform(600, 6 * 3600), now - 60)
    placement = (
        [
            {
                "podSet": "main",
                "index": 0,
                "node": entry["name"],
                "assignment": {
                    "cpu": 4000,
                    "memory": 16 << 30,
                    "gpus": pairs,
                    "mig": [],
                    "replicas": [],
                    "devices": [f"gpu-{s}" for s, _ in pairs],
                },
            }
        ]
        if pairs
        else None
    )
    queue = f"cluster-{cluster}" if cluster else "default"
    shares = len(pairs) == 1 and milli < 1000
    gpu = {GPU_MILLI: milli} if shares else {NVIDIA_GPU: milli // 1000} if pairs else {}
    requests = {"cpu": 4000, "memory": 16 << 30, **gpu}
    return {
        "id": index + 1,
        "tenant_id": tenant.id,
        "name": f"job-{index + 1:05d}",
        "kind": "batch",
        "local_queue": queue,
        "priority": 0,
        "spec": {
            "name": f"job-{index + 1:05d}",
            "queue": queue,
            "cluster": cluster or None,
            "resolved": {
                "queue": f"{tenant.name}/{queue}",
                "podSets": [{"name": "main", "count": 1, "requests": requests}],
            },
        },
        "state": state,
        "reason": "waiting for quota" if state == "Pending" else "",
        "reason_code": "WaitingForQuota" if state == "Pending" else "",
        "cluster_queue": None if state == "Pending" else f"{tenant.name}-default",
        "flavors": None
        if state == "Pending"
        else {"main": dict.fromkeys(["cpu", "memory", *gpu, GPU_MILLI], FLAVOR)},
        "placement": placement,
        "gpus": milli if pairs else 0,
        "attempts": 1,
        "created_at": created,
        "updated_at": finished or admitted or created,
        "admitted_at": admitted,
        "started_at": admitted,
        "finished_at": finished,
        "node": entry["name"],
        "model": str((entry.get("gpus") or {}).get("model", "gpu")),
        "cluster": cluster,
    }


def _usage(
    rng: random.Random,
    job: dict[str, Any],
    where: tuple[str, str, str],
    pool_tenant: Tenant,
    now: float,
) -> Iterator[dict[str, Any]]:
    """Hourly records of what the job held, as the metering step writes them."""
    start = job["admitted_at"]
    end = job["finished_at"] or now - 300
    node, model, cluster = where
    pool = job["tenant_id"] == pool_tenant.id
    capacity = "idle-pool" if pool else "on-demand"
    price = POOL_PRICE_NANO if pool else PRICE_NANO
    util = rng.uniform(0.05, 0.95)
    hour = 3600.0
    t = start
    k = 0
    while t < end:
        stop = min((t // hour + 1) * hour, end)
        micro = int(job["gpus"] / 1000 * (stop - t) * 1e6)
        cost = micro * price // (3600 * 10**6)
        yield {
            "key": f"{job['id']}/1/{k}",
            "tenant": job["tenant_id"],
            "user": "bench",
            "queue": job["local_queue"],
            "cluster": cluster,
            "job_id": job["id"],
            "attempt": 1,
            "pod": "main-0",
            "device": "gpu-0",
            "node": node,
            "sku": f"{model}/whole@{capacity}",
            "period": time.strftime("%Y-%m", time.gmtime(t)),
            "start": t,
            "end": stop,
            "quantity": micro,
            "price_id": 0,
            "currency": "USD",
            "list_cost": cost,
            "effective_cost": cost,
            "utilization": min(max(util + rng.gauss(0, 0.05), 0), 1),
        }
        t = stop
        k += 1


# --- timing the pages ----------------------------------------------------------------------

#: The provider's pages, and the busiest tenant's (tenant-00 holds the most jobs).
PROVIDER_PAGES = (
    "/fleet",
    "/fleet/picture.json",
    "/fleet/nodes",
    "/fleet/nodes/openb-node-0500",
    "/fleet/tenants",
    "/fleet/idle",
    "/fleet/utilisation",
)
TENANT_PAGES = (
    "/t/tenant-00/jobs",
    "/t/tenant-00/jobs/1",
    "/t/tenant-00/clusters",
    "/t/tenant-00/queues",
    "/t/tenant-00/usage",
)
ADMIN_TOKEN = "gpa_bench-console-admin-0123456789"
SERVER_TARGET = 0.200
RENDER_TARGET = 1.5


@dataclass(frozen=True, slots=True)
class PageTime:
    """One page: its status, the first request's time (the caches of this process empty:
    what the page costs after the data changed), then the p50 / p99 wall and the mean CPU
    of ``requests`` more, and the browser's first render (None: not measured)."""

    path: str
    status: int
    bytes: int
    first: float
    p50: float
    p99: float
    cpu: float
    render: float | None = None

    @property
    def met(self) -> bool:
        return (
            self.status == 200
            and self.p99 <= SERVER_TARGET
            and (self.render is None or self.render <= RENDER_TARGET)
        )

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "status": self.status,
            "bytes": self.bytes,
            "first_ms": round(self.first * 1000, 1),
            "p50_ms": round(self.p50 * 1000, 1),
            "p99_ms": round(self.p99 * 1000, 1),
            "cpu_ms": round(self.cpu * 1000, 1),
            "render_ms": None if self.render is None else round(self.render * 1000),
            "met": self.met,
        }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def time_pages(client: Any, paths: Iterable[str], requests: int) -> list[PageTime]:
    """Time each page through ``client`` (a logged-in TestClient: the ASGI app in this
    process, no network), as described on :class:`PageTime`."""
    from gpuaas.service import fleet_view, usage_sums

    out = []
    for path in paths:
        fleet_view.forget()
        usage_sums.forget()
        began = time.perf_counter()
        client.get(path)
        first_s = time.perf_counter() - began
        walls, cpus = [], []
        for _ in range(requests):
            began, cpu = time.perf_counter(), time.process_time()
            r = client.get(path)
            walls.append(time.perf_counter() - began)
            cpus.append(time.process_time() - cpu)
        out.append(
            PageTime(
                path,
                r.status_code,
                len(r.content),
                first_s,
                _percentile(walls, 0.5),
                _percentile(walls, 0.99),
                sum(cpus) / len(cpus),
            )
        )
    return out


@contextmanager
def serving(settings: Settings) -> Iterator[str]:
    """The app for ``settings`` over HTTP on a free local port (uvicorn in a thread, stopped
    on leaving); yields its base URL."""
    import uvicorn

    from gpuaas.service.app import create_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not server.started:
            raise RuntimeError("the console's server did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def render_times(
    base_url: str, token: str, paths: Iterable[str], chromium: str
) -> dict[str, float]:
    """First render of each page in headless Chromium: from the navigation's start until
    the page has loaded and drawn (the heatmap's SVG, every chart), in seconds. The browser
    logs in once (the static assets are then cached, as for a person's second page)."""
    from playwright.sync_api import sync_playwright

    drawn = (
        "() => document.readyState === 'complete'"
        " && (!document.getElementById('fleet-data') || !!document.querySelector('#heatmap svg'))"
        " && [...document.querySelectorAll('div.chart')].every(c => c.dataset.drawn)"
        " && performance.now()"
    )
    out: dict[str, float] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium, headless=True, args=list(CHROMIUM_ARGS)
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{base_url}/login")
            page.fill("#f-token", token)
            page.press("#f-token", "Enter")
            page.wait_for_load_state("load")
            for path in paths:
                if path.endswith(".json"):
                    continue
                page.goto(f"{base_url}{path}", wait_until="load")
                at = page.wait_for_function(drawn, timeout=30_000).json_value()
                out[path] = float(at) / 1000
        finally:
            browser.close()
    return out
