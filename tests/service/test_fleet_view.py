"""The provider console's data (gpuaas.service.fleet_view): who holds which part of which GPU
(whole GPUs, shares, MIG instances, time-sliced replicas), the owner colours (tenant, cluster,
idle pool, free, unavailable) and their contrast, the grouping by rack and NVLink domain, the
caches' invalidation, the hourly series from usage records, the pool's revenue and the
tenants' grants."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaas.model.cluster import CLUSTER_LABEL
from gpuaas.service import fleet_view as fv
from gpuaas.service.fleet import placements_on, register_nodes, set_schedulable
from gpuaas.store.db import Database
from gpuaas.store.tables import ClusterNodeRow, ClusterRow, Job, Tenant, UsageRow, User

NOW = time.time()


def _nodes() -> list[dict[str, Any]]:
    return [
        {"name": "a100-0", "cpu": "64", "memory": "512Gi",
         "gpus": {"model": "A100-80GB", "count": 2, "partitioning": "all-1g.10gb"},
         "topology": {"rack": "r1", "nvlinkDomain": "nvl-a"}},
        {"name": "l40s-0", "cpu": "64", "memory": "512Gi",
         "gpus": {"model": "L40S", "count": 2, "partitioning": {"timeSlicing": {"replicas": 4}}},
         "topology": {"rack": "r1", "nvlinkDomain": "nvl-b"}},
        {"name": "h100-0", "cpu": "64", "memory": "512Gi",
         "gpus": {"model": "H100-80GB", "count": 4}, "topology": {"rack": "r2"}},
        {"name": "h100-1", "cpu": "64", "memory": "512Gi",
         "gpus": {"model": "H100-80GB", "count": 4}, "topology": {"rack": "r2"},
         "labels": {CLUSTER_LABEL: "acme.train"}},
        {"name": "h100-2", "cpu": "64", "memory": "512Gi",
         "gpus": {"model": "H100-80GB", "count": 4},
         "labels": {CLUSTER_LABEL: "market.pool"}},
        {"name": "h100-3", "cpu": "64", "memory": "512Gi",
         "gpus": {"model": "H100-80GB", "count": 4}},
    ]  # fmt: skip


def _job(job_id: int, tenant: Tenant, user: User, state: str, node: str, a: dict[str, Any],
         gpus: int, admitted: float | None = None) -> Job:  # fmt: skip
    assignment = {"cpu": 1000, "memory": 1 << 30, "gpus": [], "mig": [], "replicas": [],
                  "devices": [], **a}  # fmt: skip
    return Job(
        id=job_id, tenant_id=tenant.id, user_id=user.id, name=f"j{job_id}", kind="batch",
        local_queue="default", spec={}, state=state, gpus=gpus,
        placement=[{"podSet": "main", "index": 0, "node": node, "assignment": assignment}],
        created_at=NOW - 7200, updated_at=NOW - 60, admitted_at=admitted or NOW - 3600,
    )  # fmt: skip


@pytest.fixture()
def db(db_url: str) -> Database:
    db = Database(db_url)
    db.upgrade()
    with db.session() as s:
        acme = Tenant(name="acme", capacity={"default": {"nvidia.com/gpu": "4"}},
                      borrowing={"default": {"nvidia.com/gpu": "2"}}, created_at=NOW)  # fmt: skip
        globex = Tenant(name="globex", capacity={"default": {"nvidia.com/gpu": "8"}},
                        created_at=NOW)  # fmt: skip
        market = Tenant(name="market", capacity={}, created_at=NOW)
        s.add_all([acme, globex, market])
        user = User(name="u", created_at=NOW)
        s.add(user)
        register_nodes(s, _nodes(), NOW)
        s.flush()
        train = ClusterRow(
            tenant_id=acme.id,
            name="train",
            kind="baremetal",
            spec={"pools": []},
            state="Ready",
            created_at=NOW,
            updated_at=NOW,
        )
        pool = ClusterRow(tenant_id=market.id, name="pool", kind="baremetal",
                          spec={"pools": [], "idlePool": {"marketplace": "m"}}, state="Ready",
                          created_at=NOW, updated_at=NOW)  # fmt: skip
        s.add_all([train, pool])
        s.flush()
        s.add_all([ClusterNodeRow(node="h100-1", cluster_id=train.id, pool="gpu", created_at=NOW),
                   ClusterNodeRow(node="h100-2", cluster_id=pool.id, pool="idle",
                                  created_at=NOW)])  # fmt: skip
        s.add_all([
            # a MIG instance (1g.10gb: 1 of 8 memory slices) of a100-0's GPU 0
            _job(1, acme, user, "Running", "a100-0", {"mig": [[0, 0]]}, 1000),
            # two of four time-sliced replicas of l40s-0's GPU 1
            _job(2, globex, user, "Running", "l40s-0", {"replicas": [[1, 2]]}, 2000),
            # a 250-milli share and a whole GPU on h100-0
            _job(3, acme, user, "Admitted", "h100-0", {"gpus": [[0, 250]]}, 250),
            _job(4, globex, user, "Running", "h100-0", {"gpus": [[1, 1000]]}, 1000),
            # finished: holds nothing now
            _job(5, globex, user, "Succeeded", "h100-0", {"gpus": [[2, 1000]]}, 1000),
        ])  # fmt: skip
    return db


def _cells(picture: dict[str, Any]) -> dict[str, list[list[tuple[str, int]]]]:
    keys = [e["key"] for e in picture["legend"]]
    return {
        n[0]: [[(keys[i], m) for i, m in parts] for parts in n[3]]
        for g in picture["groups"]
        for n in g["nodes"]
    }


def test_parts_of_each_gpu_are_its_holders_and_sum_to_a_gpu(db: Database) -> None:
    with db.session() as s:
        picture = fv.fleet_picture(s)
    cells = _cells(picture)
    assert cells["a100-0"][0] == [("tenant:acme", 125), ("free", 875)]  # 1 of 8 slices
    assert cells["a100-0"][1] == [("free", 1000)]
    assert cells["l40s-0"][1] == [("tenant:globex", 500), ("free", 500)]  # 2 of 4 replicas
    assert cells["h100-0"][:3] == [
        [("tenant:acme", 250), ("free", 750)],
        [("tenant:globex", 1000)],
        [("free", 1000)],  # the finished job holds nothing
    ]
    assert cells["h100-1"] == [[("cluster:acme.train", 1000)]] * 4  # a cluster's, whole
    assert cells["h100-2"] == [[("pool", 1000)]] * 4
    assert all(sum(m for _, m in parts) == 1000 for gpus in cells.values() for parts in gpus)
    assert picture["nodes"] == 6 and picture["gpus"] == 20
    legend = {e["key"]: e["gpus"] for e in picture["legend"]}
    assert legend["tenant:acme"] == pytest.approx(0.375)
    assert legend["pool"] == 4 and legend["cluster:acme.train"] == 4
    assert sum(legend.values()) == pytest.approx(20)
    assert dict(fv.idle_gpus(picture))["H100-80GB"] == pytest.approx(2.75 + 4)


def test_nodes_are_grouped_by_rack_and_nvlink_domain_unknown_last(db: Database) -> None:
    with db.session() as s:
        groups = fv.fleet_picture(s)["groups"]
    assert [(g["rack"], g["nvlink"], [n[0] for n in g["nodes"]]) for g in groups] == [
        ("r1", "nvl-a", ["a100-0"]),
        ("r1", "nvl-b", ["l40s-0"]),
        ("r2", "", ["h100-0", "h100-1"]),
        ("", "", ["h100-2", "h100-3"]),
    ]


def test_a_cordoned_or_unhealthy_node_is_unavailable_and_the_etag_moves(db: Database) -> None:
    with db.session() as s:
        before = fv.fleet_picture(s)
        assert fv.fleet_picture(s) is before  # kept while nothing changed
        layouts = {n.name: n for n in fv.fleet_layout(s)}
        set_schedulable(s, "h100-3", NOW, cordoned=True)
    with db.session() as s:
        after = fv.fleet_picture(s)
        sick = fv.fleet_picture(s, {"a100-0"})
        again = {n.name: n for n in fv.fleet_layout(s)}
    # only the cordoned node was parsed again
    assert [n for n in again if again[n] is not layouts[n]] == ["h100-3"]
    assert again["h100-3"].cordoned
    assert after["etag"] != before["etag"]
    assert _cells(after)["h100-3"] == [[("unavailable", 1000)]] * 4
    assert [n[2] for g in after["groups"] for n in g["nodes"] if n[0] == "h100-3"] == ["cordoned"]
    assert _cells(sick)["a100-0"] == [[("unavailable", 1000)]] * 2
    assert sick["etag"] != after["etag"]


def test_placements_on_a_node_are_its_active_jobs_pods(db: Database) -> None:
    with db.session() as s:
        on = placements_on(s, "h100-0")
        assert placements_on(s, "h100-") == [] and placements_on(s, "h100-9") == []
    assert [(job.id, pod["assignment"]["gpus"]) for job, pod in on] == [
        (3, [[0, 250]]),
        (4, [[1, 1000]]),
    ]


def test_a_job_finishing_changes_the_picture(db: Database) -> None:
    with db.session() as s:
        before = fv.fleet_picture(s)
        job = s.get(Job, 4)
        assert job is not None
        job.state, job.updated_at = "Succeeded", NOW
    with db.session() as s:
        after = fv.fleet_picture(s)
    assert after["etag"] != before["etag"]
    assert _cells(after)["h100-0"][1] == [("free", 1000)]


def test_legend_colours_have_contrast_with_the_page() -> None:
    colours = [fv.FREE_COLOUR, fv.UNAVAILABLE_COLOUR, fv.POOL_COLOUR, fv.OTHER_COLOUR,
               *fv.PALETTE]  # fmt: skip
    assert len(set(colours)) == len(colours)
    for colour in colours:
        assert fv.contrast(colour, fv.BACKGROUND) >= 3.0, colour


def test_contrast_matches_wcag_reference_values() -> None:
    assert fv.contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert fv.contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)
    assert fv.contrast("#ffffff", "#ffffff") == pytest.approx(1.0)


@given(st.lists(st.integers(min_value=1, max_value=10_000), min_size=0, max_size=40))
def test_beyond_the_palette_owners_share_one_colour(amounts: list[int]) -> None:
    owned = {f"tenant:t{i}": a for i, a in enumerate(amounts)}
    legend, index = fv._legend({"free": 5, **owned})
    assert set(index) >= set(owned)
    distinct = [e for e in legend if e.key.startswith("tenant:")]
    assert len(distinct) == min(len(owned), len(fv.PALETTE))
    assert sum(e.gpus for e in legend) * 1000 == pytest.approx(5 + sum(amounts))
    ranked = sorted(owned, key=lambda k: (-owned[k], k))
    assert [e.key for e in distinct] == ranked[: len(fv.PALETTE)]


def test_hourly_series_reads_usage_records_and_the_pool_earns(db: Database) -> None:
    hour = 3600.0
    start = (NOW // hour - 1) * hour  # the previous whole hour
    with db.session() as s:
        s.add_all([
            # 10 GPUs for the whole previous hour at 50 %: half the 20-GPU fleet, a quarter used
            UsageRow(key="a", tenant="acme", user="u", queue="q", job_id=1, attempt=1, pod="p",
                     device="gpu-0", node="h100-0", sku="H100-80GB/whole@on-demand",
                     period="2026-11", start=start, end=start + hour, quantity=10 * 3600 * 10**6,
                     price_id=0, currency="USD", list_cost=1, effective_cost=1, utilization=0.5),
            UsageRow(key="b", tenant="market", user="u", queue="q", job_id=9, attempt=1, pod="p",
                     device="gpu-0", node="h100-2", sku="H100-80GB/whole@idle-pool",
                     period="2026-11", start=start, end=start + hour, quantity=2 * 3600 * 10**6,
                     price_id=0, currency="USD", list_cost=9, effective_cost=1_800_000_000,
                     utilization=None),
            # a record starting mid-hour (a job admitted then) belongs to that hour
            UsageRow(key="d", tenant="acme", user="u", queue="q", job_id=2, attempt=1, pod="p",
                     device="gpu-1", node="h100-0", sku="H100-80GB/whole@on-demand",
                     period="2026-11", start=start + 0.75 * hour, end=start + hour,
                     quantity=4 * 900 * 10**6, price_id=0, currency="USD", list_cost=1,
                     effective_cost=1, utilization=1.0),
            UsageRow(key="c", tenant="market", user="u", queue="q", job_id=9, attempt=1, pod="p",
                     device="cpu", node="h100-2", sku="cpu@idle-pool", period="2026-11",
                     start=start, end=start + hour, quantity=10**9, price_id=0, currency="USD",
                     list_cost=9, effective_cost=5, utilization=None),
        ])  # fmt: skip
    with db.session() as s:
        series = fv.over_time(s, NOW, hours=3)
        revenue = fv.pool_revenue(s)
    assert series.gpus == 20 and series.step == hour and len(series.allocated) == 3
    # 10 GPU-hours at 50 %, 2 unmeasured, 1 (4 GPUs for a quarter hour) at 100 %
    assert series.allocated[1] == pytest.approx(13 / 20)
    assert series.utilised[1] == pytest.approx(6 / 20)
    assert series.measured[1] == pytest.approx(11 / 13)
    assert series.allocated[0] == 0
    # the current hour is not metered yet: what the active jobs hold now (4.25 GPUs)
    assert series.allocated[2] == pytest.approx(4.25 / 20)
    assert [(r.records, r.gpu_hours, r.amount_nano) for r in revenue] == [(1, 2.0, 1_800_000_000)]


def test_tenants_with_grants_and_what_they_hold(db: Database) -> None:
    with db.session() as s:
        lines = {t.name: t for t in fv.tenant_lines(s)}
    acme = lines["acme"]
    assert (acme.granted_gpus, acme.held_gpus, acme.running, acme.pending) == (4, 1.25, 2, 0)
    assert (acme.clusters, acme.cluster_nodes) == (1, 1)
    assert acme.borrowing == {"default": {"nvidia.com/gpu": "2"}}
    assert (lines["globex"].held_gpus, lines["globex"].running) == (3.0, 2)
