"""Volumes: a tenant's storage, its quota, and what jobs mount.

A tenant-admin creates, grows and deletes the tenant's volumes; its members read them (the
routes come from the one resource table, :data:`gpuaas.model.api_kinds.KINDS`, like the
governance kinds'). A volume's storage class names its provisioner (:func:`storage_classes`:
``local`` always, ``nfs`` when the provider configured a server, the Kubernetes StorageClasses
the provider offers). Semantics:

- **Quota.** The provider sets a tenant's ``storageQuota`` in bytes (a term like ``maxJob``;
  none: no limit). The sizes of all the tenant's volumes, whatever their state, together never
  exceed it: a create or a growth that would is a 409 naming ``size`` with the amounts, and
  nothing is stored or provisioned. Writers of one tenant's volumes take turns
  (:func:`~gpuaas.service.fleet.take_turn_on`), so two creates racing cannot both fit a quota
  only one fits. A quota lowered below what is held refuses new volumes and growth until
  volumes are deleted; nothing held is taken away.
- **Create.** The row is stored ``Pending``, then the provisioner is asked (in the same
  transaction); what it made becomes the state (``Ready``, or ``Pending`` for a claim not bound
  yet). A provisioner that refuses leaves the volume ``Failed`` with its reason (its size still
  held against the quota until it is deleted); a provisioner that cannot be reached fails the
  request (503) and nothing is stored.
- **Update** (PUT) may only grow ``size``; the class, access mode and cluster are fixed (a 409
  names the field: the body is valid, the volume stored says otherwise). A size is a byte
  quantity the OpenAPI document's pattern says (``models.common.bytes_schema``); an unknown
  storage class or cluster is a 404 naming the field.
- **Delete** is refused (409) while an unfinished job mounts the volume; otherwise the volume is
  ``Deleting`` while its provisioner removes what it made, then gone.
- **Metering.** A volume's GB-hours are recorded from its creation to its delete at its size
  (:mod:`gpuaas.service.usage_volumes`): a growth and a delete settle the time before them in
  their own transaction.
- **Jobs** mount volumes by name (:func:`resolve_job_volumes`, on the submission path only for
  jobs that mount any): an unknown, failed or deleting volume, a volume of another cluster than
  the job's, a read-write mount of a ``ReadOnlyMany`` volume or of a full one are 422s naming
  ``volumes[i]``; what a backend needs (the directory or the claim) is stored in the job's
  ``resolved.volumes``.

Clusters: :func:`provision_cluster_volumes` and :func:`delete_cluster_volumes` are what the
cluster service calls with a cluster's :class:`~gpuaas.model.cluster.VolumeSpec` list; the
volumes they make belong to the cluster (``cluster``) and are held to the same quota.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuaas.backends.base import BackendUnavailable
from gpuaas.backends.provisioners.base import ProvisionError
from gpuaas.backends.storage.base import StorageProvisioner
from gpuaas.backends.storage.local import MEASURE, LocalDirectories, directory_usage
from gpuaas.model.cluster import AccessMode, VolumeSpec
from gpuaas.model.errors import InvalidValue
from gpuaas.model.job_state import UNFINISHED
from gpuaas.model.resources import MEMORY, canonical_amount, describe_amount, format_amount
from gpuaas.model.volume import (
    LOCAL_CLASS,
    NFS_CLASS,
    Realised,
    Volume,
    VolumeCode,
    VolumeReason,
    VolumeState,
    mount_link,
)
from gpuaas.service import usage_volumes
from gpuaas.service.errors import ApiError, conflict, invalid, missing, not_found
from gpuaas.service.fleet import take_turn_on, text_cursor
from gpuaas.service.governance import check_name
from gpuaas.service.governance_kinds import At
from gpuaas.service.models.common import MAX_LIMIT, Page, ReasonView, bytes_text, paginate
from gpuaas.service.models.storage import VolumeIn, VolumeOut
from gpuaas.service.settings import Settings
from gpuaas.store.tables import ClusterRow, Job, Tenant, VolumeRow

#: What a job may mount: a volume not failed and not being deleted (a claim may still be
#: pending: a WaitForFirstConsumer class binds it when the first pod mounts it).
MOUNTABLE = (VolumeState.READY.value, VolumeState.PENDING.value)


# --- storage classes -----------------------------------------------------------------------


def storage_classes(settings: Settings) -> dict[str, StorageProvisioner]:
    """The provisioner of every storage class this server offers (see the module docstring)."""
    classes: dict[str, StorageProvisioner] = {
        LOCAL_CLASS: LocalDirectories(settings.data_dir / "volumes", settings.storage_enforcement)
    }
    if settings.nfs_server and settings.nfs_clients:
        from gpuaas.backends.storage.nfs import NfsExports

        classes[NFS_CLASS] = NfsExports(
            settings.nfs_server, settings.nfs_export_root, settings.nfs_clients,
            settings.nfs_mount_root,
        )  # fmt: skip
    if settings.kube_storage_classes:
        from gpuaas.backends.storage.kubernetes import PersistentVolumeClaims

        client = None
        if settings.backend == "kubernetes":
            from gpuaas.backends.kubernetes.backend import connect

            def client() -> Any:
                return connect(settings.kube_config, settings.kube_context)

        for name in settings.kube_storage_classes:
            if name not in classes:
                classes[name] = PersistentVolumeClaims(name, settings.kube_namespace, client)
    return classes


def provisioner_for(settings: Settings, storage_class: str) -> StorageProvisioner:
    classes = storage_classes(settings)
    found = classes.get(storage_class)
    if found is None:
        raise missing(
            "storageClass",
            f"no storage class {storage_class!r} is offered here (offered: {', '.join(classes)})",
        )
    return found


# --- sizes and the quota -------------------------------------------------------------------


def parse_size(value: str | int, field: str = "size") -> int:
    """Bytes of a quantity (``100Gi``, ``500M``, ``1000000``); at least one byte."""
    if isinstance(value, bool):
        raise invalid(field, f"expected a quantity of bytes, got {value!r}")
    try:
        amount = canonical_amount(MEMORY, value, field)
    except InvalidValue as exc:
        raise invalid(field, exc.problem) from None
    if amount < 1:
        raise invalid(field, f"must be at least one byte, got {value!r}")
    if amount >= 2**63:
        raise invalid(field, f"{value!r} is too large")
    return amount


def held_bytes(session: Session, tenant_id: int, *, without: int | None = None) -> int:
    """The sizes of the tenant's volumes summed (all states), ``without`` one of them."""
    stmt = select(func.coalesce(func.sum(VolumeRow.size_bytes), 0)).where(
        VolumeRow.tenant_id == tenant_id
    )
    if without is not None:
        stmt = stmt.where(VolumeRow.id != without)
    return int(session.scalar(stmt) or 0)


def check_quota(
    session: Session, tenant: Tenant, size: int, field: str = "size", without: int | None = None
) -> None:
    """Refuse (409 naming ``field``: the request is valid, the tenant's other volumes leave no
    room) a volume of ``size`` bytes that would take the tenant's volumes past its storage
    quota; ``without``: a volume being replaced."""
    quota = tenant.storage_quota
    if quota is None:
        return
    held = held_bytes(session, tenant.id, without=without)
    if held + size > quota:
        raise conflict(
            f"{field}: a volume of {describe_amount(MEMORY, size)} ({size} bytes) would bring "
            f"tenant {tenant.name}'s volumes to {held + size} bytes, above its storage quota of "
            f"{quota} bytes ({describe_amount(MEMORY, quota)}; {held} bytes held already)",
            field,
        )


def lock_tenant_storage(session: Session, tenant: Tenant) -> None:
    """Writers of one tenant's volumes take turns until they commit (the quota holds)."""
    take_turn_on(session, f"storage.{tenant.name}")


# --- rows, volumes, views --------------------------------------------------------------------


def volume_of(row: VolumeRow, tenant: str) -> Volume:
    spec = VolumeSpec(row.name, row.size_bytes, row.storage_class, AccessMode(row.access_mode))
    return Volume(tenant, spec, row.cluster)


def _record(row: VolumeRow, state: VolumeState, reason: VolumeReason, now: float) -> None:
    row.state = state.value
    row.reason = reason.render()
    row.reason_code = reason.code.value
    row.reason_fields = dict(reason.fields)
    row.updated_at = now


def _store_realised(row: VolumeRow, made: Realised, now: float) -> None:
    _record(row, made.state, made.reason, now)
    row.path = made.path
    row.claim = made.claim
    row.details = dict(made.details)


def _realise(session: Session, settings: Settings, row: VolumeRow, tenant: str) -> None:
    """Ask the provisioner to realise ``row`` now; a refusal is the row's Failed state, an
    unreachable system a 503 (the caller's transaction is rolled back: nothing stored)."""
    provisioner = provisioner_for(settings, row.storage_class)
    now = time.time()
    try:
        made = provisioner.provision(volume_of(row, tenant))
    except ProvisionError as exc:
        reason = VolumeReason(
            VolumeCode.PROVISION_FAILED, {"storage_class": row.storage_class, "detail": str(exc)}
        )
        _record(row, VolumeState.FAILED, reason, now)
        return
    except BackendUnavailable as exc:
        raise _unreachable(row, exc) from None
    _store_realised(row, made, now)
    session.flush()


def _unreachable(row: VolumeRow, exc: Exception) -> ApiError:
    return ApiError(503, f"the {row.storage_class} storage cannot be reached: {exc}")


def _observed(
    settings: Settings, row: VolumeRow, tenant: str
) -> tuple[Realised | None, int | None]:
    """The volume's state now and its usage, as its provisioner sees them (None: as stored)."""
    if row.state not in MOUNTABLE:
        return None, None
    provisioner = storage_classes(settings).get(row.storage_class)
    if provisioner is None:
        return None, None
    volume = volume_of(row, tenant)
    stored = Realised(
        VolumeState(row.state),
        VolumeReason(VolumeCode(row.reason_code), row.reason_fields),
        row.path,
        row.claim,
        row.details,
    )
    try:
        return provisioner.observe(volume, stored), provisioner.usage(volume)
    except (BackendUnavailable, ProvisionError, OSError):
        return None, None


def volume_out(row: VolumeRow, tenant: str, settings: Settings | None) -> VolumeOut:
    seen, used = _observed(settings, row, tenant) if settings is not None else (None, None)
    state, reason = row.state, (row.reason, row.reason_code, row.reason_fields)
    if seen is not None:
        state = seen.state.value
        reason = (seen.reason.render(), seen.reason.code.value, dict(seen.reason.fields))
    return VolumeOut(
        name=row.name,
        tenant=tenant,
        cluster=row.cluster or None,
        size=row.size,
        size_bytes=row.size_bytes,
        storage_class=row.storage_class,
        access_mode=row.access_mode,
        state=state,
        reason=ReasonView(code=reason[1], message=reason[0], fields=reason[2] or {}),
        used_bytes=used,
        path=row.path or None,
        claim=row.claim or None,
        details=row.details or {},
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def find_volume(session: Session, tenant_id: int, name: str) -> VolumeRow | None:
    if "\x00" in name:
        return None
    return session.scalar(
        select(VolumeRow).where(VolumeRow.tenant_id == tenant_id, VolumeRow.name == name)
    )


def _get(session: Session, tenant: Tenant, name: str) -> VolumeRow:
    row = find_volume(session, tenant.id, name)
    if row is None:
        raise not_found(f"volume {name} of tenant {tenant.name}")
    return row


def mounting_jobs(session: Session, tenant_id: int, name: str) -> list[int]:
    """Ids of the tenant's unfinished jobs that mount volume ``name``."""
    rows = session.execute(
        select(Job.id, Job.spec).where(Job.tenant_id == tenant_id, Job.state.in_(UNFINISHED))
    ).all()
    return [
        job_id
        for job_id, spec in rows
        if any(m.get("name") == name for m in (spec or {}).get("volumes") or ())
    ]


# --- the verbs ----------------------------------------------------------------------------


def create_volume(
    session: Session, settings: Settings, tenant: Tenant, spec: VolumeSpec, size: str, cluster: str
) -> VolumeRow:
    """Store and provision one volume (see the module docstring); the caller commits."""
    check_name("name", spec.name, label=True)
    provisioner_for(settings, spec.storage_class)  # a 404 for an unknown class, before the lock
    lock_tenant_storage(session, tenant)
    if find_volume(session, tenant.id, spec.name) is not None:
        raise conflict(f"volume {spec.name} already exists in tenant {tenant.name}", "name")
    check_quota(session, tenant, spec.size_bytes)
    now = time.time()
    row = VolumeRow(
        tenant_id=tenant.id,
        name=spec.name,
        cluster=cluster,
        size=size,
        size_bytes=spec.size_bytes,
        storage_class=spec.storage_class,
        access_mode=spec.access_mode.value,
        state=VolumeState.PENDING.value,
        path="",
        claim="",
        details={},
        created_at=now,
        updated_at=now,
        metered_until=now,  # its GB-hours from its creation (service/usage_volumes.py)
    )
    _record(
        row,
        VolumeState.PENDING,
        VolumeReason(VolumeCode.CREATED, {"storage_class": spec.storage_class}),
        now,
    )
    session.add(row)
    session.flush()
    _realise(session, settings, row, tenant.name)
    return row


def delete_volume(session: Session, settings: Settings, tenant: Tenant, row: VolumeRow) -> None:
    """``Deleting``, the provisioner removes it, the row goes; 409 while a job mounts it."""
    busy = mounting_jobs(session, tenant.id, row.name)
    if busy:
        raise conflict(
            f"volume {row.name} is mounted by unfinished job(s) {', '.join(map(str, busy))}; "
            "wait for them or cancel them first"
        )
    now = time.time()
    usage_volumes.settle(session, row, tenant.name, now)  # its GB-hours up to its delete
    _record(row, VolumeState.DELETING, VolumeReason(VolumeCode.DELETING), now)
    session.flush()
    provisioner = storage_classes(settings).get(row.storage_class)
    if provisioner is not None:  # a class no longer offered: nothing of ours to remove
        try:
            provisioner.delete(volume_of(row, tenant.name))
        except BackendUnavailable as exc:
            raise _unreachable(row, exc) from None
        except (ProvisionError, OSError) as exc:
            raise conflict(f"volume {row.name} could not be removed: {exc}") from None
    session.delete(row)
    session.flush()


class Volumes:
    """A tenant's volumes (tenant routes only): its admins create, grow and delete them, its
    members read them; the provider sets the quota (``storageQuota``, a tenant term)."""

    def list(self, at: At, limit: int, after: str | None, **filters: Any) -> Page[VolumeOut]:
        assert at.tenant is not None
        if limit < 1 or limit > MAX_LIMIT:
            raise invalid("limit", f"must be between 1 and {MAX_LIMIT}, got {limit}")
        stmt = select(VolumeRow).where(VolumeRow.tenant_id == at.tenant.id)
        rows, cursor = paginate(at.session, stmt, VolumeRow.name, limit, text_cursor(after))
        return Page(items=[volume_out(r, at.tenant.name, at.settings) for r in rows], next=cursor)

    def get(self, at: At, name: str) -> VolumeOut:
        assert at.tenant is not None
        return volume_out(_get(at.session, at.tenant, name), at.tenant.name, at.settings)

    def create(self, at: At, body: VolumeIn) -> VolumeOut:
        assert at.tenant is not None and at.settings is not None
        if body.name is None:
            raise invalid("name", "is required")
        bytes_text("size", body.size, zero=False)
        size = parse_size(body.size)
        cluster = "" if body.cluster is None else check_name("cluster", body.cluster, label=True)
        if cluster and not at.session.scalar(
            select(ClusterRow.id).where(
                ClusterRow.tenant_id == at.tenant.id, ClusterRow.name == cluster
            )
        ):
            raise missing("cluster", f"tenant {at.tenant.name} has no cluster {cluster}")
        spec = VolumeSpec(body.name, size, body.storage_class, body.access_mode)
        row = create_volume(at.session, at.settings, at.tenant, spec, _written(body.size), cluster)
        return volume_out(row, at.tenant.name, at.settings)

    def update(self, at: At, name: str, body: VolumeIn) -> VolumeOut:
        assert at.tenant is not None and at.settings is not None
        if body.name is not None and body.name != name:
            raise invalid("name", f"{body.name!r} differs from the name in the path {name!r}")
        bytes_text("size", body.size, zero=False)
        size = parse_size(body.size)
        lock_tenant_storage(at.session, at.tenant)
        row = _get(at.session, at.tenant, name)
        for field, given, stored in (
            ("storageClass", body.storage_class, row.storage_class),
            ("accessMode", body.access_mode.value, row.access_mode),
            ("cluster", body.cluster or "", row.cluster),
        ):
            if given != stored:  # valid alone, but not for the volume stored: a conflict
                raise conflict(
                    f"{field}: cannot change ({stored!r} -> {given!r}); only size can", field
                )
        if size < row.size_bytes:
            raise conflict(
                f"size: can only grow (now {row.size_bytes} bytes, asked {size})", "size"
            )
        if size == row.size_bytes:
            return volume_out(row, at.tenant.name, at.settings)
        if row.state == VolumeState.DELETING.value:
            raise conflict(f"volume {name} is being deleted")
        check_quota(at.session, at.tenant, size, without=row.id)
        before = row.size_bytes
        usage_volumes.settle(at.session, row, at.tenant.name)  # GB-hours at the old size
        row.size, row.size_bytes = _written(body.size), size
        _realise(at.session, at.settings, row, at.tenant.name)
        if row.state != VolumeState.FAILED.value and row.reason_code != VolumeCode.CLAIM_PENDING:
            _record(
                row,
                VolumeState(row.state),
                VolumeReason(VolumeCode.RESIZED, {"before": before, "after": size}),
                time.time(),
            )
        return volume_out(row, at.tenant.name, at.settings)

    def delete(self, at: At, name: str) -> None:
        assert at.tenant is not None and at.settings is not None
        lock_tenant_storage(at.session, at.tenant)
        delete_volume(at.session, at.settings, at.tenant, _get(at.session, at.tenant, name))


def _written(size: str | int) -> str:
    """The size as the view shows it: as written when a string, canonical bytes otherwise."""
    return size.strip() if isinstance(size, str) else format_amount(MEMORY, size)


# --- clusters --------------------------------------------------------------------------------


def provision_cluster_volumes(
    session: Session,
    settings: Settings,
    tenant: Tenant,
    cluster: str,
    volumes: Sequence[VolumeSpec],
    field: str = "volumes",
) -> list[VolumeRow]:
    """Create (or, where one of the same name belongs to the cluster already, grow) the
    volumes of ``cluster``: what the cluster service calls when it provisions the cluster.

    All or none in the caller's transaction: the first refusal (a name another cluster's or the
    tenant's volume has, an unknown class, the quota) raises a 422/409 naming
    ``<field>[i].<field>``, and the caller rolls back. Returns the rows, in order."""
    out: list[VolumeRow] = []
    lock_tenant_storage(session, tenant)
    for i, spec in enumerate(volumes):
        where = f"{field}[{i}]"
        try:
            existing = find_volume(session, tenant.id, spec.name)
            if existing is not None:
                if existing.cluster != cluster:
                    raise conflict(
                        f"volume {spec.name} already exists in tenant {tenant.name} "
                        f"(not in cluster {cluster})",
                        "name",
                    )
                if spec.size_bytes > existing.size_bytes:
                    check_quota(session, tenant, spec.size_bytes, without=existing.id)
                    usage_volumes.settle(session, existing, tenant.name)  # the old size's
                    existing.size_bytes = spec.size_bytes
                    existing.size = format_amount(MEMORY, spec.size_bytes)
                    _realise(session, settings, existing, tenant.name)
                out.append(existing)
                continue
            size = format_amount(MEMORY, spec.size_bytes)
            out.append(create_volume(session, settings, tenant, spec, size, cluster))
        except ApiError as exc:
            sub = exc.field or "name"
            raise ApiError(exc.status, f"{where}: {exc.detail}", f"{where}.{sub}") from None
    return out


def delete_cluster_volumes(
    session: Session, settings: Settings, tenant: Tenant, cluster: str
) -> list[str]:
    """Delete every volume of ``cluster`` (what the cluster service calls when it deletes the
    cluster); 409 while a job mounts one. Returns the names deleted."""
    lock_tenant_storage(session, tenant)
    rows = session.scalars(
        select(VolumeRow).where(VolumeRow.tenant_id == tenant.id, VolumeRow.cluster == cluster)
    ).all()
    for row in rows:
        delete_volume(session, settings, tenant, row)
    return [r.name for r in rows]


# --- jobs --------------------------------------------------------------------------------------


def resolve_job_volumes(
    session: Session,
    tenant_id: int,
    tenant_name: str,
    mounts: Sequence[Mapping[str, Any]],
    cluster: str | None,
) -> list[dict[str, Any]]:
    """What a job mounting ``mounts`` (``{name, mountPath, readOnly}``) is given, each checked
    (see the module docstring); InvalidValue names ``volumes[i].<field>``."""
    names = [str(m["name"]) for m in mounts]
    rows = {
        r.name: r
        for r in session.scalars(
            select(VolumeRow).where(VolumeRow.tenant_id == tenant_id, VolumeRow.name.in_(names))
        )
    }
    resolved: list[dict[str, Any]] = []
    links: dict[str, int] = {}
    for i, mount in enumerate(mounts):
        where = f"volumes[{i}]"
        name, path, read_only = names[i], str(mount["mountPath"]), bool(mount.get("readOnly"))
        if name in names[:i]:
            raise InvalidValue(f"{where}.name", f"volume {name!r} is mounted twice")
        row = rows.get(name)
        if row is None:
            known = session.scalars(
                select(VolumeRow.name).where(VolumeRow.tenant_id == tenant_id).limit(20)
            ).all()
            raise InvalidValue(
                f"{where}.name",
                f"no volume {name!r} in tenant {tenant_name} "
                f"(its volumes: {', '.join(sorted(known)) or 'none'})",
            )
        if row.state not in MOUNTABLE:
            raise InvalidValue(f"{where}.name", f"volume {name} is {row.state}: {row.reason}")
        if row.cluster and row.cluster != (cluster or ""):
            runs = f"in cluster {cluster}" if cluster else "on the shared pool"
            raise InvalidValue(
                f"{where}.name",
                f"volume {name} belongs to cluster {row.cluster}; the job runs {runs}",
            )
        if not path.startswith("/"):
            raise InvalidValue(f"{where}.mountPath", f"must be an absolute path, got {path!r}")
        try:
            link = mount_link(path)
        except ValueError as exc:
            raise InvalidValue(f"{where}.mountPath", str(exc)) from None
        for other, j in links.items():
            if other == link or other.startswith(link + "/") or link.startswith(other + "/"):
                raise InvalidValue(
                    f"{where}.mountPath", f"{path} overlaps volumes[{j}]'s mount path"
                )
        links[link] = i
        if not read_only and row.access_mode == AccessMode.ROX.value:
            raise InvalidValue(
                f"{where}.readOnly", f"volume {name} is ReadOnlyMany: mount it with readOnly: true"
            )
        if not read_only:
            _check_not_full(row, f"{where}.name")
        resolved.append(
            {
                "name": name,
                "mountPath": path,
                "readOnly": read_only,
                "storageClass": row.storage_class,
                "path": row.path,
                "claim": row.claim,
                "sizeBytes": row.size_bytes,
                "enforcement": str((row.details or {}).get("enforcement", "")),
            }
        )
    return resolved


def _check_not_full(row: VolumeRow, field: str) -> None:
    """A measured local volume whose usage reached its size takes no new read-write mount."""
    if row.storage_class != LOCAL_CLASS or (row.details or {}).get("enforcement") != MEASURE:
        return
    used = directory_usage(Path(row.path)) if row.path else 0
    if used >= row.size_bytes:
        raise InvalidValue(
            field,
            f"volume {row.name} is full ({used} of {row.size_bytes} bytes used); mount it "
            "readOnly, free space, or grow it",
        )
