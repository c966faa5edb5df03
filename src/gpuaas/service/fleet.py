"""The fleet as the service stores it: one fully resolved inventory entry per node.

Registration takes entries in the inventory format (docs/inventory.md), groups and patterns
included, validates them with the inventory loader, and stores one entry per node with the
file's defaults merged in and every pattern expanded. Other fleet sources (``kubectl get nodes``
output, the trace's CSV node list, sent as a document or as file text) are loaded by the same
loaders as ``gpuaas fleet show`` and stored as the entries that describe the same nodes
(:func:`request_entries`). So a stored node reads the same as a
one-node inventory, and :func:`load_nodes` builds the engine's nodes with the same loader.
Every change bumps ``fleet.version`` in Meta: the reconciler rebuilds its snapshot when it moves.
"""

from __future__ import annotations

import copy
import json
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Text, cast, event, select, text
from sqlalchemy.orm import Session

from gpuaas.engine.admission.restore import expand
from gpuaas.model.cluster import CLUSTER_LABEL
from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.model.job_state import ACTIVE
from gpuaas.model.node import UNSCHEDULABLE, Fleet, Node
from gpuaas.service.errors import conflict, not_found
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import ClusterNodeRow, Job, Meta, NodeRow
from gpuaas.supply.loaders import entries_from_text, parse_fleet_text
from gpuaas.supply.loaders._common import read_text
from gpuaas.supply.loaders.entries import fleet_entries, nodes_entries
from gpuaas.supply.loaders.errors import FleetFileError
from gpuaas.supply.loaders.inventory import API_VERSION, KIND, inventory_from_document
from gpuaas.supply.loaders.kubernetes import looks_like_kubernetes
from gpuaas.supply.nics import nic_entry

FLEET_VERSION = "fleet.version"
#: Keys merged key by key with the defaults (the node's value wins); others are replaced whole.
_MERGED_KEYS = ("labels", "topology", "resources")
_TOPOLOGY_FIELDS = {
    "zone": "zone",
    "block": "block",
    "rack": "rack",
    "nvlinkDomain": "nvlink_domain",
}


def take_turn_on(session: Session, key: str) -> None:
    """Make writers of ``key``'s state (the fleet, governance) take turns until they commit,
    so a write validates against what the previous one committed and no version bump is lost.

    PostgreSQL: a transaction-scoped advisory lock. SQLite: a no-op write, which takes the
    database's write lock now (pysqlite begins the transaction at the first write), before
    the reads that the validation makes.
    """
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        lock = zlib.crc32(key.encode())
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock})
    elif dialect == "sqlite":
        session.execute(text("UPDATE meta SET value = value WHERE key = :key"), {"key": key})


#: Called with the key after a transaction that bumped a version commits (in this process):
#: caches of governance or fleet drop what they hold at once instead of at their next check.
VERSION_LISTENERS: list[Callable[[str], None]] = []


def bump_version(session: Session, key: str) -> int:
    """Increment the integer kept as text under ``key`` in Meta; returns the new value."""
    take_turn_on(session, key)

    def committed(_: Session) -> None:
        for listener in VERSION_LISTENERS:
            listener(key)

    event.listen(session, "after_commit", committed, once=True)
    row = session.scalars(
        select(Meta).where(Meta.key == key).execution_options(populate_existing=True)
    ).first()
    if row is None:
        row = Meta(key=key, value="0")
        session.add(row)
    value = int(row.value or "0") + 1
    row.value = str(value)
    return value


def text_cursor(after: str | None) -> str | None:
    """An ``?after=`` name cursor PostgreSQL can compare: names hold no NUL byte, so the names
    after ``a<NUL>b`` are exactly those after ``a``."""
    return None if after is None else after.split("\x00", 1)[0]


def _document(entries: list[Any], defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "nodes": entries}
    if defaults:
        document["defaults"] = defaults
    return document


def _invalid(exc: FleetFileError) -> InvalidValue:
    """The loader's error as an InvalidValue naming the field, the entry in the message."""
    problem = f"{exc.entry}: {exc.problem}" if exc.entry else exc.problem
    return InvalidValue(exc.field or "nodes", problem)


def _validated(document: dict[str, Any], source: str) -> list[Node]:
    try:
        return inventory_from_document(document, source).nodes
    except FleetFileError as exc:
        raise _invalid(exc) from None
    except GpuaasError as exc:  # the loader only raises FleetFileError; be safe anyway
        raise InvalidValue("nodes", str(exc)) from None


def merge_defaults(entry: Mapping[str, Any], defaults: Mapping[str, Any] | None) -> dict[str, Any]:
    """``entry`` with ``defaults`` applied the way the inventory format does (see the docs)."""
    merged: dict[str, Any] = copy.deepcopy(dict(defaults or {}))
    for key, value in entry.items():
        mergeable = key in (*_MERGED_KEYS, "gpus")
        if mergeable and isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **copy.deepcopy(dict(value))}
        else:
            merged[key] = copy.deepcopy(value)
    if merged.get("gpus") == "none":
        merged.pop("gpus")
    return merged


def _resolved(merged: Mapping[str, Any], node: Node) -> dict[str, Any]:
    """The one-node entry for ``node`` of the (possibly grouped) entry ``merged``."""
    entry: dict[str, Any] = {"name": node.name}
    entry.update(
        (k, copy.deepcopy(v)) for k, v in merged.items() if k not in ("name", "count", "start")
    )
    if "topology" in merged:
        entry["topology"] = {
            key: getattr(node.topology, _TOPOLOGY_FIELDS[key]) for key in merged["topology"]
        }
    if "labels" in merged:
        entry["labels"] = {key: node.labels[key] for key in merged["labels"]}
    if merged.get("nics") not in (None, "none"):  # runs and {i} patterns, expanded
        entry["nics"] = [nic_entry(nic) for nic in node.nics]
    if isinstance(merged.get("gpus"), Mapping) and "pcieRoots" in merged["gpus"]:
        entry["gpus"]["pcieRoots"] = [g.pcie_root for g in node.gpus]
    return entry


def resolve_entries(
    entries: list[dict[str, Any]], defaults: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One validated, self-contained entry per node (defaults merged, groups expanded)."""
    if not isinstance(entries, list) or not entries:
        raise InvalidValue("nodes", "expected a non-empty list of node entries")
    if defaults is not None and not isinstance(defaults, Mapping):
        raise InvalidValue("defaults", "expected a mapping")
    _validated(_document(list(entries), defaults), "request")
    out: list[dict[str, Any]] = []
    for entry in entries:
        merged = merge_defaults(entry, defaults)
        nodes = _validated(_document([merged]), "request")
        out.extend(_resolved(merged, node) for node in nodes)
    _validated(_document(out), "request")  # the resolved entries mean the same nodes
    return out


def register_nodes(
    session: Session,
    entries: list[dict[str, Any]],
    now: float,
    defaults: dict[str, Any] | None = None,
) -> list[NodeRow]:
    """Validate and store the nodes of ``entries``; 409 when a name is already registered."""
    resolved = resolve_entries(entries, defaults)
    take_turn_on(session, FLEET_VERSION)
    names = [entry["name"] for entry in resolved]
    taken: set[str] = set()
    for start in range(0, len(names), 1000):  # bounded IN lists (SQLite caps parameters)
        chunk = names[start : start + 1000]
        taken.update(session.scalars(select(NodeRow.name).where(NodeRow.name.in_(chunk))))
    if taken:
        shown = ", ".join(sorted(taken)[:5]) + (" ..." if len(taken) > 5 else "")
        raise conflict(f"node already registered: {shown}", "name")
    rows = [NodeRow(name=e["name"], spec=e, created_at=now, updated_at=now) for e in resolved]
    session.add_all(rows)
    bump_version(session, FLEET_VERSION)
    session.flush()
    return rows


@dataclass
class Applied:
    """What :func:`apply_nodes` did, by node name."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    rows: list[NodeRow] = field(default_factory=list)


def apply_nodes(
    session: Session,
    entries: list[dict[str, Any]],
    now: float,
    defaults: dict[str, Any] | None = None,
) -> Applied:
    """Register the nodes of ``entries`` or replace the stored ones of the same name (all or
    none): what a repeated import of a cluster's nodes does.

    A replaced node keeps its cordon and drain state (those are the operator's, not the
    source's) and its row, so the reconciler sees the change as a fleet diff and applies it in
    place: workloads whose devices still exist keep them, the others are displaced and queue
    again (:mod:`gpuaas.engine.admission.fleet_changes`). A node whose entry is what is stored
    is left alone; the fleet version moves once, and only when something changed."""
    resolved = resolve_entries(entries, defaults)
    take_turn_on(session, FLEET_VERSION)
    names = [entry["name"] for entry in resolved]
    stored: dict[str, NodeRow] = {}
    for start in range(0, len(names), 1000):  # bounded IN lists (SQLite caps parameters)
        chunk = names[start : start + 1000]
        stored.update(
            (row.name, row)
            for row in session.scalars(select(NodeRow).where(NodeRow.name.in_(chunk)))
        )
    done = Applied()
    for entry in resolved:
        row = stored.get(entry["name"])
        if row is None:
            row = NodeRow(name=entry["name"], spec=entry, created_at=now, updated_at=now)
            session.add(row)
            done.created.append(row.name)
        elif row.spec == entry:
            done.unchanged.append(row.name)
        else:
            row.spec = entry
            row.updated_at = now
            done.updated.append(row.name)
        done.rows.append(row)
    if done.created or done.updated:
        bump_version(session, FLEET_VERSION)
    session.flush()
    return done


#: The request body that carries a fleet file's text: ``{"content": TEXT, "source": NAME}``.
CONTENT = "content"
_CONTENT_KEYS = (CONTENT, "source")


def request_entries(body: object) -> tuple[list[Any], dict[str, Any] | None]:
    """(entries, defaults) of a ``POST /v1/nodes`` body, which is one of:

    - one inventory ``nodes:`` entry (``count`` and patterns make several nodes);
    - a whole inventory (``apiVersion: gpuaas.io/v1``, ``kind: Fleet``), its defaults applied;
    - Kubernetes Node objects: a ``Node``, ``NodeList`` or ``List`` as ``kubectl get nodes -o
      yaml|json`` prints them;
    - a fleet file's text, ``{"content": TEXT, "source": "nodes.csv"}``: any format ``gpuaas
      fleet show`` reads (the source's extension picks CSV, JSON or YAML, as for a file).

    Problems are InvalidValue (422) naming the entry and field."""
    if not isinstance(body, Mapping):
        raise InvalidValue("", "expected a JSON object: a node entry, a fleet or a file's content")
    source = str(body.get("source") or "request")
    try:
        if CONTENT in body:
            unknown = [key for key in body if key not in _CONTENT_KEYS]
            if unknown:
                raise InvalidValue(
                    str(unknown[0]),
                    f"unknown key beside content (allowed: {', '.join(_CONTENT_KEYS)})",
                )
            if not isinstance(body[CONTENT], str):
                raise InvalidValue(CONTENT, "expected the file's text")
            document = parse_fleet_text(body[CONTENT], source)
            if isinstance(document, Fleet):
                return nodes_entries(document.nodes, source), None
            if isinstance(document, Mapping) and "kind" not in document and "name" in document:
                return [dict(document)], None  # a file holding one node entry
            return fleet_entries(document, source)
        if body.get("kind") == KIND or looks_like_kubernetes(body):
            return fleet_entries(body, "request")
    except FleetFileError as exc:
        raise _invalid(exc) from None
    if "kind" in body:
        raise InvalidValue(
            "kind",
            f"expected {KIND}, Node, NodeList or List (or a node entry without kind), "
            f"got {body.get('kind')!r}",
        )
    return [dict(body)], None


def fleet_file_entries(path: Path) -> list[dict[str, Any]]:
    """The resolved entries of a fleet file (any format), fully validated, without a database:
    ``gpuaas serve --fleet`` checks its file with this before it opens the database.
    Raises FleetFileError naming the file, the entry and the field."""
    source = str(path)
    entries, defaults = entries_from_text(read_text(path), path)
    inventory_from_document(_document(entries, defaults), path)  # FILE: ENTRY: FIELD: PROBLEM
    try:
        return resolve_entries(entries, defaults)
    except InvalidValue as exc:
        raise FleetFileError(source, exc.problem, field=exc.field) from None


def register_initial_fleet(db: Database, settings: Settings) -> None:
    """Register the fleet file ``settings.fleet`` once, when no node is registered yet.

    Without ``--fleet`` nothing is registered here: ``--demo`` seeding
    (:mod:`gpuaas.service.demo`) registers the demo's own fleet, which its flavors select.
    Every format ``gpuaas fleet show`` reads is accepted (:func:`fleet_file_entries`).
    """
    if settings.fleet is None:
        return
    path = Path(settings.fleet)
    resolved = fleet_file_entries(path)
    with db.session() as session:
        if session.scalar(select(NodeRow.id).limit(1)) is not None:
            return
        try:
            register_nodes(session, resolved, time.time())
        except InvalidValue as exc:
            raise FleetFileError(str(path), exc.problem, field=exc.field) from None


def nodes_from_rows(rows: Iterable[NodeRow]) -> list[Node]:
    """Engine nodes for stored rows; cordoned or draining ones carry the unschedulable taint."""
    rows = list(rows)
    if not rows:
        return []
    nodes = _validated(_document([row.spec for row in rows]), "nodes")
    for row, node in zip(rows, nodes, strict=True):
        if (row.cordoned or row.draining) and UNSCHEDULABLE not in node.taints:
            node.taints.append(UNSCHEDULABLE)
    return nodes


def load_nodes(session: Session) -> list[Node]:
    """Every registered node, in registration order (cordoned ones too: their jobs stay)."""
    return nodes_from_rows(session.scalars(select(NodeRow).order_by(NodeRow.id)))


def get_node(session: Session, name: str) -> NodeRow:
    row = None if "\x00" in name else session.scalar(select(NodeRow).where(NodeRow.name == name))
    if row is None:
        raise not_found(f"node {name}")
    return row


def placements_on(session: Session, node: str) -> list[tuple[Any, dict[str, Any]]]:
    """Pods of admitted or running jobs placed on ``node``: (job, placement entry); the job
    is a row of its ``id``, ``tenant_id`` and ``state``. Only the active jobs whose stored
    placement text holds the node's name as a JSON string are read (a superset: each pod is
    checked), not every active job's placement: on the openb fleet with 4,000 running jobs
    a node's page read them all."""
    out: list[tuple[Any, dict[str, Any]]] = []
    stmt = select(Job.id, Job.tenant_id, Job.state, Job.placement).where(Job.state.in_(ACTIVE))
    quoted = json.dumps(node)
    if quoted == f'"{node}"' and node.isascii():
        # the stored JSON text holds the name exactly so (a name needing no escape): only
        # those rows are read; each is still checked below
        pattern = "%" + quoted.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        stmt = stmt.where(cast(Job.placement, Text).like(pattern, escape="\\"))
    for job in session.execute(stmt.order_by(Job.id)):
        mine = [p for p in job.placement or [] if isinstance(p, Mapping) and p.get("node") == node]
        out.extend((job, pod) for pod in expand(mine))  # runs of identical pods, pod by pod
    return out


def _refuse_while_used(session: Session, row: NodeRow, action: str) -> None:
    used = placements_on(session, row.name)
    if used:
        jobs = sorted({job.id for job, _ in used})
        shown = ", ".join(str(j) for j in jobs[:10]) + (" ..." if len(jobs) > 10 else "")
        raise conflict(
            f"cannot {action} node {row.name}: {len(jobs)} admitted or running job(s) use it "
            f"(ids {shown}); drain it first and wait for them to leave"
        )


def set_schedulable(
    session: Session, name: str, now: float, *, cordoned: bool, draining: bool = False
) -> NodeRow:
    """Cordon, drain (cordon + the reconciler requeues its jobs) or uncordon a node."""
    row = get_node(session, name)
    row.cordoned = cordoned
    row.draining = draining
    row.updated_at = now
    bump_version(session, FLEET_VERSION)
    return row


def set_partitioning(
    session: Session,
    name: str,
    partitioning: Any,
    per_gpu: list[Any] | None,
    now: float,
) -> NodeRow:
    """Change how the node's GPUs are offered; 409 while jobs hold devices there."""
    take_turn_on(session, FLEET_VERSION)
    row = get_node(session, name)
    gpus = row.spec.get("gpus")
    if not isinstance(gpus, Mapping):
        raise InvalidValue("partitioning", f"node {name} has no GPUs to partition")
    _refuse_while_used(session, row, "repartition")
    spec = copy.deepcopy(row.spec)
    spec["gpus"] = {k: v for k, v in gpus.items() if k not in ("partitioning", "perGpu")}
    spec["gpus"]["partitioning"] = partitioning
    if per_gpu:
        spec["gpus"]["perGpu"] = per_gpu
    try:
        inventory_from_document(_document([spec]), name)
    except FleetFileError as exc:
        field = exc.field.removeprefix("gpus.") if exc.field else "partitioning"
        raise InvalidValue(field, exc.problem) from None
    row.spec = spec
    row.updated_at = now
    bump_version(session, FLEET_VERSION)
    return row


def delete_node(session: Session, name: str) -> None:
    """Remove a node from the fleet; 409 while jobs hold devices there."""
    take_turn_on(session, FLEET_VERSION)
    row = get_node(session, name)
    _refuse_while_used(session, row, "delete")
    carved = session.get(ClusterNodeRow, name)
    if carved is not None:
        raise conflict(
            f"cannot delete node {name}: it is carved into a tenant cluster "
            f"({row.spec.get('labels', {}).get(CLUSTER_LABEL, '?')}); scale the cluster down first"
        )
    session.delete(row)
    bump_version(session, FLEET_VERSION)
