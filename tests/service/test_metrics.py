"""``GET /metrics``: exact values of every gauge after writing rows, and the telemetry series."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from gpuaas.engine.reasons import Code
from gpuaas.service.app import create_app
from gpuaas.service.fleet import register_nodes, set_schedulable
from gpuaas.service.governance import document, put_object
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, Tenant, User

GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
NODES: list[dict[str, Any]] = [
    {
        "name": "h100-{i}",
        "count": 2,
        "cpu": "192",
        "memory": "2Ti",
        "gpus": {"model": "H100-80GB", "count": 8},
        "labels": {"gpuaas.io/pool": "training"},
        "taints": GPU_TAINT,
    },
    {
        "name": "l40s-1",
        "cpu": "64",
        "memory": "512Gi",
        "gpus": {"model": "L40S", "count": 4, "partitioning": "time-slicing:4"},
        "labels": {"gpuaas.io/pool": "shared"},
    },
    {
        "name": "a100-1",
        "cpu": "128",
        "memory": "1Ti",
        "gpus": {"model": "A100-80GB", "count": 8, "partitioning": "all-1g.10gb"},
        "labels": {"gpuaas.io/pool": "inference"},
    },
    {"name": "cpu-1", "cpu": "96", "memory": "768Gi", "labels": {"gpuaas.io/pool": "cpu"}},
]
FLAVORS = {"h100": "training", "l40s": "shared", "mig": "inference", "cpu": "cpu"}


@pytest.fixture
def served(db_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, Any]]:
    settings = Settings(db_url=db_url, data_dir=tmp_path, reconcile=False, admin_token="x" * 20)
    app = create_app(settings)
    with TestClient(app) as client:
        yield client, app


def scrape(client: TestClient) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Samples by name, then by sorted labels (no Authorization header: /metrics is open)."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.text):
        assert family.documentation, f"{family.name} has no HELP text"
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            out.setdefault(sample.name, {})[labels] = sample.value
    return out


def cluster_queue(name: str, flavor: str, resource: str, nominal: int) -> dict[str, Any]:
    spec = {  # no cohortName: each tenant's queue goes into the tenant's root cohort
        "resourceGroups": [
            {
                "coveredResources": [resource],
                "flavors": [
                    {"name": flavor, "resources": [{"name": resource, "nominalQuota": nominal}]}
                ],
            }
        ],
    }
    return document("ClusterQueue", name, {"spec": spec})


def seed(db: Database) -> dict[str, int]:
    """Two tenants, the small fleet, flavors, queues; returns tenant ids and the admin's id."""
    with db.session() as s:
        acme = Tenant(
            name="acme",
            capacity={"h100": {"nvidia.com/gpu": 12}, "mig": {"nvidia.com/mig-1g.10gb": "14"}},
            created_at=0.0,
        )
        globex = Tenant(name="globex", capacity={"l40s": {"nvidia.com/gpu": 8}}, created_at=0.0)
        s.add_all([acme, globex])
        s.flush()
        register_nodes(s, NODES, 1.0)
        for flavor, pool in FLAVORS.items():
            put_object(
                s,
                document(
                    "ResourceFlavor", flavor, {"spec": {"nodeLabels": {"gpuaas.io/pool": pool}}}
                ),
                None,
                1.0,
            )
        put_object(s, cluster_queue("acme-h100", "h100", "nvidia.com/gpu", 12), acme.id, 1.0)
        put_object(s, cluster_queue("globex-l40s", "l40s", "nvidia.com/gpu", 8), globex.id, 1.0)
        for tenant, queue, cq in (
            ("acme", "train", "acme-h100"),
            ("acme", "dev", "acme-h100"),
            ("globex", "shared", "globex-l40s"),
        ):
            lq = document("LocalQueue", queue, {"spec": {"clusterQueue": cq}}, tenant)
            put_object(s, lq, None, 1.0)
        admin = s.scalar(select(User.id).where(User.name == "admin"))
        assert admin is not None
        return {"acme": acme.id, "globex": globex.id, "user": admin}


def add_job(
    db: Database, tenant_id: int, user_id: int, queue: str, state: str, **extra: Any
) -> None:
    with db.session() as s:
        s.add(
            Job(
                tenant_id=tenant_id,
                user_id=user_id,
                name=f"job-{queue}-{state.lower()}",
                kind="training",
                local_queue=queue,
                spec={},
                state=state,
                created_at=2.0,
                updated_at=2.0,
                **extra,
            )
        )


def test_metrics_reports_queues_jobs_gpus_and_nodes(served: tuple[TestClient, Any]) -> None:
    client, app = served
    db: Database = app.state.db
    ids = seed(db)
    acme, globex, user = ids["acme"], ids["globex"], ids["user"]
    for _ in range(2):
        add_job(db, acme, user, "train", "Pending")
    add_job(db, acme, user, "train", "Pending", reason_code="UnusedQuotaShort")
    add_job(db, acme, user, "dev", "Pending", reason_code="StrictFIFOBlocked")
    add_job(db, globex, user, "shared", "Pending")
    add_job(db, globex, user, "gone", "Pending")  # its LocalQueue was never created
    h100 = {"workers": {"nvidia.com/gpu": "h100", "cpu": "h100"}}
    add_job(db, acme, user, "train", "Running", gpus=8000, flavors=h100, cluster_queue="acme-h100")
    add_job(db, acme, user, "train", "Admitted", gpus=2000, flavors=h100, cluster_queue="acme-h100")
    add_job(db, acme, user, "train", "Succeeded", gpus=4000, flavors=h100)  # released
    two = {"a": {"nvidia.com/gpu": "l40s"}, "b": {"nvidia.com/mig-1g.10gb": "mig"}}
    add_job(db, globex, user, "shared", "Running", gpus=1001, flavors=two)

    m = scrape(client)

    def lq(tenant: str, queue: str, cq: str) -> tuple[tuple[str, str], ...]:
        return (("cluster_queue", cq), ("local_queue", queue), ("tenant", tenant))

    assert m["gpuaas_local_queue_pending_jobs"] == {
        lq("acme", "train", "acme-h100"): 3,
        lq("acme", "dev", "acme-h100"): 1,
        lq("globex", "shared", "globex-l40s"): 1,
        lq("globex", "gone", ""): 1,
    }
    assert m["gpuaas_cluster_queue_pending_jobs"] == {
        (("cluster_queue", "acme-h100"),): 4,
        (("cluster_queue", "globex-l40s"),): 1,
    }
    by_reason = m["gpuaas_pending_jobs_by_reason"]
    assert len(by_reason) == len(Code)  # every code, zeros included
    assert {k[0][1]: v for k, v in by_reason.items() if v} == {
        "WaitingForAdmission": 4,  # rows without a code wait for admission
        "UnusedQuotaShort": 1,
        "StrictFIFOBlocked": 1,
    }
    jobs = m["gpuaas_jobs"]
    assert len(jobs) == 14  # every state of both tenants, zeros included
    assert jobs[(("state", "Pending"), ("tenant", "acme"))] == 4
    assert jobs[(("state", "Running"), ("tenant", "acme"))] == 1
    assert jobs[(("state", "Admitted"), ("tenant", "acme"))] == 1
    assert jobs[(("state", "Succeeded"), ("tenant", "acme"))] == 1
    assert jobs[(("state", "Failed"), ("tenant", "acme"))] == 0
    assert jobs[(("state", "Pending"), ("tenant", "globex"))] == 2
    assert jobs[(("state", "Running"), ("tenant", "globex"))] == 1
    assert m["gpuaas_flavor_gpus_allocated"] == {
        (("flavor", "h100"),): 10.0,
        (("flavor", "l40s"),): 0.501,  # two GPU flavors: split evenly, the odd milli first
        (("flavor", "mig"),): 0.5,
        (("flavor", "cpu"),): 0.0,
    }
    assert m["gpuaas_flavor_gpus_capacity"] == {
        (("flavor", "h100"),): 16.0,
        (("flavor", "l40s"),): 16.0,  # 4 GPUs x 4 time-sliced replicas
        (("flavor", "mig"),): 8 * 7 * 142 / 1000,  # 56 1g.10gb instances of 1/7 GPU each
        (("flavor", "cpu"),): 0.0,
    }
    assert m["gpuaas_flavor_physical_gpus"] == {
        (("flavor", "h100"),): 16,
        (("flavor", "l40s"),): 4,
        (("flavor", "mig"),): 8,
        (("flavor", "cpu"),): 0,
    }
    assert m["gpuaas_tenant_gpus_allocated"] == {
        (("tenant", "acme"),): 10.0,
        (("tenant", "globex"),): 1.001,
    }
    assert m["gpuaas_tenant_gpus_capacity"] == {
        (("tenant", "acme"),): 12 + 14 * 142 / 1000,
        (("tenant", "globex"),): 8.0,
    }
    assert m["gpuaas_nodes"] == {
        (("state", "ready"),): 5,
        (("state", "cordoned"),): 0,
        (("state", "draining"),): 0,
    }


def test_capacity_follows_fleet_changes_and_nodes_by_state(served: tuple[TestClient, Any]) -> None:
    client, app = served
    db: Database = app.state.db
    seed(db)
    assert scrape(client)["gpuaas_flavor_physical_gpus"][(("flavor", "h100"),)] == 16
    extra = dict(NODES[0], name="h100-extra", count=None)
    extra.pop("count")
    with db.session() as s:
        register_nodes(s, [extra], 3.0)
        set_schedulable(s, "h100-1", 3.0, cordoned=True)
        set_schedulable(s, "cpu-1", 3.0, cordoned=True, draining=True)
    m = scrape(client)
    assert m["gpuaas_flavor_physical_gpus"][(("flavor", "h100"),)] == 24  # cache rebuilt
    assert m["gpuaas_nodes"] == {
        (("state", "ready"),): 4,
        (("state", "cordoned"),): 1,
        (("state", "draining"),): 1,
    }


def test_telemetry_counters_and_histograms_are_exposed(served: tuple[TestClient, Any]) -> None:
    client, app = served
    telemetry = app.state.telemetry
    telemetry.admissions.labels("acme-h100", "train", "acme").inc(3)
    telemetry.admission_wait.labels("acme-h100").observe(4.0)
    telemetry.admission_wait.labels("acme-h100").observe(40.0)
    m = scrape(client)
    labels = (("cluster_queue", "acme-h100"), ("local_queue", "train"), ("tenant", "acme"))
    assert m["gpuaas_admissions_total"] == {labels: 3.0}
    wait = m["gpuaas_admission_wait_seconds_bucket"]
    assert wait[(("cluster_queue", "acme-h100"), ("le", "5.0"))] == 1.0
    assert wait[(("cluster_queue", "acme-h100"), ("le", "60.0"))] == 2.0
    assert m["gpuaas_admission_wait_seconds_count"] == {(("cluster_queue", "acme-h100"),): 2.0}
    assert m["gpuaas_admission_wait_seconds_sum"] == {(("cluster_queue", "acme-h100"),): 44.0}
    # An empty installation still answers, with empty families and zero nodes.
    assert m["gpuaas_nodes"][(("state", "ready"),)] == 0


def test_metrics_after_the_reconciler_admits_the_demo(
    served: tuple[TestClient, Any], tmp_path: Path
) -> None:
    from gpuaas.service.demo import TEMPLATES, JobStream, seed_demo
    from gpuaas.service.reconciler import Reconciler

    client, app = served
    db: Database = app.state.db
    settings = Settings(db_url=db.url, data_dir=tmp_path, reconcile=False)
    seed_demo(db, settings)
    stream = JobStream(db, settings, seed=5)
    for i in range(len(TEMPLATES)):
        stream.submit_next(10.0 + i)
    reconciler = Reconciler(db, settings, app.state.telemetry)
    try:
        reconciler.step(20.0)
    finally:
        reconciler.stop()
    with db.sessions() as s:
        admitted = list(s.scalars(select(Job).where(Job.state.in_(("Admitted", "Running")))))
    assert admitted
    m = scrape(client)
    assert sum(m["gpuaas_admissions_total"].values()) == len(admitted)
    assert sum(m["gpuaas_admission_wait_seconds_count"].values()) == len(admitted)
    allocated = sum(job.gpus for job in admitted) / 1000
    assert sum(m["gpuaas_tenant_gpus_allocated"].values()) == pytest.approx(allocated)
    assert sum(m["gpuaas_flavor_gpus_allocated"].values()) == pytest.approx(allocated)
    assert m["gpuaas_flavor_physical_gpus"] == {
        (("flavor", "h100"),): 256,
        (("flavor", "a100-mig"),): 128,
        (("flavor", "l40s-shared"),): 48,
        (("flavor", "cpu"),): 0,
    }
    assert m["gpuaas_flavor_gpus_capacity"][(("flavor", "l40s-shared"),)] == 192.0
    assert m["gpuaas_nodes"][(("state", "ready"),)] == 66


def test_a_metrics_token_closes_the_scrape_to_everyone_else(
    sqlite_url: str, tmp_path: Path
) -> None:
    settings = Settings(
        db_url=sqlite_url, data_dir=tmp_path, reconcile=False, admin_token="x" * 20,
        metrics_token="scrape-secret-0123456789",
    )  # fmt: skip
    with TestClient(create_app(settings)) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"},
                        {"Authorization": f"Bearer {'x' * 20}"}):  # fmt: skip
            refused = client.get("/metrics", headers=headers)
            assert refused.status_code == 401, headers
            assert refused.headers["content-type"] == "application/problem+json"
            assert refused.headers["www-authenticate"] == "Bearer"
            assert "gpuaas_" not in refused.text
        ok = client.get("/metrics", headers={"Authorization": "Bearer scrape-secret-0123456789"})
        assert ok.status_code == 200 and "gpuaas_nodes" in ok.text
        # the scrape token is no API token
        assert (
            client.get(
                "/v1/tenants", headers={"Authorization": "Bearer scrape-secret-0123456789"}
            ).status_code
            == 401
        )
