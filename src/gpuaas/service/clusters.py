"""Tenant clusters as the service stores them: create, scale, delete, and what each means for
the fleet, the governance and the jobs.

A tenant-admin asks; the request itself only *decides and stores*, in its one transaction,
all or nothing, every check made before anything is written:

- **What the tenant may carve** is the provider's (:class:`~gpuaas.store.tables.
  ClusterAllowance`): the flavors and GPU models its pools may draw from and the most nodes
  its clusters hold together. A pool outside it, a size beyond that limit, beyond the pool's
  bounds or beyond the free nodes, a cluster of a kind whose provisioner this server lacks,
  each is a 4xx naming the field.
- **Carving** (:mod:`gpuaas.engine.carving` picks the nodes): a carved node is recorded in
  ``cluster_nodes`` (its primary key: a node is in at most one cluster), and its stored
  inventory entry gets the label :data:`~gpuaas.model.cluster.CLUSTER_LABEL` =
  ``<tenant>.<cluster>`` and a ``NoSchedule`` taint of the same key and value, so no job that
  does not tolerate it (every other tenant's, the shared pool's) is placed there. The change
  bumps ``fleet.version`` and reaches the admission engine as a fleet diff applied in place
  (:mod:`gpuaas.engine.admission.fleet_changes`), never a rebuild. A node is carved cordoned:
  it takes jobs only once its provisioner has realised it (the cluster worker uncordons it).
- **The cluster's capacity feeds the tenant's queues**, Kueue-style: a ResourceFlavor
  ``cluster.<tenant>.<cluster>`` whose ``nodeLabels`` select the cluster's nodes and whose
  ``tolerations`` tolerate its taint, granted to the tenant (its ``capacity`` gains the flavor)
  and held by a ClusterQueue of the tenant of the same name (in its root cohort, covering
  cpu, memory and ``nvidia.com/gpu``), fed by the LocalQueue ``cluster-<cluster>``. A job
  naming ``cluster: NAME`` is submitted to that LocalQueue, so it is admitted only on the
  flavor, that is only on the cluster's nodes, and only its tenant can name it (the queue is
  in the tenant's namespace). The quota is set once, for the pools' *maximum* sizes: the
  nodes themselves bound what runs, so scaling changes nodes only (an in-place fleet change)
  and never the governance; creation and deletion change the governance once each.
- **Scale-in and deletion drain first**: a leaving node is marked ``releasing`` and
  *drained* (``nodes.draining``): the reconciler requeues the jobs there and stops them on
  their backend with the grace period (their checkpoint signal); requeued, they are admitted
  again on the cluster's remaining nodes. The node is given back (label, taint, cordon and
  drain removed, its ``cluster_nodes`` row deleted) by the cluster worker
  (:mod:`gpuaas.service.cluster_worker`) once no job holds it and the provisioner has
  realised the cluster without it. Deleting a cluster whose jobs run needs ``force``; its
  jobs are then cancelled (pending ones at once).

Provisioner calls (``scontrol``, a management cluster) never run on the request: the worker
makes them, and records the state (``Ready``, ``Failed``) with a reason and an event.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuaas.engine.carving import CarvingError, check_count, plan_pool
from gpuaas.engine.reasons import Code, Reason, reason
from gpuaas.model.cluster import (
    CLUSTER_LABEL,
    AccessMode,
    ClusterKind,
    ClusterNodes,
    ClusterSpec,
    ClusterState,
    Distribution,
    NodePoolSpec,
    VolumeSpec,
)
from gpuaas.model.errors import InvalidValue
from gpuaas.model.job_state import ACTIVE, UNFINISHED, JobState
from gpuaas.model.node import Node
from gpuaas.model.resources import CPU, MEMORY, NVIDIA_GPU
from gpuaas.service import governance as gv
from gpuaas.service.backends import BACKEND_LABEL
from gpuaas.service.cluster_names import (
    cluster_taint,
    flavor_name,
    label_value,
    local_queue_name,
)
from gpuaas.service.errors import conflict, invalid, not_found
from gpuaas.service.fleet import FLEET_VERSION, bump_version, nodes_from_rows, take_turn_on
from gpuaas.service.jobs import cancel_job
from gpuaas.service.models.clusters import (
    AllowanceIn,
    AllowanceOut,
    AutoscaleDecisionOut,
    AutoscaleStatus,
    ClusterEventOut,
    ClusterIn,
    ClusterJobs,
    ClusterOut,
    PoolOut,
    ScaleIn,
    autoscale_spec,
    idle_pool_spec,
)
from gpuaas.service.models.common import ReasonView, bytes_text
from gpuaas.service.settings import Settings
from gpuaas.service.storage import parse_size, provision_cluster_volumes
from gpuaas.store.tables import (
    ClusterAllowance,
    ClusterEvent,
    ClusterNodeRow,
    ClusterRow,
    Job,
    NodeRow,
    Tenant,
)

#: Why a tenant's clusters API neither creates nor changes the idle pool.
IDLE_POOL_IS_THE_PROVIDERS = (
    "the idle-capacity pool is the provider's: registered, changed and removed through "
    "/v1/idle-pools (gpuaas pool ...) by a provider-admin, never as a tenant's cluster"
)

#: Clusters whose worker has something to do.
UNSETTLED = (ClusterState.PROVISIONING, ClusterState.SCALING, ClusterState.DELETING)


# --- what the provider allows --------------------------------------------------------------


def _allowance(session: Session, tenant: Tenant) -> ClusterAllowance | None:
    return session.get(ClusterAllowance, tenant.id)


def nodes_held(session: Session, tenant: Tenant) -> int:
    return int(
        session.scalar(
            select(func.count(ClusterNodeRow.node))
            .join(ClusterRow, ClusterRow.id == ClusterNodeRow.cluster_id)
            .where(ClusterRow.tenant_id == tenant.id)
        )
        or 0
    )


def allowance_view(session: Session, tenant: Tenant) -> AllowanceOut:
    row = _allowance(session, tenant)
    pools = list(row.pools) if row is not None else []
    return AllowanceOut(
        tenant=tenant.name,
        flavors=[p["flavor"] for p in pools if "flavor" in p],
        gpuModels=[p["gpuModel"] for p in pools if "gpuModel" in p],
        nodeLimit=row.node_limit if row is not None else 0,
        nodesHeld=nodes_held(session, tenant),
    )


def set_allowance(session: Session, tenant: Tenant, body: AllowanceIn, now: float) -> AllowanceOut:
    """The provider's terms for the tenant's clusters; a flavor must exist. Lowering the limit
    below what the tenant holds is allowed (it only stops further growth)."""
    for i, model in enumerate(body.gpuModels):
        if not model.strip() or "\x00" in model:
            raise invalid(f"gpuModels[{i}]", f"{model!r} is not a GPU model name")
    for i, name in enumerate(body.flavors):
        if gv.find_object(session, gv.FLAVOR, name) is None:
            raise invalid(f"flavors[{i}]", f"no ResourceFlavor named {name!r}")
        if name.startswith("cluster."):
            raise invalid(f"flavors[{i}]", "a cluster's own flavor is not a pool")
    pools = [{"flavor": f} for f in dict.fromkeys(body.flavors)]
    pools += [{"gpuModel": m} for m in dict.fromkeys(body.gpuModels)]
    row = _allowance(session, tenant)
    if row is None:
        row = ClusterAllowance(tenant_id=tenant.id, pools=pools, node_limit=body.nodeLimit,
                               updated_at=now)  # fmt: skip
        session.add(row)
    else:
        row.pools = pools
        row.node_limit = body.nodeLimit
        row.updated_at = now
    session.flush()
    return allowance_view(session, tenant)


# --- reading clusters ----------------------------------------------------------------------


def spec_of(row: ClusterRow, tenant: str) -> ClusterSpec:
    """The model's :class:`ClusterSpec` of a stored cluster."""
    spec = row.spec
    pools = tuple(
        NodePoolSpec(
            name=p["name"],
            count=int(p["count"]),
            min_count=int(p.get("min", 0)),
            max_count=int(p.get("max", 0)),
            flavor=p.get("flavor") or "",
            gpu_model=p.get("gpuModel") or "",
        )
        for p in spec["pools"]
    )
    distribution = spec.get("distribution")
    return ClusterSpec(
        name=row.name,
        tenant=tenant,
        kind=ClusterKind(row.kind),
        pools=pools,
        distribution=Distribution(distribution) if distribution else None,
        kubernetes_version=spec.get("kubernetesVersion") or "",
        control_plane=int(spec.get("controlPlane", 1)),
        volumes=tuple(
            VolumeSpec(
                v["name"], int(v["sizeBytes"]), v["storageClass"], AccessMode(v["accessMode"])
            )
            for v in spec.get("volumes") or ()
        ),
        ssh_keys=tuple(spec.get("sshKeys") or ()),
        autoscale=autoscale_spec(spec.get("autoscale")),
        idle_pool=idle_pool_spec(spec.get("idlePool")),
    )


def node_rows(session: Session, cluster_id: int) -> list[ClusterNodeRow]:
    return list(
        session.scalars(
            select(ClusterNodeRow)
            .where(ClusterNodeRow.cluster_id == cluster_id)
            .order_by(ClusterNodeRow.node)
        )
    )


def cluster_nodes(rows: Iterable[ClusterNodeRow], *, releasing: bool = False) -> ClusterNodes:
    """The nodes of the cluster by pool (``releasing``: those leaving too)."""
    pools: dict[str, list[str]] = {}
    for r in rows:
        if releasing or not r.releasing:
            pools.setdefault(r.pool, []).append(r.node)
    return ClusterNodes({pool: tuple(sorted(names)) for pool, names in pools.items()})


def get_cluster(session: Session, tenant: Tenant, name: str) -> ClusterRow:
    if "\x00" in name:  # no stored name has one (and PostgreSQL refuses it in a query)
        raise not_found(f"cluster {name!r} of tenant {tenant.name}")
    row = session.scalar(
        select(ClusterRow).where(ClusterRow.tenant_id == tenant.id, ClusterRow.name == name)
    )
    if row is None:
        raise not_found(f"cluster {name} of tenant {tenant.name}")
    return row


def hosts_of(session: Session, names: Iterable[str]) -> dict[str, Node]:
    names = sorted(set(names))
    rows: list[NodeRow] = []
    for start in range(0, len(names), 1000):
        chunk = names[start : start + 1000]
        rows.extend(session.scalars(select(NodeRow).where(NodeRow.name.in_(chunk))))
    return {node.name: node for node in nodes_from_rows(rows)}


def _jobs_of(session: Session, tenant_id: int, cluster: str) -> Any:
    return select(Job).where(
        Job.tenant_id == tenant_id, Job.local_queue == local_queue_name(cluster)
    )


def cluster_view(session: Session, row: ClusterRow, tenant: str) -> ClusterOut:
    rows = node_rows(session, row.id)
    hosts = hosts_of(session, (r.node for r in rows))
    by_pool: dict[str, list[str]] = {}
    for r in rows:
        by_pool.setdefault(r.pool, []).append(r.node)
    counts = dict(
        session.execute(
            select(Job.state, func.count(Job.id))
            .where(Job.tenant_id == row.tenant_id, Job.local_queue == local_queue_name(row.name))
            .where(Job.state.in_([s.value for s in UNFINISHED]))
            .group_by(Job.state)
        ).all()
    )
    held = session.scalar(
        select(func.coalesce(func.sum(Job.gpus), 0))
        .where(Job.tenant_id == row.tenant_id, Job.local_queue == local_queue_name(row.name))
        .where(Job.state.in_([s.value for s in ACTIVE]))
    )
    spec = row.spec
    return ClusterOut(
        name=row.name,
        tenant=tenant,
        kind=row.kind,
        distribution=spec.get("distribution"),
        kubernetesVersion=spec.get("kubernetesVersion"),
        controlPlane=spec.get("controlPlane") if row.kind == ClusterKind.KUBERNETES else None,
        pools=[
            PoolOut(
                name=p["name"],
                flavor=p.get("flavor"),
                gpuModel=p.get("gpuModel"),
                count=int(p["count"]),
                min=int(p.get("min", 0)),
                max=int(p.get("max") or p["count"]),
                nodes=sorted(by_pool.get(p["name"], [])),
            )
            for p in spec["pools"]
        ],
        nodes=[r.node for r in rows if not r.releasing],
        releasing=[r.node for r in rows if r.releasing],
        gpus=sum(len(h.gpus) for h in hosts.values()),
        allocatedGpus=int(held or 0) / 1000,
        jobs=ClusterJobs(
            pending=counts.get(JobState.PENDING.value, 0),
            admitted=counts.get(JobState.ADMITTED.value, 0),
            running=counts.get(JobState.RUNNING.value, 0),
        ),
        localQueue=local_queue_name(row.name),
        volumes=[v["name"] for v in row.spec.get("volumes") or ()],
        state=row.state,
        reason=ReasonView(code=row.reason_code, message=row.reason, fields=row.reason_fields or {}),
        createdAt=row.created_at,
        updatedAt=row.updated_at,
        autoscale=autoscale_status(session, row),
    )


#: The autoscaler's event codes (service/autoscaler.py): those that grow a pool, shrink one,
#: and all it records.
SCALE_OUT_CODES = (Code.SCALED_OUT_PENDING, Code.SCALED_OUT_UTILIZATION, Code.SCALED_OUT_TO_MIN)
SCALE_IN_CODES = (Code.SCALED_IN_UNNEEDED,)
AUTOSCALER_CODES = (*SCALE_OUT_CODES, *SCALE_IN_CODES, Code.SCALE_OUT_AT_MAX,
                    Code.SCALE_OUT_SHORT)  # fmt: skip


def last_event_at(session: Session, cluster_id: int, codes: Iterable[Code]) -> float | None:
    """When the cluster last recorded an event of one of ``codes`` (None: never)."""
    return session.scalar(
        select(func.max(ClusterEvent.at)).where(
            ClusterEvent.cluster_id == cluster_id,
            ClusterEvent.reason_code.in_([c.value for c in codes]),
        )
    )


def autoscale_status(session: Session, row: ClusterRow, last: int = 5) -> AutoscaleStatus | None:
    """The autoscaler's settings and its ``last`` decisions (None: not autoscaled)."""
    spec = autoscale_spec(row.spec.get("autoscale"))
    if spec is None:
        return None
    events = session.scalars(
        select(ClusterEvent)
        .where(
            ClusterEvent.cluster_id == row.id,
            ClusterEvent.reason_code.in_([c.value for c in AUTOSCALER_CODES]),
        )
        .order_by(ClusterEvent.id.desc())
        .limit(last)
    )
    return AutoscaleStatus(
        targetUtilization=spec.target_percent,
        scaleInBelow=spec.scale_in_below_percent,
        unneededSeconds=spec.unneeded_seconds,
        cooldownSeconds=spec.cooldown_seconds,
        disruptionBudget=spec.disruption_budget,
        stabilizationSeconds=spec.stabilization_seconds,
        lastScaleOut=last_event_at(session, row.id, SCALE_OUT_CODES),
        lastScaleIn=last_event_at(session, row.id, SCALE_IN_CODES),
        decisions=[
            AutoscaleDecisionOut(
                at=e.at,
                reason=ReasonView(
                    code=e.reason_code,
                    message=e.reason,
                    fields=(e.reason_fields or {}).get("fields") or {},
                ),
            )
            for e in events
        ],
    )


def list_clusters(session: Session, tenant: Tenant) -> list[ClusterOut]:
    rows = session.scalars(
        select(ClusterRow).where(ClusterRow.tenant_id == tenant.id).order_by(ClusterRow.name)
    )
    return [cluster_view(session, row, tenant.name) for row in rows]


def all_cluster_views(session: Session, names: Mapping[int, str]) -> list[ClusterOut]:
    """Every tenant's clusters (for ``/metrics``)."""
    rows = session.scalars(select(ClusterRow).order_by(ClusterRow.tenant_id, ClusterRow.name))
    return [
        cluster_view(session, row, names.get(row.tenant_id, str(row.tenant_id))) for row in rows
    ]


def cluster_events(session: Session, row: ClusterRow) -> list[ClusterEventOut]:
    events = session.scalars(
        select(ClusterEvent).where(ClusterEvent.cluster_id == row.id).order_by(ClusterEvent.id)
    )
    return [
        ClusterEventOut(
            at=e.at,
            fromState=e.from_state,
            toState=e.to_state,
            reason=e.reason,
            code=e.reason_code,
            fields=e.reason_fields,
        )
        for e in events
    ]


def record(
    session: Session,
    row: ClusterRow,
    state: ClusterState,
    why: Reason,
    now: float,
    *,
    first: bool = False,
) -> None:
    """Move ``row`` to ``state`` for ``why``, with an event (``first``: from no state)."""
    fields = why.to_json()
    session.add(
        ClusterEvent(
            cluster_id=row.id,
            at=now,
            from_state=None if first else row.state,
            to_state=state.value,
            reason=why.render(),
            reason_code=why.code.value,
            reason_fields=fields,
        )
    )
    row.state = state.value
    row.reason = why.render()
    row.reason_code = why.code.value
    row.reason_fields = fields
    row.updated_at = now


# --- carving -------------------------------------------------------------------------------


@dataclass
class _Fleet:
    """The fleet as carving needs it: every node, which are free, which hold work."""

    rows: dict[str, NodeRow]
    nodes: dict[str, Node]
    carved: set[str]
    busy: set[str]
    default_backend: str

    @classmethod
    def load(cls, session: Session, default_backend: str) -> _Fleet:
        rows = {r.name: r for r in session.scalars(select(NodeRow).order_by(NodeRow.id))}
        nodes = {n.name: n for n in nodes_from_rows(rows.values())}
        carved = set(session.scalars(select(ClusterNodeRow.node)))
        return cls(rows, nodes, carved, busy_nodes(session), default_backend)

    def free(self, kind: ClusterKind, matches: Any) -> list[Node]:
        out = []
        for name, node in self.nodes.items():
            row = self.rows[name]
            if name in self.carved or name in self.busy or row.cordoned or row.draining:
                continue
            if CLUSTER_LABEL in node.labels or not self.serves(kind, node) or not matches(node):
                continue
            out.append(node)
        return out

    def serves(self, kind: ClusterKind, node: Node) -> bool:
        """A Slurm cluster's nodes are Slurm's (run by the slurm backend)."""
        if kind is not ClusterKind.SLURM:
            return True
        return node.labels.get(BACKEND_LABEL, self.default_backend) == "slurm"


def busy_nodes(session: Session) -> set[str]:
    """Nodes where an admitted or running job holds devices."""
    busy: set[str] = set()
    for placement in session.scalars(
        select(Job.placement).where(Job.state.in_([s.value for s in ACTIVE]))
    ):
        for pod in placement or []:
            if isinstance(pod, Mapping) and pod.get("node"):
                busy.add(str(pod["node"]))
    return busy


def matcher(session: Session, flavor: str, gpu_model: str) -> Any:
    """Whether a node is of the pool drawn from ResourceFlavor ``flavor`` (its nodeLabels) or
    of GPU model ``gpu_model``."""
    if flavor:
        row = gv.find_object(session, gv.FLAVOR, flavor)
        labels = dict(((row.document if row else {}).get("spec") or {}).get("nodeLabels") or {})
        return lambda n: all(n.labels.get(k) == v for k, v in labels.items())
    model = gpu_model.lower()
    return lambda n: bool(n.gpus) and all(g.model.lower() == model for g in n.gpus)


def _set_carved(row: NodeRow, tenant: str, cluster: str | None, now: float) -> None:
    """Label and taint the node for ``cluster`` (None: remove both), in its stored entry."""
    spec = copy.deepcopy(row.spec)
    labels = dict(spec.get("labels") or {})
    taints = [t for t in spec.get("taints") or [] if not _is_cluster_taint(t)]
    labels.pop(CLUSTER_LABEL, None)
    if cluster is not None:
        labels[CLUSTER_LABEL] = label_value(tenant, cluster)
        taints.append(cluster_taint(tenant, cluster))
    if labels:
        spec["labels"] = labels
    else:
        spec.pop("labels", None)
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
    row.spec = spec
    row.updated_at = now


def _is_cluster_taint(taint: object) -> bool:
    if isinstance(taint, Mapping):
        return taint.get("key") == CLUSTER_LABEL
    return isinstance(taint, str) and taint.startswith(f"{CLUSTER_LABEL}=")


def carve(
    session: Session,
    row: ClusterRow,
    tenant: str,
    pool: str,
    names: Iterable[str],
    now: float,
) -> None:
    """Give ``names`` to the cluster: recorded, labelled, tainted, cordoned until realised."""
    for name in names:
        node = session.scalar(select(NodeRow).where(NodeRow.name == name))
        assert node is not None
        _set_carved(node, tenant, row.name, now)
        node.cordoned = True
        session.add(ClusterNodeRow(node=name, cluster_id=row.id, pool=pool, releasing=False,
                                   created_at=now))  # fmt: skip


def mark_releasing(session: Session, rows: Iterable[ClusterNodeRow], now: float) -> list[str]:
    """Nodes leaving the cluster: cordoned and drained (their jobs are requeued)."""
    names = []
    for r in rows:
        r.releasing = True
        node = session.scalar(select(NodeRow).where(NodeRow.name == r.node))
        if node is not None:
            node.cordoned = True
            node.draining = True
            node.updated_at = now
        names.append(r.node)
    return names


def give_back(session: Session, rows: Iterable[ClusterNodeRow], now: float) -> list[str]:
    """The nodes return to the pool: label, taint, cordon and drain removed."""
    names = []
    for r in rows:
        node = session.scalar(select(NodeRow).where(NodeRow.name == r.node))
        if node is not None:
            _set_carved(node, "", None, now)
            node.cordoned = False
            node.draining = False
        names.append(r.node)
        session.delete(r)
    return names


# --- the cluster's queue -------------------------------------------------------------------


def _quota(pools: Sequence[NodePoolSpec], fleet: _Fleet, matchers: Sequence[Any]) -> dict:
    """cpu, memory and GPUs of the pools at their maximum size, each node counted as the
    largest node its pool matches."""
    cpu = memory = gpus = 0
    for pool, matches in zip(pools, matchers, strict=True):
        nodes = [n for n in fleet.nodes.values() if matches(n)] or [Node("none", 0, 0)]
        cpu += pool.upper * max(n.cpu_milli for n in nodes)
        memory += pool.upper * max(n.memory_bytes for n in nodes)
        gpus += pool.upper * max(len(n.gpus) for n in nodes)
    return {CPU: f"{cpu}m", MEMORY: str(memory), NVIDIA_GPU: gpus}


def _queue_documents(tenant: str, cluster: str, quota: Mapping[str, Any]) -> list[dict]:
    name = flavor_name(tenant, cluster)
    value = label_value(tenant, cluster)
    flavor = gv.document(
        gv.FLAVOR,
        name,
        {"spec": {
            "nodeLabels": {CLUSTER_LABEL: value},
            "tolerations": [{"key": CLUSTER_LABEL, "operator": "Equal", "value": value,
                             "effect": "NoSchedule"}],
        }},
    )  # fmt: skip
    queue = gv.document(
        gv.CLUSTER_QUEUE,
        name,
        {"spec": {
            "namespaceSelector": {},
            "resourceGroups": [{
                "coveredResources": [CPU, MEMORY, NVIDIA_GPU],
                "flavors": [{"name": name, "resources": [
                    {"name": r, "nominalQuota": q} for r, q in quota.items()
                ]}],
            }],
        }},
    )  # fmt: skip
    local = gv.document(
        gv.LOCAL_QUEUE, local_queue_name(cluster), {"spec": {"clusterQueue": name}}, tenant
    )
    return [flavor, queue, local]


def _add_queue(session: Session, tenant: Tenant, cluster: str, quota: dict, now: float) -> None:
    flavor, queue, local = _queue_documents(tenant.name, cluster, quota)
    if gv.find_object(session, gv.LOCAL_QUEUE, local_queue_name(cluster), tenant.name):
        raise conflict(
            f"tenant {tenant.name} already has a LocalQueue {local_queue_name(cluster)}, the "
            "name of this cluster's queue; rename one of them",
            "name",
        )
    for doc in (flavor, queue):
        if gv.find_object(session, doc["kind"], doc["metadata"]["name"]) is not None:
            raise conflict(f"{doc['kind']} {doc['metadata']['name']} exists already", "name")
    capacity = dict(tenant.capacity or {})
    capacity[flavor_name(tenant.name, cluster)] = {k: str(v) for k, v in quota.items()}
    tenant.capacity = capacity
    gv.put_objects(
        session,
        # the flavor is the tenant's (hidden from other tenants' flavor lists, which would
        # otherwise name its clusters); it holds no quota, its grant is the provider's
        [(flavor, tenant.id, None), (queue, tenant.id, None), (local, tenant.id, None)],
        now,
        source="cluster",
        by_provider=True,
        tenants=[tenant.id],
    )


def remove_queue(session: Session, tenant: Tenant, cluster: str, now: float) -> None:
    """The cluster's LocalQueue, ClusterQueue, flavor and grant, in that order."""
    name = flavor_name(tenant.name, cluster)
    local = gv.find_object(session, gv.LOCAL_QUEUE, local_queue_name(cluster), tenant.name)
    if local is not None:
        gv.delete_object(session, local)
    queue = gv.find_object(session, gv.CLUSTER_QUEUE, name)
    if queue is not None:
        gv.delete_object(session, queue)
    capacity = dict(tenant.capacity or {})
    if capacity.pop(name, None) is not None:
        tenant.capacity = capacity
        gv.put_objects(session, [], now, by_provider=True, tenants=[tenant.id])
    flavor = gv.find_object(session, gv.FLAVOR, name)
    if flavor is not None:
        gv.delete_object(session, flavor)


# --- the verbs -----------------------------------------------------------------------------


def _check_kind(body: ClusterIn, available: Mapping[str, str | None]) -> None:
    """``available``: kind -> None when this server provisions it, else why not."""
    if body.kind is ClusterKind.KUBERNETES:
        if body.distribution is None:
            raise invalid(
                "distribution", "a kubernetes cluster needs one: upstream, rancher or openshift"
            )
        if body.controlPlane not in (1, 3):
            raise invalid("controlPlane", f"must be 1 or 3, got {body.controlPlane}")
    else:
        if body.distribution is not None:
            raise invalid("distribution", f"only kubernetes clusters have one, not {body.kind}")
        if body.kubernetesVersion is not None:
            raise invalid("kubernetesVersion", f"only kubernetes clusters have one ({body.kind})")
    if body.kind is not ClusterKind.BAREMETAL and body.sshKeys:
        raise invalid("sshKeys", "recorded for bare-metal clusters only")
    for i, key in enumerate(body.sshKeys):
        parts = key.split()
        if len(parts) < 2 or not parts[0].startswith(("ssh-", "ecdsa-", "sk-")):
            raise invalid(f"sshKeys[{i}]", "expected an OpenSSH public key: 'ssh-ed25519 AAAA...'")
    if body.kind.value not in available:
        raise invalid("kind", f"this server has no {body.kind} provisioner")
    why = available[body.kind.value]
    if why is not None:
        raise invalid("kind", why)


def _pool_allowed(allowance: ClusterAllowance | None, pool: Any, where: str) -> None:
    if (pool.flavor is None) == (pool.gpuModel is None):
        raise invalid(where, "give exactly one of flavor and gpuModel")
    pools = list(allowance.pools) if allowance is not None else []
    flavors = [p["flavor"] for p in pools if "flavor" in p]
    models = [p["gpuModel"].lower() for p in pools if "gpuModel" in p]
    if pool.flavor is not None and pool.flavor not in flavors:
        raise invalid(
            f"{where}.flavor",
            f"the tenant may not draw nodes from flavor {pool.flavor!r} (allowed: "
            f"{', '.join(flavors) or 'none; the provider grants pools'})",
        )
    if pool.gpuModel is not None and pool.gpuModel.lower() not in models:
        raise invalid(
            f"{where}.gpuModel",
            f"the tenant may not draw nodes of GPU model {pool.gpuModel!r} (allowed: "
            f"{', '.join(models) or 'none; the provider grants pools'})",
        )


def _carving_error(exc: CarvingError) -> Exception:
    """Too few free nodes is a conflict with the fleet's state (409); a size outside the
    pool's bounds is bad input (422); both name the field."""
    if "free" in exc.problem:
        return conflict(f"{exc.field}: {exc.problem}", exc.field)
    return invalid(exc.field, exc.problem)


def _check_limit(
    session: Session, tenant: Tenant, allowance: ClusterAllowance | None, more: int, field: str
) -> None:
    limit = allowance.node_limit if allowance is not None else 0
    held = nodes_held(session, tenant)
    if held + more > limit:
        raise invalid(
            field,
            f"{more} more node(s) would take tenant {tenant.name} to {held + more}, beyond its "
            f"node limit of {limit} ({held} held)",
        )


def create_cluster(
    session: Session,
    tenant: Tenant,
    body: ClusterIn,
    now: float,
    settings: Settings,
    available: Mapping[str, str | None],
) -> ClusterRow:
    """Validate, carve and store a new cluster (state Provisioning) with its volumes; nothing
    is written when a check fails. ``available``: the kinds this server can provision
    (kind -> None) and the reason of those it cannot (kind -> why)."""
    default_backend = settings.backend
    gv.check_name("name", body.name, label=True)
    if len(label_value(tenant.name, body.name)) > 63:
        raise invalid("name", "tenant name + '.' + cluster name must fit 63 characters")
    if body.idlePool is not None:  # the provider's, registered through /v1/idle-pools
        raise invalid("idlePool", IDLE_POOL_IS_THE_PROVIDERS)
    _check_kind(body, available)
    for part in (body.autoscale, body.idlePool):
        if part is not None:
            try:
                part.spec()
            except InvalidValue as exc:
                raise invalid(exc.field, exc.problem) from None
    take_turn_on(session, FLEET_VERSION)
    if session.scalar(
        select(ClusterRow.id).where(ClusterRow.tenant_id == tenant.id, ClusterRow.name == body.name)
    ):
        raise conflict(f"tenant {tenant.name} already has a cluster {body.name}", "name")
    allowance = _allowance(session, tenant)
    names = [p.name for p in body.pools]
    if len(set(names)) != len(names):
        raise invalid("pools", "two pools share a name")
    pools: list[NodePoolSpec] = []
    for i, p in enumerate(body.pools):
        gv.check_name(f"pools[{i}].name", p.name, label=True)
        _pool_allowed(allowance, p, f"pools[{i}]")
        pool = NodePoolSpec(p.name, p.count, p.min, p.max, p.flavor or "", p.gpuModel or "")
        if p.max and p.min > p.max:
            raise invalid(f"pools[{i}].min", f"{p.min} is above the pool's max of {p.max}")
        try:
            check_count(pool, p.count, f"pools[{i}].count")
        except CarvingError as exc:
            raise invalid(exc.field, exc.problem) from None
        pools.append(pool)
    _check_limit(session, tenant, allowance, sum(p.count for p in pools), "pools")
    fleet = _Fleet.load(session, default_backend)
    matchers = [matcher(session, p.flavor, p.gpu_model) for p in pools]
    plans = []
    for i, (pool, matches) in enumerate(zip(pools, matchers, strict=True)):
        free = fleet.free(body.kind, matches)
        try:
            plan = plan_pool(pool, [], free, fleet.busy, pool.count, f"pools[{i}].count")
        except CarvingError as exc:
            raise _carving_error(exc) from None
        fleet.carved.update(plan.carve)
        plans.append(plan)
    for i, v in enumerate(body.volumes):
        bytes_text(f"volumes[{i}].size", v.size, zero=False)
    volumes = [
        VolumeSpec(v.name, parse_size(v.size, f"volumes[{i}].size"), v.storageClass, v.accessMode)
        for i, v in enumerate(body.volumes)
    ]
    spec = body.model_dump(mode="json", exclude_none=True)
    for stored, volume in zip(spec.get("volumes", []), volumes, strict=True):
        stored["sizeBytes"] = volume.size_bytes
    for stored, pool in zip(spec["pools"], pools, strict=True):
        stored["max"] = pool.upper  # a later scale keeps the bound asked for at creation
    if body.kind is ClusterKind.KUBERNETES and body.distribution is None:
        spec["distribution"] = Distribution.UPSTREAM.value
    row = ClusterRow(tenant_id=tenant.id, name=body.name, kind=body.kind.value, spec=spec,
                     state=ClusterState.PROVISIONING.value, reason="", reason_code="",
                     created_at=now, updated_at=now)  # fmt: skip
    session.add(row)
    session.flush()
    carved: list[str] = []
    for pool, plan in zip(pools, plans, strict=True):
        carve(session, row, tenant.name, pool.name, plan.carve, now)
        carved.extend(plan.carve)
    _add_queue(session, tenant, body.name, _quota(pools, fleet, matchers), now)
    if volumes:  # held to the tenant's storage quota; a refusal names volumes[i] and undoes all
        provision_cluster_volumes(session, settings, tenant, body.name, volumes)
    why = reason(Code.CLUSTER_CARVED, nodes=sorted(carved) or ["none"])
    record(session, row, ClusterState.PROVISIONING, why, now, first=True)
    bump_version(session, FLEET_VERSION)
    session.flush()
    return row


def scale_cluster(
    session: Session, tenant: Tenant, name: str, body: ScaleIn, now: float, default_backend: str
) -> ClusterRow:
    """New counts for some pools: nodes carved now (cordoned until realised) or marked to be
    drained and given back; state Scaling until the worker is done."""
    take_turn_on(session, FLEET_VERSION)
    row = get_cluster(session, tenant, name)
    if row.state == ClusterState.DELETING:
        raise conflict(f"cluster {name} is being deleted", "name")
    if row.spec.get("idlePool") is not None:  # a well-formed request, refused by what is stored
        raise conflict(f"cluster {name} is the idle pool: {IDLE_POOL_IS_THE_PROVIDERS}", "name")
    spec = copy.deepcopy(row.spec)
    by_name = {p["name"]: p for p in spec["pools"]}
    allowance = _allowance(session, tenant)
    rows = node_rows(session, row.id)
    fleet = _Fleet.load(session, default_backend)
    kind = ClusterKind(row.kind)
    more = 0
    plans = []
    seen: set[str] = set()
    for i, change in enumerate(body.pools):
        where = f"pools[{i}]"
        stored = by_name.get(change.name)
        if stored is None:
            raise invalid(f"{where}.name", f"cluster {name} has no pool {change.name!r} "
                          f"(pools: {', '.join(by_name)})")  # fmt: skip
        if change.name in seen:
            raise invalid(f"{where}.name", "named twice")
        seen.add(change.name)
        pool = NodePoolSpec(stored["name"], change.count, int(stored.get("min", 0)),
                            int(stored.get("max") or stored["count"]), stored.get("flavor") or "",
                            stored.get("gpuModel") or "")  # fmt: skip
        held_rows = [r for r in rows if r.pool == change.name and not r.releasing]
        held = [fleet.nodes[r.node] for r in held_rows if r.node in fleet.nodes]
        matches = matcher(session, pool.flavor, pool.gpu_model)
        free = fleet.free(kind, matches) if change.count > len(held) else []
        try:
            plan = plan_pool(pool, held, free, fleet.busy, change.count, f"{where}.count")
        except CarvingError as exc:
            raise _carving_error(exc) from None
        more += len(plan.carve)
        fleet.carved.update(plan.carve)
        plans.append((pool, plan, held_rows))
        stored["count"] = change.count
    _check_limit(session, tenant, allowance, more, "pools")
    carved: list[str] = []
    leaving: list[str] = []
    for pool, plan, held_rows in plans:
        carve(session, row, tenant.name, pool.name, plan.carve, now)
        carved.extend(plan.carve)
        going = set(plan.release) | set(plan.drain)
        leaving.extend(mark_releasing(session, [r for r in held_rows if r.node in going], now))
    row.spec = spec
    if carved:
        record(session, row, ClusterState.SCALING, reason(Code.CLUSTER_CARVED,
               nodes=sorted(carved)), now)  # fmt: skip
    if leaving:
        record(session, row, ClusterState.SCALING, reason(Code.CLUSTER_DRAINING,
               nodes=sorted(leaving)), now)  # fmt: skip
    if not carved and not leaving:
        return row
    bump_version(session, FLEET_VERSION)
    session.flush()
    return row


@dataclass(frozen=True, slots=True)
class Growth:
    """What :func:`grow_pool` did: the nodes ``carved``, how many asked for are ``missing``
    and ``why``; ``fleet_short``: they are missing for want of free nodes (the idle pool may
    give some back), not for the tenant's node limit."""

    carved: list[str]
    missing: int
    why: str
    fleet_short: bool


def grow_pool(
    session: Session,
    row: ClusterRow,
    tenant: Tenant,
    pool_name: str,
    count: int,
    now: float,
    default_backend: str,
    avoid: Iterable[str] = (),
) -> Growth:
    """The autoscaler's scale-out, on the caller's transaction (which holds the fleet's
    turn, :func:`take_turn_on`): up to ``count`` more nodes carved into pool ``pool_name``,
    chosen as :func:`scale_cluster` chooses them, held to the pool's max counting the nodes
    still leaving it (the hard limit, checked here on the state the transaction sees, so two
    loops or a concurrent manual scale cannot both pass it) and to the tenant's node limit;
    ``avoid``: free nodes not to take (given back by this cluster within its cooldown).
    Records nothing: the caller records the decision's event."""
    spec = copy.deepcopy(row.spec)
    stored = next(p for p in spec["pools"] if p["name"] == pool_name)
    rows = [r for r in node_rows(session, row.id) if r.pool == pool_name]
    upper = int(stored.get("max") or stored["count"])
    room = max(0, upper - len(rows))
    allowance = _allowance(session, tenant)
    limit = (allowance.node_limit if allowance is not None else 0) - nodes_held(session, tenant)
    fleet = _Fleet.load(session, default_backend)
    avoid = set(avoid)
    matches = matcher(session, stored.get("flavor") or "", stored.get("gpuModel") or "")
    free = [n for n in fleet.free(ClusterKind(row.kind), matches) if n.name not in avoid]
    want = min(count, room)
    take = min(want, max(0, limit), len(free))
    by_limit = limit < min(want, len(free))
    why = ""
    if take < want:
        why = (
            f"tenant {tenant.name}'s node limit leaves room for {max(0, limit)}"
            if by_limit
            else f"{len(free)} free node(s) match the pool"
        )
    if take <= 0:
        return Growth([], want, why, fleet_short=not by_limit)
    held = [r for r in rows if not r.releasing]
    pool = NodePoolSpec(pool_name, len(held) + take, int(stored.get("min", 0)), upper,
                        stored.get("flavor") or "", stored.get("gpuModel") or "")  # fmt: skip
    hosts = [fleet.nodes[r.node] for r in held if r.node in fleet.nodes]
    plan = plan_pool(pool, hosts, free, fleet.busy, len(hosts) + take, "count")
    carve(session, row, tenant.name, pool_name, plan.carve, now)
    stored["count"] = len(held) + len(plan.carve)
    row.spec = spec
    bump_version(session, FLEET_VERSION)
    missing = want - len(plan.carve)
    return Growth(list(plan.carve), missing, why, fleet_short=bool(missing) and not by_limit)


def free_for_pool(
    session: Session, row: ClusterRow, pool_name: str, default_backend: str
) -> list[str]:
    """The free nodes (in no cluster, not busy, cordoned or draining) that pool ``pool_name``
    of cluster ``row`` could be grown with, by name: what :func:`grow_pool` chooses from."""
    stored = next(p for p in row.spec["pools"] if p["name"] == pool_name)
    fleet = _Fleet.load(session, default_backend)
    matches = matcher(session, stored.get("flavor") or "", stored.get("gpuModel") or "")
    return sorted(n.name for n in fleet.free(ClusterKind(row.kind), matches))


def release_pool_nodes(
    session: Session, row: ClusterRow, pool_name: str, names: Iterable[str], now: float
) -> list[str]:
    """The autoscaler's scale-in, on the caller's transaction: ``names`` of pool
    ``pool_name`` that are still held (and not leaving) are marked to be drained and given
    back, never taking the pool below its min. Returns those marked."""
    spec = copy.deepcopy(row.spec)
    stored = next(p for p in spec["pools"] if p["name"] == pool_name)
    held = [r for r in node_rows(session, row.id) if r.pool == pool_name and not r.releasing]
    spare = len(held) - int(stored.get("min", 0))
    wanted = set(names)
    going = [r for r in held if r.node in wanted][: max(0, spare)]
    if not going:
        return []
    leaving = mark_releasing(session, going, now)
    stored["count"] = len(held) - len(leaving)
    row.spec = spec
    bump_version(session, FLEET_VERSION)
    return leaving


def delete_cluster(
    session: Session, tenant: Tenant, name: str, force: bool, now: float
) -> ClusterRow:
    """Start deleting: 409 naming ``force`` while its jobs are admitted or running, unless
    forced (then they are cancelled); pending jobs are cancelled either way. The worker gives
    the nodes back and removes the cluster once they are drained."""
    take_turn_on(session, FLEET_VERSION)
    row = get_cluster(session, tenant, name)
    jobs = list(session.scalars(
        _jobs_of(session, tenant.id, name).where(Job.state.in_([s.value for s in UNFINISHED]))
    ))  # fmt: skip
    running = [j.id for j in jobs if j.state in ACTIVE]
    if running and not force:
        shown = ", ".join(map(str, running[:10])) + (" ..." if len(running) > 10 else "")
        raise conflict(
            f"cluster {name} has {len(running)} admitted or running job(s) (ids {shown}); "
            "delete with force to cancel them",
            "force",
        )
    for job in jobs:
        if job.state not in (JobState.CANCELLED.value,) and not job.cancel_requested:
            cancel_job(session, job, now)
    mark_releasing(session, [r for r in node_rows(session, row.id) if not r.releasing], now)
    for r in node_rows(session, row.id):  # nodes already leaving drain too
        r.releasing = True
    if row.state != ClusterState.DELETING:
        record(session, row, ClusterState.DELETING, reason(Code.CLUSTER_DELETING, force=force),
               now)  # fmt: skip
    bump_version(session, FLEET_VERSION)
    session.flush()
    return row
