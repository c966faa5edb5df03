"""The provider's fleet as the console draws it: who holds which part of which GPU, the
allocation and utilisation over time, the idle pool's size and revenue, and the tenants'
grants against what they hold.

Everything here is read in a few bulk queries, never one per node or job: the provider
console must answer within 200 ms on the openb fleet (1,213 nodes, 6,212 GPUs) with 20,000
jobs (``gpuaas bench console``). The nodes' GPU layouts (whole, MIG instances, shared
replicas) come from the inventory loader, which takes a second on that fleet; they are kept
per database and ``fleet.version`` (Meta), which every node change bumps (cordon, drain,
partition, carving), so a cached layout is never older than the fleet it describes.

Semantics, in one paragraph each:

- **Parts of a GPU.** A GPU is drawn as parts in milli-GPU (1000 = the GPU): a job's share
  of a whole GPU (``gpus``: ``[slot, milli]``), a MIG instance (its memory slices of the
  GPU's 8, ``mig``: ``[slot, instance]``), a time-sliced or MPS replica (``1/replicas``,
  ``replicas``: ``[slot, count]``). What no active job holds is free; the parts are those of
  the admitted and running jobs' recorded placements (:func:`gpuaas.engine.admission.restore.
  record`), the engine's own account, so the picture and admission never disagree.
- **Colour (owner).** A node that is cordoned, draining or reports a telemetry condition is
  *unavailable* (all its GPUs). A node of the idle pool is the *idle pool*'s, a node carved
  into a tenant cluster is that *cluster*'s, whole (its free parts included: the cluster
  holds them). On the shared fleet a held part is its job's *tenant*'s and the rest is *free*.
  Tenants beyond the palette's distinct colours share one "other tenants" colour; every
  colour has at least 3:1 contrast with the page's white (WCAG 1.4.11), checked in the tests.
- **Grouping.** Nodes are grouped by rack and NVLink domain (the inventory's topology;
  ``""`` when unknown), then by name.
- **Allocation and utilisation over time**, per UTC hour, come from the usage records
  (:mod:`gpuaas.service.usage`: what each job held, cut at whole hours, with the devices'
  mean utilisation): allocation is the GPU-time held over the fleet's GPU-time, utilisation
  the held GPU-time weighted by its utilisation, so a GPU held idle counts as allocated but
  not utilised; ``measured`` says how much of the held time had telemetry at all. The last
  hours the metering step has not written yet read what the active jobs hold now.
- **Caching.** Requests poll (the console's live regions every few seconds), so the
  holdings and the picture are kept per database and an *active-jobs signature* (count,
  newest ``updated_at`` and sum of ids of the admitted and running jobs: any admission,
  start, finish or requeue moves it) with the fleet version; the hourly sums per newest
  usage record id (records are only ever added). The signature is the picture's ETag.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Integer, and_, case, cast, func, select
from sqlalchemy.orm import Session

from gpuaas.model.billing import CapacityPool
from gpuaas.model.cluster import CLUSTER_LABEL
from gpuaas.model.devices import PartitionMode
from gpuaas.model.job_state import ACTIVE, JobState
from gpuaas.service.fleet import FLEET_VERSION, nodes_from_rows
from gpuaas.service.idle_pool import pool_row
from gpuaas.store.tables import (
    ClusterAllowance,
    ClusterNodeRow,
    ClusterRow,
    Job,
    Meta,
    NodeRow,
    Tenant,
    UsageRow,
)

#: Milli-GPU in a GPU; MIG memory slices in a GPU.
MILLI = 1000
MIG_SLICES = 8

#: The page's background the legend's colours are measured against.
BACKGROUND = "#ffffff"
FREE_COLOUR = "#8a8a8a"
UNAVAILABLE_COLOUR = "#b3261e"
POOL_COLOUR = "#7a5c00"
OTHER_COLOUR = "#5f5f5f"
#: Distinct tenant and cluster colours, each at least 3:1 against white, apart from the
#: fixed ones above (a colour-blind-friendly order: blue, green, purple, brown, ...).
PALETTE = (
    "#1f5fa8",
    "#2e7d32",
    "#6a3d9a",
    "#a6540f",
    "#00796b",
    "#ad1457",
    "#3949ab",
    "#558b2f",
    "#8e24aa",
    "#00838f",
    "#c2185b",
    "#4e342e",
)

FREE = "free"
UNAVAILABLE = "unavailable"
POOL = "pool"
OTHER = "other"

_ACTIVE = tuple(s.value for s in ACTIVE)


# --- contrast ------------------------------------------------------------------------------


def _channel(c: float) -> float:
    c /= 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def luminance(colour: str) -> float:
    """WCAG relative luminance of ``#rrggbb``."""
    h = colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return 0.2126 * _channel(r) + 0.7152 * _channel(g) + 0.0722 * _channel(b)


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two colours (1 to 21)."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


# --- the nodes' layouts, cached per fleet version ------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuLayout:
    """How one GPU is offered: ``mig`` lists its instances' ``(start, size)`` in memory
    slices; ``replicas`` is 1 unless time-sliced or MPS."""

    model: str
    mig: tuple[tuple[int, int], ...] = ()
    replicas: int = 1


@dataclass(frozen=True, slots=True)
class NodeLayout:
    name: str
    model: str
    rack: str
    nvlink: str
    gpus: tuple[GpuLayout, ...]
    cordoned: bool
    draining: bool
    cluster: str  # the gpuaas.io/cluster label: "<tenant>.<cluster>", "" when none


@dataclass(slots=True)
class _Cached:
    version: str
    nodes: list[NodeLayout]
    by_name: dict[str, NodeLayout]
    #: node id -> ((updated_at, cordoned, draining), layout): a new fleet version re-reads a
    #: node only when these moved
    rows: dict[int, tuple[tuple[float, bool, bool], NodeLayout]] = field(default_factory=dict)


_cache: dict[str, _Cached] = {}
_memo: dict[tuple[Any, ...], Any] = {}
_cache_lock = threading.Lock()


def forget() -> None:
    """Drop every cache of this module (the benchmark times a page with them empty)."""
    with _cache_lock:
        _cache.clear()
        _memo.clear()


def _layout(rows: Sequence[NodeRow]) -> list[NodeLayout]:
    out = []
    for row, node in zip(rows, nodes_from_rows(rows), strict=True):
        gpus = []
        for g in node.gpus:
            p = g.partition
            mig = (
                tuple((i.start, i.size) for i in p.instances) if p.mode is PartitionMode.MIG else ()
            )
            gpus.append(GpuLayout(g.model, mig, p.replicas if p.shared else 1))
        out.append(
            NodeLayout(
                row.name,
                node.gpu_model,
                node.topology.rack,
                node.topology.nvlink_domain,
                tuple(gpus),
                row.cordoned,
                row.draining,
                node.labels.get(CLUSTER_LABEL, ""),
            )
        )
    return out


def fleet_layout(session: Session) -> list[NodeLayout]:
    """Every node's layout in registration order, kept per ``fleet.version``. When the
    version moved, only the nodes whose row changed (``updated_at``, which every write of a
    node sets: partition, carving, apply; and the cordon and drain flags) are read and parsed
    again, so a cordon costs one node's parse, not the fleet's."""
    key = str(session.get_bind().url)
    version = _version(session)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and hit.version == version:
        return hit.nodes
    known = dict(hit.rows) if hit is not None else {}
    heads = [
        (i, (at, cordoned, draining))
        for i, at, cordoned, draining in session.execute(
            select(NodeRow.id, NodeRow.updated_at, NodeRow.cordoned, NodeRow.draining).order_by(
                NodeRow.id
            )
        )
    ]
    stale = [i for i, head in heads if i not in known or known[i][0] != head]
    for start in range(0, len(stale), 500):  # bounded IN lists
        chunk = stale[start : start + 500]
        rows = list(session.scalars(select(NodeRow).where(NodeRow.id.in_(chunk))))
        for row, layout in zip(rows, _layout(rows), strict=True):
            known[row.id] = ((row.updated_at, row.cordoned, row.draining), layout)
    nodes = [known[i][1] for i, _ in heads if i in known]
    cached = _Cached(
        version, nodes, {n.name: n for n in nodes}, {i: known[i] for i, _ in heads if i in known}
    )
    with _cache_lock:
        _cache[key] = cached
    return nodes


def _version(session: Session) -> str:
    return session.scalar(select(Meta.value).where(Meta.key == FLEET_VERSION)) or "0"


def _by_name(session: Session) -> dict[str, NodeLayout]:
    fleet_layout(session)
    with _cache_lock:
        return _cache[str(session.get_bind().url)].by_name


# --- who holds what -------------------------------------------------------------------------


@dataclass(slots=True)
class Holdings:
    """The active jobs' parts, per node and GPU slot: ``(tenant id, milli)``."""

    parts: dict[str, dict[int, list[tuple[int, int]]]] = field(default_factory=dict)


def active_signature(session: Session) -> tuple[int, float, int]:
    """What changes whenever the active jobs do (see the module docstring); one indexed
    query (``ix_jobs_state``)."""
    n, newest, ids = session.execute(
        select(func.count(), func.max(Job.updated_at), func.sum(Job.id)).where(
            Job.state.in_(_ACTIVE)
        )
    ).one()
    return int(n or 0), float(newest or 0.0), int(ids or 0)


def _remember(key: tuple[Any, ...], value: Any) -> Any:
    with _cache_lock:
        if len(_memo) > 64:
            _memo.clear()
        _memo[key] = value
    return value


def _recall(key: tuple[Any, ...]) -> Any:
    with _cache_lock:
        return _memo.get(key)


def fleet_holdings(session: Session) -> Holdings:
    """:func:`holdings` of the whole fleet, kept per fleet version and active-jobs signature."""
    version = _version(session)
    key = ("holdings", str(session.get_bind().url), version, active_signature(session))
    hit = _recall(key)
    return hit if hit is not None else _remember(key, holdings(session, _by_name(session)))


def holdings(session: Session, layouts: Mapping[str, NodeLayout]) -> Holdings:
    """Who holds which part of which GPU, from the active jobs' placements (one query)."""
    out = Holdings()
    rows = session.execute(select(Job.tenant_id, Job.placement).where(Job.state.in_(_ACTIVE)))
    for tenant_id, placement in rows:
        for pod in placement or ():
            if not isinstance(pod, Mapping):
                continue
            name = pod.get("node")
            layout = layouts.get(name) if isinstance(name, str) else None
            if layout is None:
                continue
            a = pod.get("assignment") or {}
            per_gpu = out.parts.setdefault(layout.name, {})
            for slot, milli in a.get("gpus") or ():
                per_gpu.setdefault(slot, []).append((tenant_id, int(milli)))
            for slot, index in a.get("mig") or ():
                gpu = layout.gpus[slot] if 0 <= slot < len(layout.gpus) else None
                if gpu is not None and 0 <= index < len(gpu.mig):
                    size = gpu.mig[index][1]
                    per_gpu.setdefault(slot, []).append((tenant_id, size * MILLI // MIG_SLICES))
            for slot, count in a.get("replicas") or ():
                gpu = layout.gpus[slot] if 0 <= slot < len(layout.gpus) else None
                if gpu is not None:
                    per_gpu.setdefault(slot, []).append(
                        (tenant_id, int(count) * MILLI // max(gpu.replicas, 1))
                    )
    return out


def tenant_names(session: Session) -> dict[int, str]:
    return dict(session.execute(select(Tenant.id, Tenant.name)).all())


# --- the picture ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LegendEntry:
    key: str
    label: str
    colour: str
    gpus: float  # GPUs (milli / 1000) of this colour


def _owner_key(cluster: str, pool_cluster: str) -> str:
    return POOL if cluster and cluster == pool_cluster else f"cluster:{cluster}"


def fleet_picture(session: Session, conditions: Iterable[str] = ()) -> dict[str, Any]:
    """The heatmap's data, compact: ``legend`` (key, label, colour, GPUs), ``groups`` (rack,
    nvlink, nodes), each node ``[name, model, state, gpus]`` where ``state`` is ``ok``,
    ``cordoned``, ``draining`` or ``unhealthy`` and each GPU is a list of
    ``[legend index, milli]`` parts summing to 1000; the totals; and ``etag``, which
    changes whenever any of it does (kept per that key, see the module docstring)."""
    names = tenant_names(session)
    pool = pool_row(session)
    pool_cluster = f"{names.get(pool.tenant_id, '')}.{pool.name}" if pool is not None else ""
    sick = frozenset(conditions)
    version = _version(session)
    signature = active_signature(session)
    key = (
        "picture",
        str(session.get_bind().url),
        version,
        signature,
        pool_cluster,
        sick,
        len(names),
    )
    hit = _recall(key)
    if hit is not None:
        return hit
    layouts = fleet_layout(session)
    held = fleet_holdings(session)

    # milli per owner key, to rank the legend (biggest first get the distinct colours)
    amounts: Counter[str] = Counter()
    cells: list[tuple[NodeLayout, str, list[list[tuple[str, int]]]]] = []
    for n in layouts:
        state = (
            "draining"
            if n.draining
            else "cordoned"
            if n.cordoned
            else "unhealthy"
            if n.name in sick
            else "ok"
        )
        whole = (
            UNAVAILABLE
            if state != "ok"
            else _owner_key(n.cluster, pool_cluster)
            if n.cluster
            else None
        )
        gpus: list[list[tuple[str, int]]] = []
        parts_of = held.parts.get(n.name, {})
        for slot in range(len(n.gpus)):
            if whole is not None:
                parts = [(whole, MILLI)]
            else:
                parts = []
                used = 0
                for tenant_id, milli in parts_of.get(slot, ()):
                    milli = min(milli, MILLI - used)
                    if milli > 0:
                        parts.append((f"tenant:{names.get(tenant_id, tenant_id)}", milli))
                        used += milli
                if used < MILLI:
                    parts.append((FREE, MILLI - used))
            for owner, milli in parts:
                amounts[owner] += milli
            gpus.append(parts)
        cells.append((n, state, gpus))

    legend, index = _legend(amounts)
    free_by_model: Counter[str] = Counter()
    for n, _, gpus in cells:
        for parts in gpus:
            for owner, milli in parts:
                if owner == FREE:
                    free_by_model[n.model] += milli
    groups: dict[tuple[str, str], list[list[Any]]] = {}
    for n, state, gpus in cells:
        groups.setdefault((n.rack, n.nvlink), []).append(
            [n.name, n.model, state, [[[index[k], m] for k, m in parts] for parts in gpus]]
        )
    ordered = sorted(groups.items(), key=lambda kv: (kv[0][0] == "", kv[0]))
    total = sum(len(n.gpus) for n in layouts)
    picture = {
        "legend": [
            {"key": e.key, "label": e.label, "colour": e.colour, "gpus": round(e.gpus, 3)}
            for e in legend
        ],
        "groups": [
            {"rack": rack, "nvlink": nvlink, "nodes": sorted(nodes, key=lambda x: x[0])}
            for (rack, nvlink), nodes in ordered
        ],
        "nodes": len(layouts),
        "gpus": total,
        "background": BACKGROUND,
        "freeByModel": [
            [model, round(milli / MILLI, 3)]
            for model, milli in sorted(free_by_model.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "etag": hashlib.sha256(repr(key).encode()).hexdigest()[:24],
    }
    return _remember(key, picture)


def picture_text(session: Session, conditions: Iterable[str] = ()) -> tuple[str, str]:
    """``(etag, JSON text)`` of :func:`fleet_picture`, the text kept with the picture (the
    API answers it as is: serialising 130 KB each poll would cost more than the lookup)."""
    picture = fleet_picture(session, conditions)
    key = ("picture-text", picture["etag"])
    text = _recall(key)
    if text is None:
        text = _remember(key, json.dumps(picture, separators=(",", ":")))
    return picture["etag"], text


def _legend(amounts: Mapping[str, int]) -> tuple[list[LegendEntry], dict[str, int]]:
    fixed = [
        (FREE, "free", FREE_COLOUR),
        (UNAVAILABLE, "unavailable (cordoned, draining, unhealthy)", UNAVAILABLE_COLOUR),
        (POOL, "idle pool", POOL_COLOUR),
    ]
    legend = [LegendEntry(k, label, c, amounts.get(k, 0) / MILLI) for k, label, c in fixed]
    index = {k: i for i, (k, _, _) in enumerate(fixed)}
    ranked = sorted(
        (k for k in amounts if k.startswith(("tenant:", "cluster:"))),
        key=lambda k: (-amounts[k], k),
    )
    distinct, rest = ranked[: len(PALETTE)], ranked[len(PALETTE) :]
    for colour, key in zip(PALETTE, distinct, strict=False):
        kind, name = key.split(":", 1)
        index[key] = len(legend)
        legend.append(LegendEntry(key, f"{kind} {name}", colour, amounts[key] / MILLI))
    if rest:
        other = len(legend)
        legend.append(
            LegendEntry(
                OTHER,
                f"{len(rest)} other tenants and clusters",
                OTHER_COLOUR,
                sum(amounts[k] for k in rest) / MILLI,
            )
        )
        index.update(dict.fromkeys(rest, other))
    return legend, index


# --- over time ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Series:
    """Hourly buckets (UTC hours) from ``start``, the last one the current hour: allocated and
    utilised share of the fleet's GPUs (0..1), and the share of the held GPU-time whose
    records carry a utilisation (``measured``; 0 for hours not metered yet)."""

    start: float
    step: float
    allocated: list[float]
    utilised: list[float]
    measured: list[float]
    gpus: int


HOUR = 3600.0
#: Hours at the end that the metering step may not have written yet (it closes an hour
#: ``usage.LAG`` after it ends): those are read from what the active jobs hold now.
UNMETERED_HOURS = 2


def _metered(session: Session, start: float, hours: int) -> list[tuple[float, float, float]]:
    """Per UTC hour from ``start``: GPU-seconds held, GPU-seconds held with telemetry,
    GPU-seconds utilised, from the usage records (cut at whole hours, so one bucket each).
    Records are only ever added, so the sums are kept per database, ``start`` and the
    newest record's id: the hour's first request sums, the others reuse."""
    newest = session.scalar(select(func.max(UsageRow.id))) or 0
    key = ("metered", str(session.get_bind().url), start, hours, newest)
    hit = _recall(key)
    if hit is not None:
        return hit
    out = [(0.0, 0.0, 0.0)] * hours
    hours_in = (UsageRow.start - start) / HOUR
    # the hour a record starts in: SQLite's CAST truncates (the rows are >= start), but
    # PostgreSQL's rounds, so floor there
    postgres = session.get_bind().dialect.name == "postgresql"
    index = cast(func.floor(hours_in), Integer) if postgres else cast(hours_in, Integer)
    metered = case((UsageRow.utilization.is_(None), 0), else_=UsageRow.quantity)
    rows = session.execute(
        select(
            index,
            func.sum(UsageRow.quantity),
            func.sum(metered),
            func.sum(UsageRow.quantity * UsageRow.utilization),
        )
        .where(UsageRow.start >= start, _gpu_sku())
        .group_by(index)
    )
    for i, held, measured, weighted in rows:
        if 0 <= int(i) < hours:
            out[int(i)] = (
                float(held or 0) / 1e6,
                float(measured or 0) / 1e6,
                float(weighted or 0) / 1e6,
            )
    return _remember(key, out)


def over_time(session: Session, now: float, hours: int = 24) -> Series:
    """Allocation and utilisation per UTC hour over the last ``hours`` (see the module
    docstring): the metered hours from the usage records; the last hours, while the
    metering step has not written them, from what the active jobs hold now."""
    start = (now // HOUR - (hours - 1)) * HOUR
    gpus = sum(len(n.gpus) for n in fleet_layout(session))
    metered = _metered(session, start, hours)
    holding = session.scalar(select(func.sum(Job.gpus)).where(Job.state.in_(_ACTIVE))) or 0
    allocated, utilised, measured = [], [], []
    for i, (held, known, used) in enumerate(metered):
        lo = start + i * HOUR
        capacity = max(gpus, 1) * max(min(HOUR, now - lo), 1.0)
        if held == 0 and i >= hours - UNMETERED_HOURS:
            allocated.append(min(holding / MILLI / max(gpus, 1), 1.0))
            utilised.append(0.0)
            measured.append(0.0)
            continue
        allocated.append(min(held / capacity, 1.0))
        utilised.append(min(used / capacity, 1.0))
        measured.append(min(known / max(held, 1e-9), 1.0))
    return Series(start, HOUR, allocated, utilised, measured, gpus)


def _gpu_sku() -> Any:
    """Usage records of GPU devices (the SKU's resource is a GPU model, not cpu/memory)."""
    return and_(
        ~UsageRow.sku.like("cpu%"), ~UsageRow.sku.like("memory%"), ~UsageRow.sku.like("storage%")
    )


# --- the idle pool --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Revenue:
    period: str
    currency: str
    records: int
    gpu_hours: float
    amount_nano: int


def pool_revenue(session: Session) -> list[Revenue]:
    """What the idle pool earned, by month and currency: its usage records (SKUs sold
    ``@idle-pool``), priced as stored (effective cost), one grouped query, kept per newest
    record id (records are only ever added)."""
    newest = session.scalar(select(func.max(UsageRow.id))) or 0
    key = ("revenue", str(session.get_bind().url), newest)
    hit = _recall(key)
    if hit is not None:
        return list(hit)
    stmt = (
        select(
            UsageRow.period,
            UsageRow.currency,
            func.count(),
            func.sum(UsageRow.quantity),
            func.sum(UsageRow.effective_cost),
        )
        .where(UsageRow.sku.like(f"%@{CapacityPool.SPOT.value}"), _gpu_sku())
        .group_by(UsageRow.period, UsageRow.currency)
        .order_by(UsageRow.period.desc(), UsageRow.currency)
    )
    return list(
        _remember(
            key,
            [
                Revenue(period, currency, int(n), int(q or 0) / 1e6 / 3600, int(cost or 0))
                for period, currency, n, q, cost in session.execute(stmt)
            ],
        )
    )


def idle_gpus(picture: Mapping[str, Any]) -> dict[str, float]:
    """Free GPU capacity (in GPUs, shares summed) on the shared fleet, by model, most first."""
    return dict(picture["freeByModel"])


# --- tenants and their grants ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TenantLine:
    name: str
    display_name: str
    grants: dict[str, dict[str, str]]  # flavor -> resource -> amount
    granted_gpus: int
    borrowing: dict[str, Any]
    lending: dict[str, Any]
    held_gpus: float
    running: int
    pending: int
    clusters: int
    cluster_nodes: int
    node_limit: int


def _gpus_of(capacity: Mapping[str, Any]) -> int:
    total = 0
    for resources in capacity.values():
        if isinstance(resources, Mapping):
            try:
                total += int(str(resources.get("nvidia.com/gpu", 0)))
            except ValueError:
                continue
    return total


def tenant_lines(session: Session) -> list[TenantLine]:
    """Every tenant with its grants and what it holds now (grouped queries, no per-tenant)."""
    held: dict[int, float] = defaultdict(float)
    counts: dict[tuple[int, str], int] = {}
    stmt = select(Job.tenant_id, Job.state, func.count(), func.sum(Job.gpus)).where(
        Job.state.in_((*_ACTIVE, JobState.PENDING.value))
    )
    for tenant_id, state, n, milli in session.execute(stmt.group_by(Job.tenant_id, Job.state)):
        counts[(tenant_id, state)] = int(n)
        if state in _ACTIVE:
            held[tenant_id] += int(milli or 0) / MILLI
    clusters = dict(
        session.execute(
            select(ClusterRow.tenant_id, func.count()).group_by(ClusterRow.tenant_id)
        ).all()
    )
    nodes = dict(
        session.execute(
            select(ClusterRow.tenant_id, func.count())
            .join(ClusterNodeRow, ClusterNodeRow.cluster_id == ClusterRow.id)
            .group_by(ClusterRow.tenant_id)
        ).all()
    )
    limits = dict(
        session.execute(select(ClusterAllowance.tenant_id, ClusterAllowance.node_limit)).all()
    )
    out = []
    for t in session.scalars(select(Tenant).order_by(Tenant.name)):
        out.append(
            TenantLine(
                t.name,
                t.display_name,
                dict(t.capacity or {}),
                _gpus_of(t.capacity or {}),
                dict(t.borrowing or {}),
                dict(t.lending or {}),
                round(held[t.id], 3),
                sum(counts.get((t.id, s), 0) for s in _ACTIVE),
                counts.get((t.id, JobState.PENDING.value), 0),
                int(clusters.get(t.id, 0)),
                int(nodes.get(t.id, 0)),
                int(limits.get(t.id, 0)),
            )
        )
    return out
