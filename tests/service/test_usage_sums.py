"""Kept usage sums (service/usage_sums.py) always equal the records summed afresh, however
reads and added records interleave."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import insert

from gpuaas.service import usage, usage_sums
from gpuaas.store.db import Database
from gpuaas.store.tables import UsageRow

HOUR = 3600.0
QUERIES = [
    {"tenant": "acme", "by": ("sku", "currency")},
    {"tenant": "acme", "by": ("user",), "start": 2 * HOUR, "end": 6 * HOUR},
    {"tenant": None, "by": ("tenant", "queue")},
    {"tenant": "beta", "by": ("sku",), "user": "bo"},
]


def _record(rng: random.Random, i: int) -> dict[str, object]:
    start = rng.randrange(8) * HOUR
    quantity = rng.randrange(1, 3600) * 10**6
    return {
        "key": f"r{i}", "tenant": rng.choice(["acme", "beta"]), "user": rng.choice(["al", "bo"]),
        "queue": rng.choice(["q1", "q2"]), "cluster": "", "job_id": i, "attempt": 1,
        "pod": "main-0", "device": "gpu-0", "node": "n1",
        "sku": rng.choice(["H100/whole@on-demand", "A100/whole@idle-pool"]), "period": "2026-11",
        "start": start, "end": start + 60, "quantity": quantity, "price_id": 0,
        "currency": rng.choice(["USD", "EUR"]), "list_cost": quantity // 7,
        "effective_cost": quantity // 9,
    }  # fmt: skip


@pytest.fixture
def store(db: Database) -> Database:
    db.upgrade()
    usage_sums.forget()
    return db


def _kwargs(q: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in q.items() if k not in ("tenant", "by")}


def test_kept_sums_equal_fresh_sums_as_records_arrive(store: Database) -> None:
    rng = random.Random(7)
    written = 0
    for _ in range(12):
        batch = [_record(rng, written + i) for i in range(rng.randrange(0, 40))]
        written += len(batch)
        with store.session() as s:
            if batch:
                s.execute(insert(UsageRow), batch)
        with store.session() as s:
            for q in QUERIES:
                kept = usage_sums.totals(s, tenant=q["tenant"], by=q["by"], **_kwargs(q))  # type: ignore[arg-type]
                fresh = usage.totals(s, tenant=q["tenant"], by=q["by"], **_kwargs(q))  # type: ignore[arg-type]
                key = lambda t: tuple(str(v) for v in t.group.values())  # noqa: E731
                assert sorted(kept, key=key) == sorted(fresh, key=key)
    assert written > 100


def test_a_kept_sum_is_read_whole_again_after_rereads_seconds(
    store: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(3)
    with store.session() as s:
        s.execute(insert(UsageRow), [_record(rng, i) for i in range(20)])
    calls: list[object] = []
    real = usage.totals

    def spy(*args: object, **kwargs: object) -> list[usage.Total]:
        calls.append(kwargs.get("ids"))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(usage, "totals", spy)
    clock = [1000.0]
    monkeypatch.setattr(usage_sums.time, "monotonic", lambda: clock[0])
    with store.session() as s:
        usage_sums.totals(s, tenant="acme", by=("sku",))
        usage_sums.totals(s, tenant="acme", by=("sku",))  # nothing added: no read at all
        s.execute(insert(UsageRow), [_record(rng, 100)])
        usage_sums.totals(s, tenant="acme", by=("sku",))  # only the record added
        clock[0] += usage_sums.REREAD + 1
        usage_sums.totals(s, tenant="acme", by=("sku",))  # whole again
    assert calls == [(0, 20), (20, 21), (0, 21)]
