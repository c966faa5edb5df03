"""`gpuaas bench billing` at a small size: the records written are rated into one invoice per
tenant whose totals add up to the records' cost."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from sqlalchemy import func, select
from typer.testing import CliRunner

from gpuaas.cli.main import app
from gpuaas.service.billing_bench import run
from gpuaas.store.db import Database
from gpuaas.store.tables import UsageRow


def test_bench_billing_json() -> None:
    result = CliRunner().invoke(app, ["bench", "billing", "--tenants", "2", "--jobs", "30",
                                      "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["tenants"] == 2 and out["records"] >= 60 and out["invoices"] == 2
    assert out["target_met"] is True


def test_invoices_add_up_to_the_records(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        bench = run(db, 3, 40)
        with db.sessions() as s:
            cost = s.scalar(select(func.sum(UsageRow.effective_cost)))
            count = s.scalar(select(func.count()).select_from(UsageRow))
    finally:
        db.dispose()
    assert bench.records == count >= 120
    assert bench.total == Decimal(int(cost)).scaleb(-9)


def test_bench_usage_json_and_table() -> None:
    result = CliRunner().invoke(app, ["bench", "usage", "--tenants", "2", "--jobs", "30",
                                      "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["records"] == 60 and out["met"] is True
    table = CliRunner().invoke(app, ["bench", "usage", "--tenants", "1", "--jobs", "10"])
    assert table.exit_code == 0 and "target <= 10 s: met" in table.stdout
