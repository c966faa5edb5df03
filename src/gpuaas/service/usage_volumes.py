"""Storage GB-hours: every second a tenant's volume exists, recorded once, at its size.

Semantics (docs/billing.md, "Storage"). A volume is billed for its provisioned size (what
its tenant's quota holds; not the bytes written) from the moment it is created until it is
deleted, while its state is one a job may mount (Ready, or Pending: a claim not bound yet is
still reserved for the tenant); a Failed volume (nothing was made) is not billed. It is
``size / 10^9`` units of ``storage/storage/<storage class>@<pool>`` (the pool of its
cluster, as for jobs; the shared fleet's volumes are on-demand), priced by the provider's
book entry in force at each record's start, and cut at whole UTC hours (so at billing
periods too) like a job's records (:mod:`gpuaas.service.usage`).

A volume row carries ``metered_until``: its time is recorded up to there. What changes
what is billed passes through :func:`settle`, in the same transaction as the change:

- a **growth** settles at the old size first (:func:`settle`, then the new size applies from
  that instant), a **delete** settles before the row goes, a **create** starts the meter at
  the creation (``metered_until = created_at``);
- the reconciler's metering step (:func:`step`) writes every volume's records up to the last
  whole hour at least :data:`~gpuaas.service.usage.LAG` ago and moves ``metered_until``
  there, compare-and-set, so two writers never both move it;
- a volume made before metering existed (``metered_until`` None) is adopted by the next step
  from that step's time: no time before it is billed after the fact (it may lie in a period
  already invoiced).

Records are keyed ``volume/<tenant>/<name>/<id>/<start>`` and written insert-or-ignore, and a
record and the move of ``metered_until`` commit together: a ``kill -9`` loses both or neither,
so no second is lost or recorded twice across restarts. Records carry ``job`` 0 (no job
holds a volume), no user, queue, pod or node, and no utilisation.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpuaas.billing.metering import US, cut_volume, hour_floor, to_us
from gpuaas.billing.skus import volume_held
from gpuaas.model.volume import VolumeState
from gpuaas.service import usage
from gpuaas.store.tables import Tenant, VolumeRow

#: The states in which a volume is billed (see the module docstring).
BILLED = frozenset({VolumeState.READY.value, VolumeState.PENDING.value})


def settle(session: Session, row: VolumeRow, tenant: str, now: float | None = None) -> int:
    """Record ``row``'s time up to ``now`` at its stored size and state, and move its meter
    there: what a growth or a delete calls before it changes the row. Returns the records
    written."""
    if not usage.enabled(session):
        return 0
    now = time.time() if now is None else now
    since = row.metered_until
    if since is None or now <= since:
        if since is None:
            row.metered_until = now
        return 0
    written = _write(session, row, tenant, since, now)
    row.metered_until = now
    return written


def step(session: Session, now: float) -> int:
    """Every volume's records up to the last whole hour at least ``usage.LAG`` before
    ``now`` (see the module docstring); adopt volumes not yet metered. Returns the records
    written."""
    if not usage.enabled(session):
        return 0
    session.execute(
        update(VolumeRow)
        .where(VolumeRow.metered_until.is_(None))
        .values(metered_until=now)
        .execution_options(synchronize_session=False)
    )
    until = hour_floor(to_us(now - usage.LAG)) / US
    written = 0
    rows = session.execute(
        select(VolumeRow, Tenant.name)
        .join(Tenant, Tenant.id == VolumeRow.tenant_id)
        .where(VolumeRow.metered_until < until)
    ).all()
    for row, tenant in rows:
        since = row.metered_until
        moved = session.execute(
            update(VolumeRow)
            .where(VolumeRow.id == row.id, VolumeRow.metered_until == since)
            .values(metered_until=until)
            .execution_options(synchronize_session=False)
        )
        if moved.rowcount == 1:  # type: ignore[attr-defined]
            written += _write(session, row, tenant, since, until)
    return written


def _write(session: Session, row: VolumeRow, tenant: str, since: float, until: float) -> int:
    if row.state not in BILLED or row.size_bytes <= 0:
        return 0
    pool = usage.pool_of(session, row.tenant_id, row.cluster)
    held = volume_held(row.name, row.size_bytes, row.storage_class, pool)
    whose = SimpleNamespace(tenant=tenant, user="", queue="", cluster=row.cluster, job_id=0,
                            attempt=0)  # fmt: skip
    pieces = cut_volume(tenant, row.id, row.name, held, to_us(since), to_us(until))
    return usage.write_pieces(session, whose, pieces, None)
