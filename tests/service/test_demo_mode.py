"""Demo mode: seeding once, a valid configuration on a 66-node fleet, users that can log in, and
a stream of jobs the engine admits."""

from __future__ import annotations

import stat
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from gpuaas.model.devices import PartitionMode
from gpuaas.service.app import create_app
from gpuaas.service.demo import (
    MAX_PENDING_PER_QUEUE,
    SEEDED,
    STAND_IN_MAX,
    TEMPLATES,
    TOKENS_FILE,
    JobStream,
    read_tokens,
    seed_demo,
)
from gpuaas.service.fleet import load_nodes
from gpuaas.service.governance import load_governance
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import GovernanceObject, Job, Membership, Meta, NodeRow, Tenant, Token
from gpuaas.supply.loaders import load_fleet

FLEET_FILE = Path(__file__).parents[2] / "src/gpuaas/supply/data/service-demo-fleet.yaml"


def settings_for(url: str, data_dir: Path) -> Settings:
    return Settings(db_url=url, data_dir=data_dir, demo=True, reconcile=False, admin_token="a" * 24)


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    db = Database(db_url)
    db.upgrade()
    yield db
    db.dispose()


def counts(db: Database) -> dict[str, int]:
    with db.sessions() as s:
        return {
            table.__name__: int(s.scalar(select(func.count()).select_from(table)) or 0)
            for table in (NodeRow, Tenant, GovernanceObject, Membership, Token, Job)
        }


def test_seeding_twice_changes_nothing_and_keeps_the_tokens(
    database: Database, tmp_path: Path
) -> None:
    settings = settings_for(database.url, tmp_path)
    users = seed_demo(database, settings)
    before = counts(database)
    assert seed_demo(database, settings) == users
    assert counts(database) == before
    assert before["NodeRow"] == 66 and before["Tenant"] == 3 and before["Token"] == len(users)
    path = tmp_path / TOKENS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_tokens(path) == users
    roles = {(u.user, u.tenant, u.role) for u in users}
    assert ("alice", "acme-ai", "tenant-admin") in roles
    assert ("arjun", "acme-ai", "tenant-user") in roles
    assert ("ava", "acme-ai", "viewer") in roles
    assert ("olga", None, "viewer") in roles
    with database.sessions() as s:
        assert s.get(Meta, SEEDED) is not None


def test_seeded_governance_and_fleet(database: Database, tmp_path: Path) -> None:
    seed_demo(database, settings_for(database.url, tmp_path))
    with database.sessions() as s:
        gov, config = load_governance(s)
        nodes = load_nodes(s)
    assert set(gov.flavors) == {"h100", "a100-mig", "l40s-shared", "cpu"}
    tenants = {"acme-ai", "globex-research", "initech-apps"}
    assert set(gov.cohort_names()) == {"demo-cloud"} | tenants
    # each tenant's queues sit in its own root cohort, which the provider hung under demo-cloud
    # with explicit borrowing limits on everything the tenant's queues hold
    for cq in gov.cluster_queues.values():
        assert cq.cohort in tenants and cq.name.startswith(f"{cq.cohort}-"), cq
    for tenant in tenants:
        root = gov.cohorts[tenant]
        assert root.parent == "demo-cloud"
        limits = [q.borrowing_limit for g in root.resource_groups for f in g.flavors
                  for q in f.resources]  # fmt: skip
        assert limits and None not in limits
    assert len(gov.cluster_queues) == 6
    assert set(gov.local_queues) == {
        "acme-ai/h100",
        "acme-ai/l40s",
        "globex-research/h100",
        "globex-research/cpu",
        "initech-apps/a100-mig",
        "initech-apps/l40s",
    }
    assert {"h100-8x", "a100-mig-1g", "l40s-quarter"} <= set(gov.hardware_profiles)
    assert {"production", "high", "normal", "preemptible"} <= set(gov.priority_classes)
    assert config.user_limits == {"acme-ai/h100": 8, "globex-research/h100": 8}
    assert len(nodes) >= 64
    kinds = Counter((node.gpu_model, node.gpus[0].partition.mode) for node in nodes if node.gpus)
    assert kinds == {
        ("H100-80GB", PartitionMode.WHOLE): 32,
        ("A100-80GB", PartitionMode.MIG): 16,
        ("L40S", PartitionMode.TIME_SLICED): 12,
    }
    # every flavor selects nodes of its own kind, and only those
    for name, model in (("h100", "H100-80GB"), ("a100-mig", "A100-80GB"), ("l40s-shared", "L40S")):
        flavor = gov.flavors[name]
        chosen = {n.gpu_model for n in nodes if flavor.node_labels.items() <= n.labels.items()}
        assert chosen == {model}, name
    assert load_fleet(FLEET_FILE).gpu_count == sum(len(n.gpus) for n in nodes)


def test_demo_users_log_in_with_their_roles(sqlite_url: str, tmp_path: Path) -> None:
    db = Database(sqlite_url)
    db.upgrade()
    users = {u.user: u for u in seed_demo(db, settings_for(sqlite_url, tmp_path))}
    db.dispose()
    settings = settings_for(sqlite_url, tmp_path)
    settings.demo = False
    with TestClient(create_app(settings)) as client:
        me = client.get("/v1/whoami", headers={"Authorization": f"Bearer {users['arjun'].token}"})
        assert me.status_code == 200, me.text
        assert me.json()["tenants"] == [{"tenant": "acme-ai", "role": "tenant-user"}]
        other = client.get(
            "/v1/tenants/acme-ai", headers={"Authorization": f"Bearer {users['gus'].token}"}
        )
        assert other.status_code == 404  # not a member of acme-ai


def test_the_stream_submits_every_kind_of_job_and_stops_at_a_full_queue(
    database: Database, tmp_path: Path
) -> None:
    settings = settings_for(database.url, tmp_path)
    seed_demo(database, settings)
    stream = JobStream(database, settings, seed=7)
    jobs = [stream.submit_next(1000.0 + i) for i in range(len(TEMPLATES))]
    assert all(job is not None for job in jobs)
    assert {job.name for job in jobs if job} == {t.spec["name"] for t in TEMPLATES}
    with database.sessions() as s:
        rows = list(s.scalars(select(Job)))
    assert all(row.state == "Pending" and row.spec["duration"] > 0 for row in rows)
    for _ in range(MAX_PENDING_PER_QUEUE * len(TEMPLATES)):
        stream.submit_next(2000.0)
    with database.sessions() as s:
        query = select(Job.tenant_id, Job.local_queue, func.count()).group_by(
            Job.tenant_id, Job.local_queue
        )
        per_queue = {(tenant, queue): n for tenant, queue, n in s.execute(query)}
    assert list(per_queue.values()) == [MAX_PENDING_PER_QUEUE] * 6


def test_the_stream_thread_submits_until_stopped(sqlite_url: str, tmp_path: Path) -> None:
    db = Database(sqlite_url)
    db.upgrade()
    settings = settings_for(sqlite_url, tmp_path)
    settings.demo_job_interval = 0.01
    seed_demo(db, settings)
    stream = JobStream(db, settings)
    stream.start()
    deadline = time.monotonic() + 10
    while counts(db)["Job"] <= len(TEMPLATES) and time.monotonic() < deadline:
        time.sleep(0.02)
    stream.stop()
    stopped = counts(db)["Job"]
    assert stopped > len(TEMPLATES)  # the first burst, then the interval's submissions
    time.sleep(0.05)
    assert counts(db)["Job"] == stopped
    db.dispose()


def test_the_reconciler_admits_demo_jobs_on_every_kind_of_hardware(
    database: Database, tmp_path: Path
) -> None:
    from gpuaas.service.reconciler import Reconciler

    settings = settings_for(database.url, tmp_path)
    seed_demo(database, settings)
    stream = JobStream(database, settings, seed=3)
    for i in range(len(TEMPLATES)):
        stream.submit_next(100.0 + i)
    reconciler = Reconciler(database, settings)
    try:
        reconciler.step(200.0)
        reconciler.step(201.0)
    finally:
        reconciler.stop()
    with database.sessions() as s:
        admitted = list(s.scalars(select(Job).where(Job.state.in_(("Admitted", "Running")))))
    flavors = {f for job in admitted for per in (job.flavors or {}).values() for f in per.values()}
    # L40S work waits: admission places nvidia.com/gpu on whole GPUs only, not on time-sliced
    # replicas (reported to the lead); include l40s-shared here once the engine does.
    assert {"h100", "a100-mig", "cpu"} <= flavors
    on_h100 = [job for job in admitted if job.cluster_queue == "acme-ai-h100"]
    assert sorted(job.gpus for job in on_h100) == [4000, 32000]  # finetune and the 4-node gang


def test_on_the_local_backend_demo_jobs_are_stand_in_scripts(
    database: Database, tmp_path: Path
) -> None:
    """Every kind of demo job, submitted for the local backend, is a script that says what it
    stands for and sleeps at most STAND_IN_MAX seconds; no container, no mpirun."""
    settings = settings_for(database.url, tmp_path)
    settings.backend = "local"
    settings.speed = 2.0
    seed_demo(database, settings)
    stream = JobStream(database, settings, seed=11)
    jobs = [stream.submit_next(1000.0 + i) for i in range(len(TEMPLATES))]
    assert all(job is not None for job in jobs)
    with database.sessions() as s:
        rows = list(s.scalars(select(Job)))
    for row in rows:
        assert "container" not in row.spec and "command" not in row.spec
        script = row.spec["script"]
        assert script.startswith("echo 'demo stand-in for ")
        seconds = int(script.rsplit("exec sleep ", 1)[1])
        assert 1 <= seconds <= min(STAND_IN_MAX, row.spec["duration"] / 2 + 1)
