"""`gpuaas bench console` at a small size (the openb fleet, a few hundred jobs, no browser): every
provider page answers 200 and is timed; the store it builds holds what the console shows (jobs
on GPUs nobody else holds, usage records, clusters and the pool). Skips without ../shared."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from gpuaas.cli.main import app
from gpuaas.service import console_bench as cb
from gpuaas.service import fleet_view
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, UsageRow

OPENB = Path(__file__).resolve().parents[2] / "../shared/data/openb/openb_node_list_gpu_node.csv"

pytestmark = pytest.mark.skipif(not OPENB.exists(), reason=f"{OPENB} is absent (../shared/data)")


def test_bench_console_json() -> None:
    result = CliRunner().invoke(app, ["bench", "console", "--nodes", str(OPENB), "--jobs", "300",
                                      "--requests", "2", "--no-browser", "--no-tenant-pages",
                                      "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert (out["nodes"], out["gpus"], out["jobs"]) == (1213, 6212, 300)
    assert [p["path"] for p in out["pages"]] == list(cb.PROVIDER_PAGES)
    for page in out["pages"]:
        assert page["status"] == 200, page
        assert page["p50_ms"] > 0 and page["p99_ms"] >= page["p50_ms"] and page["render_ms"] is None


def test_the_store_holds_no_gpu_twice(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'c.db'}")
    db.upgrade()
    try:
        store = cb.build(db, OPENB, jobs=1500)
        with db.session() as s:
            held: Counter[tuple[str, int]] = Counter()
            for (placement,) in s.execute(select(Job.placement).where(Job.state == "Running")):
                for pod in placement:
                    for slot, milli in pod["assignment"]["gpus"]:
                        held[(pod["node"], slot)] += milli
            records = s.scalar(select(func.count()).select_from(UsageRow))
            picture = fleet_view.fleet_picture(s)
    finally:
        db.dispose()
    assert store.active > 0 and max(held.values()) <= 1000
    assert records == store.usage_records > 0
    keys = {e["key"] for e in picture["legend"]}
    assert {"pool", "cluster:tenant-00.train", "free"} <= keys
