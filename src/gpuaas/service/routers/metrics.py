"""``GET /metrics``: Prometheus text exposition.

Open by default (a scraper usually carries no user token); with ``metrics_token`` set
(``gpuaas serve --metrics-token`` or ``GPUAAS_METRICS_TOKEN``) only a scrape presenting it as a
bearer token is answered, since the series name tenants and queues. It is a shared secret of its
own, not a user token: it grants nothing on the API and is never stored.

Two sources are merged into one scrape: the application's :class:`~gpuaas.service.telemetry.
Telemetry` registry (admissions, evictions, admission wait, reconcile cycle time, which the
reconciler records as it works) and gauges that are facts of the database, computed at scrape
time so that every replica reports the same numbers: queue depth per LocalQueue and ClusterQueue,
pending jobs per reason code (:class:`gpuaas.engine.reasons.Code`: why they wait), jobs per tenant
and state, nodes per state, and GPUs allocated against capacity per flavor and per tenant.

GPU amounts are in GPUs, counted the way admission charges them (``gpuaas.io/gpu-milli`` / 1000):
a whole GPU is 1, a time-sliced replica is 1 (it is advertised as one ``nvidia.com/gpu``), a MIG
instance is its share of the GPU's compute slices. ``gpuaas_flavor_physical_gpus`` counts the
cards themselves. Capacity includes cordoned nodes (``gpuaas_nodes`` says how many are).

A scrape costs a handful of aggregate queries; the capacity part (nodes x flavors) is rebuilt
only when the Meta values ``fleet.version`` or ``governance.version`` move.
"""

from __future__ import annotations

import hmac
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuaas.engine.admission.gpu_size import GPU_MILLI, MILLI, is_gpu_device, mig_milli
from gpuaas.engine.reasons import Code
from gpuaas.model.devices import PartitionMode
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import ResourceFlavor
from gpuaas.model.job_state import ACTIVE, JobState
from gpuaas.model.node import Node
from gpuaas.model.resources import MIG_PREFIX, NVIDIA_GPU, canonical_amount
from gpuaas.service.cost_metrics import CostCollector
from gpuaas.service.errors import ApiError
from gpuaas.service.fleet import FLEET_VERSION, load_nodes
from gpuaas.service.governance import GOVERNANCE_VERSION, load_governance
from gpuaas.service.usage_metrics import PoolUsageCollector
from gpuaas.service.utilisation_metrics import UtilisationCollector
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, Meta, NodeRow, Tenant

router = APIRouter(tags=["metrics"])

#: Every job state, in lifecycle order; each tenant reports all of them, zeros included, so that
#: a dashboard's series never disappear.
JOB_STATES = tuple(state.value for state in JobState)
#: States in which a job holds devices (and its milli-GPU, ``Job.gpus``).
HOLDING_STATES = tuple(state.value for state in ACTIVE)
NODE_STATES = ("ready", "cordoned", "draining")
VERSION_KEYS = (FLEET_VERSION, GOVERNANCE_VERSION)


@dataclass(frozen=True, slots=True)
class Capacity:
    """What changes only with the fleet or the governance objects."""

    versions: tuple[str | None, ...]
    flavor_milli: dict[str, int] = field(default_factory=dict)
    flavor_physical: dict[str, int] = field(default_factory=dict)
    local_queues: dict[tuple[str, str], str] = field(default_factory=dict)  # (ns, name) -> CQ
    cluster_queues: tuple[str, ...] = ()


class CapacityCache:
    """The last :class:`Capacity`, reused while the Meta versions it was built at hold."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._capacity: Capacity | None = None

    def get(self, session: Session) -> Capacity:
        query = select(Meta.key, Meta.value).where(Meta.key.in_(VERSION_KEYS))
        rows = {key: value for key, value in session.execute(query)}
        versions = tuple(rows.get(key) for key in VERSION_KEYS)
        current = self._capacity
        if current is not None and current.versions == versions:
            return current
        built = build_capacity(session, versions)
        with self._lock:
            self._capacity = built
        return built


def node_gpu_milli(node: Node) -> int:
    """Milli-GPU the node offers, as admission charges requests for it."""
    total = 0
    for gpu in node.gpus:
        partition = gpu.partition
        if partition.mode is PartitionMode.MIG:
            total += sum(mig_milli(instance.profile) for instance in partition.instances)
        elif partition.shared:
            total += MILLI * partition.replicas
        else:
            total += MILLI
    return total


def matches(flavor: ResourceFlavor, node: Node) -> bool:
    return all(node.labels.get(key) == value for key, value in flavor.node_labels.items())


def build_capacity(session: Session, versions: tuple[str | None, ...]) -> Capacity:
    """GPU capacity per flavor (nodes matching its labels) and the queue tree's names."""
    nodes = load_nodes(session)
    governance, _ = load_governance(session)
    milli: dict[str, int] = {}
    physical: dict[str, int] = {}
    for name, flavor in sorted(governance.flavors.items()):
        chosen = [node for node in nodes if matches(flavor, node)]
        milli[name] = sum(node_gpu_milli(node) for node in chosen)
        physical[name] = sum(len(node.gpus) for node in chosen)
    return Capacity(
        versions=versions,
        flavor_milli=milli,
        flavor_physical=physical,
        local_queues={
            (lq.namespace, lq.name): lq.cluster_queue for lq in governance.local_queues.values()
        },
        cluster_queues=tuple(sorted(governance.cluster_queues)),
    )


def capacity_milli(capacity: Mapping[str, Any]) -> int:
    """Milli-GPU of a tenant's ``{flavor: {resource: quantity}}``, GPU resources only.

    Capacity is validated when written; an amount that does not parse counts as nothing rather
    than failing every scrape.
    """
    total = 0
    for resources in capacity.values():
        if not isinstance(resources, Mapping):
            continue
        for resource, quantity in resources.items():
            if not (is_gpu_device(resource) or resource == GPU_MILLI):
                continue
            try:
                amount = canonical_amount(resource, quantity)
                if resource == NVIDIA_GPU:
                    total += amount * MILLI
                elif resource.startswith(MIG_PREFIX):
                    total += amount * mig_milli(resource)
                else:
                    total += amount
            except InvalidValue:
                continue
    return total


def gpu_flavors(flavors: object) -> list[str]:
    """The flavors a job's GPU resources were assigned (``{podSet: {resource: flavor}}``)."""
    out: set[str] = set()
    if isinstance(flavors, Mapping):
        for assigned in flavors.values():
            if isinstance(assigned, Mapping):
                out.update(
                    str(flavor)
                    for resource, flavor in assigned.items()
                    if is_gpu_device(resource) or resource == GPU_MILLI
                )
    return sorted(out)


def _gauge(
    name: str, doc: str, labels: list[str], samples: Iterable[tuple[list[str], float]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


class DatabaseCollector(Collector):
    """The database gauges of one scrape (a fresh collector per scrape, one session)."""

    def __init__(self, session: Session, cache: CapacityCache) -> None:
        self.session = session
        self.cache = cache

    def collect(self) -> Iterator[GaugeMetricFamily]:
        session = self.session
        capacity = self.cache.get(session)
        tenants = {
            tid: (name, cap or {})
            for tid, name, cap in session.execute(select(Tenant.id, Tenant.name, Tenant.capacity))
        }
        names = {tid: name for tid, (name, _) in tenants.items()}
        yield from self._queues(capacity, names)
        yield self._pending_reasons()
        yield from self._jobs(names)
        yield from self._gpus(capacity, tenants)
        yield self._nodes()
        yield from self._clusters(names)
        yield self._idle_pool()

    def _queues(self, capacity: Capacity, names: Mapping[int, str]) -> Iterator[GaugeMetricFamily]:
        pending: dict[tuple[str, str], int] = {key: 0 for key in capacity.local_queues}
        rows = self.session.execute(
            select(Job.tenant_id, Job.local_queue, func.count())
            .where(Job.state == JobState.PENDING.value)
            .group_by(Job.tenant_id, Job.local_queue)
        )
        for tenant_id, queue, count in rows:
            key = (names.get(tenant_id, str(tenant_id)), queue)
            pending[key] = pending.get(key, 0) + int(count)
        per_cq: dict[str, int] = {cq: 0 for cq in capacity.cluster_queues}
        for key, count in pending.items():
            cq = capacity.local_queues.get(key)
            if cq is not None:
                per_cq[cq] = per_cq.get(cq, 0) + count
        yield _gauge(
            "gpuaas_local_queue_pending_jobs",
            "Jobs waiting for admission, per LocalQueue (tenant/queue) and its ClusterQueue",
            ["tenant", "local_queue", "cluster_queue"],
            (
                ([tenant, queue, capacity.local_queues.get((tenant, queue), "")], count)
                for (tenant, queue), count in sorted(pending.items())
            ),
        )
        yield _gauge(
            "gpuaas_cluster_queue_pending_jobs",
            "Jobs waiting for admission, per ClusterQueue (summed over its LocalQueues)",
            ["cluster_queue"],
            (([cq], count) for cq, count in sorted(per_cq.items())),
        )

    def _pending_reasons(self) -> GaugeMetricFamily:
        """Pending jobs per reason code, every code of the closed set reported (zeros too, so
        that series never disappear); a row stored before codes existed waits for admission."""
        counts = {code.value: 0 for code in Code}
        rows = self.session.execute(
            select(Job.reason_code, func.count())
            .where(Job.state == JobState.PENDING.value)
            .group_by(Job.reason_code)
        )
        for code, count in rows:
            key = code if code in counts else Code.WAITING_FOR_ADMISSION.value
            counts[key] += int(count)
        return _gauge(
            "gpuaas_pending_jobs_by_reason",
            "Jobs waiting for admission, per reason code (why they wait; see docs/architecture.md)",
            ["reason"],
            (([code], count) for code, count in sorted(counts.items())),
        )

    def _jobs(self, names: Mapping[int, str]) -> Iterator[GaugeMetricFamily]:
        counts = {(tenant, state): 0 for tenant in names.values() for state in JOB_STATES}
        rows = self.session.execute(
            select(Job.tenant_id, Job.state, func.count()).group_by(Job.tenant_id, Job.state)
        )
        for tenant_id, state, count in rows:
            key = (names.get(tenant_id, str(tenant_id)), state)
            counts[key] = counts.get(key, 0) + int(count)
        yield _gauge(
            "gpuaas_jobs",
            "Jobs per tenant and state",
            ["tenant", "state"],
            (([tenant, state], count) for (tenant, state), count in sorted(counts.items())),
        )

    def _gpus(
        self, capacity: Capacity, tenants: Mapping[int, tuple[str, Mapping[str, Any]]]
    ) -> Iterator[GaugeMetricFamily]:
        by_tenant: dict[str, int] = {name: 0 for name, _ in tenants.values()}
        by_flavor: dict[str, int] = defaultdict(int, {name: 0 for name in capacity.flavor_milli})
        rows = self.session.execute(
            select(Job.tenant_id, Job.gpus, Job.flavors).where(
                Job.state.in_(HOLDING_STATES), Job.gpus > 0
            )
        )
        for tenant_id, milli, flavors in rows:
            tenant = tenants.get(tenant_id, (str(tenant_id), {}))[0]
            by_tenant[tenant] = by_tenant.get(tenant, 0) + milli
            chosen = gpu_flavors(flavors)
            for i, flavor in enumerate(chosen):  # several GPU flavors: an even split
                by_flavor[flavor] += milli // len(chosen) + (i < milli % len(chosen))
        yield _gauge(
            "gpuaas_flavor_gpus_allocated",
            "GPUs held by admitted and running jobs, per ResourceFlavor",
            ["flavor"],
            (([f], m / MILLI) for f, m in sorted(by_flavor.items())),
        )
        yield _gauge(
            "gpuaas_flavor_gpus_capacity",
            "GPUs the nodes matching a ResourceFlavor offer (time-sliced replicas and MIG "
            "instances counted as admission charges them)",
            ["flavor"],
            (([f], m / MILLI) for f, m in sorted(capacity.flavor_milli.items())),
        )
        yield _gauge(
            "gpuaas_flavor_physical_gpus",
            "Physical GPUs in the nodes matching a ResourceFlavor",
            ["flavor"],
            (([f], n) for f, n in sorted(capacity.flavor_physical.items())),
        )
        yield _gauge(
            "gpuaas_tenant_gpus_allocated",
            "GPUs held by a tenant's admitted and running jobs",
            ["tenant"],
            (([t], m / MILLI) for t, m in sorted(by_tenant.items())),
        )
        yield _gauge(
            "gpuaas_tenant_gpus_capacity",
            "GPUs the provider gave a tenant (its capacity in GPU resources, all flavors)",
            ["tenant"],
            (([name], capacity_milli(cap) / MILLI) for name, cap in sorted(tenants.values())),
        )

    def _nodes(self) -> GaugeMetricFamily:
        counts = dict.fromkeys(NODE_STATES, 0)
        rows = self.session.execute(
            select(NodeRow.cordoned, NodeRow.draining, func.count()).group_by(
                NodeRow.cordoned, NodeRow.draining
            )
        )
        for cordoned, draining, count in rows:
            state = "draining" if draining else "cordoned" if cordoned else "ready"
            counts[state] += int(count)
        return _gauge(
            "gpuaas_nodes",
            "Registered nodes per state (ready, cordoned, draining)",
            ["state"],
            (([state], count) for state, count in counts.items()),
        )

    def _idle_pool(self) -> GaugeMetricFamily:
        """The idle-capacity pool's nodes: in it (``held``) and being given back to tenants
        (``reclaiming``); its reclaims are counted and timed by the reconciler
        (``gpuaas_idle_pool_reclaims_total``, ``gpuaas_idle_pool_reclaim_seconds``)."""
        from gpuaas.service.idle_pool import pool_row, pool_view

        row = pool_row(self.session)
        view = None if row is None else pool_view(self.session, row)
        samples = []
        if view is not None:
            reclaiming = len(view.reclaiming)
            samples = [
                ([view.name, "held"], len(view.nodes) - reclaiming),
                ([view.name, "reclaiming"], reclaiming),
            ]
        return _gauge(
            "gpuaas_idle_pool_nodes",
            "Nodes of the idle-capacity pool (held; reclaiming: being given back to tenants)",
            ["pool", "status"],
            samples,
        )

    def _clusters(self, names: Mapping[int, str]) -> Iterator[GaugeMetricFamily]:
        """Per tenant cluster: its nodes (held, and being given back), GPUs, the GPUs its
        jobs hold, its jobs by state, and its state (1 for the one it is in)."""
        from gpuaas.service.clusters import all_cluster_views

        views = all_cluster_views(self.session, names)
        yield _gauge(
            "gpuaas_cluster_nodes",
            "Nodes a tenant cluster holds (releasing: being drained and given back)",
            ["tenant", "cluster", "kind", "status"],
            (
                sample
                for v in views
                for sample in (
                    ([v.tenant, v.name, v.kind, "held"], len(v.nodes)),
                    ([v.tenant, v.name, v.kind, "releasing"], len(v.releasing)),
                )
            ),
        )
        yield _gauge(
            "gpuaas_cluster_gpus",
            "Physical GPUs of a tenant cluster's nodes",
            ["tenant", "cluster"],
            (([v.tenant, v.name], v.gpus) for v in views),
        )
        yield _gauge(
            "gpuaas_cluster_gpus_allocated",
            "GPUs the jobs of a tenant cluster hold (as admission charges them)",
            ["tenant", "cluster"],
            (([v.tenant, v.name], v.allocatedGpus) for v in views),
        )
        yield _gauge(
            "gpuaas_cluster_jobs",
            "Unfinished jobs of a tenant cluster, per state",
            ["tenant", "cluster", "state"],
            (
                ([v.tenant, v.name, state], getattr(v.jobs, state))
                for v in views
                for state in ("pending", "admitted", "running")
            ),
        )
        yield _gauge(
            "gpuaas_cluster_state",
            "A tenant cluster's state (1 for the state it is in)",
            ["tenant", "cluster", "state"],
            (([v.tenant, v.name, v.state], 1) for v in views),
        )


class Scrape(Collector):
    """The telemetry registry followed by the database gauges."""

    def __init__(self, parts: Iterable[Collector]) -> None:
        self.parts = list(parts)

    def collect(self) -> Iterator[Any]:
        for part in self.parts:
            yield from part.collect()


def capacity_cache(request: Request) -> CapacityCache:
    """The app's cache (created on first scrape: one per application, like its registry)."""
    cache = getattr(request.app.state, "metrics_capacity", None)
    if cache is None:
        cache = CapacityCache()
        request.app.state.metrics_capacity = cache
    return cache


def check_scraper(request: Request) -> None:
    """401 unless the request carries the configured metrics token (if there is one)."""
    expected = request.app.state.settings.metrics_token
    if not expected:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise ApiError(401, "this server's metrics need its metrics token (Authorization: Bearer)")
    if not hmac.compare_digest(given.strip().encode(), expected.encode()):
        raise ApiError(401, "wrong metrics token")


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def metrics(request: Request) -> Response:
    """Prometheus text format; a bearer token only when the server was given one."""
    check_scraper(request)
    db: Database = request.app.state.db
    with db.sessions() as session:
        scrape = Scrape(
            [
                request.app.state.telemetry.source(),
                DatabaseCollector(session, capacity_cache(request)),
                UtilisationCollector(request.app.state.utilisation),
                PoolUsageCollector(session),  # the idle pool's usage (docs/billing.md)
                CostCollector(session),  # tenants' cost to date and per hour, prices
            ]
        )
        body = generate_latest(scrape)  # type: ignore[arg-type]
    return Response(content=body, media_type=CONTENT_TYPE_LATEST)
