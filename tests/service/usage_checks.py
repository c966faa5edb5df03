"""Checks of usage records against jobs' events, shared by the usage tests (in-process
reconciler and a real server killed with -9): every job's recorded GPU-seconds equal the time
it held its GPUs, to the microsecond; records within one hour and one period, priced by the
entry in force at their start, never two for the same time of the same device."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from sqlalchemy import select

from gpuaas.billing.metering import HOUR_US, cost, in_force, nano, period_of, to_us
from gpuaas.model.job_state import ACTIVE
from gpuaas.service import usage
from gpuaas.store.db import Database
from gpuaas.store.tables import JobEvent, UsageRow

ACTIVE_STATES = {s.value for s in ACTIVE}


def held_intervals(db: Database, job_id: int) -> list[tuple[float, float]]:
    """When the job held its devices, from its events: entering Admitted until leaving
    Admitted/Running (an interval still open ends at None)."""
    with db.sessions() as s:
        steps = s.execute(
            select(JobEvent.from_state, JobEvent.to_state, JobEvent.at)
            .where(JobEvent.job_id == job_id)
            .order_by(JobEvent.id)
        ).all()
    out, since = [], None
    for a, b, at in steps:
        if (a in ACTIVE_STATES) != (b in ACTIVE_STATES):
            if b in ACTIVE_STATES:
                since = at
            else:
                assert since is not None
                out.append((since, at))
                since = None
    assert since is None, f"job {job_id} still holds its devices"
    return out


def check_records(db: Database, gpus_of: dict[int, int]) -> None:
    """Every finished job's recorded GPU-seconds equal the time it held its GPUs; each record
    within one hour and one period, priced by the entry in force at its start; per device and
    run no two records overlap."""
    with db.sessions() as s:
        rows = list(s.execute(select(UsageRow.__table__)))
        prices = usage.entries(s, usage.PROVIDER_BOOK)
    assert len({r.key for r in rows}) == len(rows)
    by_sku: dict[str, list[Any]] = defaultdict(list)
    for p in prices:
        by_sku[p.sku].append(p)
    spans: dict[tuple[int, int, str, str], list[tuple[int, int]]] = defaultdict(list)
    seconds: dict[int, int] = defaultdict(int)
    for r in rows:
        a, b = to_us(r.start), to_us(r.end)
        assert a < b and a // HOUR_US == (b - 1) // HOUR_US, r
        assert r.period == period_of(r.start) == period_of((b - 1) / 1e6)
        spans[(r.job_id, r.attempt, r.pod, r.device)].append((a, b))
        entry = in_force(by_sku.get(r.sku, []), r.start)
        assert r.price_id == (entry.id if entry else 0)
        if entry is not None:
            assert r.list_cost == cost(r.quantity, nano(entry.list_per_hour))
            assert r.effective_cost == cost(r.quantity, nano(entry.contracted_per_hour))
        if r.device.startswith("gpu-"):
            seconds[r.job_id] += r.quantity
    for pieces in spans.values():
        pieces.sort()
        for (_, b), (c, _) in itertools.pairwise(pieces):
            assert b <= c  # never billed twice
    for job_id, gpus in gpus_of.items():
        expected = sum(to_us(b) - to_us(a) for a, b in held_intervals(db, job_id)) * gpus
        assert seconds.get(job_id, 0) == expected, (job_id, held_intervals(db, job_id))
