"""The issue's metering restart test: kill -9 the server (twice) while jobs stream through
their transitions, start it again on the same database, and check that no usage second was
lost or billed twice: every job's recorded GPU-seconds equal the time its events say it held
its GPUs, to the microsecond, and no device's time is recorded twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from job_world import jobs
from serve_process import Server, all_final, kill_mid_stream, post_all
from sqlalchemy import func, select
from test_restart import CLUSTER_QUEUE, FLEET  # the same fleet and quota as the jobs' test
from usage_checks import check_records

from gpuaas.service import usage
from gpuaas.store.db import Database
from gpuaas.store.tables import UsageRow

ADMIN = "gpa_usage-restart-admin-token-0123"
PER_ROUND = 80


SETUP = [
    ("/v1/tenants", {"name": "acme"}),
    ("/v1/flavors", {"name": "gpu", "spec": {}}),
    ("/v1/cluster-queues", {"name": "cq", "spec": CLUSTER_QUEUE}),
    ("/v1/tenants/acme/local-queues", {"name": "default", "clusterQueue": "cq"}),
    ("/v1/prices", {"name": "h100", "sku": "H100-80GB/whole@on-demand", "listPerHour": "2.49",
                    "validFrom": 0}),
]  # fmt: skip


def _spec(i: int) -> dict[str, object]:
    return {
        "name": f"job-{i}",
        "kind": "batch",
        "queue": "default",
        "idempotencyKey": f"key-{i}",
        "command": ["sleep", "1"],
        "duration": 5 + (i % 4) * 5,  # 0.1 .. 0.4 s at --speed 50
        "podSets": [
            {"count": 2 if i % 3 == 0 else 1,
             "resources": {"cpu": "4", "nvidia.com/gpu": 1 + i % 2}}
        ],
    }  # fmt: skip


def _records(db_url: str) -> int:
    db = Database(db_url)
    try:
        with db.sessions() as s:
            return int(s.scalar(select(func.count()).select_from(UsageRow)) or 0)
    finally:
        db.dispose()


@pytest.mark.slow
def test_kill_9_during_transitions_loses_no_usage_second_and_bills_none_twice(
    tmp_path: Path, servers: list[Server]
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    db_url = f"sqlite:///{tmp_path / 'gpuaas.db'}"
    log = tmp_path / "server.log"
    args = ["--db", db_url, "--fleet", str(fleet), "--speed", "50"]
    acked: dict[int, int] = {}
    for round_ in range(3):
        server = Server(args, log, ADMIN, startup=240)
        servers.append(server)
        if round_ == 0:
            with server.client() as c:
                post_all(c, SETUP)
        # kill once usage is being written (the reconciler process may take seconds to
        # start); the last server: stop submitting after a second and let everything finish
        before = _records(db_url)

        def writing(before: int = before) -> bool:
            return _records(db_url) > before + 5

        kill_mid_stream(server, _spec, acked, writing,
                        start=len(acked) + 1000 * round_, limit=PER_ROUND, pause=0.05,
                        wait=0 if round_ == 2 else 180, after=1.0 if round_ == 2 else 0.3,
                        kill=round_ < 2)  # fmt: skip
    assert len(acked) > 20, "too few submissions to test anything"
    states = all_final(db_url, 300)
    db = Database(db_url)
    try:
        with db.sessions() as s:
            stored = jobs(s)
            assert all(j.state == "Succeeded" for j in stored.values()), states
            assert usage.open_jobs(s) == {}
            gpus_of = {
                j.id: sum(int(ps["count"]) * int(ps["resources"]["nvidia.com/gpu"])
                          for ps in j.spec["podSets"])
                for j in stored.values()
            }  # fmt: skip
        assert set(acked.values()) <= set(gpus_of)
        check_records(db, gpus_of)  # exact seconds, each once, priced at their start
    finally:
        db.dispose()
