"""``gpuaas bench usage`` on a small month: the totals account for every record and every
nano-unit, and ``bench api --no-metering`` starts its server without metering."""

from __future__ import annotations

from pathlib import Path

from gpuaas.cli.bench_api import Server
from gpuaas.service.usage_bench import run
from gpuaas.store.db import Database


def test_a_small_month_is_rated_and_adds_up(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'bench.db'}")
    try:
        result = run(db, tenants=3, jobs=200)
    finally:
        db.dispose()
    assert result.records == 600  # each job one record (within its hour)
    assert result.groups <= 3 * 6 and result.total > 0
    assert result.to_json()["met"] is True


def test_bench_api_can_start_its_server_without_metering(tmp_path: Path) -> None:
    off = Server("sqlite:///x.db", tmp_path, None, reconcile=True, metering=False)
    on = Server("sqlite:///x.db", tmp_path, None, reconcile=True)
    assert "--no-metering" in off.command and "--no-metering" not in on.command
